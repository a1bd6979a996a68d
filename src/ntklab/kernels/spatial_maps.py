"""Linear maps of the positions of an image: the kernel rules :class:`ImageResize` and
:class:`Index` (with the helper :data:`Slice`) and their finite modules
:class:`ImageResizeLayer` and :class:`IndexLayer`.

A layer that maps every channel of an image ``(n, C, *S)`` by the same linear map of its
positions, one matrix :math:`R^{(k)}` per spatial axis, maps the covariance of a position
pair by the bilinear form

.. math:: K'_{hh'} = \\sum_{j, j'} R_{hj} R_{h'j'} K_{jj'}

on each axis (neural-tangents' ``stax.ImageResize`` and ``stax.Index``, arXiv:1912.02803).
When each output position reads one input position (nearest-neighbour resizing, indexing)
the spatial diagonal maps to itself; otherwise the layer needs the full covariance
(``mixes_space``). The channels are the infinite-width axis: they are never resized nor
indexed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from ..errors import NtklabTypeError, NtklabValueError
from .covariance import require_full, spatial_axes
from .engine import Layer
from .kernel import KernelState

__all__ = [
    "ImageResize",
    "ImageResizeLayer",
    "Index",
    "IndexLayer",
    "Slice",
    "index_entries",
    "resize_matrix",
]

ResizeMethod = Literal["linear", "bilinear", "trilinear", "triangle", "nearest"]
_LINEAR = ("linear", "bilinear", "trilinear", "triangle")
_REFUSED = ("cubic", "bicubic", "tricubic", "lanczos3", "lanczos5")


def resize_matrix(
    in_size: int,
    out_size: int,
    method: ResizeMethod,
    antialias: bool,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """The matrix ``(out_size, in_size)`` of ``jax.image.resize`` along one axis.

    Pixel centres sit at half-integers: output position :math:`o` samples the input at
    :math:`u_o = (o + \\frac12)\\, m / n - \\frac12` (:math:`m` = ``in_size``, :math:`n` =
    ``out_size``). ``"nearest"`` reads input :math:`\\lfloor (o + \\frac12) m / n \\rfloor`
    (computed in float32, as jax does). Linear interpolation weighs input :math:`j` by the
    triangle :math:`\\max(0, 1 - |u_o - j| / a)`, normalized to sum 1 over :math:`j`, with
    :math:`a = \\max(m / n, 1)` when ``antialias`` (a low-pass filter when downsampling),
    else :math:`a = 1`.
    """
    if method == "nearest":
        # jax computes the offsets in float32 (multiplication before division)
        pos = (torch.arange(out_size, dtype=torch.float32) + 0.5) * in_size / out_size
        idx = torch.floor(pos).to(torch.long).clamp_(max=in_size - 1)
        out = torch.zeros(out_size, in_size, dtype=dtype, device=device)
        out[torch.arange(out_size), idx.to(out.device)] = 1.0
        return out
    inv_scale = in_size / out_size
    width = max(inv_scale, 1.0) if antialias else 1.0
    sample = (torch.arange(out_size, dtype=torch.float64) + 0.5) * inv_scale - 0.5
    dist = (sample[:, None] - torch.arange(in_size, dtype=torch.float64)[None, :]).abs()
    weights = (1.0 - dist / width).clamp_(min=0.0)  # shape: (out, in)
    total = weights.sum(dim=1, keepdim=True)
    eps32 = float(torch.finfo(torch.float32).eps)
    weights = torch.where(total.abs() > 1000.0 * eps32, weights / total.clamp(min=eps32), 0.0)
    return weights.to(dtype=dtype, device=device)


def _apply_matrix(x: Tensor, axis: int, matrix: Tensor) -> Tensor:
    """:math:`y_{\\ldots h \\ldots} = \\sum_j R_{hj} x_{\\ldots j \\ldots}` along ``axis``."""
    return torch.movedim(torch.tensordot(x, matrix, dims=([axis], [1])), -1, axis)


@dataclass(frozen=True)
class ImageResize(Layer):
    """Resize the spatial axes of images ``(n, C, *S)`` as ``jax.image.resize`` (and
    neural-tangents' ``stax.ImageResize``) does.

    Parameters
    ----------
    shape : int or tuple of int
        The output spatial shape ``S'``, one entry per spatial axis (``-1``: keep that axis).
        Unlike stax, whose ``shape`` covers every axis of an ``NHWC`` batch, it names the
        spatial axes only: the batch cannot be resized, nor the channels (the
        infinite-width axis).
    method : {"linear", "bilinear", "trilinear", "triangle", "nearest"}
        Linear interpolation (the first four are one method) or the nearest neighbour.
        neural-tangents' kernels support no other (``"cubic"``, ``"lanczos3"``, ... are
        refused).
    antialias : bool
        Low-pass filter when downsampling with linear interpolation (jax's default); no
        effect when upsampling or with ``"nearest"``.

    Notes
    -----
    The layer is linear, :math:`y = (R^{(1)} \\otimes R^{(2)}) x` per channel with the
    matrices of :func:`resize_matrix`, so :math:`K' = R K R^T` on each axis pair of the full
    covariance, the same for :math:`\\Theta`. Linear interpolation mixes positions (the full
    covariance is carried up to it); nearest-neighbour resizing selects them and runs on the
    spatial diagonal.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import Conv, Flatten, ImageResize
    >>> cnn = nl.serial(Conv(8, (3, 3)), nl.Relu(), ImageResize((9, 9), "linear"), Flatten(),
    ...                 nl.Dense(1))
    >>> cnn.kernel(torch.randn(3, 2, 6, 6, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
    """

    shape: int | tuple[int, ...]
    method: ResizeMethod = "linear"
    antialias: bool = True

    @property
    def moves_positions(self) -> bool:
        return True

    def __post_init__(self) -> None:
        shape = (self.shape,) if isinstance(self.shape, int) else self.shape
        if isinstance(shape, list):
            shape = tuple(shape)
        if (
            not isinstance(shape, tuple)
            or not shape
            or any(isinstance(s, bool) or not isinstance(s, int) for s in shape)
        ):
            raise NtklabTypeError(
                f"shape: expected an int or a tuple of ints (the output spatial shape, -1 to "
                f"keep an axis), got {self.shape!r}"
            )
        if len(shape) not in (1, 2, 3) or any(s < 1 and s != -1 for s in shape):
            raise NtklabValueError(
                "shape: expected 1 to 3 entries (the spatial axes only: the batch and the "
                f"channels cannot be resized), each a size >= 1 or -1, got {shape!r}"
            )
        if self.method in _REFUSED:
            raise NtklabValueError(
                f"method: expected 'linear' or 'nearest', the methods whose kernels "
                f"neural-tangents implements, got {self.method!r}"
            )
        if self.method not in (*_LINEAR, "nearest"):
            raise NtklabValueError(
                "method: expected 'linear', 'bilinear', 'trilinear', 'triangle' or 'nearest', "
                f"got {self.method!r}"
            )
        if not isinstance(self.antialias, bool):
            raise NtklabTypeError(f"antialias: expected a bool, got {self.antialias!r}")
        object.__setattr__(self, "shape", shape)

    @property
    def _shape(self) -> tuple[int, ...]:
        return self.shape  # type: ignore[return-value]  # a tuple after __post_init__

    @property
    def spatial_ndim(self) -> int | None:
        return len(self._shape)

    @property
    def mixes_space(self) -> bool:
        return self.method != "nearest" and any(s != -1 for s in self._shape)

    @property
    def passes_through(self) -> bool:
        return True

    def spatial_shape_after(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if len(shape) != len(self._shape):
            return shape
        return tuple(s if t == -1 else t for s, t in zip(shape, self._shape, strict=True))

    def matrices(self, sizes: tuple[int, ...], x: Tensor) -> list[Tensor | None]:
        """The resize matrix of each spatial axis of sizes ``sizes`` (``None``: unchanged)."""
        out: list[Tensor | None] = []
        for size, target in zip(sizes, self._shape, strict=True):
            if target in (-1, size):
                out.append(None)  # jax skips these axes (both methods are the identity)
                continue
            method: ResizeMethod = "nearest" if self.method == "nearest" else "linear"
            out.append(
                resize_matrix(size, target, method, self.antialias, dtype=x.dtype, device=x.device)
            )
        return out

    def _resize(self, x: Tensor, state: KernelState) -> Tensor:
        for axes, matrix in zip(
            spatial_axes(state), self.matrices(state.spatial_shape, x), strict=True
        ):
            if matrix is not None:
                for axis in axes:
                    x = _apply_matrix(x, axis, matrix)
        return x

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        _require_images("ImageResize", state, len(self._shape))
        if self.mixes_space:
            require_full("ImageResize", state)
        cov = self._resize(state.cov, state)
        ntk = None if state.ntk is None else self._resize(state.ntk, state)
        return dataclasses.replace(state, cov=cov, ntk=ntk)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return ImageResizeLayer(self)


class ImageResizeLayer(nn.Module):
    """The resize of :class:`ImageResize` applied to a batch ``(n, C, *S)``: the matrices of
    :func:`resize_matrix` on each spatial axis."""

    def __init__(self, layer: ImageResize) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim != len(self.layer._shape) + 2:
            raise NtklabValueError(
                f"input: expected a {len(self.layer._shape) + 2}-D batch (n, C, ...), got shape "
                f"{tuple(input.shape)}"
            )
        x = input
        for k, matrix in enumerate(self.layer.matrices(tuple(input.shape[2:]), input)):
            if matrix is not None:
                x = _apply_matrix(x, 2 + k, matrix)
        return x

    def extra_repr(self) -> str:
        return (
            f"shape={self.layer._shape}, method={self.layer.method!r}, "
            f"antialias={self.layer.antialias}"
        )


def _require_images(name: str, state: KernelState, ndim: int | None) -> None:
    if state.spatial_ndim == 0 or (ndim is not None and state.spatial_ndim != ndim):
        got = (
            "a flat (n, d) representation"
            if not state.spatial_ndim
            else (f"{state.spatial_ndim} spatial dimension(s)")
        )
        want = "spatial dimensions" if ndim is None else f"{ndim} spatial dimension(s)"
        raise NtklabValueError(f"{name}: expected images (n, C, *S) with {want}, got {got}")


# --------------------------------------------------------------------------------------------
# indexing


class _Slice:
    """``Slice[1:5, ::2]`` is ``(slice(1, 5), slice(None, None, 2))``: the index to pass to
    :class:`Index` (neural-tangents' ``stax.Slice``)."""

    def __getitem__(self, idx: Any) -> Any:
        return idx

    def __repr__(self) -> str:
        return "Slice"


Slice = _Slice()
"""Build the index of :class:`Index` with indexing syntax: ``Index(Slice[:, :, 1:, ::2])``."""

IndexEntry = int | slice


def index_entries(idx: object, ndim: int) -> tuple[IndexEntry, ...]:
    """The index ``idx`` of an ``ndim``-D batch, one int or slice per axis (Ellipsis and
    missing trailing entries expanded to ``:``)."""
    items = idx if isinstance(idx, tuple) else (idx,)
    if sum(item is Ellipsis for item in items) > 1:
        raise NtklabValueError(f"idx: expected at most one Ellipsis, got {idx!r}")
    for item in items:
        if (
            item is not Ellipsis
            and not isinstance(item, slice)
            and (isinstance(item, bool) or not isinstance(item, int))
        ):
            raise NtklabTypeError(
                f"idx: expected ints, slices and one Ellipsis (as built by Slice[...]), got "
                f"{item!r} in {idx!r}"
            )
    if Ellipsis in items:
        at = items.index(Ellipsis)
        fill = ndim - (len(items) - 1)
        items = items[:at] + (slice(None),) * max(fill, 0) + items[at + 1 :]
    if len(items) > ndim:
        raise NtklabValueError(
            f"idx: expected at most {ndim} entries for a {ndim}-D batch (n, C, *S), got "
            f"{len(items)} in {idx!r}"
        )
    return tuple(items) + (slice(None),) * (ndim - len(items))


def _positions(entry: IndexEntry, size: int, axis_name: str) -> int | list[int]:
    """The positions ``entry`` selects on an axis of ``size`` (an int drops the axis)."""
    if isinstance(entry, int):
        if not -size <= entry < size:
            raise NtklabValueError(
                f"idx: expected an index in [-{size}, {size}) on {axis_name} (of size {size}), "
                f"got {entry}"
            )
        return entry % size
    chosen = list(range(size)[entry])
    if not chosen:
        raise NtklabValueError(
            f"idx: expected a slice that keeps at least one position of {axis_name} (of size "
            f"{size}), got {entry!r}"
        )
    return chosen


def _select(x: Tensor, axis: int, chosen: int | list[int]) -> Tensor:
    if isinstance(chosen, int):
        return x.select(axis, chosen)
    if chosen == list(range(x.shape[axis])):
        return x
    return torch.index_select(x, axis, torch.tensor(chosen, device=x.device))


@dataclass(frozen=True)
class Index(Layer):
    """Index the spatial axes of images ``(n, C, *S)`` as ``x[idx]`` (neural-tangents'
    ``stax.Index``).

    Parameters
    ----------
    idx : int, slice, Ellipsis or tuple of them
        An index of the channels-first batch ``(n, C, *S)``, most easily built with
        :data:`Slice`: ``Index(Slice[:, :, 2:, ::-1])`` crops rows and reverses columns;
        ``Index(Slice[..., 0])`` keeps the first column (an int drops its axis). The batch
        and channel entries must be ``:`` (the channels are the infinite-width axis; the
        kernel's rows are the inputs); slices may have any step, negative included.

    Notes
    -----
    Selecting positions maps the covariance of each pair of positions to itself,
    :math:`K'_{hh'} = K_{\\pi(h) \\pi(h')}`: it runs on the full covariance or on its
    diagonal. On padded inputs (``mask_constant``) the mask is indexed alike: a selected
    masked position stays masked. An int index removes a spatial axis (all of them: a flat
    ``(n, C)`` representation); the layers after it act on the remaining axes
    (``Index(Slice[:, :, 0])`` on ``(n, C, H, W)`` images, then 1-D convolutions).

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import Conv, Flatten, Index, Slice
    >>> cnn = nl.serial(Conv(8, (3, 3)), nl.Relu(), Index(Slice[:, :, 1:, ::2]), Flatten(),
    ...                 nl.Dense(1))
    >>> cnn.kernel(torch.randn(3, 2, 6, 6, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
    """

    idx: Any

    @property
    def moves_positions(self) -> bool:
        return True

    def __post_init__(self) -> None:
        items = index_entries(self.idx, 64)  # types and Ellipsis; lengths are checked on use
        why = {
            0: "the batch axis (the kernel's rows are the inputs: select them before)",
            1: "the channel axis (the infinite-width axis, as in neural-tangents)",
        }
        for axis, what in why.items():
            if items[axis] != slice(None):
                raise NtklabValueError(
                    f"idx: expected ':' on {what}, got {items[axis]!r} at axis {axis} of "
                    f"(n, C, *S) in {self.idx!r}"
                )

    @property
    def spatial_layer(self) -> bool:
        return True

    @property
    def passes_through(self) -> bool:
        return True

    @property
    def drops_spatial_axes(self) -> bool:
        items = self.idx if isinstance(self.idx, tuple) else (self.idx,)
        return any(isinstance(item, int) for item in items)

    def mask_after(self, mask: Tensor) -> Tensor:
        """The mask indexed as the positions are (neural-tangents' ``mask[idx]``); an input
        left with masked positions only is refused (its pooled kernel would be 0 / 0)."""
        out: Tensor = IndexLayer(self)(mask.unsqueeze(1))[:, 0]  # shape: (n, *S')
        if out.ndim > 1:
            empty = out.flatten(1).all(dim=1).nonzero().flatten()
            if len(empty):
                raise NtklabValueError(
                    f"Index: expected at least one unmasked position of every input among the "
                    f"positions {self.idx!r} selects, got {len(empty)} input(s) with masked "
                    f"positions only (rows {empty[:5].tolist()})"
                )
        return out

    def _selections(self, sizes: tuple[int, ...]) -> list[int | list[int]]:
        items = index_entries(self.idx, len(sizes) + 2)[2:]
        return [
            _positions(entry, size, f"spatial axis {k}")
            for k, (entry, size) in enumerate(zip(items, sizes, strict=True))
        ]

    def _index(self, x: Tensor, state: KernelState) -> Tensor:
        chosen = self._selections(state.spatial_shape)
        groups = spatial_axes(state)
        for axes, sel in reversed(list(zip(groups, chosen, strict=True))):
            for axis in reversed(axes):  # the second axis first: the first keeps its number
                x = _select(x, axis, sel)
        return x

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        _require_images("Index", state, None)
        dropped = sum(isinstance(c, int) for c in self._selections(state.spatial_shape))
        cov = self._index(state.cov, state)
        ntk = None if state.ntk is None else self._index(state.ntk, state)
        spatial = state.spatial_ndim - dropped
        return dataclasses.replace(
            state,
            cov=cov,
            ntk=ntk,
            spatial_ndim=spatial,
            full_spatial=state.full_spatial and spatial > 0,
        )

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return IndexLayer(self)


class IndexLayer(nn.Module):
    """``input[idx]`` for the index of :class:`Index` (negative steps included)."""

    def __init__(self, layer: Index) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim < 3:
            raise NtklabValueError(
                f"input: expected images (n, C, *S), got shape {tuple(input.shape)}"
            )
        chosen = self.layer._selections(tuple(input.shape[2:]))
        x = input
        for k in reversed(range(len(chosen))):
            x = _select(x, 2 + k, chosen[k])
        return x

    def extra_repr(self) -> str:
        return f"idx={self.layer.idx!r}"
