"""D1 ``label-alignment``: labels and initial residuals align with the top of the empirical
NTK's spectrum.

Claim: on CIFAR-10, for MLPs and CNNs, :math:`(v_i^\\top y)^2 \\sim \\lambda_i^2` (slope 2) and
:math:`(v_i^\\top r_0)^2 \\sim \\lambda_i` (slope 1), with :math:`(\\lambda_i, v_i)` the
eigenpairs of the empirical NTK, :math:`y` the labels and :math:`r_0` the initial residual
(the paper "Label-NTK alignments and a tighter convergence bound in the NTK regime"; labels'
projections on the NTK's eigenvectors govern the speed of GD since Arora et al., 2019,
"Fine-grained analysis of optimization and generalization for overparameterized two-layer
neural networks"). Measured here:

1. data: ``n_train`` images of scikit-learn's 8x8 digits (quick), of Fashion-MNIST (Xiao,
   Rasul & Vollgraf 2017; paper scale: a class-balanced subset of its training split, read
   from ``data_root`` or Debian's folder :data:`ntklab.data.FASHION_MNIST_ROOT`), or of MNIST
   / CIFAR-10 read from ``data_root``; targets are centered one-hot labels :math:`Y_{ic} =
   [y_i = c] - 1/C` (so the mean label does not load the kernel's near-constant top
   direction); the positions of the images in their split are stored (array ``indices``);
2. networks at initialization, NTK parameterization (``arch.to_torch``): an MLP
   ``depth x [Dense, Relu] + Dense`` on the flattened images and a small CNN
   ``depth x [Conv 3x3 SAME, Relu] + Flatten + Dense`` (``conv2d`` layers), C outputs;
3. their empirical NTK :math:`K` on the training images (:func:`ntklab.empirical.ntk`, mean
   over outputs), eigenpairs in float64 (:func:`ntklab.analysis.kernel_eigh`);
4. energies :math:`e_i = \\|v_i^\\top Y\\|^2` of the labels, of a permuted-label control (mean
   over ``n_permutations`` shuffles) and of the initial residual :math:`r_0 = f_0 - Y`, with
   :math:`f_0` the network's own random output at initialization (its scale is reported);
5. binned log-log slopes over the eigenvalues in ``relative_range`` times :math:`\\lambda_1`
   (:func:`ntklab.analysis.alignment_slope`, bootstrap interval; the range used is reported)
   and the share of :math:`\\|Y\\|^2` on the top ``top_k`` eigenvectors;
6. verdict, ``criterion="chance"`` (digits): label slope >= 0.8, permuted slope within
   ``permuted_tolerance`` of 0, top-``top_k`` share >= 75%, residual slope in [0.8, 1.5], for
   every network; ``criterion="seed"`` (paper scale): the paper's slopes, label slope in
   [1.6, 2.4] and residual slope in [0.7, 1.3]. The paper's slopes 2 and 1 are printed next
   to the measured ones.

The paper measures on CIFAR-10; the paper scale here measures on Fashion-MNIST instead,
because CIFAR-10 cannot be obtained on the project's machines (no network, no local copy)
while Fashion-MNIST installs from Debian's archive (``apt-get install
dataset-fashion-mnist``): real 28 x 28 grayscale images of 10 classes, so the slopes are
tested on natural images, not on CIFAR-10 itself (``--set dataset=cifar10 data_root=PATH``
runs CIFAR-10 where a copy exists). Everything else of the paper scale is as before.

:func:`measure` computes 1-5 and stores the spectra, energies, binned points and fits;
:func:`judge` applies 6 (constants :data:`CHANCE_LABEL_MIN`, :data:`CHANCE_SHARE_MIN`,
:data:`CHANCE_RESIDUAL`, :data:`PAPER_LABEL`, :data:`PAPER_RESIDUAL`); :func:`draw` plots the
stored arrays.

Paper scale (10,000 class-balanced Fashion-MNIST training images, depth 3, MLP width 1024,
CNN 64 channels, float64 analysis) took about 63 CPU-minutes over 2 threads on the project's
2-core x86_64 machine, its resident set near 17 GiB as observed (2026-12-02,
``results/paper/label-alignment.json``; its recorded wall time, 96 minutes, includes the time
it shared the machine and was paused for benchmarks): the empirical NTKs of 10,000 images
by structured derivatives, the CNN's through its ``ConvLayer`` contractions, and two
10,000 x 10,000 eigendecompositions. At 4000 images it took 5.3 minutes on the idle machine.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import torch
from matplotlib.figure import Figure
from pydantic import Field, model_validator
from torch import Tensor, nn

from .. import kernels as nk
from .._repr import short_repr
from ..analysis import (
    AlignmentSlope,
    alignment_slope,
    kernel_eigh,
    permuted_projections,
    projections,
    top_energy_share,
)
from ..data import Dataset, load_cifar10, load_digits, load_fashion_mnist, load_mnist
from ..empirical import ntk
from ..errors import NtklabValueError
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

__all__ = [
    "CHANCE_LABEL_MIN",
    "CHANCE_RESIDUAL",
    "CHANCE_SHARE_MIN",
    "PAPER_LABEL",
    "PAPER_RESIDUAL",
    "TRAIN_SIZES",
    "AlignmentMeasurement",
    "DatasetName",
    "ImageData",
    "LabelAlignmentConfig",
    "cnn_architecture",
    "describe_images",
    "draw",
    "judge",
    "load_images",
    "measure",
    "measure_alignment",
    "mlp_architecture",
    "network",
]

NetName = Literal["mlp", "cnn"]
DatasetName = Literal["digits", "mnist", "cifar10", "fashion-mnist"]
#: ``criterion="chance"``: smallest accepted label slope (alignment beyond chance).
CHANCE_LABEL_MIN = 0.8
#: ``criterion="chance"``: smallest accepted share of ||Y||^2 on the top ``top_k`` eigenvectors.
CHANCE_SHARE_MIN = 0.75
#: ``criterion="chance"``: accepted residual slope (the paper: 1).
CHANCE_RESIDUAL = (0.8, 1.5)
#: ``criterion="seed"``: accepted label slope (the paper: 2).
PAPER_LABEL = (1.6, 2.4)
#: ``criterion="seed"``: accepted residual slope (the paper: 1).
PAPER_RESIDUAL = (0.7, 1.3)
#: Training images of each data set (``load_images`` draws from the training split).
TRAIN_SIZES: dict[str, int] = {
    "digits": 1797,
    "mnist": 60_000,
    "cifar10": 50_000,
    "fashion-mnist": 60_000,
}
_TITLES = {
    "digits": "digits",
    "mnist": "MNIST",
    "cifar10": "CIFAR-10",
    "fashion-mnist": "Fashion-MNIST",
}
_FITS = ("label", "permuted", "residual")

NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class LabelAlignmentConfig(ExperimentConfig):
    """Grid of ``label-alignment``.

    Parameters
    ----------
    dataset : {"digits", "mnist", "cifar10", "fashion-mnist"}
        ``"digits"`` needs nothing; ``"fashion-mnist"`` reads ``data_root`` or, when it is
        None, :data:`ntklab.data.FASHION_MNIST_ROOT` (a class-balanced subset);
        ``"mnist"`` and ``"cifar10"`` read ``data_root``.
    data_root : str or None
        Folder of the MNIST, Fashion-MNIST or CIFAR-10 files.
    criterion : {"chance", "seed"}
        The verdict: ``"chance"`` (alignment beyond chance, the quick-scale criterion) or
        ``"seed"`` (the paper's slopes, the paper-scale criterion).
    networks : tuple of {"mlp", "cnn"}
        Networks measured, non-empty and distinct.
    n_train : int
        Training images, >= 3 and at most the data set's training split.
    depth, mlp_width, cnn_channels : int
        Hidden layers, MLP width and CNN channels, >= 1.
    w_std, b_std : float
        Weight (> 0) and bias (>= 0) standard deviations.
    net_dtype : {"float32", "float64"}
        Precision of the networks and of their empirical NTK.
    relative_range : (float, float)
        Eigenvalues fitted, relative to the largest: ``0 < low < high <= 1``.
    bins : int
        Logarithmic eigenvalue bins, >= 3 (a slope with an interval needs three).
    n_boot : int
        Bootstrap resamples of the eigenpairs, >= 0 (0: the OLS interval).
    n_permutations : int
        Label shuffles of the control, >= 1.
    permuted_tolerance : float
        ``criterion="chance"``: largest accepted \\|permuted slope\\|, > 0.
    top_k : int
        Eigenvectors of the energy share, 1 <= top_k <= n_train.
    max_memory_mb : int
        Memory budget of the empirical NTK in MiB, >= 1.
    """

    dataset: DatasetName = "digits"
    data_root: str | None = None
    criterion: Literal["chance", "seed"] = "chance"
    networks: Annotated[tuple[NetName, ...], Field(min_length=1)] = ("mlp", "cnn")
    n_train: Annotated[int, Field(ge=3)] = 1000
    depth: Count = 2
    mlp_width: Count = 512
    cnn_channels: Count = 32
    w_std: PositiveFloat = math.sqrt(2.0)
    b_std: NonNegativeFloat = 0.1
    net_dtype: Literal["float32", "float64"] = "float32"
    relative_range: tuple[PositiveFloat, PositiveFloat] = (1e-5, 1.0)
    bins: Annotated[int, Field(ge=3)] = 20
    n_boot: NonNegativeCount = 500
    n_permutations: Count = 20
    permuted_tolerance: PositiveFloat = 0.25
    top_k: Count = 100
    max_memory_mb: Count = 1024

    @model_validator(mode="after")
    def _check_grid(self) -> LabelAlignmentConfig:
        """networks distinct; relative_range 0 < low < high <= 1; n_train at most the data
        set's training images; top_k <= n_train."""
        if len(set(self.networks)) != len(self.networks):
            raise NtklabValueError(
                f"networks: expected distinct networks, received {list(self.networks)}"
            )
        low, high = self.relative_range
        if not low < high <= 1.0:
            raise NtklabValueError(
                f"relative_range: expected (low, high) with 0 < low < high <= 1, received "
                f"{self.relative_range}"
            )
        available = TRAIN_SIZES[self.dataset]
        if self.n_train > available:
            raise NtklabValueError(
                f"n_train: expected at most {available} (the {self.dataset} training images), "
                f"received {self.n_train}"
            )
        if self.top_k > self.n_train:
            raise NtklabValueError(
                f"top_k: expected at most n_train = {self.n_train} (eigenvectors of the "
                f"kernel), received {self.top_k}"
            )
        return self


@short_repr
@dataclass(frozen=True)
class ImageData:
    """Images (NCHW), integer labels and centered one-hot targets of one split.

    ``indices`` are the images' positions in the split they were drawn from (int64),
    ``source`` a citable description such as ``"Fashion-MNIST train, 4000 images
    (class-balanced)"``."""

    x: Tensor
    labels: Tensor
    targets: Tensor
    num_classes: int
    name: str
    indices: Tensor
    source: str


def load_images(
    dataset: DatasetName,
    data_root: str | None,
    n: int,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float32,
    split: Literal["train", "test"] = "train",
) -> ImageData:
    """``n`` random images of ``dataset``'s ``split`` as NCHW tensors with centered one-hot
    targets :math:`[y_i = c] - 1/C` (float64).

    Fashion-MNIST subsets are class-balanced (:meth:`ntklab.data.Dataset.balanced_subsample`,
    ``n // 10`` images per class, the remainder to the first classes), read from
    ``data_root`` or, when it is None, :data:`ntklab.data.FASHION_MNIST_ROOT`; the other data
    sets are subsampled uniformly (:meth:`ntklab.data.Dataset.subsample`). scikit-learn's
    digits have no test split."""
    ds: Dataset
    if dataset == "digits":
        if split != "train":
            raise NtklabValueError(
                f"split: scikit-learn's digits have one split, expected 'train', got {split!r}"
            )
        ds = load_digits(images=True, dtype=dtype)
    elif dataset == "fashion-mnist":
        ds = load_fashion_mnist(split, data_root, dtype=dtype)
    else:
        if data_root is None:
            raise NtklabValueError(
                f"data_root: expected the folder of the {dataset} files for dataset="
                f"{dataset!r}, got None (pass --set data_root=PATH)"
            )
        loader = load_mnist if dataset == "mnist" else load_cifar10
        ds = loader(data_root, split, dtype=dtype)
    if n > len(ds):
        raise NtklabValueError(f"n_train: expected at most {len(ds)} images, got {n}")
    balanced = dataset == "fashion-mnist"
    ds = ds.balanced_subsample(n, generator) if balanced else ds.subsample(n, generator)
    x = ds.x  # NCHW
    targets = ds.targets("centered_onehot").to(torch.float64)
    return ImageData(
        x,
        ds.labels,
        targets,
        ds.num_classes,
        ds.name,
        ds.indices,
        describe_images(dataset, split, n),
    )


def describe_images(dataset: DatasetName, split: Literal["train", "test"], n: int) -> str:
    """A citable description of ``n`` images drawn by :func:`load_images`, e.g.
    ``"Fashion-MNIST train, 4000 images (class-balanced)"``."""
    if dataset == "digits":
        return f"scikit-learn digits (8x8), {n} of the 1797 images drawn uniformly"
    how = "class-balanced" if dataset == "fashion-mnist" else "drawn uniformly"
    return f"{_TITLES[dataset]} {split}, {n} images ({how})"


def mlp_architecture(depth: int, w_std: float, b_std: float) -> nk.Architecture:
    """``depth x [Dense, Relu] + Dense`` (on flattened images)."""
    return nk.serial(
        *([nk.Dense(w_std=w_std, b_std=b_std), nk.Relu()] * depth),
        nk.Dense(w_std=w_std, b_std=b_std),
    )


def cnn_architecture(depth: int, w_std: float, b_std: float) -> nk.Architecture:
    """``depth x [Conv 3x3 SAME, Relu] + Flatten + Dense``."""
    block = [nk.Conv(filter_shape=(3, 3), w_std=w_std, b_std=b_std), nk.Relu()]
    return nk.serial(*(block * depth), nk.Flatten(), nk.Dense(w_std=w_std, b_std=b_std))


class _Flat(nn.Module):
    """Flattens NCHW images before an MLP."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.inner(x.flatten(1))
        return out


def network(
    name: NetName,
    data: ImageData,
    *,
    depth: int,
    width: int,
    w_std: float,
    b_std: float,
    generator: torch.Generator,
    dtype: torch.dtype,
    zero_output: bool = False,
) -> nn.Module:
    """The MLP or CNN of ``label-alignment`` (NTK parameterization), taking NCHW images.

    With ``zero_output`` it is an antisymmetric pair whose halves have ``width`` each (so its
    output is 0 at initialization and its NTK that of one half). It is built on
    ``generator``'s device."""
    full = 2 * width if zero_output else width
    device = generator.device
    if name == "mlp":
        arch = mlp_architecture(depth, w_std, b_std)
        features = int(math.prod(data.x.shape[1:]))
        inner = arch.to_torch(
            full,
            data.num_classes,
            in_features=features,
            zero_output=zero_output,
            generator=generator,
            dtype=dtype,
            device=device,
        )
        return _Flat(inner)
    arch = cnn_architecture(depth, w_std, b_std)
    net = arch.to_torch(
        full,
        data.num_classes,
        zero_output=zero_output,
        generator=generator,
        dtype=dtype,
        device=device,
    )
    with torch.no_grad():
        net(data.x[:1].to(device, dtype))  # materialize the lazy layers
    return net


@short_repr
@dataclass(frozen=True)
class AlignmentMeasurement:
    """What ``label-alignment`` measures on one network."""

    eigenvalues: Tensor
    label: AlignmentSlope
    permuted: AlignmentSlope
    residual: AlignmentSlope
    label_energy: Tensor
    permuted_energy: Tensor
    residual_energy: Tensor
    top_share: float
    f0_std: float


def measure_alignment(
    kernel: Tensor,
    targets: Tensor,
    f0: Tensor,
    *,
    relative_range: tuple[float, float],
    bins: int,
    n_boot: int,
    n_permutations: int,
    top_k: int,
    generator: torch.Generator,
) -> AlignmentMeasurement:
    """Eigenpairs of ``kernel``; label, permuted-label and residual energies and slopes; the
    top-``top_k`` share of the labels' energy."""
    lam, vecs = kernel_eigh(kernel)
    residual = f0.to(torch.float64) - targets
    e_label = projections(vecs, targets)
    e_perm = permuted_projections(vecs, targets, n_permutations=n_permutations, generator=generator)
    e_res = projections(vecs, residual)

    def fit(e: Tensor) -> AlignmentSlope:
        return alignment_slope(
            lam, e, relative_range=relative_range, bins=bins, n_boot=n_boot, generator=generator
        )

    return AlignmentMeasurement(
        eigenvalues=lam,
        label=fit(e_label),
        permuted=fit(e_perm),
        residual=fit(e_res),
        label_energy=e_label,
        permuted_energy=e_perm,
        residual_energy=e_res,
        top_share=top_energy_share(e_label, min(top_k, int(lam.shape[0]))),
        f0_std=float(f0.to(torch.float64).std()),
    )


def _range_note(fit: AlignmentSlope) -> str:
    return (
        f"eigenvalues [{fit.eig_low:.3g}, {fit.eig_high:.3g}] ({fit.decades:.1f} decades), "
        f"{fit.n_eigenpairs} eigenpairs in {fit.n_bins} bins, {fit.interval} interval"
    )


def _predictions(config: LabelAlignmentConfig) -> tuple[str, str]:
    """What the criterion predicts for the label and the residual slopes, as text."""
    if config.criterion == "chance":
        lo, hi = CHANCE_RESIDUAL
        return f">= {CHANCE_LABEL_MIN} (paper: 2)", f"[{lo}, {hi}] (paper: 1)"
    (l_lo, l_hi), (lo, hi) = PAPER_LABEL, PAPER_RESIDUAL
    return f"[{l_lo}, {l_hi}] (paper: 2)", f"[{lo}, {hi}] (paper: 1)"


def _network_metrics(
    name: str,
    m: AlignmentMeasurement,
    config: LabelAlignmentConfig,
    *,
    n_points: int,
    y_std: float,
) -> list[Metric]:
    """The metrics of one network: label, permuted-label and residual slopes, the top-``top_k``
    label share, the spread of the initial outputs and the eigenvalue range.

    Parameters
    ----------
    name : str
        The network's name, used in the metric names (``label_slope[<name>]``, ...).
    m : AlignmentMeasurement
        What :func:`measure_alignment` measured on its empirical NTK.
    config : LabelAlignmentConfig
        The run's config (predictions, permutations, ``top_k``).
    n_points : int
        Training points, the size of the kernel.
    y_std : float
        Standard deviation of the centered one-hot labels, quoted beside ``f0_std``.

    Returns
    -------
    list of Metric
        Eight metrics, in the order the claim's table shows them.
    """
    label_pred, res_pred = _predictions(config)
    return [
        Metric(
            f"label_slope[{name}]",
            m.label.slope,
            m.label.ci_low,
            m.label.ci_high,
            predicted=label_pred,
            note=_range_note(m.label),
        ),
        Metric(
            f"permuted_label_slope[{name}]",
            m.permuted.slope,
            m.permuted.ci_low,
            m.permuted.ci_high,
            predicted=f"0 +- {config.permuted_tolerance}",
            note=f"mean energy over {config.n_permutations} label permutations",
        ),
        Metric(
            f"top{config.top_k}_label_energy[{name}]",
            m.top_share,
            predicted=f">= {CHANCE_SHARE_MIN}" if config.criterion == "chance" else None,
            note=f"share of ||Y||^2 on the top {config.top_k} of {n_points} eigenvectors",
        ),
        Metric(
            f"residual_slope[{name}]",
            m.residual.slope,
            m.residual.ci_low,
            m.residual.ci_high,
            predicted=res_pred,
            note=_range_note(m.residual),
        ),
        Metric(
            f"f0_std[{name}]",
            m.f0_std,
            note=f"std of the initial outputs f_0 (NTK parameterization); labels' std {y_std:.3f}",
        ),
        Metric(f"eigenvalue_max[{name}]", float(m.eigenvalues[0])),
        Metric(f"eigenvalue_min[{name}]", float(m.eigenvalues[-1])),
        Metric(
            f"fit_decades[{name}]",
            m.label.decades,
            note="decades of eigenvalues spanned by the fitted range",
        ),
    ]


def _network_arrays(name: str, f0: Tensor, m: AlignmentMeasurement) -> dict[str, np.ndarray]:
    """The arrays of one network: initial outputs, eigenvalues, the three energies and, for
    each fit, its bin centers, binned mean energies and (slope, intercept).

    Parameters
    ----------
    name : str
        The network's name, the suffix of every key.
    f0 : Tensor
        Initial outputs, shape ``(n, classes)``.
    m : AlignmentMeasurement
        What :func:`measure_alignment` measured on its empirical NTK.

    Returns
    -------
    dict of str to numpy.ndarray
        Keys ``f0_<name>``, ``eigenvalues_<name>``, ``<kind>_energy_<name>``,
        ``<kind>_bin_centers_<name>``, ``<kind>_bin_energy_<name>``, ``<kind>_fit_<name>``.
    """
    out: dict[str, np.ndarray] = {}
    out[f"f0_{name}"] = f0.detach().to(torch.float64).cpu().numpy()
    out[f"eigenvalues_{name}"] = m.eigenvalues.cpu().numpy()
    out[f"label_energy_{name}"] = m.label_energy.cpu().numpy()
    out[f"permuted_energy_{name}"] = m.permuted_energy.cpu().numpy()
    out[f"residual_energy_{name}"] = m.residual_energy.cpu().numpy()
    for kind, fit in zip(_FITS, (m.label, m.permuted, m.residual), strict=True):
        out[f"{kind}_bin_centers_{name}"] = fit.bins.centers.cpu().numpy()
        out[f"{kind}_bin_energy_{name}"] = fit.bins.mean_energy.cpu().numpy()
        out[f"{kind}_fit_{name}"] = np.array([fit.slope, fit.intercept])
    return out


def measure(config: LabelAlignmentConfig, ctx: RunContext) -> Measurement:
    """Each network's empirical NTK spectrum, label / permuted / residual energies, binned
    slopes and the top-``top_k`` label share."""
    dtype = torch.float32 if config.net_dtype == "float32" else torch.float64
    data = load_images(
        config.dataset, config.data_root, config.n_train, ctx.generator("data"), dtype
    )
    budget = config.max_memory_mb * 2**20
    y_std = float(data.targets.std())
    metrics: list[Metric] = []
    arrays: dict[str, np.ndarray] = {
        "targets": data.targets.cpu().numpy(),
        "indices": data.indices.cpu().numpy(),
    }
    device = ctx.torch_device
    x = data.x.to(device)  # the networks and their NTKs on the run's device, the analysis on CPU
    for k, name in enumerate(config.networks):
        width = config.mlp_width if name == "mlp" else config.cnn_channels
        net = network(
            name,
            data,
            depth=config.depth,
            width=width,
            w_std=config.w_std,
            b_std=config.b_std,
            generator=ctx.generator(f"init-{name}", device=device),
            dtype=dtype,
        )
        with torch.no_grad():
            f0 = net(x).cpu()
        kernel = ntk(net, x, max_memory=budget).cpu()
        ctx.progress((k + 0.7) / len(config.networks), f"{name}: NTK {tuple(kernel.shape)}")
        m = measure_alignment(
            kernel,
            data.targets,
            f0,
            relative_range=config.relative_range,
            bins=config.bins,
            n_boot=config.n_boot,
            n_permutations=config.n_permutations,
            top_k=config.top_k,
            generator=ctx.generator(f"analysis-{name}"),
        )
        metrics += _network_metrics(name, m, config, n_points=int(data.x.shape[0]), y_std=y_std)
        arrays |= _network_arrays(name, f0, m)
        ctx.progress((k + 1) / len(config.networks), f"{name}: slopes")
    notes = (
        f"targets: centered one-hot labels (std {y_std:.3f}); residual r_0 = f_0 - Y with f_0 "
        "the network's own random initial output (std reported as f0_std)",
        f"fit range: eigenvalues in {config.relative_range} x lambda_1, {config.bins} log bins",
    )
    return Measurement(
        metrics=tuple(metrics),
        arrays=arrays,
        notes=notes,
        dataset=f"{data.source}, seed {ctx.seed}",
    )


def _architecture_text(config: LabelAlignmentConfig) -> str:
    parts = {
        "mlp": f"an MLP of width {config.mlp_width}",
        "cnn": f"a CNN of {config.cnn_channels} channels",
    }
    return " and ".join(parts[name] for name in config.networks)


def judge(config: LabelAlignmentConfig, metrics: Metrics) -> Judgement:
    """``criterion="chance"``: label slope >= :data:`CHANCE_LABEL_MIN`, \\|permuted slope\\| <=
    ``permuted_tolerance``, top-``top_k`` share >= :data:`CHANCE_SHARE_MIN`, residual slope in
    :data:`CHANCE_RESIDUAL`; ``criterion="seed"``: label slope in :data:`PAPER_LABEL`,
    residual slope in :data:`PAPER_RESIDUAL`; for every network."""
    checks: list[bool] = []
    parts: list[str] = []
    for name in config.networks:
        label = metrics[f"label_slope[{name}]"].value
        permuted = metrics[f"permuted_label_slope[{name}]"].value
        share = metrics[f"top{config.top_k}_label_energy[{name}]"].value
        residual = metrics[f"residual_slope[{name}]"].value
        decades = metrics[f"fit_decades[{name}]"].value
        if config.criterion == "chance":
            lo, hi = CHANCE_RESIDUAL
            checks += [
                label >= CHANCE_LABEL_MIN,
                abs(permuted) <= config.permuted_tolerance,
                share >= CHANCE_SHARE_MIN,
                lo <= residual <= hi,
            ]
        else:
            (l_lo, l_hi), (lo, hi) = PAPER_LABEL, PAPER_RESIDUAL
            checks += [l_lo <= label <= l_hi, lo <= residual <= hi]
        parts.append(
            f"{name}: label slope {label:.2f} (paper: 2), permuted {permuted:.2f}, "
            f"top-{config.top_k} share {share:.2f}, residual slope {residual:.2f} (paper: 1) "
            f"over {decades:.1f} decades"
        )
    low, high = config.relative_range
    grid = (
        f"{config.n_train} {_TITLES[config.dataset]} images, {_architecture_text(config)} "
        f"(depth {config.depth}) at initialization, binned log-log slopes over the eigenvalues "
        f"in [{low:g}, {high:g}] x lambda_1 ({config.bins} bins)"
    )
    if config.criterion == "chance":
        lo, hi = CHANCE_RESIDUAL
        rule = (
            f"label slope >= {CHANCE_LABEL_MIN}, |permuted-label slope| <= "
            f"{config.permuted_tolerance:g} ({config.n_permutations} shuffles), share of "
            f"||Y||^2 on the top {config.top_k} eigenvectors >= {CHANCE_SHARE_MIN}, residual "
            f"slope in [{lo}, {hi}]"
        )
    else:
        (l_lo, l_hi), (lo, hi) = PAPER_LABEL, PAPER_RESIDUAL
        rule = f"label slope in [{l_lo}, {l_hi}] and residual slope in [{lo}, {hi}]"
    return Judgement(
        passed=all(checks),
        summary=f"{_TITLES[config.dataset]}: " + "; ".join(parts),
        criterion=f"{grid}: for every network, {rule}",
    )


def draw(
    config: LabelAlignmentConfig, metrics: Metrics, arrays: Mapping[str, Any]
) -> dict[str, Figure]:
    """One log-log panel per network: label energies, the binned label, permuted-label and
    residual energies with their fitted lines, and the paper's slopes 2 and 1."""
    fig = Figure(figsize=(5.2 * len(config.networks), 4.4))
    axes = np.atleast_1d(fig.subplots(1, len(config.networks)))
    for ax, name in zip(axes, config.networks, strict=True):
        lam = arrays[f"eigenvalues_{name}"]
        pos = lam > 0
        energy = arrays[f"label_energy_{name}"]
        ax.loglog(lam[pos], energy[pos], ".", color="C0", ms=1.5, alpha=0.25)
        for kind, label, color, marker in (
            ("label", "labels", "C0", "o"),
            ("permuted", "permuted labels", "C7", "x"),
            ("residual", "residual $r_0$", "C3", "s"),
        ):
            c = arrays[f"{kind}_bin_centers_{name}"]
            e = arrays[f"{kind}_bin_energy_{name}"]
            slope, intercept = arrays[f"{kind}_fit_{name}"]
            ax.loglog(c, e, marker, color=color, ms=4, label=f"{label}: slope {slope:.2f}")
            ax.loglog(c, math.exp(intercept) * c**slope, "-", color=color, lw=1)
        c = arrays[f"label_bin_centers_{name}"]
        mid = float(np.exp(np.log(c).mean()))
        slope, intercept = arrays[f"label_fit_{name}"]
        anchor = math.exp(intercept) * mid**slope
        ax.loglog(c, anchor * (c / mid) ** 2, "k:", lw=1, label="paper: slope 2")
        slope_r, intercept_r = arrays[f"residual_fit_{name}"]
        anchor_r = math.exp(intercept_r) * mid**slope_r
        ax.loglog(c, anchor_r * (c / mid), "k--", lw=0.8, label="paper: slope 1")
        ax.set(
            xlabel=r"eigenvalue $\lambda_i$",
            ylabel=r"$\|v_i^\top y\|^2$ (binned mean)",
            title=f"{name} on {_TITLES[config.dataset]}, n={lam.shape[0]}",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    return {"label_alignment": fig}


EXPERIMENT = register(
    Experiment(
        name="label-alignment",
        claim_id="D1",
        claim=(
            "Labels align with the top of the empirical NTK's spectrum, (v_i^T y)^2 ~ "
            "lambda_i^2 (slope 2), and the initial residual as (v_i^T r_0)^2 ~ lambda_i "
            "(slope 1), for MLPs and CNNs at initialization."
        ),
        criterion=(
            "digits (quick): for an MLP and a small CNN, binned log-log label slope >= 0.8 "
            "with the permuted-label slope near 0, top-100 share of ||y||^2 >= 75%, residual "
            "slope (random nonzero f_0) in [0.8, 1.5]; Fashion-MNIST, 10,000 class-balanced "
            "training images (paper scale, CIFAR-10 not available): label slope in "
            "[1.6, 2.4] and residual slope in [0.7, 1.3]"
        ),
        reported="label slope 2 and residual slope 1 on CIFAR-10 for MLPs and CNNs",
        headline=(
            "label_slope[mlp]",
            "label_slope[cnn]",
            "residual_slope[mlp]",
            "residual_slope[cnn]",
        ),
        dataset="scikit-learn digits (8x8)",
        config_type=LabelAlignmentConfig,
        dtype_field="net_dtype",
        uses_device=True,
        scales={
            "tiny": {
                "n_train": 120,
                "mlp_width": 64,
                "cnn_channels": 8,
                "bins": 8,
                "n_boot": 50,
                "n_permutations": 4,
                "top_k": 20,
            },
            "quick": {},
            "paper": {
                "dataset": "fashion-mnist",
                "criterion": "seed",
                "n_train": 10000,
                "depth": 3,
                "mlp_width": 1024,
                "cnn_channels": 64,
                "max_memory_mb": 16384,
            },
        },
        measure=measure,
        judge=judge,
        draw=draw,
    )
)
