"""Helpers for tests of experiments and of the code that runs them (not installed with the
package; ``tests/`` is on ``sys.path`` through its ``conftest.py``).

- :func:`registered` registers experiments for the duration of a ``with`` block and restores
  the registry afterwards (a test fixture's body);
- :func:`run_tiny` runs an experiment end to end at its ``tiny`` scale and fails with the
  experiment's traceback when it raised, which is what every experiment's test does; it also
  judges the recorded metrics again and fails when the recorded judgement differs (so an
  inverted verdict cannot pass);
- :func:`fake_experiment` builds a small experiment (a config, one metric, one figure, one
  array) whose verdict and failure the caller chooses, for testing the runner, the report
  and the command line without any real computation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ntklab.experiments import registry as _registry
from ntklab.experiments.base import (
    Experiment,
    ExperimentConfig,
    Judgement,
    Measurement,
    Metric,
    Metrics,
    RunContext,
    metrics_by_name,
)
from ntklab.experiments.registry import get_experiment
from ntklab.experiments.result import RunResult
from ntklab.experiments.runner import run_experiment

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "FakeConfig",
    "fake_experiment",
    "registered",
    "relu_kernels_numpy",
    "relu_ntk_numpy",
    "run_tiny",
]


@contextmanager
def registered(*experiments: Experiment) -> Iterator[tuple[Experiment, ...]]:
    """Register ``experiments`` inside the block; restore the registry on exit.

    Examples
    --------
    >>> with registered(fake_experiment("fake-doc")):
    ...     from ntklab.experiments import get_experiment
    ...     get_experiment("fake-doc").claim_id
    'Z1'
    """
    table = _registry._REGISTRY
    saved = dict(table)
    try:
        for experiment in experiments:
            _registry.register(experiment, replace=True)
        yield experiments
    finally:
        table.clear()
        table.update(saved)


def run_tiny(experiment: Experiment | str, out_root: Path, **overrides: str) -> RunResult:
    """Run ``experiment`` at scale ``tiny`` into ``out_root``; fail loudly on ERROR.

    Raises
    ------
    AssertionError
        When the run ended in ERROR (the message holds the traceback), when it is not a
        smoke run, when a figure it lists is missing, when its ``result.json`` does not read
        back to the same result, or when the experiment's ``judge`` on the recorded metrics
        does not give the recorded judgement and criterion.
    """
    result = run_experiment(experiment, "tiny", overrides, out_root=out_root, force=True)
    if result.verdict == "ERROR":
        raise AssertionError(f"{result.experiment} raised:\n{result.error}")
    if result.verdict != "SMOKE":
        raise AssertionError(
            f"{result.experiment}: a tiny run is a smoke run, got {result.verdict}"
        )
    exp = experiment if isinstance(experiment, Experiment) else get_experiment(experiment)
    config = exp.config_type.model_validate(result.config)
    again = exp.judge(config, metrics_by_name(result.metrics))
    if again.passed != result.criterion_met:
        raise AssertionError(
            f"{result.experiment}: judge gives {again.passed} on the recorded metrics, "
            f"the run recorded criterion_met={result.criterion_met}"
        )
    if again.criterion != result.criterion:
        raise AssertionError(
            f"{result.experiment}: judge's criterion {again.criterion!r} differs from the "
            f"recorded {result.criterion!r}"
        )
    for path in result.figure_paths:
        if not path.is_file():
            raise AssertionError(f"{result.experiment}: figure {path} was not written")
    if RunResult.from_json(result.run_dir / "result.json") != result:
        raise AssertionError(f"{result.experiment}: result.json does not read back")
    return result


class FakeConfig(ExperimentConfig):
    """Config of :func:`fake_experiment`: fields of the types ``--set`` must parse."""

    n: int = 8
    scale_factor: float = 1.0
    widths: tuple[int, ...] = (4, 8)
    use_bias: bool = True
    activation: Literal["relu", "erf"] = "relu"
    label: str = "fake"


def fake_experiment(
    name: str = "fake-pass",
    claim_id: str = "Z1",
    *,
    passed: bool = True,
    error: BaseException | None = None,
    figure: bool = True,
) -> Experiment:
    """A small experiment for tests: its metric is ``n * scale_factor``, predicted ``"n"``.

    Parameters
    ----------
    name, claim_id : str
        Its name and claim id.
    passed : bool
        The verdict it returns (PASS or FAIL).
    error : exception, optional
        Raised by the run function instead of returning (verdict ERROR).
    figure : bool
        Whether the outcome has a figure (``line.png``).
    """

    def measure(config: FakeConfig, ctx: RunContext) -> Measurement:
        ctx.progress(0.5, "halfway")
        if error is not None:
            raise error
        import torch

        value = config.n * config.scale_factor
        noise = torch.randn(config.n, generator=ctx.generator("data"), dtype=torch.float64)
        metric = Metric(
            "value", value, ci_low=value - 1, ci_high=value + 1, predicted=str(config.n)
        )
        return Measurement(
            metrics=(metric, Metric("spread", math.sqrt(2.0), unit="sd", note="a | b")),
            arrays={"noise": noise, "widths": torch.tensor(config.widths)},
            notes=("a fake experiment",),
        )

    def judge(config: FakeConfig, metrics: Metrics) -> Judgement:
        value = metrics["value"].value
        verdict = "matches" if passed else "misses"
        return Judgement(
            passed=passed,
            summary=f"value {value:g} {verdict} prediction {config.n}",
            criterion=f"value equals n = {config.n}",
        )

    def draw(config: FakeConfig, metrics: Metrics, arrays: Mapping[str, Any]) -> dict[str, Figure]:
        figures: dict[str, Figure] = {}
        if figure:
            from matplotlib.figure import Figure

            fig = Figure(figsize=(3, 2))
            ax = fig.add_subplot()
            ax.plot(range(config.n), arrays["noise"].tolist())
            ax.set_title(f"{name} <&> data")
            figures["line"] = fig
        return figures

    return Experiment(
        name=name,
        claim_id=claim_id,
        claim=f"The fake claim of {name} holds. It has <html> & | pipes.",
        criterion="value equals n",
        config_type=FakeConfig,
        scales={"tiny": {"n": 4}, "quick": {}, "paper": {"n": 64, "widths": (64, 128)}},
        measure=measure,
        judge=judge,
        draw=draw,
    )


def relu_kernels_numpy(x1: Any, x2: Any, depth: int, w_std: float, b_std: float) -> tuple[Any, Any]:
    """NNGP and NTK of ``depth x [Dense(w_std, b_std), Relu] + Dense(w_std, b_std)`` in the
    NTK parameterization, in numpy, from the arc-cosine closed forms (Cho & Saul 2009;
    Jacot et al. 2018), independent of ntklab's kernels: the reference that a wrong kernel
    (``tools/mutation_check.py``'s ``kernel`` mutation) cannot reach.

    .. math:: K_0 = \\sigma_w^2 \\frac{x^\\top x'}{d} + \\sigma_b^2, \\quad
              K_{l+1} = \\sigma_w^2 \\frac{\\sqrt{K_{11} K_{22}}}{2\\pi}
              (\\sin\\theta + (\\pi - \\theta)\\cos\\theta) + \\sigma_b^2, \\quad
              \\Theta_{l+1} = \\sigma_w^2 \\frac{\\pi - \\theta}{2\\pi} \\Theta_l + K_{l+1}.

    Returns ``(nngp, ntk)``, arrays of shape ``(n1, n2)``.
    """
    import numpy as np

    a, b = np.asarray(x1, dtype=np.float64), np.asarray(x2, dtype=np.float64)
    d = a.shape[1]
    w2, b2 = w_std**2, b_std**2
    k = w2 * a @ b.T / d + b2
    k1 = w2 * np.einsum("ij,ij->i", a, a) / d + b2
    k2 = w2 * np.einsum("ij,ij->i", b, b) / d + b2
    theta_ntk = k.copy()
    for _ in range(depth):
        norm = np.sqrt(np.outer(k1, k2))
        cos = np.clip(k / norm, -1.0, 1.0)
        angle = np.arccos(cos)
        k = w2 * norm / (2 * np.pi) * (np.sin(angle) + (np.pi - angle) * cos) + b2
        theta_ntk = w2 * (np.pi - angle) / (2 * np.pi) * theta_ntk + k
        k1 = w2 * k1 / 2 + b2
        k2 = w2 * k2 / 2 + b2
    return k, theta_ntk


def relu_ntk_numpy(x1: Any, x2: Any, depth: int, w_std: float, b_std: float) -> Any:
    """The NTK of :func:`relu_kernels_numpy`, shape ``(n1, n2)``."""
    return relu_kernels_numpy(x1, x2, depth, w_std, b_std)[1]
