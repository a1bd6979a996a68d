"""A5 ``sparse-parity``: on a compositional target (a sparse parity) an SGD-trained network
learns what NTK regression cannot.

Claim (Ganguli & Constantinescu 2026, "A Function-Space Dichotomy for Compositional Learning:
Exponential Sub-Optimality of the Neural Tangent Kernel", numerical section, "compositional
targets"): inputs uniform on :math:`\\{-1, 1\\}^d`, label
:math:`y = \\prod_{i \\in S} x_i` with :math:`|S| = k`; a standard two-layer network trained
by SGD learns the parity while the NTK "stays at the bottom, guessing at random whatever the
data". The network's settings are those of Barak et al. 2022 (arXiv:2207.08799, "Hidden
progress in deep learning: SGD learns parities near the computational limit"; width 1000,
learning rate 0.1, batch 32, weight decay 0.01, hinge loss), who report that such networks
reach near-perfect test accuracy on sparse parities. A kernel of a rotation-invariant
architecture needs of the order of :math:`d^k` samples for a degree-``k`` parity (Ghorbani et
al. 2021, arXiv:1904.12191), so at ``n = 1000`` with ``d = 20``, ``k = 3`` it is at chance.

The verdict is judged on the **0-1 test error** (the sign of the output against the label),
which is what "learns the parity" and "guesses at random" mean:

- the network's 0-1 test error at ``criterion_n`` (mean over seeds of the mean of its last
  ``last_evaluations`` evaluations) at most ``NET_MAX_ERROR = 0.05``: ntklab's own reading of
  Barak et al.'s "near-perfect accuracy" (they give no threshold);
- the NTK's 0-1 test error at ``criterion_n`` (mean over seeds) at least
  ``NTK_MIN_ERROR = 0.4`` (chance is 0.5): ntklab's own reading of "at chance";
- NTK test MSE at least ``NTK_FLOOR = 0.9`` Var(y): ntklab's own bound, from Ghorbani et
  al.'s :math:`n \\sim d^k` (the NTK's MSE only falls once ``n`` is of that order);
- no network run diverged.

The NTK / network test-MSE ratio and the network's MSE are **reported, not judged**: the
paper's "four to six orders of magnitude" (Ganguli & Constantinescu 2026; not a figure of
Barak et al. 2022) is such a ratio, but with the NTK at chance the ratio is 1 / (network
MSE), and that MSE is the equilibrium of hinge loss with weight decay, not a property of the
claim: halving the weight decay moved the ratio from 5.99e3 to 7.8e4 in an audit run.

Data, computation, measurement, verdict, figure:

1. per seed a parity on ``k`` random coordinates
   (:func:`~ntklab.data.random_sparse_parity`), ``n`` training points
   (:func:`~ntklab.data.hypercube`, nested over the ``n`` grid) and ``n_test`` test points;
2. NTK regression: the NTK of the network's architecture ``Dense, Relu, Dense`` on the ``n``
   points, ridge chosen by exact leave-one-out (:func:`~ntklab.dynamics.select_ridge_loo`);
3. the network: ``arch.to_torch(width, parameterization="standard")`` trained by
   :func:`~ntklab.nets.train` (minibatch SGD, hinge loss, weight decay) on the same points;
   its test MSE and 0-1 error are evaluated every ``eval_every`` steps and averaged over the
   last ``last_evaluations`` of them (not the best one);
4. both methods' outputs are clipped to [-1, 1] before the test MSE; the 0-1 error counts an
   output of exactly 0 as an error; the criterion above at ``n = criterion_n``;
5. figure: both methods' 0-1 test error and test MSE against ``n``, and the network's test
   MSE during SGD.

Audit (issue "verdicts that test the claim"):

- wrong kernel (the analytic NTK replaced by 1.5 NTK + 0.5 NNGP): the verdict still PASSes
  (quick scale, 2026-12-04: NTK 0-1 error 0.50, network 0), as it should: the NNGP of the
  same rotation-invariant architecture needs as many samples (the claim holds for every such
  kernel); the test suite catches the mutation: the tiny run's NTK test MSE is compared
  with an independent NumPy evaluation of the ReLU NTK's closed form (arc-cosine kernels,
  Cho & Saul 2009);
- permuted labels (reasoned, not run): the network can no longer generalize (0-1 test error
  near 0.5): FAIL, as it should;
- a baseline set up to lose (a network that does not learn, e.g. too few steps; reasoned,
  not run): its 0-1 error stays near chance: FAIL. The verdict no longer moves with the
  weight decay (the test suite runs a small judged configuration at ``weight_decay`` and at
  half of it: PASS both times).

Paper scale (``n`` up to 8000, 5 seeds, 20000 test points, width 1000, 20000 SGD steps,
float64 kernels) measured 54 minutes on the project's 2-core x86_64 machine shared with other
jobs (2026-12-02, ``results/paper/sparse-parity.json``, the MSE-ratio criterion): six NTK
fits per seed with exact leave-one-out ridges (an 8000 x 8000 eigendecomposition at the
largest ``n``, 11-13 GB) and 30 network runs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import torch
from matplotlib.figure import Figure
from pydantic import Field, model_validator
from torch import Tensor

from ..data import SparseParity, hypercube, random_sparse_parity
from ..dynamics import kernel_ridge_regression, select_ridge_loo
from ..errors import NtklabValueError, NumericalWarning
from ..nets import train
from . import (
    Count,
    Experiment,
    ExperimentConfig,
    Judgement,
    Measurement,
    Metric,
    Metrics,
    PositiveFloat,
    RunContext,
    register,
)
from .spectrum_s1 import relu_network

__all__ = [
    "NET_MAX_ERROR",
    "NTK_FLOOR",
    "NTK_MIN_ERROR",
    "SparseParityConfig",
    "draw",
    "judge",
    "measure",
    "network_test_mse",
    "ntk_test_mse",
    "zero_one_error",
]

#: The network's 0-1 test error at ``criterion_n`` must be at most this. ntklab's own bound
#: on "near-perfect accuracy" (Barak et al. 2022 report it for SGD on sparse parities).
NET_MAX_ERROR = 0.05
#: The NTK's 0-1 test error at ``criterion_n`` must be at least this (chance: 0.5). ntklab's
#: own bound on "at chance" (Ganguli & Constantinescu 2026, numerical section).
NTK_MIN_ERROR = 0.4
#: NTK test MSE at ``criterion_n`` must be at least this fraction of Var(y). ntklab's own
#: bound, after Ghorbani et al. 2021 (a kernel needs of the order of d^k samples).
NTK_FLOOR = 0.9
#: Var(y) of a parity of k >= 1 coordinates, uniform on {-1, 1}.
VAR_Y = 1.0
#: An exactly zero network MSE makes the ratio infinite: it is floored at float32 resolution.
MSE_FLOOR = float(np.finfo(np.float32).eps) ** 2


def zero_one_error(output: Tensor, y: Tensor) -> float:
    """Fraction of points whose output's sign is not the label's: :math:`\\text{mean}(f y
    \\le 0)` (an output of exactly 0 is an error).

    Parameters
    ----------
    output, y : Tensor of shape (n,)
        Predictions and labels in :math:`\\{-1, 1\\}`.
    """
    return float((output * y <= 0).double().mean())


class SparseParityConfig(ExperimentConfig):
    """Grid of ``sparse-parity``.

    Parameters
    ----------
    dim, k : int
        Input dimension ``d`` and parity order ``1 <= k <= d``.
    ns : tuple of int
        Training-set sizes, strictly increasing (nested samples).
    criterion_n : int
        The size the verdict reads, one of ``ns``.
    seeds : int
        Seeds (a fresh parity and sample each).
    n_test : int
        Test points per seed.
    w_std, b_std : float
        Weight (> 0) and bias (>= 0) standard deviations of ``Dense, Relu, Dense``.
    width, learning_rate, batch_size, weight_decay, loss, t : various
        The network and its SGD (``t`` steps at ``learning_rate``, as in
        :func:`~ntklab.nets.train`); ``batch_size`` at most the smallest ``n``.
    eval_every, last_evaluations : int
        Test MSE every ``eval_every`` steps (and at the last step); the reported MSE is the
        mean of the last ``last_evaluations`` of them (at most the number of evaluations).
    ridges : tuple of float
        Candidate ridges of the NTK relative to its mean diagonal (> 0).
    net_max_error : float
        Criterion: the network's 0-1 test error at ``criterion_n`` at most this, in [0, 1].
    ntk_min_error : float
        Criterion: the NTK's 0-1 test error at ``criterion_n`` at least this, in [0, 1].
    ntk_floor : float
        Criterion: NTK test MSE at least ``ntk_floor`` Var(y) (>= 0).
    """

    dim: Count = 20
    k: Count = 3
    ns: tuple[Count, ...] = Field(default=(500, 1000, 2000), min_length=1)
    criterion_n: Count = 1000
    seeds: Count = 2
    n_test: Count = 5000
    w_std: PositiveFloat = 1.0
    b_std: float = Field(default=0.1, ge=0.0, allow_inf_nan=False)
    width: Count = 1000
    learning_rate: PositiveFloat = 0.1
    batch_size: Count = 32
    weight_decay: float = Field(default=0.01, ge=0.0, allow_inf_nan=False)
    loss: Literal["hinge", "mse"] = "hinge"
    t: Count = 6000
    eval_every: Count = 250
    last_evaluations: Count = 8
    ridges: tuple[PositiveFloat, ...] = Field(
        default=tuple(10.0 ** (e / 2) for e in range(-12, 5)), min_length=1
    )
    net_max_error: float = Field(default=NET_MAX_ERROR, ge=0.0, le=1.0, allow_inf_nan=False)
    ntk_min_error: float = Field(default=NTK_MIN_ERROR, ge=0.0, le=1.0, allow_inf_nan=False)
    ntk_floor: float = Field(default=NTK_FLOOR, ge=0.0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _check_grid(self) -> SparseParityConfig:
        if self.k > self.dim:
            raise NtklabValueError(
                f"k: expected at most dim = {self.dim} coordinates, received {self.k}"
            )
        if any(b <= a for a, b in zip(self.ns, self.ns[1:], strict=False)):
            raise NtklabValueError(
                f"ns: expected strictly increasing sizes, received {list(self.ns)}"
            )
        if self.criterion_n not in self.ns:
            raise NtklabValueError(
                f"criterion_n: expected one of ns = {list(self.ns)}, received {self.criterion_n}"
            )
        if self.batch_size > self.ns[0]:
            raise NtklabValueError(
                f"batch_size: expected at most the smallest n = {self.ns[0]}, received "
                f"{self.batch_size}"
            )
        evaluations = _n_evaluations(self.t, self.eval_every)
        if self.last_evaluations > evaluations:
            raise NtklabValueError(
                f"last_evaluations: expected at most the {evaluations} evaluations of "
                f"t = {self.t} with eval_every = {self.eval_every}, received "
                f"{self.last_evaluations}"
            )
        return self


def _n_evaluations(steps: int, every: int) -> int:
    """Test evaluations of a run: steps ``0, every, 2 every, ... < steps`` and ``steps``."""
    return len(range(0, steps, every)) + 1


def _name(metric: str, n: int) -> str:
    """``"mse_ratio[n=1000]"``."""
    return f"{metric}[n={n}]"


def ntk_test_mse(
    config: SparseParityConfig, x: Tensor, y: Tensor, x_test: Tensor, y_test: Tensor
) -> tuple[float, float, float]:
    """Clipped test MSE of NTK regression with the leave-one-out ridge, that ridge relative
    to the mean diagonal, and the 0-1 test error."""
    arch = relu_network(1, config.w_std, config.b_std)
    xd, xtd = x.double(), x_test.double()
    with torch.no_grad():
        k = arch.kernel(xd, xd).ntk
    scale = float(k.diagonal().mean())
    yd = y.double()
    sel = select_ridge_loo(k, yd, [scale * r for r in config.ridges])
    # the (n_test, n) test kernel only after the ridge search: not held during its peak
    with torch.no_grad():
        k_test = arch.kernel(xtd, xd).ntk
    pred = kernel_ridge_regression(k, yd, k_test, ridge=sel.ridge).clamp(-1.0, 1.0)
    yt = y_test.double()
    return float((pred - yt).square().mean()), sel.ridge / scale, zero_one_error(pred, yt)


def network_test_mse(
    config: SparseParityConfig,
    x: Tensor,
    y: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    gen: torch.Generator,
) -> tuple[float, float, np.ndarray, np.ndarray, bool]:
    """Train the network; returns the clipped test MSE and the 0-1 test error, each averaged
    over the last evaluations, the evaluated steps and test MSEs, and whether training
    diverged."""
    arch = relu_network(1, config.w_std, config.b_std)
    net = arch.to_torch(
        config.width, in_features=config.dim, parameterization="standard", generator=gen
    )
    steps: list[int] = []
    curve: list[float] = []
    errors: list[float] = []

    def evaluate(step: int, record: object) -> None:
        with torch.no_grad():
            out = net(x_test)[:, 0].clamp(-1.0, 1.0)
        steps.append(step)
        curve.append(float((out - y_test).square().mean()))
        errors.append(zero_one_error(out, y_test))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)
        run = train(
            net,
            x,
            y[:, None],
            learning_rate=config.learning_rate,
            t=config.t,
            loss=config.loss,
            batch_size=config.batch_size,
            weight_decay=config.weight_decay,
            log_every=config.eval_every,
            generator=gen,
            callback=evaluate,
        )
    last = config.last_evaluations
    value = float(np.mean(curve[-last:])) if not run.diverged else math.nan
    error = float(np.mean(errors[-last:])) if not run.diverged else math.nan
    return value, error, np.array(steps), np.array(curve), run.diverged


def _geomean(values: np.ndarray, axis: int | None = None) -> Any:
    return np.exp(np.mean(np.log(values), axis=axis))


def _grid_metrics(
    config: SparseParityConfig,
    *,
    ntk: np.ndarray,
    net: np.ndarray,
    ntk_error: np.ndarray,
    net_error: np.ndarray,
    ridges: np.ndarray,
    diverged: np.ndarray,
) -> list[Metric]:
    """The metrics of the grid: the criterion's figures at ``criterion_n``, the reported MSE
    ratio and network MSE, the diverged runs, and the NTK / network ratio at every ``n``.

    The ratio of a seed is :math:`\\text{MSE}_{NTK} / \\max(\\text{MSE}_{net}, \\epsilon)`
    with :math:`\\epsilon` = ``MSE_FLOOR``; the reported ratio is its geometric mean over seeds.

    Parameters
    ----------
    config : SparseParityConfig
        The run's config.
    ntk, net, ntk_error, net_error, ridges : numpy.ndarray
        Clipped test MSEs and 0-1 test errors of the NTK and of the network, and the NTK's
        chosen ridge relative to its mean diagonal, each of shape ``(seeds, len(ns))``.
    diverged : numpy.ndarray
        1 where the network's loss became non-finite, shape ``(seeds, len(ns))``.

    Returns
    -------
    list of Metric
        ``net_error``, ``ntk_error``, ``ntk_mse_over_var``, ``mse_ratio`` and ``net_mse`` at
        ``criterion_n``, ``diverged_runs``, then ``ratio[n=N]`` per size.
    """
    ns = list(config.ns)
    geo = _geomean(ntk / np.maximum(net, MSE_FLOOR), axis=0)  # per n
    j = ns.index(config.criterion_n)
    n_at = config.criterion_n
    metrics: list[Metric] = [
        Metric(
            _name("net_error", n_at),
            float(net_error[:, j].mean()),
            predicted=f"<= {config.net_max_error:g}",
            note=f"network 0-1 test error, mean of the last {config.last_evaluations} "
            f"evaluations, mean over {config.seeds} seeds",
        ),
        Metric(
            _name("ntk_error", n_at),
            float(ntk_error[:, j].mean()),
            predicted=f">= {config.ntk_min_error:g}",
            note="NTK 0-1 test error, mean over seeds (chance: 0.5)",
        ),
        Metric(
            _name("ntk_mse_over_var", n_at),
            float(ntk[:, j].mean()) / VAR_Y,
            predicted=f">= {config.ntk_floor:g}",
            note="mean over seeds; it only falls once n ~ d^k",
        ),
        Metric(
            _name("mse_ratio", n_at),
            float(geo[j]),
            note=f"NTK / network clipped test MSE, geometric mean over {config.seeds} seeds; "
            "reported, not judged (it is 1 / the network's MSE floor)",
        ),
        Metric(
            _name("net_mse", n_at),
            float(_geomean(np.maximum(net[:, j], MSE_FLOOR))),
            note=f"mean of the last {config.last_evaluations} evaluations (every "
            f"{config.eval_every} steps), geometric mean over seeds; the equilibrium of the "
            "loss with weight decay, reported, not judged",
        ),
        Metric(
            "diverged_runs",
            float(diverged.sum()),
            predicted="0",
            note=f"network runs (of {diverged.size}) whose loss became non-finite",
        ),
    ]
    for i, n in enumerate(ns):
        metrics.append(
            Metric(
                _name("ratio", n),
                float(geo[i]),
                note=f"NTK {ntk[:, i].mean():.3g} (0-1 error {ntk_error[:, i].mean():.3g}, "
                f"ridge/diag {np.median(ridges[:, i]):.2g}), net {net[:, i].mean():.3g} "
                f"(0-1 error {net_error[:, i].mean():.3g})",
            )
        )
    return metrics


def measure(config: SparseParityConfig, ctx: RunContext) -> Measurement:
    """Clipped test MSE and 0-1 test error of NTK regression and of the SGD-trained network at
    every ``n``.

    Returns
    -------
    Measurement
        ``net_error``, ``ntk_error``, ``ntk_mse_over_var``, ``mse_ratio`` and ``net_mse`` at
        ``criterion_n``, the number of diverged network runs, and ``ratio[n=N]`` per size;
        arrays ``n_grid``, ``ntk_mse``, ``net_mse``, ``ntk_error``, ``net_error``, ``ratios``,
        ``ntk_ridge`` (shape ``(seeds, len(ns))``), ``diverged`` and the network's test
        curves ``net_curve_seed<s>_n<N>`` (steps, MSE).
    """
    ns = list(config.ns)
    n_max = ns[-1]
    ntk = np.zeros((config.seeds, len(ns)))
    net = np.zeros_like(ntk)
    ntk_error = np.zeros_like(ntk)
    net_error = np.zeros_like(ntk)
    ridges = np.zeros_like(ntk)
    diverged = np.zeros((config.seeds, len(ns)), dtype=np.int64)
    curves: dict[str, np.ndarray] = {}
    jobs = config.seeds * len(ns)
    for seed in range(config.seeds):
        gen = ctx.generator(f"data{seed}")
        parity: SparseParity = random_sparse_parity(config.dim, config.k, generator=gen)
        x_all = hypercube(n_max, config.dim, generator=gen, dtype=torch.float32)
        x_test = hypercube(config.n_test, config.dim, generator=gen, dtype=torch.float32)
        y_all, y_test = parity(x_all), parity(x_test)
        for i, n in enumerate(ns):
            x, y = x_all[:n], y_all[:n]
            ntk[seed, i], ridges[seed, i], ntk_error[seed, i] = ntk_test_mse(
                config, x, y, x_test, y_test
            )
            value, error, steps, curve, bad = network_test_mse(
                config, x, y, x_test, y_test, ctx.generator(f"net{seed}-n{n}")
            )
            diverged[seed, i] = int(bad)
            net[seed, i] = value
            net_error[seed, i] = error
            curves[f"net_curve_seed{seed}_n{n}"] = np.stack([steps, curve])
            ctx.progress(
                (seed * len(ns) + i + 1) / jobs,
                f"seed {seed}, n={n}: NTK {ntk[seed, i]:.3g} ({ntk_error[seed, i]:.2f}), net "
                f"{value:.3g} ({error:.2f})",
            )
    ratios = ntk / np.maximum(net, MSE_FLOOR)
    metrics = _grid_metrics(
        config,
        ntk=ntk,
        net=net,
        ntk_error=ntk_error,
        net_error=net_error,
        ridges=ridges,
        diverged=diverged,
    )
    return Measurement(
        metrics=tuple(metrics),
        arrays={
            "n_grid": np.array(ns, dtype=np.float64),
            "ntk_mse": ntk,
            "net_mse": net,
            "ntk_error": ntk_error,
            "net_error": net_error,
            "ratios": ratios,
            "ntk_ridge": ridges,
            "diverged": diverged,
            **curves,
        },
        notes=(
            f"network: width {config.width}, standard parameterization, SGD lr "
            f"{config.learning_rate}, batch {config.batch_size}, weight decay "
            f"{config.weight_decay}, {config.loss} loss, {config.t} steps",
            "0-1 test error: sign of the output against the label; test MSE: both methods' "
            "outputs clipped to [-1, 1]",
        ),
    )


def judge(config: SparseParityConfig, metrics: Metrics) -> Judgement:
    """PASS when, at ``criterion_n``, the network's 0-1 test error is at most
    ``net_max_error``, the NTK's at least ``ntk_min_error``, NTK test MSE at least
    ``ntk_floor`` Var(y), and no network run diverged (NaN fails). The MSE ratio is
    reported, not judged."""
    n_at = config.criterion_n
    net_error = metrics[_name("net_error", n_at)].value
    ntk_error = metrics[_name("ntk_error", n_at)].value
    ntk = metrics[_name("ntk_mse_over_var", n_at)].value
    ratio = metrics[_name("mse_ratio", n_at)].value
    diverged = metrics["diverged_runs"].value
    net_ok = net_error <= config.net_max_error
    chance = ntk_error >= config.ntk_min_error
    ntk_ok = ntk >= config.ntk_floor
    stable = diverged == 0
    summary = (
        f"0-1 test error at n={n_at}: network {net_error:.3g} (predicted <= "
        f"{config.net_max_error:g}), NTK {ntk_error:.3g} (predicted >= "
        f"{config.ntk_min_error:g}); NTK test MSE {ntk:.3f} Var(y) (predicted >= "
        f"{config.ntk_floor:g}); MSE ratio {ratio:.3g} (reported)"
        + ("" if stable else f"; {diverged:g} network runs diverged")
    )
    criterion = (
        f"on a parity of k = {config.k} of d = {config.dim} coordinates, at n = {n_at}, mean "
        f"over {config.seeds} seeds: the network's 0-1 test error (averaged over its last "
        f"{config.last_evaluations} evaluations) <= {config.net_max_error:g}, the NTK's >= "
        f"{config.ntk_min_error:g}, NTK test MSE >= {config.ntk_floor:g} Var(y), and no "
        f"network run diverged (ntklab's own bounds on 'near-perfect' and 'at chance')"
    )
    return Judgement(
        passed=net_ok and chance and ntk_ok and stable, summary=summary, criterion=criterion
    )


def draw(
    config: SparseParityConfig, metrics: Metrics, arrays: Mapping[str, Any]
) -> dict[str, Figure]:
    """Both methods' test MSE against ``n`` and the network's test MSE during SGD (seed 0)."""
    fig = Figure(figsize=(16.0, 4.2))
    ax_e, ax_n, ax_t = fig.subplots(1, 3)
    n_arr = np.asarray(arrays["n_grid"], dtype=np.float64)
    ntk = np.asarray(arrays["ntk_mse"])
    net = np.asarray(arrays["net_mse"])
    ax_e.semilogx(n_arr, np.asarray(arrays["ntk_error"]).mean(axis=0), "o-", label="NTK")
    ax_e.semilogx(
        n_arr, np.asarray(arrays["net_error"]).mean(axis=0), "s-", label=f"SGD ({config.loss})"
    )
    ax_e.axhline(config.net_max_error, color="C1", lw=0.6, ls=":", label="network bound")
    ax_e.axhline(config.ntk_min_error, color="C0", lw=0.6, ls=":", label="NTK bound")
    ax_e.set(
        title=f"sparse parity d={config.dim}, k={config.k}: 0-1 error",
        xlabel="n (training points)",
        ylabel="0-1 test error (mean over seeds)",
        ylim=(-0.02, 0.6),
    )
    ax_e.legend(fontsize=7)
    ax_n.loglog(n_arr, ntk.mean(axis=0), "o-", label="NTK regression (LOO ridge)")
    ax_n.loglog(
        n_arr, np.maximum(net, MSE_FLOOR).mean(axis=0), "s-", label=f"SGD network ({config.loss})"
    )
    ax_n.axhline(
        config.ntk_floor * VAR_Y, color="k", lw=0.6, ls=":", label=f"{config.ntk_floor:g} Var(y)"
    )
    ax_n.set(
        title=f"sparse parity d={config.dim}, k={config.k}: MSE",
        xlabel="n (training points)",
        ylabel="clipped test MSE (mean over seeds)",
    )
    ax_n.legend(fontsize=7)
    for n in n_arr.astype(int):
        curve = np.asarray(arrays[f"net_curve_seed0_n{n}"])
        ax_t.semilogy(curve[0], np.maximum(curve[1], MSE_FLOOR), label=f"n{n}")
    ax_t.set(
        title=f"sparse parity d={config.dim}, k={config.k}: network during SGD (seed 0)",
        xlabel="step",
        ylabel="clipped test MSE",
    )
    ax_t.legend(fontsize=7)
    fig.tight_layout()
    return {"sparse_parity": fig}


EXPERIMENT = register(
    Experiment(
        name="sparse-parity",
        claim_id="A5",
        claim=(
            "On a sparse parity on {-1,1}^d (d = 20, k = 3) a two-layer ReLU network trained "
            "by SGD at the settings of Barak et al. 2022 reaches a test MSE orders of magnitude "
            "below NTK regression on the same samples, which stays near Var(y)."
        ),
        criterion=(
            "at n = 1000, mean over seeds: the network's 0-1 test error (averaged over its "
            "last evaluations) <= 0.05 and the NTK's >= 0.4 (ntklab's own bounds on "
            "'near-perfect' and 'at chance'), NTK test MSE >= 0.9 Var(y), no run diverged; "
            "the MSE ratio is reported, not judged"
        ),
        criterion_change=(
            "2026-12-04: judged on 0-1 test errors (network <= 0.05, NTK >= 0.4) with the NTK's "
            "MSE >= 0.9 Var(y); the MSE ratio, which is 1 / (network MSE) and set by the weight "
            "decay, is reported, not judged"
        ),
        reported=(
            "Ganguli & Constantinescu 2026, numerical section: the NTK stays at chance "
            "whatever the data while a two-layer network learns the parity, 4-6 orders of "
            "magnitude lower test error (ntklab reports that ratio, does not judge it); "
            "Barak et al. 2022: SGD reaches near-perfect accuracy on sparse parities"
        ),
        headline=("net_error[n=1000]", "ntk_error[n=1000]", "ntk_mse_over_var[n=1000]"),
        dataset="synthetic: 3-sparse parity on {-1,1}^20",
        config_type=SparseParityConfig,
        fixed_dtype="float32",
        scales={
            "tiny": {
                "dim": 8,
                "k": 2,
                "ns": [64, 128],
                "criterion_n": 128,
                "seeds": 1,
                "n_test": 256,
                "width": 64,
                "t": 200,
                "eval_every": 50,
                "last_evaluations": 2,
                "net_max_error": 1.0,
                "ntk_min_error": 0.0,
                "ntk_floor": 0.0,
            },
            "quick": {},
            "paper": {
                "ns": [250, 500, 1000, 2000, 4000, 8000],
                "seeds": 5,
                "n_test": 20000,
                "t": 20000,
            },
        },
        measure=measure,
        judge=judge,
        draw=draw,
    )
)
