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
6. controls, on each network's own spectrum (:func:`control_targets`): targets whose slope
   is known, labels :math:`Y = KA` (slope 2), :math:`Y \\sim N(0, K)` (slope 1) and white
   noise (slope 0), fitted by the same estimator; the residual's control :math:`f_0 - Y_\\pi`
   with permuted labels; :math:`f_0` alone (``f0_slope``) and its share of the residual's
   energy (``f0_label_energy_ratio``); with :math:`f_0 = 0` the residual is :math:`-Y` and
   its slope is the label slope;
7. the label slope under other estimators, side by side (reported, not judged): raw
   one-hot labels (``label_slope_raw_onehot``), single eigenpairs without bins
   (``label_slope_unbinned``), groups of :data:`GROUP_SIZE` consecutive eigenpairs
   (``label_slope_groups``);
8. verdict, ``criterion="chance"`` (digits): label slope >= 0.8, permuted slope within
   ``permuted_tolerance`` of 0, top-``top_k`` share >= 75%, residual slope in [0.8, 1.5];
   ``criterion="seed"`` (paper scale): the paper's slopes, label slope in [1.6, 2.4] and
   residual slope in [0.7, 1.3]; under both, for every network, the residual slope's interval
   must lie apart from its permuted-label control's (else the residual's slope is set by
   :math:`f_0` and the network, not by the labels, and says nothing about the claim). A control
   farther than :data:`CONTROL_TOL` from its known slope makes the run an ERROR ("the
   estimator failed its control"): the estimator could not be trusted on the labels either.
   The paper's slopes 2 and 1 are printed next to the measured ones.

Where each criterion comes from:

- slopes 2 (labels) and 1 (residual): the paper's reported scaling laws
  :math:`(v_i^\\top y)^2 \\sim \\lambda_i^2` and :math:`(v_i^\\top r_0)^2 \\sim \\lambda_i`, its
  experiments on CIFAR-10 (the reported figure of the claims table);
- the bands around them, [1.6, 2.4] and [0.7, 1.3] (:data:`PAPER_LABEL`,
  :data:`PAPER_RESIDUAL`): ntklab's own tolerance (the paper states the slopes, not a band);
- ``criterion="chance"``'s thresholds (label slope >= 0.8, top-100 share >= 75%, residual in
  [0.8, 1.5], \\|permuted slope\\| <= 0.25): ntklab's own bounds for "aligned beyond
  chance", set before the quick scale ran (a prototype on digits measured label slopes
  0.9-1.35);
- the controls' slopes 2, 1, 0 are exact in expectation (closed forms above);
  :data:`CONTROL_TOL` and the residual-vs-control rule are ntklab's own sanity bounds.

Assumptions: the NTK at initialization (not during training), the labels as given (centered
one-hot), the slope fitted over ``relative_range`` only (never only the top decade).

Audit (does the verdict test the claim?): with permuted labels (``labels="permuted"``, a
control run of the whole experiment) the label slope falls to about 0 and the residual
slope onto its permuted-label control: FAIL (a test runs it). With a wrong kernel
(:math:`1.5\\hat\\Theta + 0.5 f f^\\top` in place of the empirical NTK,
``tools/mutation_check.py``'s ``kernel`` column) the tiny run's spectra no longer equal a
float64 Jacobian NTK of the same networks computed in the test, which fails. The controls
guard the estimator itself: a binning or fitting error that bends slopes shows on targets
whose slope is known. What it cannot tell: at the quick scale :math:`f_0` carries 11-16 times
the labels' energy and the residual's slope is :math:`f_0`'s own (``f0_slope``); its
distance to the permuted-label control comes from the labels' aligned energy at the top of
the spectrum, which shuffling spreads flat.

The paper measures on CIFAR-10; the paper scale here measures on Fashion-MNIST instead,
because CIFAR-10 cannot be obtained on the project's machines (no network, no local copy)
while Fashion-MNIST installs from Debian's archive (``apt-get install
dataset-fashion-mnist``): real 28 x 28 grayscale images of 10 classes, so the slopes are
tested on natural images, not on CIFAR-10 itself (``--set dataset=cifar10 data_root=PATH``
runs CIFAR-10 where a copy exists). Everything else of the paper scale is as before.

:func:`measure` computes 1-5 and stores the spectra, energies, binned points and fits;
:func:`judge` applies 8 (constants :data:`CHANCE_LABEL_MIN`, :data:`CHANCE_SHARE_MIN`,
:data:`CHANCE_RESIDUAL`, :data:`PAPER_LABEL`, :data:`PAPER_RESIDUAL`, :data:`CONTROL_SLOPES`,
:data:`CONTROL_TOL`); :func:`draw` plots the stored arrays.

Paper scale (10,000 class-balanced Fashion-MNIST training images, depth 3, MLP width 1024,
CNN 64 channels, float64 analysis) took about 63 CPU-minutes over 2 threads on the project's
2-core x86_64 machine, its resident set near 17 GiB as observed (2026-12-02,
``results/paper/label-alignment.json``; its recorded wall time, 96 minutes, includes the time
it shared the machine and was paused for benchmarks): the empirical NTKs of 10,000 images
by structured derivatives, the CNN's through its ``ConvLayer`` contractions, and two
10,000 x 10,000 eigendecompositions. At 4000 images it took 5.3 minutes on the idle machine.
Rerun under the current criterion (2026-12-04, the same machine shared with another run): 33
minutes of wall time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
    fit_power_law,
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
    "CONTROL_SLOPES",
    "CONTROL_TOL",
    "GROUP_SIZE",
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
#: The controls: targets built on each network's own spectrum whose slope is known exactly in
#: expectation, ``name -> slope``: labels ``Y = K A`` (energies :math:`\lambda_i^2 \|v_i^\top
#: A\|^2`, slope 2), Gaussian labels ``Y ~ N(0, K)`` (energies :math:`\lambda_i z_i^2`,
#: slope 1) and white noise (slope 0), each with as many columns as the labels.
CONTROL_SLOPES: dict[str, float] = {"kernel": 2.0, "gaussian": 1.0, "noise": 0.0}
#: Largest accepted distance between a control's slope and its known slope (ntklab's own
#: sanity bound on the estimator, not a figure of the paper): beyond it the binned fit cannot
#: be trusted on this spectrum and the run is an ERROR, not a PASS or FAIL.
CONTROL_TOL = 0.1
#: Eigenpairs per group of the grouped-estimator variant of the label slope.
GROUP_SIZE = 100
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
_FITS = ("label", "permuted", "residual", "permuted_residual", "f0")

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
    labels : {"true", "permuted"}
        ``"permuted"`` is a control run of the whole experiment: the labels are shuffled
        across the images before anything is measured, so there is no alignment to find
        and the verdict must be FAIL.
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
    labels: Literal["true", "permuted"] = "true"

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
    permuted_residual: AlignmentSlope
    f0: AlignmentSlope | None
    f0_label_energy_ratio: float
    controls: dict[str, AlignmentSlope]
    variants: dict[str, float]


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
    r"""Eigenpairs of ``kernel``; label, permuted-label and residual energies and slopes; the
    top-``top_k`` share of the labels' energy; the residual's permuted-label control and
    :math:`f_0` alone; the three controls of :data:`CONTROL_SLOPES`; the label slope under
    other estimators (raw one-hot labels, no binning).

    The permuted-label residual is :math:`f_0 - Y_\pi` (mean energy over the permutations
    :math:`\pi`): if its slope is that of :math:`f_0 - Y`, the residual's slope is set by
    :math:`f_0` and says nothing about the labels."""
    lam, vecs = kernel_eigh(kernel)
    f0 = f0.to(torch.float64)
    targets = targets.to(torch.float64)
    residual = f0 - targets
    e_label = projections(vecs, targets)
    e_perm = permuted_projections(vecs, targets, n_permutations=n_permutations, generator=generator)
    e_res = projections(vecs, residual)

    def fit(e: Tensor) -> AlignmentSlope:
        return alignment_slope(
            lam, e, relative_range=relative_range, bins=bins, n_boot=n_boot, generator=generator
        )

    label, permuted, res = fit(e_label), fit(e_perm), fit(e_res)
    # the residual's control: f_0 - Y_pi, mean energy over permutations pi
    n = int(targets.shape[0])
    e_perm_res = torch.zeros_like(e_res)
    for _ in range(n_permutations):
        pi = torch.randperm(n, generator=generator)
        e_perm_res += projections(vecs, f0 - targets[pi])
    e_perm_res /= n_permutations
    controls = {
        name: fit(projections(vecs, y))
        for name, y in control_targets(lam, vecs, int(targets.shape[1]), generator).items()
    }
    raw = targets - targets.min()  # centered one-hot labels [y=c] - 1/C back to one-hot
    return AlignmentMeasurement(
        eigenvalues=lam,
        label=label,
        permuted=permuted,
        residual=res,
        label_energy=e_label,
        permuted_energy=e_perm,
        residual_energy=e_res,
        top_share=top_energy_share(e_label, min(top_k, int(lam.shape[0]))),
        f0_std=float(f0.std()),
        permuted_residual=fit(e_perm_res),
        f0=fit(projections(vecs, f0)) if bool(f0.any()) else None,  # None: f_0 = 0
        f0_label_energy_ratio=float((f0**2).sum() / (targets**2).sum()),
        controls=controls,
        variants={
            "raw_onehot": fit(projections(vecs, raw)).slope,
            "unbinned": _unbinned_slope(lam, e_label, relative_range),
            "groups": _grouped_slope(lam, e_label, relative_range, GROUP_SIZE),
        },
    )


def control_targets(
    eigenvalues: Tensor, eigenvectors: Tensor, columns: int, generator: torch.Generator
) -> dict[str, Tensor]:
    """The controls' targets on one spectrum, ``name -> (n, columns)`` (float64).

    - ``"kernel"``: :math:`Y = K A = V \\Lambda V^\top A`, :math:`A_{ic} \\sim N(0, 1)`:
      :math:`\\|v_i^\top Y\\|^2 = \\lambda_i^2 \\|v_i^\top A\\|^2`, expected slope 2;
    - ``"gaussian"``: :math:`Y = V \\Lambda^{1/2} Z` (:math:`Y \\sim N(0, K)` per column),
      :math:`\\|v_i^\top Y\\|^2 = \\lambda_i \\|z_i\\|^2`, expected slope 1;
    - ``"noise"``: :math:`Y_{ic} \\sim N(0, 1)`, expected slope 0.

    Eigenvalues below 0 (rounding) are taken as 0."""
    lam = eigenvalues.to(torch.float64).clamp_min(0.0)
    vecs = eigenvectors.to(torch.float64)
    n = int(vecs.shape[0])
    draw = [torch.randn(n, columns, generator=generator, dtype=torch.float64) for _ in range(3)]
    return {
        "kernel": vecs @ (lam[:, None] * (vecs.T @ draw[0])),
        "gaussian": vecs @ (lam.sqrt()[:, None] * draw[1]),
        "noise": draw[2],
    }


def _grouped_slope(
    eigenvalues: Tensor, energies: Tensor, relative_range: tuple[float, float], group: int
) -> float:
    r"""Least-squares log-log slope of the mean energy on the mean eigenvalue of consecutive
    groups of ``group`` eigenpairs in ``relative_range`` x :math:`\lambda_1` (equal counts
    instead of equal log-widths; NaN with fewer than three groups)."""
    lam = eigenvalues.to(torch.float64).cpu().numpy()
    e = energies.to(torch.float64).cpu().numpy()
    low, high = relative_range[0] * lam[0], relative_range[1] * lam[0]
    keep = (lam >= low) & (lam <= high) & (lam > 0)
    lam, e = lam[keep], e[keep]
    count = lam.size // group
    if count < 3:
        return float("nan")
    mean_lam = lam[: count * group].reshape(count, group).mean(1)
    mean_e = e[: count * group].reshape(count, group).mean(1)
    return float(fit_power_law(mean_lam, mean_e).slope)


def _unbinned_slope(
    eigenvalues: Tensor, energies: Tensor, relative_range: tuple[float, float]
) -> float:
    r"""Least-squares slope of :math:`\log e_i` on :math:`\log \lambda_i` over the single
    eigenpairs in ``relative_range`` x :math:`\lambda_1` (no bins; zero energies dropped)."""
    lam = eigenvalues.to(torch.float64).cpu().numpy()
    e = energies.to(torch.float64).cpu().numpy()
    low, high = relative_range[0] * lam[0], relative_range[1] * lam[0]
    keep = (lam >= low) & (lam <= high) & (lam > 0) & (e > 0)
    if keep.sum() < 3:
        return float("nan")
    return float(fit_power_law(lam[keep], e[keep]).slope)


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


_CONTROL_NOTES = {
    "kernel": "control: labels Y = K A on this spectrum (known slope 2)",
    "gaussian": "control: labels Y ~ N(0, K) on this spectrum (known slope 1)",
    "noise": "control: white-noise labels (known slope 0)",
}


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
        Up to eighteen metrics, in the order the claim's table shows them (the variants that
        cannot be fitted on the grid are left out).
    """
    label_pred, res_pred = _predictions(config)
    metrics = [
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
        Metric(
            f"permuted_residual_slope[{name}]",
            m.permuted_residual.slope,
            m.permuted_residual.ci_low,
            m.permuted_residual.ci_high,
            predicted=f"outside the interval of residual_slope[{name}]",
            note=(
                "residual f_0 - Y_pi with permuted labels (mean energy over "
                f"{config.n_permutations} shuffles): the residual's control"
            ),
        ),
        Metric(
            f"f0_slope[{name}]",
            math.nan if m.f0 is None else m.f0.slope,
            None if m.f0 is None else m.f0.ci_low,
            None if m.f0 is None else m.f0.ci_high,
            note="slope of the initial output f_0 alone (no labels; left out when f_0 = 0)",
        ),
        Metric(
            f"f0_label_energy_ratio[{name}]",
            m.f0_label_energy_ratio,
            note="||f_0||^2 / ||Y||^2: how much of the residual's energy is f_0",
        ),
        *(
            Metric(
                f"control_slope[{name},{control}]",
                m.controls[control].slope,
                m.controls[control].ci_low,
                m.controls[control].ci_high,
                predicted=f"{known:g} +- {CONTROL_TOL:g}",
                note=_CONTROL_NOTES[control],
            )
            for control, known in CONTROL_SLOPES.items()
        ),
        Metric(
            f"label_slope_raw_onehot[{name}]",
            m.variants["raw_onehot"],
            note="label slope with raw (uncentered) one-hot labels, same bins",
        ),
        Metric(
            f"label_slope_unbinned[{name}]",
            m.variants["unbinned"],
            note="label slope by least squares over single eigenpairs, no bins",
        ),
        Metric(
            f"label_slope_groups[{name}]",
            m.variants["groups"],
            note=f"label slope over groups of {GROUP_SIZE} consecutive eigenpairs",
        ),
        Metric(f"eigenvalue_max[{name}]", float(m.eigenvalues[0])),
        Metric(f"eigenvalue_min[{name}]", float(m.eigenvalues[-1])),
        Metric(
            f"fit_decades[{name}]",
            m.label.decades,
            note="decades of eigenvalues spanned by the fitted range",
        ),
    ]
    # a variant that cannot be fitted on this grid (too few groups or eigenpairs, f_0 = 0)
    # is left out rather than recorded as NaN
    optional = ("f0_slope[", "label_slope_groups[", "label_slope_unbinned[")
    return [m for m in metrics if m.finite or not m.name.startswith(optional)]


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
    fits = (m.label, m.permuted, m.residual, m.permuted_residual, m.f0)
    for kind, fit in zip(_FITS, fits, strict=True):
        if fit is None:
            continue
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
    if config.labels == "permuted":
        shuffle = torch.randperm(int(data.targets.shape[0]), generator=ctx.generator("labels"))
        data = replace(data, labels=data.labels[shuffle], targets=data.targets[shuffle])
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
        "assumptions: the NTK at initialization (not during training), the labels as given "
        "(centered one-hot), the slope fitted over the stated eigenvalue range only",
        f"fit range: eigenvalues in {config.relative_range} x lambda_1, {config.bins} log bins",
    )
    return Measurement(
        metrics=tuple(metrics),
        arrays=arrays,
        notes=notes,
        dataset=f"{data.source}, seed {ctx.seed}"
        + (", labels permuted (control run)" if config.labels == "permuted" else ""),
    )


def _architecture_text(config: LabelAlignmentConfig) -> str:
    parts = {
        "mlp": f"an MLP of width {config.mlp_width}",
        "cnn": f"a CNN of {config.cnn_channels} channels",
    }
    return " and ".join(parts[name] for name in config.networks)


def _intervals_overlap(a: Metric, b: Metric) -> bool:
    """Whether the slopes' intervals (the bootstrap or OLS intervals recorded with them)
    overlap; a missing interval is the point itself."""
    a_lo, a_hi = (a.value, a.value) if a.ci_low is None else (a.ci_low, a.ci_high or a.value)
    b_lo, b_hi = (b.value, b.value) if b.ci_low is None else (b.ci_low, b.ci_high or b.value)
    return a_lo <= b_hi and b_lo <= a_hi


def control_failures(config: LabelAlignmentConfig, metrics: Metrics) -> tuple[str, ...]:
    """One line per control of :data:`CONTROL_SLOPES` whose slope is farther than
    :data:`CONTROL_TOL` from the known one, for every network."""
    failed = []
    for name in config.networks:
        for control, known in CONTROL_SLOPES.items():
            slope = metrics[f"control_slope[{name},{control}]"].value
            if not abs(slope - known) <= CONTROL_TOL:
                failed.append(
                    f"{name}: {control} control slope {slope:.3f}, known {known:g} "
                    f"(tolerance {CONTROL_TOL:g})"
                )
    return tuple(failed)


def judge(config: LabelAlignmentConfig, metrics: Metrics) -> Judgement:
    r"""``criterion="chance"``: label slope >= :data:`CHANCE_LABEL_MIN`, \|permuted slope\| <=
    ``permuted_tolerance``, top-``top_k`` share >= :data:`CHANCE_SHARE_MIN`, residual slope in
    :data:`CHANCE_RESIDUAL`; ``criterion="seed"``: label slope in :data:`PAPER_LABEL`,
    residual slope in :data:`PAPER_RESIDUAL`; for every network, and under both criteria the
    residual's slope must differ from its permuted-label control (their intervals do not
    overlap), else it says nothing about the labels. A control of :data:`CONTROL_SLOPES`
    farther than :data:`CONTROL_TOL` from its known slope makes the run an ERROR."""
    checks: list[bool] = []
    parts: list[str] = []
    for name in config.networks:
        label = metrics[f"label_slope[{name}]"].value
        permuted = metrics[f"permuted_label_slope[{name}]"].value
        share = metrics[f"top{config.top_k}_label_energy[{name}]"].value
        residual_metric = metrics[f"residual_slope[{name}]"]
        residual = residual_metric.value
        control = metrics[f"permuted_residual_slope[{name}]"]
        label_driven = not _intervals_overlap(residual_metric, control)
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
        checks.append(label_driven)
        parts.append(
            f"{name}: label slope {label:.2f} (paper: 2), permuted {permuted:.2f}, "
            f"top-{config.top_k} share {share:.2f}, residual slope {residual:.2f} (paper: 1; "
            f"permuted-label residual {control.value:.2f}, "
            f"{'distinct' if label_driven else 'not distinct'}) over {decades:.1f} decades"
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
    rule += (
        ", the residual slope's interval apart from its permuted-label control's; controls "
        f"(labels K A, N(0, K), white noise) within {CONTROL_TOL:g} of slopes 2, 1, 0"
    )
    return Judgement(
        passed=all(checks),
        summary=f"{_TITLES[config.dataset]}: " + "; ".join(parts),
        criterion=f"{grid}: for every network, {rule}",
        controls_failed=control_failures(config, metrics),
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
            "slope (random nonzero f_0) in [0.8, 1.5] (ntklab's own bounds for alignment "
            "beyond chance); Fashion-MNIST, 10,000 class-balanced training images (paper "
            "scale, CIFAR-10 not available): the paper's slopes 2 and 1 within ntklab's "
            "bands, label slope in [1.6, 2.4] and residual slope in [0.7, 1.3]; at both "
            "scales the residual slope apart from its permuted-label control, and the "
            "controls (labels K a, N(0, K), white noise) at slopes 2, 1, 0 within 0.1 "
            "(else ERROR)"
        ),
        reported=(
            "label slope 2 and residual slope 1 on CIFAR-10 for MLPs and CNNs (the paper's "
            "scaling laws, its experiments on CIFAR-10)"
        ),
        criterion_change=(
            "2026-12-04: the residual half is judged against its permuted-label control (with "
            "permuted labels the residual slope stayed inside the fixed band), and controls of "
            "known slope 2, 1, 0 guard the estimator"
        ),
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
