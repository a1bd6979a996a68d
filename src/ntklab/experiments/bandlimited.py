"""A4 ``bandlimited``: on smooth (band-limited) targets the NTK is not much worse than a
trained network: no exponential gap.

Claim (Ganguli & Constantinescu 2026, "A Function-Space Dichotomy for Compositional Learning:
Exponential Sub-Optimality of the Neural Tangent Kernel", numerical section, "smooth
targets"): on band-limited smooth targets NTK regression is competitive with, or better
than, a wide trained network; there is no exponential gap (contrast the sparse parity of
experiment ``sparse-parity``). The ReLU NTK is a Sobolev-like kernel whose eigenvalues decay
polynomially with the frequency (Bietti & Mairal 2019, arXiv:1905.12173), so a target made of
a few low frequencies lies well inside its RKHS.

The claim is one-sided ("not much worse"), and the paper gives no factor: the bounds below are
**ntklab's own sanity bounds**, not figures of the paper. For a random trigonometric
polynomial of frequency :math:`\\le 4` on :math:`S^1` and a random degree-2 polynomial on
:math:`S^4` (``d = 5``), with labels carrying noise of sd 0.1, NTK test MSE / network test MSE
(geometric mean over seeds) is at most ``RATIO_FACTOR = 3`` at every ``n``; on noiseless
labels it is below ``NOISELESS_MAX_RATIO = 30`` (far from the gap of :math:`10^4` and more
that the same paper reports on the sparse parity).

Data, computation, measurement, verdict, figure:

1. per seed a fresh target (:func:`~ntklab.data.random_trig_polynomial`,
   :func:`~ntklab.data.random_sphere_polynomial`, unit :math:`L^2` norm), ``n`` uniform
   inputs and ``n_test`` test inputs; the last ``validation_fraction`` of the ``n`` points
   is the validation split, the rest the fit split, for both methods;
2. NTK: the ReLU NTK of ``depth x [Dense, Relu] + Dense`` for each depth of ``ntk_depths``;
   the ridge is chosen on the validation split
   (:func:`~ntklab.dynamics.model_selection.select_ridge_validation`) and so is the depth;
3. network: ``Dense, Relu, Dense`` of width ``width`` in ``parameterization``, one member
   per seed trained together (:func:`~ntklab.nets.train_ensemble`, full-batch GD on the
   squared loss), early-stopped at the recorded step of smallest validation MSE. With
   ``zero_output`` (the default) each member is an antisymmetric pair whose initial output
   :math:`f_0` is exactly 0 (:class:`~ntklab.nets.AntisymmetricPair`), as the kernel
   regression it is compared with starts from 0: a random :math:`f_0` (sd about 0.6 against
   a target of sd about 1) is a component of the error that early-stopped training does not
   remove; in an audit of the first paper-scale run it, not the training length, set the
   network's floor (NTK / network 0.24 at ``sphere, noisy, n = 2048``, 0.36-0.59 with
   :math:`f_0 = 0`);
4. test MSE of each method against the noiseless target (the excess risk); ratio
   NTK / network per seed, geometric mean over seeds (metric ``ratio[target,noise,n=N]``).
   PASS when every noisy ratio is at most ``ratio_factor`` and every noiseless one below
   ``noiseless_max_ratio``. A ratio below ``1 / ratio_factor`` (the NTK 3x *better*) does
   not contradict the claim; it raises the **baseline warning** instead (metric
   ``baseline_warning``, a note in the result): the network baseline looks undertrained or
   floored by its :math:`f_0`. The warning also fires when the networks start at
   :math:`f_0 \\ne 0` and the mean square of :math:`f_0` on the test inputs exceeds the
   network's test MSE in some noisy cell (metric ``f0_energy_over_net_mse`` > 1: the error
   can be a residue of :math:`f_0`). Neither is part of PASS/FAIL;
5. control: with ``zero_output`` the measured mean square of :math:`f_0` must be 0; if it is
   not, the baseline is not what it claims to be and the verdict is ERROR;
6. width sweep (reported, not judged): at ``sweep_n`` on ``sweep_target`` with noisy labels
   (the cell that failed at paper scale: ``n = 2048`` on the sphere; quick: ``n = 512``,
   its largest ``n``), the first ``sweep_seeds`` seeds' data, networks of each width of
   ``width_sweep`` trained with :math:`f_0 = 0` and with a random :math:`f_0`, side by side
   (metrics ``sweep_ratio[w=W,f0=zero|random]``), which separates the width from
   :math:`f_0`. In the standard parameterization the NTK of the network grows linearly with
   the width, so the learning rate of width ``w`` is ``learning_rate * width / w`` (the same
   steps in kernel time); in the NTK and muP parameterizations it is ``learning_rate``;
7. figure: the geometric-mean test MSE of both methods against ``n``, one panel per target,
   and the width sweep.

Audit (Ganguli & Constantinescu's claim, issue "verdicts that test the claim"):

- wrong kernel (the analytic NTK replaced by 1.5 NTK + 0.5 NNGP): the verdict still PASSes
  (quick scale, 2026-12-04: noisy ratios 0.31-1.54 against 0.32-1.54 with the NTK): the
  wrong kernel is a smooth kernel too, and the claim is about smooth kernels doing well,
  not about this kernel's exact values; the test suite catches the mutation instead: the
  tiny run's NTK test MSE is compared with an independent NumPy evaluation of the ReLU
  NTK's closed form (arc-cosine kernels, Cho & Saul 2009);
- permuted labels (reasoned, not run): both methods then fit noise, both test MSEs approach
  the target's variance, and the ratio approaches 1: PASS. The claim (no gap on a smooth
  target) is not falsified by a target both methods fail on, so this is not a defect of the
  criterion;
- a baseline set up to lose (an undertrained network, or a random :math:`f_0`): the ratio
  falls below 1 and the verdict PASSes (one-sided), which a one-sided claim cannot avoid;
  the baseline warning fires instead (tested: a network with a random :math:`f_0` is
  flagged), and the width sweep reports how far a random :math:`f_0` is from
  :math:`f_0 = 0` at each width.

Paper scale (``n`` from 32 to 2048, 10 seeds, 4000 test points, NTK depths 1-4, networks of
width 1024 trained for 10000 full-batch steps, float64) measured 70 minutes on the project's
2-core x86_64 machine shared with other jobs (load 4-5; 2026-12-02, with the random
:math:`f_0` and no width sweep): the NTK fits (validation ridges over four depths) and 140
network runs of 10000 steps. The width sweep of the paper scale is kept small (widths 256,
1024, 2048; 3 seeds; two initializations): about two extra ``n = 2048`` cells of the grid,
by the cost of the network runs (linear in width, seeds and ``n``); not yet measured.
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

from ..data import random_sphere_polynomial, random_trig_polynomial, uniform_circle, uniform_sphere
from ..dynamics import select_ridge_validation
from ..errors import NtklabValueError, NumericalWarning
from ..nets import MLPEnsemble, ModuleEnsemble, ensemble, train_ensemble
from . import (
    Count,
    Experiment,
    ExperimentConfig,
    Judgement,
    Measurement,
    Metric,
    Metrics,
    NonNegativeCount,
    PositiveFloat,
    RunContext,
    register,
)
from .spectrum_s1 import relu_network

__all__ = [
    "F0_ENERGY_WARNING",
    "F0_ZERO_TOLERANCE",
    "NOISELESS_MAX_RATIO",
    "RATIO_FACTOR",
    "BandlimitedConfig",
    "draw",
    "judge",
    "measure",
    "network_test_mse",
    "ntk_test_mse",
    "ratio_name",
    "sweep_name",
]

Target = Literal["circle", "sphere"]

#: With noisy labels, NTK / network test MSE must be at most this. ntklab's own sanity bound:
#: Ganguli & Constantinescu 2026 (numerical section) report "competitive or better, no
#: exponential gap" and no factor. Below 1 / RATIO_FACTOR the baseline warning fires.
RATIO_FACTOR = 3.0
#: With noiseless labels, NTK / network test MSE must stay below this. ntklab's own sanity
#: bound, far below the 10^4-10^6 gap the same paper reports on a sparse parity.
NOISELESS_MAX_RATIO = 30.0
#: Baseline warning: the networks' initial output f0 has a mean square on the test inputs
#: above this multiple of the network's test MSE (its error can be a residue of f0).
#: ntklab's own diagnostic.
F0_ENERGY_WARNING = 1.0
#: Control of ``zero_output``: the measured mean square of f0 must not exceed this (it is
#: exactly 0 for an antisymmetric pair).
F0_ZERO_TOLERANCE = 1e-12


class BandlimitedConfig(ExperimentConfig):
    """Grid of ``bandlimited``.

    Parameters
    ----------
    targets : tuple of {"circle", "sphere"}
        Target families, each once: a trigonometric polynomial on :math:`S^1`, a polynomial
        on :math:`S^{d-1}`.
    circle_degree, sphere_degree : int
        Highest frequency / degree of the targets (>= 0).
    sphere_dim : int
        Ambient dimension ``d >= 2`` of the sphere target.
    ns : tuple of int
        Sample sizes (fit + validation), strictly increasing, each leaving at least one
        point in both splits.
    seeds : int
        Seeds per cell (targets and data drawn afresh).
    noise_sd : float
        Label noise of the noisy cells (> 0).
    noiseless : bool
        Whether to run the noiseless cells as well.
    n_test : int
        Test points per seed.
    validation_fraction : float
        Fraction of the ``n`` points held out for validation, in (0, 1).
    ntk_depths : tuple of int
        Candidate depths of the NTK (chosen on validation).
    w_std, b_std : float
        Weight (> 0) and bias (>= 0) standard deviations of the architecture.
    ridges : tuple of float
        Candidate ridges relative to the kernel's mean diagonal (> 0).
    width, parameterization, learning_rate, t, record_every
        The network and its full-batch gradient descent (``t`` steps at ``learning_rate``, as in
        :func:`~ntklab.nets.train`); validation every ``record_every``
        steps.
    zero_output : bool
        Whether the networks start at :math:`f_0 = 0` (antisymmetric pairs; the width must be
        even) or at a random :math:`f_0` (the behaviour of the first runs).
    ratio_factor : float
        Noisy criterion: ratio at most ``ratio_factor`` (>= 1); a ratio below
        ``1 / ratio_factor`` raises the baseline warning.
    noiseless_max_ratio : float
        Noiseless criterion: ratio below it (> 0).
    width_sweep : tuple of int
        Widths of the width sweep (reported, not judged; empty: no sweep). Even widths.
    sweep_target : {"circle", "sphere"}
        Target of the width sweep (noisy labels).
    sweep_n : int
        Sample size of the width sweep.
    sweep_seeds : int
        Seeds of the width sweep (the first ones of the grid's, at most ``seeds``).
    """

    targets: tuple[Target, ...] = Field(default=("circle", "sphere"), min_length=1)
    circle_degree: NonNegativeCount = 4
    sphere_dim: int = Field(default=5, ge=2)
    sphere_degree: NonNegativeCount = 2
    ns: tuple[Count, ...] = Field(default=(32, 128, 512), min_length=1)
    seeds: Count = 3
    noise_sd: PositiveFloat = 0.1
    noiseless: bool = True
    n_test: Count = 1000
    validation_fraction: float = Field(default=0.25, gt=0.0, lt=1.0)
    ntk_depths: tuple[Count, ...] = Field(default=(1, 3), min_length=1)
    w_std: PositiveFloat = math.sqrt(2.0)
    b_std: float = Field(default=0.1, ge=0.0, allow_inf_nan=False)
    ridges: tuple[PositiveFloat, ...] = Field(
        default=tuple(10.0 ** (e / 2) for e in range(-16, 3)), min_length=1
    )
    width: Count = 256
    parameterization: Literal["ntk", "standard", "mup"] = "standard"
    learning_rate: PositiveFloat = 0.04
    t: Count = 4000
    record_every: Count = 20
    zero_output: bool = True
    ratio_factor: float = Field(default=RATIO_FACTOR, ge=1.0, allow_inf_nan=False)
    noiseless_max_ratio: PositiveFloat = NOISELESS_MAX_RATIO
    width_sweep: tuple[Count, ...] = (64, 256, 1024)
    sweep_target: Target = "sphere"
    sweep_n: Count = 512
    sweep_seeds: Count = 3

    @model_validator(mode="after")
    def _check_grid(self) -> BandlimitedConfig:
        if len(set(self.targets)) != len(self.targets):
            raise NtklabValueError(
                f"targets: expected each target at most once, received {list(self.targets)}"
            )
        if any(b <= a for a, b in zip(self.ns, self.ns[1:], strict=False)):
            raise NtklabValueError(
                f"ns: expected strictly increasing sizes, received {list(self.ns)}"
            )
        for name, sizes in (("ns", self.ns), ("sweep_n", (self.sweep_n,))):
            for n in sizes:
                n_val = _n_validation(n, self.validation_fraction)
                if n - n_val < 1:
                    raise NtklabValueError(
                        f"{name}: expected sizes that leave at least one fit point after "
                        f"holding out validation_fraction = {self.validation_fraction:g} for "
                        f"validation, received n = {n} ({n_val} validation points)"
                    )
        if self.zero_output and self.width % 2:
            raise NtklabValueError(
                f"width: expected an even width with zero_output = True (two halves), "
                f"received {self.width}"
            )
        odd = [w for w in self.width_sweep if w % 2]
        if odd:
            raise NtklabValueError(
                f"width_sweep: expected even widths (the f0 = 0 networks are two halves), "
                f"received {list(self.width_sweep)}"
            )
        if len(set(self.width_sweep)) != len(self.width_sweep):
            raise NtklabValueError(
                f"width_sweep: expected each width at most once, received {list(self.width_sweep)}"
            )
        if self.width_sweep and self.sweep_seeds > self.seeds:
            raise NtklabValueError(
                f"sweep_seeds: expected at most seeds = {self.seeds}, received {self.sweep_seeds}"
            )
        return self


def _n_validation(n: int, fraction: float) -> int:
    """Validation points among ``n``: ``max(1, round(fraction * n))``."""
    return max(1, round(fraction * n))


def _noise_labels(config: BandlimitedConfig) -> list[tuple[str, float]]:
    """``(label, noise sd)`` of the cells that run: noisy, then noiseless if asked."""
    return [("noisy", config.noise_sd)] + ([("noiseless", 0.0)] if config.noiseless else [])


def ratio_name(target: str, label: str, n: int) -> str:
    """Name of the metric of one cell: ``"ratio[circle,noisy,n=32]"``."""
    return f"ratio[{target},{label},n={n}]"


def _key(target: str, label: str, n: int) -> str:
    """Suffix of the arrays of one cell: ``"circle_noisy_n32"``."""
    return f"{target}_{label}_n{n}"


def sweep_name(width: int, zero_output: bool) -> str:
    """Name of the metric of one width of the sweep: ``"sweep_ratio[w=256,f0=zero]"``."""
    return f"sweep_ratio[w={width},f0={'zero' if zero_output else 'random'}]"


def _sweep_learning_rate(config: BandlimitedConfig, width: int) -> float:
    """Learning rate of width ``width`` in the sweep: ``learning_rate * config.width / width``
    in the standard parameterization (its NTK grows linearly with the width), else
    ``learning_rate``."""
    if config.parameterization == "standard":
        return config.learning_rate * config.width / width
    return config.learning_rate


def _data(
    target: Target, config: BandlimitedConfig, n: int, gen: torch.Generator
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Inputs, noiseless labels, test inputs and test labels of one seed."""
    dtype = torch.float64
    if target == "circle":
        f = random_trig_polynomial(config.circle_degree, generator=gen, dtype=dtype)
        _, x = uniform_circle(n, generator=gen, dtype=dtype)
        _, x_test = uniform_circle(config.n_test, generator=gen, dtype=dtype)
        return x, f(x), x_test, f(x_test)
    g = random_sphere_polynomial(
        config.sphere_degree, config.sphere_dim, generator=gen, dtype=dtype
    )
    x = uniform_sphere(n, config.sphere_dim, generator=gen, dtype=dtype)
    x_test = uniform_sphere(config.n_test, config.sphere_dim, generator=gen, dtype=dtype)
    return x, g(x), x_test, g(x_test)


def ntk_test_mse(
    config: BandlimitedConfig, x: Tensor, y: Tensor, x_test: Tensor, f_test: Tensor, n_fit: int
) -> tuple[float, int, float]:
    """Test MSE of NTK regression with depth and ridge chosen on the validation split;
    returns ``(test_mse, depth, ridge / mean diagonal)``."""
    best: tuple[float, float, int, float] | None = None
    for depth in config.ntk_depths:
        arch = relu_network(depth, config.w_std, config.b_std)
        with torch.no_grad():
            k = arch.kernel(x, x).ntk
            k_test = arch.kernel(x_test, x[:n_fit]).ntk
        scale = float(k.diagonal().mean())
        ridges = scale * torch.tensor(config.ridges, dtype=k.dtype)
        sel = select_ridge_validation(
            k[:n_fit, :n_fit], y[:n_fit], k[n_fit:, :n_fit], y[n_fit:], ridges
        )
        val = float(sel.best_mse)
        if best is None or val < best[0]:
            test = float((sel.predict(k_test) - f_test).square().mean())
            best = (val, test, depth, float(sel.ridge) / scale)
    assert best is not None
    return best[1], best[2], best[3]


def network_test_mse(
    config: BandlimitedConfig,
    x: Tensor,
    y: Tensor,
    x_test: Tensor,
    f_test: Tensor,
    n_fit: int,
    gen: torch.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Early-stopped test MSE of one two-layer network per seed (the leading axis of the
    inputs), the stopping steps, and the mean square of the initial output :math:`f_0` on the
    test inputs (0 with ``config.zero_output``), each of shape ``(seeds,)``.

    The validation MSE is recorded every ``record_every`` steps; each member's test MSE is
    that of its weights at the recorded step of smallest validation MSE (the first one on a
    tie). The test inputs are evaluated only at the stopping steps: recording them at every
    step cost more than the training itself at small ``n`` with thousands of test points.
    """
    members, _, d = x.shape
    arch = relu_network(1, config.w_std, config.b_std)
    ens = ensemble(
        arch,
        members,
        config.width,
        in_features=d,
        parameterization=config.parameterization,
        zero_output=config.zero_output,
        generator=gen,
        dtype=torch.float32,
    )
    with torch.no_grad():
        f0_ms = ens(x_test.float())[..., 0].double().square().mean(dim=-1)  # shape: (M,)
    record = list(range(0, config.t + 1, config.record_every))
    if record[-1] != config.t:
        record.append(config.t)
    x32 = x.float()
    x_fit, y_fit = x32[:, :n_fit], y[:, :n_fit, None].float()
    x_val, y_val = x32[:, n_fit:], y[:, n_fit:]
    # Train from one recorded step to the next (full-batch GD: the same trajectory as one
    # run), recording the validation outputs only, and keep the members' weights at the
    # steps that are still some member's best: the test inputs are evaluated once per
    # stopping step instead of at every recorded step. Both go through train_ensemble's own
    # recording (the same chunks of members), so the outputs equal those of one long run.
    val = torch.empty((len(record), members), dtype=torch.float64)  # shape: (T, M)
    snapshots: dict[int, MLPEnsemble | ModuleEnsemble] = {0: ens}
    current: MLPEnsemble | ModuleEnsemble = ens
    with warnings.catch_warnings():
        warnings.simplefilter("error", NumericalWarning)
        for j in range(1, len(record)):
            length = record[j] - record[j - 1]
            run = train_ensemble(
                current,
                x_fit,
                y_fit,
                learning_rate=config.learning_rate,
                t=length,
                x_test=x_val,
                record_t=[0, length] if j == 1 else [length],
            )
            assert run.test_outputs is not None
            out = run.test_outputs[..., 0].double()  # shape: (1 or 2, M, n_val)
            val[j + 1 - out.shape[0] : j + 1] = (out - y_val[None]).square().mean(dim=-1)
            current = snapshots[j] = run.ensemble
            best = set(val[: j + 1].argmin(dim=0).tolist())
            snapshots = {k: v for k, v in snapshots.items() if k in best}
        stop = val.argmin(dim=0)  # shape: (M,)
        chosen = torch.empty(members, dtype=torch.float64)
        for j in sorted(set(stop.tolist())):
            # the outputs recorded at step 0 of a run from the snapshot (one step is taken
            # and discarded)
            run = train_ensemble(
                snapshots[j],
                x_fit,
                y_fit,
                learning_rate=config.learning_rate,
                t=1,
                x_test=x_test.float(),
                record_t=[0],
            )
            assert run.test_outputs is not None
            picked = stop == j
            test = (run.test_outputs[0, ..., 0].double() - f_test).square().mean(dim=-1)
            chosen[picked] = test[picked]
    steps = torch.tensor(record, dtype=torch.int64)
    return chosen.numpy(), steps[stop].numpy(), f0_ms.numpy()


def _geomean(values: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(values))))


def _cell_data(
    config: BandlimitedConfig, ctx: RunContext, target: Target, sd: float, n: int, seeds: int
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], np.ndarray, np.ndarray]:
    """The data of the first ``seeds`` seeds of one cell, stacked over seeds, and the NTK's
    test MSE and chosen depth per seed.

    Each seed draws its own sample of ``n`` points (generator ``<target>-n<n>-seed<s>``, so a
    noisy and a noiseless cell, and the width sweep, see the same inputs) with label noise of
    standard deviation ``sd``; the NTK's depth and ridge are chosen on the validation split by
    :func:`ntk_test_mse`.

    Returns
    -------
    data : tuple of Tensor
        ``x`` (seeds, n, d), ``y`` (seeds, n), ``x_test`` (seeds, n_test, d) and ``f_test``
        (seeds, n_test).
    ntk, depths : numpy.ndarray
        Each of shape ``(seeds,)``.
    """
    n_fit = n - _n_validation(n, config.validation_fraction)
    xs, ys, xts, fts = [], [], [], []
    ntk = np.zeros(seeds)
    depths = np.zeros(seeds, dtype=np.int64)
    for seed in range(seeds):
        gen = ctx.generator(f"{target}-n{n}-seed{seed}")
        x, f, x_test, f_test = _data(target, config, n, gen)
        y = f + sd * torch.randn(n, generator=gen, dtype=f.dtype)
        ntk[seed], depths[seed], _ = ntk_test_mse(config, x, y, x_test, f_test, n_fit)
        xs.append(x)
        ys.append(y)
        xts.append(x_test)
        fts.append(f_test)
    data = (torch.stack(xs), torch.stack(ys), torch.stack(xts), torch.stack(fts))
    return data, ntk, depths


def _cell_mse(
    config: BandlimitedConfig,
    ctx: RunContext,
    target: Target,
    noise: tuple[str, float],
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Test MSEs of the NTK and of the early-stopped network in one cell of the grid, per seed.

    The data and the NTK side come from :func:`_cell_data`; the networks of all seeds are
    trained at once by :func:`network_test_mse` (generator ``net-<target>-<label>-n<n>``).

    Parameters
    ----------
    config : BandlimitedConfig
        The run's config.
    ctx : RunContext
        The run's context (named generators).
    target : {"circle", "sphere"}
        The target function.
    noise : tuple of (str, float)
        The cell's label (``"noisy"`` or ``"noiseless"``) and noise standard deviation.
    n : int
        Sample size, validation points included.

    Returns
    -------
    ntk, depths, net, stops, f0_ms : numpy.ndarray
        Each of shape ``(seeds,)``: NTK test MSE, its chosen depth, the network's test MSE,
        its stopping step and the mean square of its initial output on the test inputs.
    """
    label, sd = noise
    n_fit = n - _n_validation(n, config.validation_fraction)
    data, ntk, depths = _cell_data(config, ctx, target, sd, n, config.seeds)
    net, stops, f0_ms = network_test_mse(
        config, *data, n_fit, ctx.generator(f"net-{target}-{label}-n{n}")
    )
    return ntk, depths, net, np.asarray(stops, dtype=np.int64), f0_ms


def _width_sweep(
    config: BandlimitedConfig, ctx: RunContext
) -> tuple[list[Metric], dict[str, np.ndarray]]:
    """The width sweep: at ``sweep_n`` on ``sweep_target`` (noisy labels), the first
    ``sweep_seeds`` seeds' data and NTK, networks of each width of ``width_sweep`` with
    :math:`f_0 = 0` and with a random :math:`f_0` (generator ``sweep-w<W>-<zero|random>``).

    Returns
    -------
    metrics : list of Metric
        ``sweep_ratio[w=W,f0=zero|random]``: NTK / network test MSE, geometric mean over seeds.
    arrays : dict of str to numpy.ndarray
        ``sweep_widths``, ``sweep_ntk_mse`` (seeds,), ``sweep_net_mse_zero`` and
        ``sweep_net_mse_random`` (len(width_sweep), seeds).
    """
    target, n = config.sweep_target, config.sweep_n
    n_fit = n - _n_validation(n, config.validation_fraction)
    data, ntk, _ = _cell_data(config, ctx, target, config.noise_sd, n, config.sweep_seeds)
    x, y, x_test, f_test = data
    widths = config.width_sweep
    nets = {z: np.zeros((len(widths), config.sweep_seeds)) for z in (True, False)}
    metrics: list[Metric] = []
    for i, width in enumerate(widths):
        lr = _sweep_learning_rate(config, width)
        for zero in (True, False):
            sub = config.model_copy(
                update={"width": width, "learning_rate": lr, "zero_output": zero}
            )
            gen = ctx.generator(f"sweep-w{width}-{'zero' if zero else 'random'}")
            net, _, f0_ms = network_test_mse(sub, x, y, x_test, f_test, n_fit, gen)
            nets[zero][i] = net
            metrics.append(
                Metric(
                    sweep_name(width, zero),
                    _geomean(ntk / net),
                    note=f"{target}, noisy, n={n}, {config.sweep_seeds} seeds: NTK "
                    f"{_geomean(ntk):.3g} vs net {_geomean(net):.3g} (lr {lr:.3g}, mean "
                    f"square of f0 {float(np.mean(f0_ms)):.3g}); reported, not judged",
                )
            )
    arrays = {
        "sweep_widths": np.array(widths, dtype=np.int64),
        "sweep_ntk_mse": ntk,
        "sweep_net_mse_zero": nets[True],
        "sweep_net_mse_random": nets[False],
    }
    return metrics, arrays


def _summary_metrics(ratios: dict[str, list[float]], config: BandlimitedConfig) -> list[Metric]:
    """The largest and smallest noisy ratio and the largest noiseless one.

    Parameters
    ----------
    ratios : dict of str to list of float
        NTK / network test MSE ratio (geometric mean over seeds) of every cell, keyed by
        ``"noisy"`` and ``"noiseless"``; the noisy list is not empty.
    config : BandlimitedConfig
        The run's config (the criterion's bounds).

    Returns
    -------
    list of Metric
        ``noisy_ratio_max``, ``noisy_ratio_min`` (reported: below ``1 / ratio_factor`` it
        raises the baseline warning) and, with noiseless cells, ``noiseless_ratio_max``.
    """
    noisy = ratios["noisy"]
    summary: list[Metric] = [
        Metric(
            "noisy_ratio_max",
            max(noisy),
            predicted=f"<= {config.ratio_factor:g}",
            note="largest noisy NTK / network ratio",
        ),
        Metric(
            "noisy_ratio_min",
            min(noisy),
            note=f"smallest noisy NTK / network ratio; below 1/{config.ratio_factor:g} it "
            "raises the baseline warning (not judged)",
        ),
    ]
    if ratios["noiseless"]:
        summary.append(
            Metric(
                "noiseless_ratio_max",
                max(ratios["noiseless"]),
                predicted=f"< {config.noiseless_max_ratio:g}",
            )
        )
    return summary


def _baseline_metrics(
    config: BandlimitedConfig,
    beaten: list[str],
    f0_over_net: float,
    f0_ms: float,
) -> tuple[list[Metric], tuple[str, ...]]:
    """The baseline warning's metrics and its note (empty when it does not fire).

    Parameters
    ----------
    config : BandlimitedConfig
        The run's config.
    beaten : list of str
        The noisy cells whose ratio is below ``1 / ratio_factor``, by metric name.
    f0_over_net : float
        Largest, over the noisy cells, mean square of :math:`f_0` on the test inputs (mean
        over seeds) over the network's test MSE (geometric mean over seeds).
    f0_ms : float
        Mean square of :math:`f_0` on the test inputs, mean over every cell and seed.
    """
    floored = f0_over_net > F0_ENERGY_WARNING
    warning = bool(beaten) or floored
    metrics = [
        Metric(
            "baseline_warning",
            float(warning),
            note="1 when the network baseline looks undertrained or floored by its initial "
            "output f0 (a warning, not part of the verdict)",
        ),
        Metric(
            "baseline_beaten_cells",
            float(len(beaten)),
            note=f"noisy cells where the NTK is more than {config.ratio_factor:g}x better "
            "than the network",
        ),
        Metric(
            "f0_energy_over_net_mse",
            f0_over_net,
            note=f"largest over noisy cells of mean square of f0 / network test MSE; above "
            f"{F0_ENERGY_WARNING:g} the network's error can be a residue of f0",
        ),
        Metric(
            "f0_mean_square",
            f0_ms,
            predicted="0" if config.zero_output else None,
            note="mean square of the networks' initial output on the test inputs (control: 0 "
            "with zero_output)",
        ),
    ]
    notes: list[str] = []
    if beaten:
        notes.append(
            f"baseline warning: the NTK beats the network by more than "
            f"{config.ratio_factor:g}x at {', '.join(beaten)}: the network baseline looks "
            "undertrained or floored by f0 (not part of the verdict)"
        )
    if floored:
        notes.append(
            f"baseline warning: the networks start at a random f0 whose mean square is "
            f"{f0_over_net:.3g}x the network's test MSE: its error floor can be set by f0 "
            "(not part of the verdict)"
        )
    return metrics, tuple(notes)


def measure(config: BandlimitedConfig, ctx: RunContext) -> Measurement:
    """Test MSE of NTK regression and of the early-stopped network in every cell of the grid,
    the baseline warning, and the width sweep.

    Returns
    -------
    Measurement
        ``ratio[target,noise,n=N]`` per cell and ``noisy_ratio_max``, ``noisy_ratio_min``,
        ``noiseless_ratio_max`` over them; ``baseline_warning``, ``baseline_beaten_cells``,
        ``f0_energy_over_net_mse``, ``f0_mean_square``; ``sweep_ratio[w=W,f0=zero|random]``;
        arrays ``ntk_mse_<cell>``, ``net_mse_<cell>``, ``f0_ms_<cell>`` (per seed),
        ``ntk_depth_<cell>``, ``net_stop_<cell>``, ``ns`` and the sweep's
        (:func:`_width_sweep`).
    """
    cells: list[Metric] = []
    arrays: dict[str, np.ndarray] = {"ns": np.array(config.ns, dtype=np.int64)}
    ratios: dict[str, list[float]] = {"noisy": [], "noiseless": []}
    beaten: list[str] = []
    f0_over_net = 0.0
    f0_all: list[float] = []
    labels = _noise_labels(config)
    jobs = len(config.targets) * len(labels) * len(config.ns) + (1 if config.width_sweep else 0)
    done = 0
    for target in config.targets:
        for label, sd in labels:
            for n in config.ns:
                ntk, depths, net, stops, f0_ms = _cell_mse(config, ctx, target, (label, sd), n)
                ratio = _geomean(ntk / net)
                ratios[label].append(ratio)
                key = _key(target, label, n)
                name = ratio_name(target, label, n)
                arrays[f"ntk_mse_{key}"] = ntk
                arrays[f"net_mse_{key}"] = net
                arrays[f"f0_ms_{key}"] = f0_ms
                arrays[f"ntk_depth_{key}"] = depths
                arrays[f"net_stop_{key}"] = stops
                f0_all.extend(f0_ms.tolist())
                if label == "noisy":
                    predicted = f"<= {config.ratio_factor:g}"
                    if ratio < 1.0 / config.ratio_factor:
                        beaten.append(name)
                    f0_over_net = max(f0_over_net, float(np.mean(f0_ms)) / _geomean(net))
                else:
                    predicted = f"< {config.noiseless_max_ratio:g}"
                cells.append(
                    Metric(
                        name,
                        ratio,
                        predicted=predicted,
                        note=f"NTK {_geomean(ntk):.3g} (depths {sorted(set(depths.tolist()))}) "
                        f"vs net {_geomean(net):.3g} (stopped at steps "
                        f"{stops.min()}..{stops.max()})",
                    )
                )
                done += 1
                ctx.progress(done / jobs, f"{target},{label},n={n}: ratio {ratio:.2f}")
    summary = _summary_metrics(ratios, config)
    baseline, warnings_ = _baseline_metrics(config, beaten, f0_over_net, float(np.mean(f0_all)))
    sweep: list[Metric] = []
    if config.width_sweep:
        sweep, sweep_arrays = _width_sweep(config, ctx)
        arrays.update(sweep_arrays)
        ctx.progress(1.0, f"width sweep at n={config.sweep_n}")
    f0 = "f0 = 0 (antisymmetric pairs)" if config.zero_output else "a random f0"
    return Measurement(
        metrics=(*summary, *baseline, *cells, *sweep),
        arrays=arrays,
        notes=(
            f"network: width {config.width}, {config.parameterization} parameterization, "
            f"{f0}, full-batch GD lr {config.learning_rate}, {config.t} steps, early-stopped "
            f"on the validation split (every {config.record_every} steps)",
            "test MSE against the noiseless target on fresh inputs (excess risk)",
            *warnings_,
        ),
    )


def _span(values: list[float]) -> str:
    """``"lo..hi"`` of the values (``nan`` when one is NaN)."""
    arr = np.array(values, dtype=np.float64)
    return f"{np.min(arr):.3g}..{np.max(arr):.3g}"


def judge(config: BandlimitedConfig, metrics: Metrics) -> Judgement:
    """PASS when every noisy ratio is at most ``ratio_factor`` and every noiseless ratio is
    below ``noiseless_max_ratio`` (NaN fails); ERROR (a failed control) when the networks
    were to start at :math:`f_0 = 0` and did not. The baseline warning is stated in the
    summary, not judged."""
    factor, ceiling = config.ratio_factor, config.noiseless_max_ratio
    values: dict[str, list[float]] = {"noisy": [], "noiseless": []}
    off: list[str] = []
    for target in config.targets:
        for label, _ in _noise_labels(config):
            for n in config.ns:
                name = ratio_name(target, label, n)
                ratio = metrics[name].value
                values[label].append(ratio)
                ok = ratio <= factor if label == "noisy" else ratio < ceiling
                if not ok:
                    off.append(f"{name} = {ratio:.3g}")
    parts = [
        f"NTK / network test MSE (geometric mean over {config.seeds} seeds): noisy "
        f"{_span(values['noisy'])} (predicted <= {factor:g})"
    ]
    f0 = "f0 = 0" if config.zero_output else "a random f0"
    criterion = (
        f"with label noise sd {config.noise_sd:g}, the geometric mean over {config.seeds} "
        f"seeds of NTK test MSE / network test MSE (networks starting at {f0}) is at most "
        f"{factor:g} at n = {', '.join(str(n) for n in config.ns)} on targets "
        f"{', '.join(config.targets)}"
    )
    if config.noiseless:
        parts.append(f"noiseless {_span(values['noiseless'])} (predicted < {ceiling:g})")
        criterion += f"; on noiseless labels it is below {ceiling:g}"
    criterion += " (ntklab's own bounds on the paper's 'no exponential gap')"
    parts.append(f"n in {list(config.ns)}, targets {list(config.targets)}")
    if off:
        parts.append("off: " + ", ".join(off))
    if metrics["baseline_warning"].value != 0.0:
        parts.append(
            f"baseline warning: {metrics['baseline_beaten_cells'].value:g} noisy cells with "
            f"ratio < 1/{factor:g}, mean square of f0 / network MSE up to "
            f"{metrics['f0_energy_over_net_mse'].value:.3g} (not judged)"
        )
    controls: list[str] = []
    f0_ms = metrics["f0_mean_square"].value
    if config.zero_output and not f0_ms <= F0_ZERO_TOLERANCE:
        controls.append(
            f"zero_output: the networks' initial output has mean square {f0_ms:.3g} on the "
            f"test inputs, expected 0"
        )
    return Judgement(
        passed=not off,
        summary="; ".join(parts),
        criterion=criterion,
        controls_failed=tuple(controls),
    )


def draw(
    config: BandlimitedConfig, metrics: Metrics, arrays: Mapping[str, Any]
) -> dict[str, Figure]:
    """Geometric-mean test MSE of both methods against ``n``, one panel per target, and the
    width sweep's network test MSE against the width (``f0 = 0`` and random) beside the
    NTK's."""
    panels = len(config.targets) + (1 if config.width_sweep else 0)
    fig = Figure(figsize=(5.5 * panels, 4.2))
    all_axes = np.atleast_1d(fig.subplots(1, panels))
    axes = all_axes[: len(config.targets)]
    ns = np.asarray(arrays["ns"], dtype=np.float64)
    for ax, target in zip(axes, config.targets, strict=True):
        for label, _ in _noise_labels(config):
            keys = [_key(target, label, int(n)) for n in ns]
            ntk = [_geomean(np.asarray(arrays[f"ntk_mse_{k}"])) for k in keys]
            net = [_geomean(np.asarray(arrays[f"net_mse_{k}"])) for k in keys]
            style = "-" if label == "noisy" else ":"
            ax.loglog(ns, ntk, "o" + style, color="C0", label=f"NTK, {label}")
            ax.loglog(ns, net, "s" + style, color="C1", label=f"network, {label}")
        name = (
            f"$S^1$, degree {config.circle_degree}"
            if target == "circle"
            else f"$S^{{{config.sphere_dim - 1}}}$, degree {config.sphere_degree}"
        )
        ax.set(
            title=f"band-limited target on {name}",
            xlabel="n (fit + validation points)",
            ylabel="test MSE vs noiseless target (geo. mean)",
        )
        ax.legend(fontsize=7)
    if config.width_sweep:
        ax = all_axes[-1]
        widths = np.asarray(arrays["sweep_widths"], dtype=np.float64)
        ntk_sweep = _geomean(np.asarray(arrays["sweep_ntk_mse"]))
        for zero, marker in (("zero", "o-"), ("random", "s--")):
            net_sweep = np.exp(np.log(np.asarray(arrays[f"sweep_net_mse_{zero}"])).mean(axis=1))
            ax.loglog(widths, net_sweep, marker, label=f"network, f0 {zero}")
        ax.axhline(ntk_sweep, color="k", lw=0.8, ls=":", label="NTK")
        ax.set(
            title=f"width sweep: {config.sweep_target}, noisy, n={config.sweep_n}",
            xlabel="width",
            ylabel="test MSE (geo. mean)",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    return {"bandlimited": fig}


EXPERIMENT = register(
    Experiment(
        name="bandlimited",
        claim_id="A4",
        claim=(
            "On smooth band-limited targets (a random trigonometric polynomial of frequency "
            "<= 4 on S^1, a degree-2 polynomial on S^4) NTK regression is not much worse than "
            "a trained wide two-layer ReLU network: no exponential gap (Ganguli & "
            "Constantinescu 2026)."
        ),
        criterion=(
            "with label noise sd 0.1, the geometric mean over seeds of NTK test MSE / network "
            "test MSE (networks starting at f0 = 0) is at most 3 at every n on both targets; "
            "on noiseless labels it stays below 30 (both ntklab's own sanity bounds on the "
            "paper's 'no exponential gap'); a ratio below 1/3 raises a baseline warning, not "
            "judged"
        ),
        criterion_change=(
            "2026-12-04: the verdict is the one-sided claim (NTK / network <= 3, noiseless < 30; "
            "a ratio under 1/3 failed it when the NTK was better) and the networks start at f0 = "
            "0 (a random f0 set their error floor); the lower bound is a baseline warning"
        ),
        reported=(
            "Ganguli & Constantinescu 2026, numerical section: on band-limited smooth targets "
            "the NTK is competitive with or better than a wide network, no exponential gap "
            "(no factor given)"
        ),
        headline=("noisy_ratio_max", "noiseless_ratio_max", "baseline_warning"),
        dataset="synthetic: random polynomials on S^1 and S^4 + noise",
        config_type=BandlimitedConfig,
        scales={
            "tiny": {
                "targets": ["circle", "sphere"],
                "ns": [32],
                "seeds": 2,
                "n_test": 200,
                "width": 64,
                "learning_rate": 0.1,
                "t": 100,
                "record_every": 10,
                "noiseless": True,
                "width_sweep": [16, 32],
                "sweep_n": 32,
                "sweep_seeds": 2,
            },
            "quick": {},
            "paper": {
                "ns": [32, 64, 128, 256, 512, 1024, 2048],
                "seeds": 10,
                "n_test": 4000,
                "width": 1024,
                "learning_rate": 0.01,
                "t": 10000,
                "ntk_depths": [1, 2, 3, 4],
                "width_sweep": [256, 1024, 2048],
                "sweep_n": 2048,
                "sweep_seeds": 3,
            },
        },
        measure=measure,
        judge=judge,
        draw=draw,
    )
)
