r"""Small real datasets as tensors: scikit-learn's digits, MNIST, Fashion-MNIST and CIFAR-10
from local files.

Nothing is ever downloaded. MNIST, Fashion-MNIST (Xiao, Rasul & Vollgraf 2017,
arXiv:1708.07747) and CIFAR-10 are read from a local folder in their standard distribution
formats; a missing or malformed folder raises :class:`~ntklab.errors.NtklabValueError` naming
the path and the files expected there. Fashion-MNIST has a default folder,
:data:`FASHION_MNIST_ROOT`, where Debian's package ``dataset-fashion-mnist`` installs it
(``sudo apt-get install dataset-fashion-mnist``).

Subsets. :meth:`Dataset.subsample` draws uniformly, :meth:`Dataset.balanced_subsample` the
same number of examples from every class; both are reproducible from a seeded
``torch.Generator`` and record, in :attr:`Dataset.indices`, which examples of the full split
they kept, so that an experiment can store them.

Layout. Images are torch's channels-first batches ``(n, C, H, W)`` (NCHW), ready for
:class:`ntklab.kernels.Conv` and ``nn.Conv2d`` without a permute (neural-tangents and
TensorFlow use channels-last NHWC; ``x.permute(0, 2, 3, 1)`` gives that).

Standardization. Images are scaled to [0, 1] and then, with ``standardize=True``, shifted and
scaled per channel by the mean and standard deviation of *all training pixels* of that channel
(the train split's statistics, also for the test split, so both live on the same scale and no
test information leaks). scikit-learn's digits have no official split: they are standardized
per pixel (feature) over all 1797 images, constant pixels mapped to 0.
"""

from __future__ import annotations

import gzip
import math
import pickle
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from ntklab._checks import check_positive_int
from ntklab.errors import NtklabTypeError, NtklabValueError

from ._validation import check_float_dtype, check_generator

__all__ = [
    "FASHION_MNIST_ROOT",
    "Dataset",
    "load_cifar10",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist",
]

TargetKind = Literal["onehot", "binary", "centered_onehot"]
Split = Literal["train", "test"]

#: Where Debian's package ``dataset-fashion-mnist`` installs Fashion-MNIST's four idx files
#: (``sudo apt-get install dataset-fashion-mnist``); the default ``root`` of
#: :func:`load_fashion_mnist`.
FASHION_MNIST_ROOT = Path("/usr/share/datasets/fashion-mnist")
_FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"


# ---------------------------------------------------------------------------------------------
# the dataset container


@dataclass(frozen=True, eq=False)
class Dataset:
    r"""Inputs and integer class labels.

    Attributes
    ----------
    x : Tensor of shape (n, ...)
        Real floating inputs: ``(n, features)`` or images ``(n, C, H, W)`` (NCHW, torch's
        layout, what :class:`ntklab.kernels.Conv` and ``nn.Conv2d`` take).
    labels : Tensor of shape (n,)
        ``int64`` class indices in ``[0, num_classes)``.
    num_classes : int
        Number of classes ``C >= 1``.
    name : str
        A short description (e.g. ``"digits"``, ``"fashion-mnist-train"``).
    indices : Tensor of shape (n,)
        ``int64`` positions of the examples in the full split they were drawn from, kept
        through :meth:`subsample`, :meth:`balanced_subsample` and :meth:`split`; by default
        (an empty tensor is given) ``0 .. n-1``, the full split in order.

    Examples
    --------
    >>> ds = Dataset(torch.zeros(3, 2), torch.tensor([0, 1, 1]), 2, "toy")
    >>> ds.targets("binary")
    tensor([-1.,  1.,  1.])
    >>> ds
    Dataset('toy', x (3, 2) torch.float32, 2 classes)
    >>> ds.balanced_subsample(2, torch.Generator().manual_seed(0)).labels.sort().values
    tensor([0, 1])
    """

    x: Tensor
    labels: Tensor
    num_classes: int
    name: str = "dataset"
    indices: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.int64))

    def __post_init__(self) -> None:
        if not isinstance(self.x, Tensor) or not self.x.is_floating_point() or self.x.ndim < 1:
            got = (
                f"dtype {self.x.dtype}, shape {tuple(self.x.shape)}"
                if isinstance(self.x, Tensor)
                else type(self.x).__name__
            )
            raise NtklabTypeError(
                f"x: expected a real floating tensor of shape (n, ...), got {got}"
            )
        if not isinstance(self.labels, Tensor) or self.labels.dtype != torch.int64:
            got = (
                f"dtype {self.labels.dtype}"
                if isinstance(self.labels, Tensor)
                else type(self.labels).__name__
            )
            raise NtklabTypeError(f"labels: expected an int64 tensor of shape (n,), got {got}")
        if self.labels.shape != (self.x.shape[0],):
            raise NtklabValueError(
                f"labels: expected shape ({self.x.shape[0]},) to match x's first dimension, got "
                f"{tuple(self.labels.shape)}"
            )
        check_positive_int("num_classes", self.num_classes)
        if self.labels.numel() and (
            int(self.labels.min()) < 0 or int(self.labels.max()) >= self.num_classes
        ):
            raise NtklabValueError(
                f"labels: expected class indices in [0, {self.num_classes}), got values in "
                f"[{int(self.labels.min())}, {int(self.labels.max())}]"
            )
        if self.labels.device != self.x.device:
            raise NtklabValueError(
                f"labels: expected the device of x ({self.x.device}), got {self.labels.device}"
            )
        if not isinstance(self.indices, Tensor) or self.indices.dtype != torch.int64:
            got = (
                f"dtype {self.indices.dtype}"
                if isinstance(self.indices, Tensor)
                else type(self.indices).__name__
            )
            raise NtklabTypeError(f"indices: expected an int64 tensor of shape (n,), got {got}")
        if self.indices.numel() == 0 and len(self) > 0:
            object.__setattr__(self, "indices", torch.arange(len(self), device=self.x.device))
        if self.indices.shape != (len(self),):
            raise NtklabValueError(
                f"indices: expected shape ({len(self)},) to match x's first dimension, got "
                f"{tuple(self.indices.shape)}"
            )
        if self.indices.device != self.x.device:
            raise NtklabValueError(
                f"indices: expected the device of x ({self.x.device}), got {self.indices.device}"
            )

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, x {tuple(self.x.shape)} {self.x.dtype}, "
            f"{self.num_classes} classes)"
        )

    def _take(self, idx: Tensor, name: str | None = None) -> Dataset:
        """The examples at positions ``idx`` of this dataset, their indices carried along."""
        return replace(
            self,
            x=self.x[idx],
            labels=self.labels[idx],
            indices=self.indices[idx],
            name=self.name if name is None else name,
        )

    def one_hot(self) -> Tensor:
        """One-hot targets, shape ``(n, num_classes)``, in ``x``'s dtype and device."""
        return self.targets("onehot")

    def targets(self, kind: TargetKind = "onehot") -> Tensor:
        r"""Regression targets for the labels, in ``x``'s dtype and device.

        - ``"onehot"``: shape ``(n, C)``, :math:`Y_{ic} = [y_i = c]`.
        - ``"centered_onehot"``: shape ``(n, C)``, :math:`Y_{ic} = [y_i = c] - 1/C` (zero row
          sums, the usual NTK regression target).
        - ``"binary"``: shape ``(n,)``, :math:`2 y_i - 1 \in \{-1, +1\}`; requires
          ``num_classes == 2`` (class 1 is ``+1``).
        """
        if kind == "binary":
            if self.num_classes != 2:
                raise NtklabValueError(
                    f"kind: 'binary' targets need num_classes == 2, got {self.num_classes} "
                    f"(load with binary=True)"
                )
            return (2 * self.labels - 1).to(self.x.dtype)
        if kind not in ("onehot", "centered_onehot"):
            raise NtklabValueError(
                f"kind: expected 'onehot', 'binary' or 'centered_onehot', got {kind!r}"
            )
        y = torch.nn.functional.one_hot(self.labels, self.num_classes).to(self.x.dtype)
        if kind == "centered_onehot":
            y = y - 1.0 / self.num_classes
        return y

    def subsample(self, n: int, generator: torch.Generator) -> Dataset:
        """``n`` examples drawn without replacement (uniformly random order); their positions
        in the full split are in :attr:`indices`."""
        n = check_positive_int("n", n)
        if n > len(self):
            raise NtklabValueError(f"n: expected an int <= {len(self)} (the size), got {n}")
        idx = self._permutation(generator)[:n]
        return self._take(idx)

    def balanced_subsample(self, n: int, generator: torch.Generator) -> Dataset:
        """``n`` examples, the same number from every class, drawn without replacement.

        Each class contributes ``n // num_classes`` examples; the remainder
        ``n % num_classes`` goes one each to the classes with the smallest indices
        (``0, 1, ...``). Within each class the examples are the first of that class in a
        uniformly random permutation drawn from ``generator``, and the subset keeps that
        permutation's order (classes interleaved at random, so any prefix is a uniform
        draw too). The same generator state gives the same subset; its positions in the full
        split are in :attr:`indices`.

        Parameters
        ----------
        n : int
            Size of the subset, ``1 <= n <= len(self)``.
        generator : torch.Generator
            Source of the permutation.

        Returns
        -------
        Dataset
            ``n`` examples, the same name.

        Raises
        ------
        NtklabValueError
            When a class has fewer examples than its share of ``n``.
        """
        n = check_positive_int("n", n)
        if n > len(self):
            raise NtklabValueError(f"n: expected an int <= {len(self)} (the size), got {n}")
        classes = self.num_classes
        base, extra = divmod(n, classes)
        quota = torch.full((classes,), base, dtype=torch.int64, device=self.labels.device)
        quota[:extra] += 1
        counts = torch.bincount(self.labels, minlength=classes)
        short = (counts < quota).nonzero().flatten().tolist()
        if short:
            c = short[0]
            smallest = int(counts.min())
            # the largest feasible n: `smallest` from each class, plus one from each of the
            # leading classes that have more
            leading = counts > smallest
            most = smallest * classes + int(leading.cumprod(0).sum())
            raise NtklabValueError(
                f"n: expected at most {most} for a class-balanced subset ({classes} classes, "
                f"the smallest has {smallest} examples), got {n}: class {c} has "
                f"{int(counts[c])} examples and its share is {int(quota[c])}"
            )
        perm = self._permutation(generator)
        drawn = self.labels[perm]  # shape: (N,)
        # rank of each drawn example among the drawn examples of its class (0, 1, ...)
        onehot = torch.nn.functional.one_hot(drawn, classes)  # shape: (N, C)
        rank = onehot.cumsum(0).gather(1, drawn[:, None]).squeeze(1) - 1
        return self._take(perm[rank < quota[drawn]])

    def split(self, n_train: int, generator: torch.Generator) -> tuple[Dataset, Dataset]:
        """A random partition into ``n_train`` training and ``n - n_train`` held-out examples.

        Returns
        -------
        train, test : Dataset
            Disjoint, together all examples; names suffixed ``"/train"`` and ``"/test"``.
        """
        n_train = check_positive_int("n_train", n_train)
        if n_train >= len(self):
            raise NtklabValueError(
                f"n_train: expected an int < {len(self)} (the size) so that the test part is "
                f"not empty, got {n_train}"
            )
        perm = self._permutation(generator)
        tr, te = perm[:n_train], perm[n_train:]
        return self._take(tr, f"{self.name}/train"), self._take(te, f"{self.name}/test")

    def flatten(self) -> Dataset:
        """The same examples with ``x`` reshaped to ``(n, features)``."""
        return replace(self, x=self.x.reshape(len(self), -1))

    def to(
        self, *, dtype: torch.dtype | None = None, device: torch.device | str | None = None
    ) -> Dataset:
        """A copy with ``x`` cast to ``dtype`` and both tensors moved to ``device``."""
        if dtype is not None:
            check_float_dtype(dtype)
        return replace(
            self,
            x=self.x.to(dtype=dtype, device=device),
            labels=self.labels.to(device=device),
            indices=self.indices.to(device=device),
        )

    def _permutation(self, generator: torch.Generator) -> Tensor:
        gen = check_generator(generator)
        perm = torch.randperm(len(self), generator=gen, device=gen.device)
        return perm.to(self.x.device)


# ---------------------------------------------------------------------------------------------
# scikit-learn digits


def load_digits(
    *,
    standardize: bool = True,
    binary: bool = False,
    images: bool = False,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes; no download).

    Parameters
    ----------
    standardize : bool
        Per-pixel z-score over all 1797 images (the set has no official split); pixels that
        are constant (std 0) become 0. Otherwise raw intensities 0..16.
    binary : bool
        Two classes: label 0 for even digits (0, 2, 4, 6, 8), 1 for odd digits (1, 3, 5, 7,
        9), 898 / 899 images; ``targets("binary")`` gives -1 (even) / +1 (odd).
    images : bool
        Return ``x`` as NCHW images ``(n, 1, 8, 8)`` instead of ``(n, 64)`` features.
    dtype, device
        Of ``x``.

    Returns
    -------
    Dataset
        Named ``"digits"`` or ``"digits-binary"``.

    Examples
    --------
    >>> ds = load_digits(binary=True)
    >>> len(ds), ds.num_classes, tuple(ds.x.shape)
    (1797, 2, (1797, 64))
    >>> tuple(load_digits(images=True).x.shape)  # NCHW
    (1797, 1, 8, 8)
    """
    from sklearn.datasets import load_digits as sk_load_digits

    dtype = check_float_dtype(dtype)
    bunch = sk_load_digits()
    data = np.asarray(bunch.data, dtype=np.float64)  # shape: (1797, 64)
    target = np.asarray(bunch.target, dtype=np.int64)
    if standardize:
        mean = data.mean(axis=0)
        std = data.std(axis=0)
        data = np.where(std > 0, (data - mean) / np.where(std > 0, std, 1.0), 0.0)
    num_classes = 10
    if binary:
        target = target % 2
        num_classes = 2
    x = torch.from_numpy(data)
    if images:
        x = x.reshape(-1, 1, 8, 8)
    return Dataset(
        x=x.to(dtype=dtype, device=device),
        labels=torch.from_numpy(target).to(device=device),
        num_classes=num_classes,
        name="digits-binary" if binary else "digits",
    )


# ---------------------------------------------------------------------------------------------
# shared helpers for image files


def _check_root(root: object) -> Path:
    if not isinstance(root, str | Path):
        raise NtklabTypeError(
            f"root: expected a str or pathlib.Path folder, got {type(root).__name__}"
        )
    path = Path(root).expanduser()
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise NtklabValueError(f"root: expected an existing local folder, got {path} ({what})")
    return path


def _check_split(split: object) -> Split:
    if split not in ("train", "test"):
        raise NtklabValueError(f"split: expected 'train' or 'test', got {split!r}")
    return "train" if split == "train" else "test"


#: Images per chunk when summing pixel statistics (bounds the temporary arrays).
_STATS_CHUNK = 4096


def _channel_stats(pixels: list[NDArray[np.uint8]]) -> tuple[NDArray[np.float64], ...]:
    """Per-channel mean and std over all NCHW uint8 arrays, of intensities scaled to [0, 1].

    The sums of the pixel values and of their squares are exact integers (in chunks of
    :data:`_STATS_CHUNK` images), so the statistics carry one rounding only."""
    channels = pixels[0].shape[1]
    total = [0] * channels
    total_sq = [0] * channels
    count = 0
    for block in pixels:
        for start in range(0, block.shape[0], _STATS_CHUNK):
            chunk = block[start : start + _STATS_CHUNK]  # shape: (b, C, H, W)
            wide = chunk.astype(np.int64)
            sums = wide.sum(axis=(0, 2, 3))
            squares = np.square(wide).sum(axis=(0, 2, 3))
            for c in range(channels):
                total[c] += int(sums[c])
                total_sq[c] += int(squares[c])
        count += block.shape[0] * block.shape[2] * block.shape[3]
    mean = np.array([t / (255.0 * count) for t in total])
    # variance count^2 Var = count sum(v^2) - (sum v)^2, exact in Python integers
    var = np.array(
        [(count * q - t * t) / (255.0**2 * count**2) for t, q in zip(total, total_sq, strict=True)]
    )
    std = np.sqrt(np.maximum(var, 0.0))
    return mean, np.where(std > 0, std, 1.0)


def _to_dataset(
    pixels: NDArray[np.uint8],
    labels: NDArray[np.int64],
    stats: tuple[NDArray[np.float64], ...] | None,
    name: str,
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> Dataset:
    # copies only when needed (idx data is a read-only buffer)
    writable = np.require(pixels, requirements=["C_CONTIGUOUS", "WRITEABLE"])
    x = torch.from_numpy(writable).to(dtype=dtype)  # a new tensor; shape: (n, C, H, W)
    x.div_(255.0)
    if stats is not None:
        mean, std = (torch.from_numpy(v).to(dtype)[:, None, None] for v in stats)
        x.sub_(mean).div_(std)
    return Dataset(
        x=x.to(device=device),
        labels=torch.from_numpy(labels.astype(np.int64)).to(device=device),
        num_classes=10,
        name=name,
    )


# ---------------------------------------------------------------------------------------------
# MNIST (idx files)

_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_IDX_TYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def _find_file(folders: list[Path], stem: str) -> Path | None:
    """``stem`` (or ``stem.gz``, or with ``.idx`` for ``-idx``) in the first folder having it."""
    names = [stem, stem.replace("-idx", ".idx")]
    for folder in folders:
        for name in names:
            for candidate in (folder / name, folder / f"{name}.gz"):
                if candidate.is_file():
                    return candidate
    return None


def _read_idx(path: Path) -> NDArray[Any]:
    """Parse an idx file (plain or gzip): magic 0 0 type ndim, big-endian uint32 dims, data."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise NtklabValueError(f"root: could not read {path} as an idx file: {exc}") from exc
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise NtklabValueError(
            f"root: expected {path} to be an idx file (magic bytes 0x00 0x00 <type> <ndim>), "
            f"got {raw[:4]!r}"
        )
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise NtklabValueError(f"root: idx file {path} has a truncated header (ndim {ndim})")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_TYPES[raw[2]]
    expected = math.prod(dims) * dtype.itemsize
    if len(raw) - header != expected:
        raise NtklabValueError(
            f"root: idx file {path} declares shape {dims} ({expected} data bytes), got "
            f"{len(raw) - header} data bytes"
        )
    array: NDArray[Any] = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return array


def _mnist_arrays(
    folders: list[Path], split: Split, title: str = "MNIST", hint: str = ""
) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """Images ``(n, 1, H, W)`` and labels of one split of an MNIST-format data set (MNIST,
    Fashion-MNIST); ``title`` and ``hint`` go into the error for missing files."""
    image_stem, label_stem = _MNIST_FILES[split]
    image_path = _find_file(folders, image_stem)
    label_path = _find_file(folders, label_stem)
    if image_path is None or label_path is None:
        missing = [s for s, p in ((image_stem, image_path), (label_stem, label_path)) if p is None]
        raise NtklabValueError(
            f"root: expected the {title} {split} files {image_stem} and {label_stem} (plain or "
            f".gz) in {' or '.join(str(f) for f in folders)}, but {', '.join(missing)} is "
            f"missing{hint}"
        )
    images = _read_idx(image_path)
    labels = _read_idx(label_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise NtklabValueError(
            f"root: expected {image_path} to hold uint8 images of shape (n, H, W), got "
            f"{images.dtype} of shape {images.shape}"
        )
    if labels.ndim != 1 or labels.shape[0] != images.shape[0]:
        raise NtklabValueError(
            f"root: expected {label_path} to hold {images.shape[0]} labels (one per image in "
            f"{image_path.name}), got shape {labels.shape}"
        )
    labels64 = labels.astype(np.int64)
    if labels64.size and (labels64.min() < 0 or labels64.max() > 9):
        raise NtklabValueError(
            f"root: expected labels 0..9 in {label_path}, got values in "
            f"[{labels64.min()}, {labels64.max()}]"
        )
    return images[:, None], labels64  # NCHW, one channel


def _load_idx_dataset(
    folders: list[Path],
    split: Split,
    *,
    title: str,
    prefix: str,
    hint: str,
    standardize: bool,
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> Dataset:
    """One split of an MNIST-format data set, named ``f"{prefix}-{split}"``, standardized
    with the train split's per-channel statistics."""
    images, labels = _mnist_arrays(folders, split, title, hint)
    stats = None
    if standardize:
        train = images if split == "train" else _mnist_arrays(folders, "train", title, hint)[0]
        stats = _channel_stats([train])
    return _to_dataset(images, labels, stats, f"{prefix}-{split}", dtype, device)


def _is_fashion_folder(folder: Path) -> bool:
    """Whether ``folder`` is (inside) a folder named for Fashion-MNIST, or the default one."""
    resolved = folder.resolve()
    if resolved == FASHION_MNIST_ROOT.resolve():
        return True
    names = {"fashion-mnist", "fashionmnist"}
    return any(part.lower().replace("_", "-") in names for part in resolved.parts)


def load_mnist(
    root: str | Path,
    split: Split = "train",
    *,
    standardize: bool = True,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Dataset:
    """MNIST from the standard idx files in a local folder (never downloads).

    Looks in ``root`` and then ``root/MNIST/raw`` (torchvision's layout) for
    ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and
    ``t10k-labels-idx1-ubyte``, each plain or gzipped (``.gz``); ``.idx3-ubyte`` spellings are
    accepted too.

    Parameters
    ----------
    root : str or Path
        The folder.
    split : {"train", "test"}
        60000 or 10000 images in the real files.
    standardize : bool
        Subtract the mean and divide by the std of all *training* pixels (intensities scaled to
        [0, 1]); for ``split="test"`` the training images are read for these statistics.
        Otherwise intensities in [0, 1].
    dtype, device
        Of ``x``.

    Returns
    -------
    Dataset
        ``x`` of shape ``(n, 1, H, W)`` (NCHW; 28 x 28 for the real files), 10 classes, named
        ``"mnist-train"`` or ``"mnist-test"``.

    Raises
    ------
    NtklabValueError
        When files are missing or malformed, or when ``root`` is Fashion-MNIST's folder
        (:data:`FASHION_MNIST_ROOT`, or a folder named ``fashion-mnist`` / ``FashionMNIST``):
        its files have MNIST's names, but the data set is another one; read it with
        :func:`load_fashion_mnist` so that it is named what it is.
    """
    folder = _check_root(root)
    split = _check_split(split)
    dtype = check_float_dtype(dtype)
    if _is_fashion_folder(folder):
        raise NtklabValueError(
            f"root: expected a folder of MNIST's files, got {folder}, which holds "
            f"Fashion-MNIST (same file names, another data set); load it with "
            f"load_fashion_mnist(split, root={str(folder)!r}) so that it is named "
            f"'fashion-mnist-{split}'"
        )
    return _load_idx_dataset(
        [folder, folder / "MNIST" / "raw"],
        split,
        title="MNIST",
        prefix="mnist",
        hint="",
        standardize=standardize,
        dtype=dtype,
        device=device,
    )


def load_fashion_mnist(
    split: Split = "train",
    root: str | Path | None = None,
    *,
    standardize: bool = True,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Dataset:
    """Fashion-MNIST (Xiao, Rasul & Vollgraf 2017, arXiv:1708.07747) from its idx files.

    70000 grayscale 28 x 28 images of clothing in 10 classes (T-shirt/top, trouser,
    pullover, dress, coat, sandal, shirt, sneaker, bag, ankle boot), 60000 for training and
    10000 for testing, each class 6000 / 1000 times; the files have MNIST's names and format
    (``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
    ``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz``, plain or gzipped), read by
    the same code as :func:`load_mnist`. Never downloads: Debian's package
    ``dataset-fashion-mnist`` installs the files in :data:`FASHION_MNIST_ROOT`
    (``sudo apt-get install dataset-fashion-mnist``).

    Parameters
    ----------
    split : {"train", "test"}
        60000 or 10000 images in the real files.
    root : str, Path or None
        The folder (also searched: ``root/FashionMNIST/raw``, torchvision's layout); ``None``
        for :data:`FASHION_MNIST_ROOT`.
    standardize : bool
        Subtract the mean and divide by the std of all *training* pixels (intensities scaled
        to [0, 1]); for ``split="test"`` the training images are read for these statistics.
        Otherwise intensities in [0, 1].
    dtype, device
        Of ``x``.

    Returns
    -------
    Dataset
        ``x`` of shape ``(n, 1, 28, 28)`` (NCHW), integer labels (one-hot with
        :meth:`Dataset.targets`), 10 classes, named ``"fashion-mnist-train"`` or
        ``"fashion-mnist-test"``.

    Raises
    ------
    NtklabValueError
        When the folder or its files are missing (the message names the folder and the
        package that installs them) or malformed.

    Examples
    --------
    >>> load_fashion_mnist("test")  # doctest: +SKIP
    Dataset('fashion-mnist-test', x (10000, 1, 28, 28) torch.float32, 10 classes)
    """
    split = _check_split(split)
    dtype = check_float_dtype(dtype)
    hint = (
        f"; install Fashion-MNIST with `sudo apt-get install {_FASHION_MNIST_PACKAGE}` (it "
        f"puts the files in {FASHION_MNIST_ROOT}) or pass root= a folder holding them"
    )
    if root is None:
        folder = FASHION_MNIST_ROOT
    elif isinstance(root, str | Path):
        folder = Path(root).expanduser()
    else:
        raise NtklabTypeError(
            f"root: expected a str or pathlib.Path folder or None, got {type(root).__name__}"
        )
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise NtklabValueError(
            f"root: expected the folder of Fashion-MNIST's idx files, got {folder} ({what}){hint}"
        )
    return _load_idx_dataset(
        [folder, folder / "FashionMNIST" / "raw"],
        split,
        title="Fashion-MNIST",
        prefix="fashion-mnist",
        hint=hint,
        standardize=standardize,
        dtype=dtype,
        device=device,
    )


# ---------------------------------------------------------------------------------------------
# CIFAR-10 (python pickle batches)

_CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_TEST = ("test_batch",)
_PICKLE_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, bytes and numpy arrays only (no arbitrary code)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _PICKLE_ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        if module == "numpy.core.multiarray":
            module = "numpy._core.multiarray" if np.__version__ >= "2" else module
        return super().find_class(module, name)


def _cifar_folder(root: Path) -> Path:
    for folder in (root, root / "cifar-10-batches-py"):
        if any((folder / f).is_file() for f in (*_CIFAR_TRAIN, *_CIFAR_TEST)):
            return folder
    raise NtklabValueError(
        f"root: expected the CIFAR-10 python batches ({', '.join(_CIFAR_TRAIN)}, test_batch) in "
        f"{root} or {root / 'cifar-10-batches-py'}, found none"
    )


def _read_cifar_batch(path: Path) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    if not path.is_file():
        raise NtklabValueError(
            f"root: expected the CIFAR-10 batch file {path}, but it is missing (a full folder "
            f"has {', '.join(_CIFAR_TRAIN)} and test_batch)"
        )
    try:
        with path.open("rb") as handle:
            batch = _ArrayUnpickler(handle, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise NtklabValueError(
            f"root: could not read {path} as a CIFAR-10 python batch (a pickled dict with "
            f"'data' and 'labels'): {exc}"
        ) from exc
    if not isinstance(batch, dict):
        raise NtklabValueError(
            f"root: expected {path} to hold a dict with 'data' and 'labels', got "
            f"{type(batch).__name__}"
        )
    norm = {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}
    if "data" not in norm or "labels" not in norm:
        raise NtklabValueError(
            f"root: expected {path} to hold the keys 'data' and 'labels', got "
            f"{sorted(str(k) for k in norm)}"
        )
    data = np.asarray(norm["data"])
    labels = np.asarray(norm["labels"], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise NtklabValueError(
            f"root: expected 'data' in {path} to be uint8 of shape (n, 3072), got {data.dtype} "
            f"of shape {data.shape}"
        )
    if labels.shape != (data.shape[0],) or (labels.size and (labels.min() < 0 or labels.max() > 9)):
        raise NtklabValueError(
            f"root: expected {data.shape[0]} labels in 0..9 in {path}, got shape "
            f"{labels.shape}"
            + (f" with values in [{labels.min()}, {labels.max()}]" if labels.size else "")
        )
    # Rows are 1024 red, 1024 green, 1024 blue values, each plane row-major: already NCHW.
    images = data.reshape(-1, 3, 32, 32)
    return images, labels


def load_cifar10(
    root: str | Path,
    split: Split = "train",
    *,
    standardize: bool = True,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Dataset:
    """CIFAR-10 from the python pickle batches in a local folder (never downloads).

    Reads ``data_batch_1`` .. ``data_batch_5`` (train, 50000 images) or ``test_batch`` (10000)
    from ``root`` or ``root/cifar-10-batches-py``. The pickles are read with an unpickler that
    only accepts containers and numpy arrays, so a tampered file cannot run code.

    Parameters
    ----------
    root : str or Path
        The folder.
    split : {"train", "test"}
    standardize : bool
        Per-channel z-score with the mean and std of all *training* pixels (intensities scaled
        to [0, 1]); for ``split="test"`` the training batches are read for these statistics.
        Otherwise intensities in [0, 1].
    dtype, device
        Of ``x``.

    Returns
    -------
    Dataset
        ``x`` of shape ``(n, 3, 32, 32)`` (NCHW, channels R, G, B), 10 classes, named
        ``"cifar10-train"`` or ``"cifar10-test"``.
    """
    base = _check_root(root)
    split = _check_split(split)
    dtype = check_float_dtype(dtype)
    folder = _cifar_folder(base)
    names = _CIFAR_TRAIN if split == "train" else _CIFAR_TEST
    batches = [_read_cifar_batch(folder / name) for name in names]
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    stats = None
    if standardize:
        train = (
            [b[0] for b in batches]
            if split == "train"
            else [_read_cifar_batch(folder / name)[0] for name in _CIFAR_TRAIN]
        )
        stats = _channel_stats(train)
    return _to_dataset(images, labels, stats, f"cifar10-{split}", dtype, device)
