"""The kernel engine: the layer contract, the carried state, and the walk through a graph.

An architecture is a chain of layers (:func:`serial`); a layer may hold branches
(:func:`~ntklab.kernels.graphs.parallel`), so the chain is a graph. Conventions are those of
neural-tangents' ``stax`` (arXiv:1912.02803): the input kernel of an ``(n, d)`` batch is
:math:`K_0(x, x') = \\langle x, x' \\rangle / d` with :math:`\\Theta_0 = 0`; the input kernel of
images ``(n, C, *S)`` averages over channels, :math:`K_0(x, x')_{hh'} = \\frac1C \\sum_c
x_{ch} x'_{ch'}`.

What this module owns, and the layer rooms do not:

- **The carried state** (:class:`Flow`): the pair kernel of ``x1`` and ``x2`` and the
  per-input kernels (variances), which activations read. For images the engine decides once,
  from the architecture alone and before any compute (:func:`plan_chain`), which covariance
  each layer's output keeps: the **full** spatial covariance while a pooling layer still
  follows (in any branch), the **spatial diagonal** after the last one, or **none** for flat
  inputs (:data:`Carry`). Full layouts hold :math:`|S|` times more numbers per pair.
- **Validation** of the inputs (:func:`check_images`) and of the chain.
- **Blocking** over input pairs under ``max_memory`` (:func:`kernel_in_blocks`).
- **Dispatch** of runs of ``[Relu, Dense]`` on flat CPU inputs to the fused backend
  (:mod:`ntklab.kernels._fused`), and of runs of ``[Conv, Relu]`` on CPU images to the fused
  convolution backend (:mod:`ntklab.kernels._fused_conv`), on CUDA images to the compiled
  step (:mod:`ntklab.kernels._compiled_conv`).

Each layer family (dense, activations, convolution, pooling, normalization, dropout, graphs)
lives in its own module with its kernel rule and its finite module side by side; they import
this module, never the reverse.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import torch
from torch import Tensor, nn

from .._checks import (
    check_channels_first,
    check_inputs,
    check_nonnegative,
    check_positive_int,
    check_precision,
)
from ..errors import NtklabTypeError, NtklabValueError
from ..memory import format_bytes, resolve_max_memory
from . import _compiled_conv, _fused, _fused_conv
from .covariance import (
    apply_mask,
    next_diagonal,
    self_variances,
    to_diagonal,
    with_variances,
)
from .graph_batch import GraphBatch, GraphNetwork, check_finite
from .kernel import Kernel, KernelState
from .network_wrappers import AntisymmetricPair, ScaledOutput

__all__ = [
    "FLAT_MATRICES",
    "FUSED_FLAT_MATRICES",
    "Architecture",
    "Carry",
    "Features",
    "Flow",
    "GraphLayer",
    "InputShape",
    "Layer",
    "Plan",
    "check_input_shape",
    "flat_kernel_bytes",
    "flat_matrices",
    "plan_chain",
    "run_chain",
    "serial",
]

Parameterization = Literal["ntk", "standard"]
Role = Literal["input", "hidden", "output", "only"]

Carry = Literal["full", "diagonal", "none"]
"""Which covariance of the inputs the recursion carries: between every pair of positions
(``"full"``), between equal positions only (``"diagonal"``), or none (flat inputs)."""


@dataclass(frozen=True)
class Flow:
    """The state carried along one edge of the graph.

    ``pair`` holds the kernels between ``x1`` and ``x2`` (its ``var1``/``var2`` refreshed from
    the per-input states after each layer); ``diag1`` and ``diag2`` the kernels of each input
    with itself; ``diag2 = None`` means ``x2`` is ``x1``.
    """

    pair: KernelState
    diag1: KernelState
    diag2: KernelState | None
    images: tuple[Tensor, Tensor | None] | None = None
    """When set, ``pair.cov`` is a placeholder of the right shape (zero strides, no memory):
    the pair kernel is the input kernel of these images, which the fused convolution kernel
    computes itself and :meth:`materialized` writes out."""

    def materialized(self) -> Flow:
        """The flow with the input pair kernel written out (a no-op unless ``images``)."""
        if self.images is None:
            return self
        x1, x2 = self.images
        pair = image_pair_state(x1, x2, full=self.pair.full_spatial)
        return Flow(pair, self.diag1, self.diag2).refreshed()

    def refreshed(self) -> Flow:
        """The flow with ``pair``'s variances taken from the per-input states."""
        diag2 = self.diag1 if self.diag2 is None else self.diag2
        return dataclasses.replace(self, pair=with_variances(self.pair, self.diag1, diag2))

    def to_diagonal(self) -> Flow:
        """Drop the off-diagonal positions of a full spatial layout (a no-op otherwise)."""
        if not self.pair.full_spatial:
            return self
        diag2 = None if self.diag2 is None else to_diagonal(self.diag2)
        return Flow(to_diagonal(self.pair), to_diagonal(self.diag1), diag2).refreshed()


Flows: TypeAlias = "Flow | tuple[Flow, ...]"
"""One edge, or the parallel edges between a ``FanOut`` and a ``FanIn``."""


@dataclass(frozen=True)
class Plan:
    """Which covariance a chain keeps, decided before any compute.

    ``keep_full[i]``: whether the output of layer ``i`` is still carried in the full spatial
    layout (a later layer, in this chain or after it, pools). ``branches[i]``: the plans of
    layer ``i``'s branches (empty for a layer without branches).
    """

    keep_full: tuple[bool, ...]
    branches: tuple[tuple[Plan, ...], ...]
    needs_full_input: bool = False

    @property
    def carry(self) -> Carry:
        """The layout an image input is carried in (flat inputs carry ``"none"``)."""
        return "full" if self.needs_full_input else "diagonal"


def plan_chain(layers: Sequence[Layer], keep_full_at_end: bool) -> Plan:
    """The carry plan of a chain whose output must stay full when ``keep_full_at_end``."""
    keep: list[bool] = []
    branches: list[tuple[Plan, ...]] = []
    full_after = keep_full_at_end
    for layer in reversed(layers):
        keep.append(full_after)
        branches.append(layer.branch_plans(full_after))
        full_after = full_after or layer.mixes_space
    return Plan(tuple(reversed(keep)), tuple(reversed(branches)), full_after)


def run_chain(
    layers: Sequence[Layer],
    plan: Plan,
    flow: Flows,
    *,
    inplace: bool,
    fusable: bool,
    compiled: bool = False,
) -> Flows:
    """Propagate ``flow`` through ``layers`` as ``plan`` says.

    ``fusable``: runs of ``[Relu, Dense]`` on flat states may take the fused CPU kernel
    (which works in place), and runs of ``[Conv, Relu]`` on image states the fused
    convolution kernel (with the ``GlobalAvgPool`` or ``Flatten`` that follows).
    ``compiled``: runs of ``[Conv, Relu]`` take the compiled step first
    (:mod:`ntklab.kernels._compiled_conv`, on CUDA inputs). Neither for masked inputs
    (:attr:`KernelState.mask`), whose masks the fused kernels do not carry.
    """
    i = 0
    layers = tuple(layers)
    # the fused kernels do not carry masks: masked inputs run eager (in branches too)
    fusable = fusable and flow_masks(flow) is None
    compiled = compiled and flow_masks(flow) is None
    while i < len(layers):
        if (fusable or compiled) and isinstance(flow, Flow) and flow.pair.spatial_ndim > 0:
            length = _fused_conv.run_length(layers, i)
            if length:
                top = layers[i + length] if i + length < len(layers) else None
                run = layers[i : i + length]
                conv_done = _compiled_conv.propagate_run(run, flow, top) if compiled else None
                if conv_done is None and fusable:
                    conv_done = _fused_conv.propagate_run(run, flow, top)
                if conv_done is not None:
                    flow, used_top = conv_done
                    i += length + int(used_top)
                    continue
        if fusable and isinstance(flow, Flow) and flow.pair.spatial_ndim == 0:
            length = _fused.run_length(layers, i)
            if length:
                run = layers[i : i + length]
                done = _fused.propagate_run(run, flow.pair, flow.diag1, flow.diag2)
                if done is not None:
                    pair, d1, d2 = done
                    flow = Flow(pair, d1, None if flow.diag2 is None else d2)
                    i += length
                    continue
        if isinstance(flow, Flow):
            flow = flow.materialized()
        masks = flow_masks(flow)
        flow = layers[i].step(flow, plan.branches[i], inplace=inplace)
        if masks is not None:
            flow = remasked(layers[i], masks, flow)
        if not plan.keep_full[i]:
            flow = (
                flow.to_diagonal()
                if isinstance(flow, Flow)
                else tuple(f.to_diagonal() for f in flow)
            )
        i += 1
    return flow


def flow_masks(flow: Flows) -> tuple[Tensor, Tensor] | None:
    """The masks ``(n1, *S)``, ``(n2, *S)`` of the inputs of ``flow`` (the first branch's
    when several: branches share their inputs), ``None`` for unmasked inputs."""
    one = flow if isinstance(flow, Flow) else flow[0]
    return one.pair.mask


def remasked(layer: Layer, masks: tuple[Tensor, Tensor], flow: Flows) -> Flows:
    """``flow`` after ``layer`` with the masks of its inputs carried through the layer
    (:meth:`Layer.mask_after` when it changes the spatial shape, none once the
    representation is flat) and the covariances involving a masked position zeroed
    (neural-tangents' ``remask``, arXiv:1912.02803)."""
    if not isinstance(flow, Flow):
        return tuple(remasked(layer, masks, f) for f in flow)  # type: ignore[misc]
    pair = flow.pair
    if pair.spatial_ndim == 0:
        d2 = None if flow.diag2 is None else dataclasses.replace(flow.diag2, mask=None)
        diag1 = dataclasses.replace(flow.diag1, mask=None)
        return Flow(dataclasses.replace(pair, mask=None), diag1, d2)
    m1, m2 = masks
    shape = pair.spatial_shape
    carried = pair.mask  # set by the branches of a graph layer, which remask themselves
    composite = bool(layer.sublayers)
    if composite and carried is not None and tuple(carried[0].shape[1:]) == shape:
        m1, m2 = carried  # the mask the branches carried to the output (FanIn: the first's)
    elif (layer.moves_positions and not composite) or (
        tuple(m1.shape[1:]) != shape and (carried is None or tuple(carried[0].shape[1:]) != shape)
    ):
        same = m2 is m1
        m1 = layer.mask_after(m1)
        m2 = m1 if same else layer.mask_after(m2)
    elif tuple(m1.shape[1:]) != shape and carried is not None:
        m1, m2 = carried
    d1 = self_variances(apply_mask(flow.diag1, m1, m1))
    d2 = None if flow.diag2 is None else self_variances(apply_mask(flow.diag2, m2, m2))
    return Flow(apply_mask(pair, m1, m2), d1, d2).refreshed()


def with_masks(flow: Flow, mask1: Tensor, mask2: Tensor | None) -> Flow:
    """The input ``flow`` carrying the masks of ``x1`` and ``x2`` (``None``: ``x2`` is
    ``x1``), boolean ``(n, *S)``, ``True`` at padded positions."""
    m2 = mask1 if mask2 is None else mask2
    d1 = apply_mask(flow.diag1, mask1, mask1)
    d2 = None if flow.diag2 is None else apply_mask(flow.diag2, m2, m2)
    return Flow(apply_mask(flow.pair, mask1, m2), d1, d2)


def single_flow(layer: Layer, flow: Flows) -> Flow:
    """``flow`` when it is one edge; an error naming ``layer`` when it is several branches."""
    if isinstance(flow, Flow):
        return flow
    raise NtklabValueError(
        f"{type(layer).__name__}: expected one input, got {len(flow)} branches; combine them "
        "first with FanInSum(), FanInConcat() or FanInProd()"
    )


class Layer(ABC):
    """A layer of an architecture: it maps kernels to kernels and builds its finite module."""

    @abstractmethod
    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        """Apply the layer's kernel recursion to ``state``.

        ``state.var1``/``state.var2`` hold the variances of the layer's *input*. With
        ``inplace=True`` the layer may overwrite ``state.cov`` and ``state.ntk``.
        """

    @abstractmethod
    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        """The finite-width counterpart of the layer (``in_features=None``: inferred lazily)."""

    @property
    def has_parameters(self) -> bool:
        """Whether the layer has weights (it changes the width of the representation)."""
        return any(layer.has_parameters for layer in self.sublayers)

    @property
    def sublayers(self) -> tuple[Layer, ...]:
        """The layers inside this one (the branches of a graph layer), in order."""
        return ()

    def _requires_grad(self) -> bool:
        return any(layer._requires_grad() for layer in self.sublayers)

    @property
    def spatial_ndim(self) -> int | None:
        """Spatial dimensions of the inputs the layer acts on (``Conv``, ``AvgPool``), else
        ``None``."""
        dims = {layer.spatial_ndim for layer in self.sublayers} - {None}
        return dims.pop() if len(dims) == 1 else None

    @property
    def spatial_layer(self) -> bool:
        """Whether the layer reads image batches ``(n, C, *S)`` (convolutions, pooling,
        ``Flatten``): an architecture with one accepts images."""
        return self.spatial_ndim is not None or any(lay.spatial_layer for lay in self.sublayers)

    @property
    def mixes_space(self) -> bool:
        """Whether the layer reads covariances between different positions (pooling)."""
        return any(layer.mixes_space for layer in self.sublayers)

    @property
    def reads_preactivations(self) -> bool:
        """Whether the layer needs a layer with parameters before it (activations)."""
        return False

    def spatial_shape_after(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """An upper bound, in positions, of the spatial shape the layer holds for inputs of
        spatial shape ``shape`` (it sizes the memory blocks): ``shape`` itself unless the layer
        enlarges images (``ImageResize``, ``ConvTranspose``); for a graph layer the largest
        shape inside its branches."""
        return peak_spatial_shape(self.sublayers, shape)

    @property
    def drops_spatial_axes(self) -> bool:
        """Whether the layer removes spatial axes (``Index`` with an int entry): the layers
        after it act on fewer spatial dimensions than the input has."""
        return any(layer.drops_spatial_axes for layer in self.sublayers)

    @property
    def reads_adjacency(self) -> bool:
        """Whether the layer reads the adjacency of graph inputs (``Aggregate``): the
        architecture then takes :class:`~ntklab.kernels.GraphBatch` inputs."""
        return any(layer.reads_adjacency for layer in self.sublayers)

    @property
    def moves_positions(self) -> bool:
        """Whether the layer maps positions to other positions otherwise than by windows
        (``Index``, ``ImageResize``, ``DotGeneral``, ``ConvTranspose``, ``Aggregate``):
        the masks of padded inputs follow it only where :meth:`mask_after` says how
        (``Index``: the mask is indexed alike; ``Aggregate``: a masked node stays masked)."""
        return any(layer.moves_positions for layer in self.sublayers)

    def mask_after(self, mask: Tensor) -> Tensor:
        """The mask ``(n, *S')`` of the layer's output for inputs masked as ``mask``
        ``(n, *S)`` (``True``: masked), when the layer changes the spatial shape or moves
        positions; window layers (``Conv``, ``AvgPool``), ``Index`` and ``Aggregate``
        override it, the others refuse masked inputs."""
        raise NtklabValueError(
            f"{type(self).__name__}: masked inputs (mask_constant) are not supported by a "
            "layer that moves positions or changes the spatial shape "
            f"{tuple(mask.shape[1:])}, other than Conv, AvgPool, SumPool, GlobalAvgPool, "
            "Flatten, Index and Aggregate; got one"
        )

    @property
    def passes_through(self) -> bool:
        """Whether the layer only averages or reshapes (pooling, ``Flatten``, ``Dropout``,
        ``Identity``): a normalization's gain may reach a ``Dense`` through it."""
        return False

    @property
    def fused_kind(self) -> Literal["relu", "dense", "conv"] | None:
        """``"relu"``, ``"dense"`` or ``"conv"`` (NTK parameterization, plain-number scales)
        when the fused CPU kernels can run the layer (:mod:`ntklab.kernels._fused`,
        :mod:`ntklab.kernels._fused_conv`)."""
        return None

    @property
    def takes_role(self) -> bool:
        """Whether :meth:`module` takes ``parameterization`` and ``role`` (``Dense``)."""
        return False

    def check_in_chain(
        self, layers: Sequence[Layer], index: int, where: str, in_branch: bool
    ) -> None:
        """Raise when the layer cannot sit at ``layers[index]`` (``where`` names the chain in
        errors; ``in_branch``: the chain is a branch of a graph layer)."""
        for i, layer in enumerate(self.sublayers):
            layer.check_in_chain(self.sublayers, i, f"{where}[{index}].branch", True)

    def branch_plans(self, keep_full: bool) -> tuple[Plan, ...]:
        """The carry plans of the layer's branches, given whether its output stays full."""
        return ()

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        """One step of the walk: propagate the pair state and the per-input states, then
        refresh the variances. Graph layers override it."""
        one = single_flow(self, flow)
        pair = self.propagate(one.pair, inplace=inplace)
        diag1 = next_diagonal(self, one.diag1)
        diag2 = None if one.diag2 is None else next_diagonal(self, one.diag2)
        return Flow(pair, diag1, diag2).refreshed()

    # A single layer is also a (one-layer) architecture.
    def kernel(self, x1: Tensor, x2: Tensor | None = None) -> Kernel:
        """The kernel of the one-layer architecture ``serial(self)``."""
        return serial(self).kernel(x1, x2)


def as_float(v: float | Tensor) -> float:
    """A plain float of a number or a one-element tensor."""
    return float(v.detach()) if isinstance(v, Tensor) else float(v)


def check_width(width: object, meaning: str, keywords: str) -> None:
    """Raise unless ``width`` is None or a positive int; the message says what the first
    positional argument means and how to pass the scales (``keywords``) instead."""
    if width is None:
        return
    if isinstance(width, bool) or not isinstance(width, int):
        raise NtklabTypeError(
            f"width: expected a positive int or None ({meaning}), got {width!r}; pass the "
            f"scales as keywords, e.g. {keywords}"
        )
    check_positive_int("width", width)


def check_weight_scales(
    w_std: float | Tensor, b_std: float | Tensor | None, parameterization: object
) -> None:
    """Raise unless ``w_std >= 0``, ``b_std`` is None or ``>= 0`` and ``parameterization`` is
    ``"ntk"`` or ``"standard"`` (the arguments of a Dense or Conv layer)."""
    check_nonnegative("w_std", w_std)
    if b_std is not None:
        check_nonnegative("b_std", b_std)
    if parameterization not in ("ntk", "standard"):
        raise NtklabValueError(
            f"parameterization: expected 'ntk' or 'standard', got {parameterization!r}"
        )


def plain_ntk_scales(
    w_std: float | Tensor, b_std: float | Tensor | None, parameterization: str
) -> bool:
    """Whether a Dense or Conv layer has the NTK parameterization and plain-number scales
    (what the fused CPU kernels take)."""
    scales = (w_std, 0.0 if b_std is None else b_std)
    plain = all(isinstance(v, int | float) and not isinstance(v, bool) for v in scales)
    return parameterization == "ntk" and plain


def affine(x: Tensor, scale: float | Tensor, shift: float | Tensor, inplace: bool) -> Tensor:
    """``scale * x + shift``, in place when allowed and the coefficients are plain numbers."""
    if inplace and not isinstance(scale, Tensor) and not isinstance(shift, Tensor):
        x = x.mul_(scale)
        return x.add_(shift) if shift != 0.0 else x
    return x * scale + shift


# --------------------------------------------------------------------------------------------
# input states


def flat_input_flow(a: Tensor, b: Tensor | None, *, fusable: bool) -> Flow:
    """The input kernels :math:`\\langle x, x' \\rangle / d` of flat batches ``(n, d)``."""
    d = a.shape[1]
    var1 = a.square().mean(dim=1)  # shape: (n1,)
    var2 = var1 if b is None else b.square().mean(dim=1)  # shape: (n2,)
    scale = d**-0.5  # fold the 1/d of the input kernel into the (n, d) inputs
    a_scaled = a * scale
    b_scaled = a_scaled if b is None else b * scale
    n1, n2 = a.shape[0], b_scaled.shape[0]
    out = _fused.empty_matrix(n1, n2, a) if fusable else None
    cov = torch.matmul(a_scaled, b_scaled.T, out=out)  # shape: (n1, n2)
    pair = KernelState(cov, None, var1[:, None], var2[None, :], d)
    diag1 = KernelState(var1, None, var1, var1, d)
    diag2 = None if b is None else KernelState(var2, None, var2, var2, d)
    return Flow(pair, diag1, diag2)


def _image_specs(s: int, full: bool) -> tuple[str, str]:
    """einsum specs of the pair and of the per-input kernels of ``s``-D images."""
    letters = "hwdxyz"[:s]
    up = letters.upper()
    if full:
        pair = "".join(a + b for a, b in zip(letters, up, strict=True))
        return f"ic{letters},jc{up}->ij{pair}", f"ic{letters},ic{up}->i{pair}"
    return f"ic{letters},jc{letters}->ij{letters}", f"ic{letters},ic{letters}->i{letters}"


def image_pair_state(
    x1: Tensor,
    x2: Tensor | None,
    *,
    full: bool,
    adjacency: tuple[Tensor, Tensor] | None = None,
) -> KernelState:
    """The input kernel between the images of ``x1`` and ``x2`` (variances not yet set);
    ``adjacency``: the pair's graphs (:class:`GraphBatch`), carried in the state."""
    c, s = x1.shape[1], x1.ndim - 2
    spec, _ = _image_specs(s, full)
    other = x1 if x2 is None else x2
    grad = torch.is_grad_enabled() and (x1.requires_grad or other.requires_grad)
    cov = torch.einsum(spec, x1, other)
    cov = cov / c if grad else cov.div_(c)
    return KernelState(
        cov, None, cov, cov, c, spatial_ndim=s, full_spatial=full, adjacency=adjacency
    )


def image_input_flow(
    x1: Tensor,
    x2: Tensor | None,
    *,
    full: bool,
    lazy: bool = False,
    adjacency: tuple[Tensor, Tensor | None] | None = None,
) -> Flow:
    """Input kernels of image batches ``(n, C, *S)``, averaged over channels, in the full or
    the diagonal spatial layout. ``lazy``: leave the pair kernel to the fused convolution
    kernel (:attr:`Flow.images`); ``adjacency``: the graphs of inputs ``x1`` and ``x2``
    (:class:`GraphBatch`), carried in the states (never lazy)."""
    c, s = x1.shape[1], x1.ndim - 2
    _, self_spec = _image_specs(s, full)
    a1, a2 = (None, None) if adjacency is None else adjacency

    def self_state(x: Tensor, a: Tensor | None) -> KernelState:
        k = torch.einsum(self_spec, x, x) / c
        graph = None if a is None else (a, a)
        return self_variances(
            KernelState(k, None, k, k, c, spatial_ndim=s, full_spatial=full, adjacency=graph)
        )

    diag1 = self_state(x1, a1)
    diag2 = None if x2 is None else self_state(x2, a2)
    if a1 is not None:
        pair_graph = (a1, a1 if a2 is None else a2)
        pair = image_pair_state(x1, x2, full=full, adjacency=pair_graph)
        return Flow(pair, diag1, diag2).refreshed()
    if not lazy:
        return Flow(image_pair_state(x1, x2, full=full), diag1, diag2).refreshed()
    n2 = x1.shape[0] if x2 is None else x2.shape[0]
    layout = [d for size in x1.shape[2:] for d in ((size, size) if full else (size,))]
    cov = x1.new_zeros(()).expand(x1.shape[0], n2, *layout)
    state = KernelState(cov, None, cov, cov, c, spatial_ndim=s, full_spatial=full)
    return Flow(state, diag1, diag2, images=(x1, x2)).refreshed()


# --------------------------------------------------------------------------------------------
# validation and blocking


def architecture_spatial_ndim(layers: Sequence[Layer]) -> int | None:
    """The number of spatial dimensions the architecture's Conv/AvgPool layers expect of
    its inputs (those after a layer that drops spatial axes check theirs when they run)."""
    dims: set[int] = set()

    def collect(items: Sequence[Layer]) -> None:
        for layer in items:
            if layer.sublayers:
                collect(layer.sublayers)
            elif layer.spatial_ndim is not None:
                dims.add(layer.spatial_ndim)
            if layer.drops_spatial_axes:
                return

    collect(layers)
    if len(dims) > 1:
        raise NtklabValueError(
            "layers: expected Conv/AvgPool layers of one spatial dimensionality, got "
            f"{sorted(dims)}"
        )
    return dims.pop() if dims else None


def check_images(
    x1: object,
    x2: object | None,
    spatial_ndim: int | None,
    input_shape: InputShape | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Validate image batches ``(n, C, *S)`` (or flat ``(n, d)`` when ``spatial_ndim`` is
    None) for an architecture with spatial layers: float32 or float64, finite, and not
    channels-last. With the channel count of ``input_shape`` known, the layout is decided by
    it (:func:`check_input_shape`); otherwise by :func:`~ntklab._checks.check_channels_first`
    (a last axis of 1 or 3 entries after axes of more than 4 is refused)."""

    def one(name: str, x: object) -> Tensor:
        if not isinstance(x, Tensor):
            raise NtklabTypeError(
                f"{name}: expected a torch.Tensor of shape (n, C, ...), got {type(x).__name__}"
            )
        ndims = (2, 3, 4) if spatial_ndim is None else (spatial_ndim + 2,)
        if x.ndim not in ndims:
            want = {3: "(n, C, L)", 4: "(n, C, H, W)", 5: "(n, C, D, H, W)"}.get(
                ndims[-1], "(n, d)"
            )
            if spatial_ndim is None:
                want = "(n, d), (n, C, L) or (n, C, H, W)"
            raise NtklabValueError(
                f"{name}: expected a {'/'.join(map(str, ndims))}-D tensor of shape {want}, got "
                f"{x.ndim}-D shape {tuple(x.shape)}"
            )
        check_precision(name, x)
        if input_shape is not None:
            check_input_shape(name, x, input_shape)
        elif x.ndim > 2:
            check_channels_first(name, x)
        if min(x.shape[1:]) == 0:
            raise NtklabValueError(
                f"{name}: expected non-empty channels and positions, got shape {tuple(x.shape)}"
            )
        if not bool(torch.isfinite(x).all()):
            bad = int((~torch.isfinite(x)).sum())
            raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
        return x

    a = one("x1", x1)
    if x2 is None:
        return a, None
    b = one("x2", x2)
    if a.shape[1:] != b.shape[1:]:
        raise NtklabValueError(
            f"x2: expected the channels and spatial shape of x1, {tuple(a.shape[1:])}, got "
            f"{tuple(b.shape[1:])}"
        )
    if a.dtype != b.dtype:
        raise NtklabTypeError(f"x2: expected the dtype of x1 ({a.dtype}), got {b.dtype}")
    if a.device != b.device:
        raise NtklabValueError(f"x2: expected the device of x1 ({a.device}), got {b.device}")
    return a, b


InputShape: TypeAlias = "tuple[int | None, ...]"
"""The shape of one input, without the batch axis: ``(d,)`` for flat inputs, ``(C, *S)`` for
images (``(C, L)``, ``(C, H, W)``); ``None`` marks a size that is not known (the spatial
size of a model read by :func:`~ntklab.kernels.from_torch`)."""


def as_input_shape(input_shape: object) -> InputShape:
    """``input_shape`` validated: a non-empty sequence of positive ints or ``None`` entries
    (the batch axis excluded), whose first entry (features or channels) is known."""
    if isinstance(input_shape, int | Tensor | str) or not isinstance(input_shape, Sequence):
        raise NtklabTypeError(
            "input_shape: expected a tuple of the sizes of one input without the batch axis, "
            f"e.g. (d,) or (C, H, W), got {input_shape!r}"
        )
    shape = tuple(input_shape)
    if not shape or len(shape) > 4:
        raise NtklabValueError(
            "input_shape: expected 1 to 4 sizes (d,), (C, L), (C, H, W) or (C, D, H, W) "
            f"without the batch axis, got {shape!r}"
        )
    for i, size in enumerate(shape):
        if size is None and i > 0:
            continue
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            what = "a positive int" if i == 0 else "a positive int or None (unknown)"
            raise NtklabValueError(
                f"input_shape[{i}]: expected {what}, got {size!r} (input_shape={shape!r})"
            )
    return shape


def _shape_text(input_shape: InputShape) -> str:
    return "(n, " + ", ".join("?" if s is None else str(s) for s in input_shape) + ")"


def check_input_shape(name: str, x: Tensor, input_shape: InputShape) -> None:
    """Raise unless the batch ``x`` ``(n, *input_shape)`` has the architecture's input shape.

    The channel count ``C = input_shape[0]`` decides the layout of images: a batch with ``C``
    entries on its last axis but not on its first is channels-last (neural-tangents' and
    TensorFlow's ``(n, H, W, C)``) and refused with the permutation to apply; a batch with
    ``C`` entries on both is ambiguous unless ``input_shape`` gives the spatial sizes, and is
    refused naming ``input_shape``.
    """
    want = _shape_text(input_shape)
    if x.ndim != len(input_shape) + 1:
        raise NtklabValueError(
            f"{name}: expected a {len(input_shape) + 1}-D batch of shape {want} (the "
            f"architecture's input_shape {input_shape!r}), got {x.ndim}-D shape "
            f"{tuple(x.shape)}"
        )
    got = tuple(x.shape[1:])

    def fits(shape: tuple[int, ...]) -> bool:
        return all(w is None or w == g for w, g in zip(input_shape, shape, strict=True))

    if x.ndim == 2:
        if not fits(got):
            raise NtklabValueError(
                f"{name}: expected {input_shape[0]} features (the architecture's input_shape "
                f"{input_shape!r}, shape {want}), got {got[0]} features, shape {tuple(x.shape)}"
            )
        return
    c = input_shape[0]
    last = (got[-1], *got[:-1])  # the sizes of a channels-last batch, read channels-first
    order = "(0, 3, 1, 2)" if x.ndim == 4 else "(0, 2, 1)" if x.ndim == 3 else "(0, 4, 1, 2, 3)"
    channels_last = (
        f"{name}: expected a channels-first batch {want} (the architecture's input_shape "
        f"{input_shape!r}), got shape {tuple(x.shape)}, which is channels-last ({c} channels "
        f"on its last axis); permute it with {name}.permute{order}"
    )
    if fits(got) and fits(last) and got != last:
        raise NtklabValueError(
            f"{name}: shape {tuple(x.shape)} reads both as channels-first and as channels-last "
            f"for {c} channels (the architecture's input_shape {input_shape!r} leaves the "
            "spatial size open); give the spatial size in input_shape, e.g. "
            f"arch.with_input_shape({got!r}) for channels-first, or pass a channels-first "
            f"batch whose last axis is not {c}"
        )
    if fits(got):
        return
    if fits(last):
        raise NtklabValueError(channels_last)
    if got[0] != c:
        raise NtklabValueError(
            f"{name}: expected {c} channels (the architecture's input_shape {input_shape!r}, "
            f"shape {want}), got {got[0]} channels, shape {tuple(x.shape)}"
        )
    raise NtklabValueError(
        f"{name}: expected the spatial size of the architecture's input_shape {input_shape!r} "
        f"(shape {want}), got shape {tuple(x.shape)}"
    )


def check_mask_constant(mask_constant: object) -> None:
    """Raise unless ``mask_constant`` is a real number (NaN and infinities included)."""
    if isinstance(mask_constant, bool) or not isinstance(mask_constant, int | float):
        raise NtklabTypeError(f"mask_constant: expected a float (or None), got {mask_constant!r}")


def masked_input(name: str, x: object, mask_constant: float) -> tuple[Tensor, Tensor]:
    """``x`` ``(n, C, *S)`` with its entries equal to ``mask_constant`` (NaN: its NaN
    entries) set to zero, and the mask of its positions ``(n, *S)``: ``True`` where every
    channel equals ``mask_constant`` (neural-tangents' ``mask_constant``)."""
    if not isinstance(x, Tensor):
        raise NtklabTypeError(
            f"{name}: expected a torch.Tensor of shape (n, C, ...), got {type(x).__name__}"
        )
    if x.ndim < 3:
        raise NtklabValueError(
            f"{name}: expected sequences (n, C, L) or images (n, C, H, W) with "
            f"mask_constant, got shape {tuple(x.shape)}"
        )
    entries = torch.isnan(x) if math.isnan(mask_constant) else x == mask_constant
    positions = entries.all(dim=1)
    empty = (positions.flatten(1).all(dim=1)).nonzero().flatten()
    if len(empty):
        raise NtklabValueError(
            f"{name}: expected at least one unmasked position in every input, got "
            f"{len(empty)} input(s) entirely equal to mask_constant={mask_constant} (rows "
            f"{empty[:5].tolist()})"
        )
    return torch.where(entries, x.new_zeros(()), x), positions


def peak_spatial_shape(layers: Sequence[Layer], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The spatial shape with the most positions along a chain whose input has spatial shape
    ``shape`` (:meth:`Layer.spatial_shape_after` of each layer)."""
    peak = shape
    for layer in layers:
        shape = layer.spatial_shape_after(shape)
        if math.prod(shape) > math.prod(peak):
            peak = shape
    return peak


def block_bytes(
    x: Tensor, rows: int, cols: int, full: bool, spatial: tuple[int, ...] | None = None
) -> int:
    """Estimated peak bytes of one block of ``rows x cols`` input pairs: the NNGP and NTK
    and two temporaries per pair, plus the per-input states, at the spatial shape
    ``spatial`` (default: the input's; padded by 2 per dimension)."""
    sizes = tuple(x.shape[2:]) if spatial is None else spatial
    positions = math.prod(s + 2 for s in sizes)
    per_pair = positions**2 if full else positions
    item = x.element_size()
    return item * per_pair * (4 * rows * cols + 4 * (rows + cols))


def kernel_in_blocks(
    compute: Callable[[Tensor, Tensor | None], Kernel],
    a: Tensor,
    b: Tensor | None,
    *,
    full: bool,
    max_memory: int | None,
    spatial: tuple[int, ...] | None = None,
) -> Kernel:
    """Compute ``compute(a, b)`` in blocks of input pairs that fit ``max_memory`` bytes
    (``spatial``: the largest spatial shape the recursion holds, default the input's)."""
    budget = resolve_max_memory(max_memory, a.device)
    n1 = a.shape[0]
    n2 = n1 if b is None else b.shape[0]
    if block_bytes(a, n1, n2, full, spatial) <= budget:
        return compute(a, b)
    if block_bytes(a, 1, 1, full, spatial) > budget:
        layout = "full spatial covariance" if full else "spatial diagonal"
        raise NtklabValueError(
            f"max_memory: expected at least {block_bytes(a, 1, 1, full, spatial)} bytes (one "
            "pair of "
            f"inputs of shape {tuple(a.shape[1:])}, {layout}), got {budget}; reduce the "
            "image size, use Flatten instead of pooling, or pass a larger max_memory"
        )
    size = 1
    while size < max(n1, n2) and block_bytes(a, 2 * size, 2 * size, full, spatial) <= budget:
        size *= 2
    blocks1 = list(range(0, n1, size))
    blocks2 = list(range(0, n2, size))
    rows_nngp: list[Tensor] = []
    rows_ntk: list[Tensor] = []
    var1_parts: list[Tensor] = []
    var2_parts: list[Tensor | None] = [None] * len(blocks2)
    cache: dict[tuple[int, int], Kernel] = {}
    for i, s1 in enumerate(blocks1):
        xa = a[s1 : s1 + size]
        row_nngp, row_ntk = [], []
        for j, s2 in enumerate(blocks2):
            if b is None and j < i:
                k_t = cache[(j, i)]
                row_nngp.append(k_t.nngp.T)
                row_ntk.append(k_t.ntk.T)
                continue
            k = (
                compute(xa, None)
                if b is None and i == j
                else compute(xa, (a if b is None else b)[s2 : s2 + size])
            )
            if b is None:
                cache[(i, j)] = k
            row_nngp.append(k.nngp)
            row_ntk.append(k.ntk)
            if var2_parts[j] is None:
                var2_parts[j] = k.var2
            if (j == 0 or (b is None and i == j)) and len(var1_parts) == i:
                var1_parts.append(k.var1)
        rows_nngp.append(torch.cat(row_nngp, dim=1))
        rows_ntk.append(torch.cat(row_ntk, dim=1))
    var1 = torch.cat(var1_parts)
    var2 = var1 if b is None else torch.cat([v for v in var2_parts if v is not None])
    return Kernel(nngp=torch.cat(rows_nngp), ntk=torch.cat(rows_ntk), var1=var1, var2=var2)


#: Matrices of shape (n1, n2) that the eager flat recursion holds at its peak (NNGP, NTK,
#: the correlation and two scratch buffers of the activation's dual).
FLAT_MATRICES = 5
#: Matrices of shape (n1, n2) that the fused CPU path (:mod:`ntklab.kernels._fused`) holds
#: at its peak: the NNGP and the NTK, overwritten in place layer after layer (measured:
#: 2.00 matrices of peak RSS for n = 2,000-3,000, float32 and float64, x2 given or not,
#: ``tests/kernels/test_flat_memory.py``).
FUSED_FLAT_MATRICES = 2
_ALWAYS_FITS = 2**26


def flat_matrices(layers: Sequence[Layer], a: Tensor, b: Tensor | None) -> int:
    """How many (n1, n2) matrices the flat recursion of ``layers`` holds at its peak:
    :data:`FUSED_FLAT_MATRICES` when every layer runs in the fused CPU kernel (CPU float
    inputs without autograd, a chain of ``[Relu, Dense]`` runs, the library loaded), else
    :data:`FLAT_MATRICES`."""
    grad = torch.is_grad_enabled() and (
        a.requires_grad
        or (b is not None and b.requires_grad)
        or any(layer._requires_grad() for layer in layers)
    )
    if grad or not _fused.supports(a) or not _fused.available():
        return FLAT_MATRICES
    fused = all(flag for _, flag in _fused.split_runs(layers))
    return FUSED_FLAT_MATRICES if fused else FLAT_MATRICES


def flat_kernel_bytes(layers: Sequence[Layer], a: Tensor, b: Tensor | None) -> int:
    """Estimated peak bytes of the flat kernel of ``layers`` on ``a`` ``(n1, d)`` and ``b``
    ``(n2, d)`` (``None``: ``a``): :func:`flat_matrices` matrices of (n1, n2), the scaled
    inputs and the per-input variances."""
    n1, d = a.shape
    n2 = n1 if b is None else b.shape[0]
    item = a.element_size()
    return item * (flat_matrices(layers, a, b) * n1 * n2 + 2 * (n1 + n2) * d + 4 * (n1 + n2))


def _check_flat_fits(
    layers: Sequence[Layer], a: Tensor, b: Tensor | None, max_memory: int | None
) -> None:
    """Refuse a flat kernel whose (n1, n2) matrices cannot fit ``max_memory``."""
    n1, n2 = a.shape[0], (a if b is None else b).shape[0]
    if max_memory is None and FLAT_MATRICES * n1 * n2 * a.element_size() <= _ALWAYS_FITS:
        return  # small kernels skip reading the memory policy on every call
    needed = flat_kernel_bytes(layers, a, b)
    budget = resolve_max_memory(max_memory, a.device)
    if needed > budget:
        source = "the memory policy's default" if max_memory is None else "max_memory"
        count = flat_matrices(layers, a, b)
        raise NtklabValueError(
            f"max_memory: the kernel of n1 = {n1} by n2 = {n2} inputs needs about "
            f"{format_bytes(needed)} ({count} matrices of {n1} x {n2}), more than "
            f"{source} of {format_bytes(budget)}; use ntklab.solvers.kernel_operator for a "
            "matrix-free kernel, or compute it in blocks of rows"
        )


def check_chain(layers: Sequence[Layer], where: str) -> None:
    """Validate a top-level chain: types, activations after a layer with parameters, and each
    layer's own placement rule (:meth:`Layer.check_in_chain`)."""
    for i, layer in enumerate(layers):
        if not isinstance(layer, Layer):
            raise NtklabTypeError(
                f"{where}[{i}]: expected an ntklab layer (Dense, Relu, ...), got "
                f"{type(layer).__name__}"
            )
    first_dense = next((i for i, layer in enumerate(layers) if layer.has_parameters), None)
    for i, layer in enumerate(layers):
        if layer.reads_preactivations and (first_dense is None or i < first_dense):
            raise NtklabValueError(
                f"{where}[{i}]: expected a Dense layer before the activation "
                f"{type(layer).__name__} (an activation reads the pre-activations of a Dense "
                "layer), got it before any Dense"
            )
    for i, layer in enumerate(layers):
        layer.check_in_chain(layers, i, where, False)
    check_branching(layers, where)


def check_branching(layers: Sequence[Layer], where: str, *, in_branch: bool = False) -> None:
    """Refuse a ``FanInSum``/``FanInConcat``/``FanInProd`` that no ``FanOut`` (or
    ``parallel``) opens, a layer other than ``parallel`` or a fan-in on open branches, and a
    branch of ``parallel`` or ``Residual`` that ends with open branches.

    A chain starts with one input; ``FanOut(n)`` makes ``n`` branches, ``parallel`` maps
    them, and a fan-in joins them back into one. A fan-in on one input would act as the
    identity (neural-tangents' ``stax`` fails there at apply time). A chain may start with
    ``parallel`` (the tail of a block whose ``FanOut`` comes before it in a larger
    :func:`serial`) and may end with open branches (the head of one); a branch inside a graph
    layer must end with one output.
    """
    from .graphs import FanInConcat, FanInProd, FanInSum, FanOut, Parallel, Residual

    fan_ins = (FanInSum, FanInConcat, FanInProd)
    open_branches: int | None = None  # None: one input; n: n branches
    for i, layer in enumerate(layers):
        name = type(layer).__name__
        if isinstance(layer, Parallel):
            for j, branch in enumerate(layer.branches):
                check_branching(branch, f"{where}[{i}].branches[{j}]", in_branch=True)
            n = len(layer.branches)
            if open_branches is None and i > 0:
                raise NtklabValueError(
                    f"{where}[{i}]: expected the {n} branches of a FanOut({n}) before "
                    f"parallel, got one input (the output of {type(layers[i - 1]).__name__} "
                    f"at {where}[{i - 1}]); put FanOut({n}) before it"
                )
            if open_branches is not None and open_branches != n:
                raise NtklabValueError(
                    f"{where}[{i}]: expected parallel with as many branches as the FanOut "
                    f"before it ({open_branches}), got {n}"
                )
            open_branches = n
        elif isinstance(layer, FanOut):
            if open_branches is not None:
                raise NtklabValueError(
                    f"{where}[{i}]: expected one input to FanOut, got {open_branches} "
                    "branches; combine them first with FanInSum(), FanInConcat() or "
                    "FanInProd()"
                )
            open_branches = layer.n
        elif isinstance(layer, fan_ins):
            if open_branches is None:
                raise NtklabValueError(
                    f"{where}[{i}]: expected {name} to join the branches of a FanOut(n) "
                    "(then parallel(...)), got one input with no FanOut before it; a fan-in "
                    f"of one input would act as the identity: remove the {name} or put "
                    "FanOut(n) and parallel(...) before it"
                )
            open_branches = None
        else:
            if isinstance(layer, Residual):
                check_branching(layer.layers, f"{where}[{i}].branch", in_branch=True)
            if open_branches is not None:
                raise NtklabValueError(
                    f"{where}[{i}]: expected one input to {name}, got {open_branches} "
                    "branches (from FanOut); map them with parallel(...) or combine them "
                    "with FanInSum(), FanInConcat() or FanInProd() first"
                )
    if in_branch and open_branches is not None:
        raise NtklabValueError(
            f"{where}: expected the branch to end with one output, got {open_branches} "
            "branches; close its FanOut with FanInSum(), FanInConcat() or FanInProd()"
        )


# --------------------------------------------------------------------------------------------
# architectures


@dataclass(frozen=True)
class Architecture:
    """A chain of layers (possibly with branches) with its infinite-width kernels and
    finite-width networks.

    Build it with :func:`serial`. ``arch.kernel(x1, x2)`` returns the NNGP and NTK;
    ``arch.to_torch(width)`` a ``torch.nn.Module`` with the same parameterization, whose
    empirical NTK and output covariance converge to ``arch.kernel`` as the width grows.

    ``input_shape`` (optional, as neural-tangents' ``init_fn(key, input_shape)``) is the
    shape of **one** input, without the batch axis: ``(d,)`` for flat inputs, ``(C, L)`` or
    ``(C, H, W)`` for images, with ``None`` for a size that is not known (``from_torch``
    knows a model's channels, not its image size: ``(3, None, None)``). When set,
    ``kernel`` refuses inputs of another feature or channel count, and the channel count
    decides whether an image batch is channels-first or channels-last
    (:func:`check_input_shape`); ``to_torch`` takes it as ``in_features``. Set it with
    ``serial(..., input_shape=...)`` or :meth:`with_input_shape`; it is checked for tensor
    inputs, not for :class:`~ntklab.kernels.GraphBatch` ones.
    """

    layers: tuple[Layer, ...]
    input_shape: InputShape | None = None

    def __post_init__(self) -> None:
        if not self.layers:
            raise NtklabValueError("layers: expected at least one layer, got none")
        check_chain(self.layers, "layers")
        if self.input_shape is None:
            return
        shape = as_input_shape(self.input_shape)
        object.__setattr__(self, "input_shape", shape)
        if not any(layer.spatial_layer for layer in self.layers) and len(shape) != 1:
            raise NtklabValueError(
                "input_shape: expected (d,) for an architecture without spatial layers (it "
                f"takes flat inputs (n, d)), got {shape!r}"
            )
        s = architecture_spatial_ndim(self.layers)
        if s is not None and len(shape) != s + 1:
            raise NtklabValueError(
                f"input_shape: expected {s + 1} sizes (C and {s} spatial) for an architecture "
                f"of {s}-D spatial layers, got {shape!r}"
            )

    def with_input_shape(self, input_shape: Sequence[int | None] | None) -> Architecture:
        """The same architecture with ``input_shape`` (``None``: unknown); see the class.

        Examples
        --------
        >>> import ntklab as nl
        >>> nl.serial(nl.Dense(), nl.Relu(), nl.Dense()).with_input_shape((5,)).input_shape
        (5,)
        """
        return dataclasses.replace(self, input_shape=input_shape)  # type: ignore[arg-type]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def _requires_grad(self) -> bool:
        return any(layer._requires_grad() for layer in self.layers)

    def plan(self) -> Plan:
        """Which covariance each layer's output keeps, for image inputs (decided from the
        layers alone: full while a pooling layer follows, the diagonal after)."""
        return plan_chain(self.layers, False)

    def kernel(
        self,
        x1: Tensor | GraphBatch,
        x2: Tensor | GraphBatch | None = None,
        *,
        max_memory: int | None = None,
        mask_constant: float | None = None,
    ) -> Kernel:
        """NNGP and NTK between the rows of ``x1`` and ``x2``.

        Parameters
        ----------
        x1 : Tensor of shape (n1, d), or (n1, C, *S) for an architecture with spatial layers
            Images are torch's channels-first batches: ``(n, C, L)`` or ``(n, C, H, W)``.
            Graphs (for an architecture with ``Aggregate``) are
            :class:`~ntklab.kernels.GraphBatch` of features ``(n1, C, N)`` and adjacency
            ``(n1, N, N)``.
        x2 : Tensor of the same shape but for n2, optional
            Defaults to ``x1``.
        max_memory : int, optional
            Bytes available to one block of input pairs, for image inputs (default ``None``:
            the policy of :mod:`ntklab.memory`, half of the memory this process may still use
            on the inputs' device). The full spatial covariance needed by pooling holds
            :math:`n_1 n_2 |S|^2` numbers per kernel; pairs are computed in blocks that fit,
            and an error says when not even one pair fits. For flat inputs the recursion
            holds :func:`flat_matrices` matrices of shape (n1, n2) at its peak (2 on the
            fused CPU path of ReLU networks, :data:`FLAT_MATRICES` otherwise); a kernel
            that needs more than ``max_memory`` is refused before anything is computed (use
            :func:`ntklab.solvers.kernel_operator` for a matrix-free kernel at that size).
        mask_constant : float, optional
            Padding value of variable-length sequences or images (neural-tangents'
            ``mask_constant``; ``float("nan")`` masks NaN entries): entries equal to it count
            as zero, and a position whose channels all equal it is masked: the kernels
            ignore it (covariances with it are zero, ``GlobalAvgPool``,
            ``GlobalSelfAttention`` and ``LayerNorm(axes="all")`` average over the unmasked
            positions only). ``Conv`` and
            ``AvgPool`` mask an output position when the input position at the centre of its
            window is masked. Needs an architecture with spatial layers and, in each input,
            at least one unmasked position. Graphs (:class:`~ntklab.kernels.GraphBatch`) are
            masked by their features: a masked node is neither read by ``Aggregate`` nor
            counted by pooling, whatever its adjacency rows and columns hold.

        Returns
        -------
        Kernel
            ``nngp`` and ``ntk`` of shape (n1, n2), on ``x1``'s dtype and device;
            differentiable in the inputs and in tensor-valued ``w_std``/``b_std``.

        Examples
        --------
        >>> import torch, ntklab as nl
        >>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(),
        ...                  nl.Dense(w_std=1.5, b_std=0.1))
        >>> k = arch.kernel(torch.randn(4, 3, dtype=torch.float64))
        >>> k.ntk.shape
        torch.Size([4, 4])
        """
        plan = self.plan()
        if isinstance(x1, GraphBatch) or isinstance(x2, GraphBatch):
            return self._graph_kernel(x1, x2, plan, max_memory, mask_constant)
        if mask_constant is not None:
            return self._masked_kernel(x1, x2, plan, max_memory, mask_constant)
        if not any(layer.spatial_layer for layer in self.layers):
            a, b = check_inputs(x1, x2)
            if self.input_shape is not None:
                check_input_shape("x1", a, self.input_shape)
                if b is not None:
                    check_input_shape("x2", b, self.input_shape)
            _check_flat_fits(self.layers, a, b, max_memory)
            return self._kernel(a, b, plan)
        if max_memory is not None:
            resolve_max_memory(max_memory)  # the type and sign
        a, b = check_images(x1, x2, architecture_spatial_ndim(self.layers), self.input_shape)
        full = a.ndim > 2 and plan.carry == "full"

        def compute(xa: Tensor, xb: Tensor | None) -> Kernel:
            return self._kernel(xa, xb, plan)

        spatial = peak_spatial_shape(self.layers, tuple(a.shape[2:]))
        return kernel_in_blocks(compute, a, b, full=full, max_memory=max_memory, spatial=spatial)

    def _masked_kernel(
        self,
        x1: object,
        x2: object | None,
        plan: Plan,
        max_memory: int | None,
        mask_constant: float,
    ) -> Kernel:
        """The kernel of padded inputs whose entries equal to ``mask_constant`` are masked,
        in blocks of input pairs (the position masks travel as one more channel)."""
        check_mask_constant(mask_constant)
        spatial_ndim = architecture_spatial_ndim(self.layers)
        if not any(layer.spatial_layer for layer in self.layers):
            raise NtklabValueError(
                "mask_constant: expected an architecture with spatial layers (Conv, pooling, "
                "Flatten, GlobalSelfAttention, Aggregate) on sequences (n, C, L), images "
                "(n, C, H, W) or graphs, got a flat architecture"
            )
        if max_memory is not None:
            resolve_max_memory(max_memory)  # the type and sign
        (a, m1), (b, m2) = masked_input("x1", x1, mask_constant), (None, None)
        if x2 is not None:
            b, m2 = masked_input("x2", x2, mask_constant)
        a, b = check_images(a, b, spatial_ndim, self.input_shape)
        if a.ndim < 3:
            raise NtklabValueError(
                f"x1: expected sequences (n, C, L) or images (n, C, H, W) with mask_constant, "
                f"got shape {tuple(a.shape)}"
            )
        full = plan.carry == "full"
        channels = a.shape[1]
        a = torch.cat([a, m1.unsqueeze(1).to(a.dtype)], dim=1)
        b = None if b is None or m2 is None else torch.cat([b, m2.unsqueeze(1).to(b.dtype)], 1)

        def compute(xa: Tensor, xb: Tensor | None) -> Kernel:
            fb = None if xb is None else xb[:, :channels]
            mb = None if xb is None else xb[:, channels] > 0.5
            return self._kernel(xa[:, :channels], fb, plan, mask=(xa[:, channels] > 0.5, mb))

        spatial = peak_spatial_shape(self.layers, tuple(a.shape[2:]))
        return kernel_in_blocks(compute, a, b, full=full, max_memory=max_memory, spatial=spatial)

    def _graph_kernel(
        self,
        x1: object,
        x2: object | None,
        plan: Plan,
        max_memory: int | None,
        mask_constant: float | None = None,
    ) -> Kernel:
        """The kernel of graph inputs (:class:`GraphBatch`), in blocks of graph pairs; with
        ``mask_constant``, nodes whose features all equal it are masked."""
        for name, x in (("x1", x1), ("x2", x2)):
            if x is not None and not isinstance(x, GraphBatch):
                raise NtklabTypeError(
                    f"{name}: expected a GraphBatch like the other input, got {type(x).__name__}"
                )
        g1: GraphBatch = x1  # type: ignore[assignment]
        g2: GraphBatch | None = x2  # type: ignore[assignment]
        if max_memory is not None:
            resolve_max_memory(max_memory)  # the type and sign
        if g2 is not None and (
            g2.shape[1:] != g1.shape[1:]
            or g2.features.dtype != g1.features.dtype
            or g2.features.device != g1.features.device
        ):
            raise NtklabValueError(
                f"x2: expected graphs of x1's channels and nodes {tuple(g1.shape[1:])}, dtype "
                f"{g1.features.dtype} and device {g1.features.device}, got "
                f"{tuple(g2.shape[1:])}, {g2.features.dtype} and {g2.features.device}"
            )
        channels = g1.shape[1]
        full = plan.carry == "full"
        f1, f2 = g1.features, None if g2 is None else g2.features
        m1 = m2 = None
        if mask_constant is not None:
            check_mask_constant(mask_constant)
            f1, m1 = masked_input("x1.features", f1, mask_constant)
            if f2 is not None:
                f2, m2 = masked_input("x2.features", f2, mask_constant)
        check_finite("x1.features", f1)
        if f2 is not None:
            check_finite("x2.features", f2)

        def joined(f: Tensor, m: Tensor | None, adjacency: Tensor) -> Tensor:
            # The blocks slice features, node masks and adjacency together: one
            # (n, C [+ 1] + N, N) tensor per batch.
            parts = [f] if m is None else [f, m.unsqueeze(1).to(f.dtype)]
            return torch.cat([*parts, adjacency], dim=1)

        a = joined(f1, m1, g1.adjacency)
        b = None if g2 is None or f2 is None else joined(f2, m2, g2.adjacency)
        lead = channels + int(mask_constant is not None)

        def compute(xa: Tensor, xb: Tensor | None) -> Kernel:
            pa, pb = xa[:, lead:], None if xb is None else xb[:, lead:]
            fb = None if xb is None else xb[:, :channels]
            mask = None
            if mask_constant is not None:
                mask = (xa[:, channels] > 0.5, None if xb is None else xb[:, channels] > 0.5)
            return self._kernel(xa[:, :channels], fb, plan, adjacency=(pa, pb), mask=mask)

        spatial = peak_spatial_shape(self.layers, tuple(g1.shape[2:]))
        return kernel_in_blocks(compute, a, b, full=full, max_memory=max_memory, spatial=spatial)

    def _kernel(
        self,
        a: Tensor,
        b: Tensor | None,
        plan: Plan,
        adjacency: tuple[Tensor, Tensor | None] | None = None,
        mask: tuple[Tensor, Tensor | None] | None = None,
    ) -> Kernel:
        """The kernel of validated inputs (flat ``(n, d)`` or images ``(n, C, *S)``; graphs
        with their ``adjacency``; padded inputs with their position ``mask``)."""
        inplace = not (
            torch.is_grad_enabled()
            and (a.requires_grad or (b is not None and b.requires_grad) or self._requires_grad())
        )
        fusable = inplace and _fused.supports(a)
        compiled = False
        if a.ndim > 2:
            # graphs carry their adjacency, which the fused convolution kernels do not
            # (and masked inputs their masks)
            fusable = fusable and adjacency is None and mask is None
            compiled = inplace and adjacency is None and mask is None and _compiled_conv.enabled(a)
            lazy = fusable and not compiled and _fused_conv.run_length(self.layers, 0) > 0
            full = plan.carry == "full"
            start = image_input_flow(a, b, full=full, lazy=lazy, adjacency=adjacency)
            flow: Flows = start if mask is None else with_masks(start, *mask)
        else:
            flow = flat_input_flow(a, b, fusable=fusable)
        flow = run_chain(
            self.layers, plan, flow, inplace=inplace, fusable=fusable, compiled=compiled
        )
        if not isinstance(flow, Flow):
            raise NtklabValueError(
                f"layers: expected an architecture with one output, got {len(flow)} branches "
                "at its end; combine them with FanInSum(), FanInConcat() or FanInProd()"
            )
        state, diag1 = flow.pair, flow.diag1
        diag2 = diag1 if flow.diag2 is None else flow.diag2
        if state.spatial_ndim:
            raise NtklabValueError(
                "layers: expected an architecture whose output is flat (ending with Flatten() "
                "or GlobalAvgPool() before the readout), got one that ends with "
                f"{state.spatial_ndim} spatial dimension(s)"
            )
        nngp = state.cov
        ntk = state.ntk if state.ntk is not None else torch.zeros_like(nngp)
        if b is None:
            # The recursion is elementwise, so the diagonal of K(x1, x1) is the diagonal pass,
            # computed at correlation exactly 1 (rounding near c = 1 costs sqrt(eps) in angle).
            diag_ntk = diag1.ntk if diag1.ntk is not None else torch.zeros_like(diag1.cov)
            if inplace:
                nngp.diagonal().copy_(diag1.cov)
                ntk.diagonal().copy_(diag_ntk)
            else:
                nngp = torch.diagonal_scatter(nngp, diag1.cov)
                ntk = torch.diagonal_scatter(ntk, diag_ntk)
        return Kernel(nngp=nngp, ntk=ntk, var1=diag1.cov, var2=diag2.cov)

    def features(
        self,
        x: Tensor,
        num_features: int,
        *,
        seed: int = 0,
        get: Literal["ntk", "nngp"] = "ntk",
        block_size: int | None = None,
        max_memory: int | None = None,
    ) -> Tensor:
        """Random features :math:`\\Phi` of shape (n, num_features) with
        :math:`\\Phi(x_1)\\Phi(x_2)^T \\approx` ``kernel(x1, x2).ntk`` (or ``.nngp``).

        The NTK random features and sketches of Zandieh et al. (2021, arXiv:2106.07880),
        computed in blocks of rows; the same ``seed`` gives the same feature map, so inputs
        can be featurized separately. See :func:`ntklab.kernels.features.kernel_features`
        for the parameters, the construction and what is supported.

        Examples
        --------
        >>> import torch, ntklab as nl
        >>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense())
        >>> arch.features(torch.randn(4, 3, dtype=torch.float64), 64, seed=0).shape
        torch.Size([4, 64])
        """
        from .features import kernel_features

        return kernel_features(
            self.layers,
            x,
            num_features,
            seed=seed,
            get=get,
            block_size=block_size,
            max_memory=max_memory,
        )

    def to_torch(
        self,
        width: int = 1024,
        out_features: int = 1,
        *,
        in_features: int | None = None,
        parameterization: Literal["ntk", "standard", "mup"] | None = None,
        alpha: float = 1.0,
        zero_output: bool = False,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        mask_constant: float | None = None,
    ) -> nn.Module:
        """A finite network with this architecture.

        Parameters
        ----------
        width : int
            Output width of every hidden Dense layer that has no ``width`` of its own.
        out_features : int
            Output width of the last Dense layer (when it has no ``width`` of its own).
        in_features : int, optional
            Input dimension d (channels C for a first Conv layer). When omitted, the
            architecture's ``input_shape[0]`` where it gives it (flat inputs, or a first
            layer that is a Conv); otherwise the first Dense layer is lazy: its weights are
            created (from ``generator``) on the first forward call, as ``nn.LazyLinear`` does.
        parameterization : {"ntk", "standard", "mup"}, optional
            Overrides the parameterization of every Dense layer (default: each keeps its own).
            ``"mup"`` is the maximal-update parameterization of Yang & Hu (arXiv:2011.14522),
            which treats the first Dense layer as the input layer, the last as the readout and
            the others as hidden (a single Dense layer is parameterized as in NTK); see
            :class:`ntklab.nets.DenseLayer`.
        alpha : float
            Lazy-training scale (Chizat, Oyallon & Bach, arXiv:1812.07956): when not 1 the
            network is wrapped in :class:`ntklab.nets.ScaledOutput`, whose output is
            ``alpha`` times the network's; :func:`ntklab.nets.train` then divides the loss by
            ``alpha**2``.
        zero_output : bool
            Build :class:`ntklab.nets.AntisymmetricPair` of two networks of hidden width
            ``width // 2`` (``width`` must be even), the second a copy of the first:
            :math:`f = (a - b)/\\sqrt 2` is exactly 0 at initialization and its empirical NTK
            at initialization equals that of one half. Dense layers with a ``width`` of their
            own keep it in each half.
        generator : torch.Generator, optional
            Source of randomness for the initialization (reproducible networks).
        dtype, device
            Of the parameters.
        mask_constant : float, optional
            Padding value of the inputs, as in :meth:`kernel`: the network is a
            :class:`~ntklab.kernels.masking.MaskedNetwork`, which zeroes the masked
            positions after every module, averages ``GlobalAvgPool`` over the unmasked
            positions and gives padded keys no attention weight; each branch (``FanOut``,
            ``parallel``, ``Residual``) carries its own mask. Graph networks take
            :class:`~ntklab.kernels.GraphBatch` inputs whose masked nodes ``Aggregate``
            does not read.

        Returns
        -------
        torch.nn.Module
            An ``nn.Sequential`` (possibly wrapped as above); graph layers become modules
            that pass tuples of branch outputs (:mod:`ntklab.kernels.graphs`). Its parameters
            are initialized as the parameterization prescribes (unit Gaussian in NTK
            parameterization, the scale applied in ``forward``).

        Notes
        -----
        ``arch.kernel`` is the infinite-width limit of the NTK- and standard-parameterized
        networks (the standard one with learning rates scaled by the width). The muP network
        has no kernel limit: its output vanishes at initialization and its features move by
        O(1) in training (feature learning), so ``arch.kernel`` does not describe it.
        """
        check_positive_int("width", width)
        check_positive_int("out_features", out_features)
        if in_features is not None:
            check_positive_int("in_features", in_features)
        known = self._known_in_features()
        if known is not None and in_features is not None and in_features != known:
            raise NtklabValueError(
                f"in_features: expected the architecture's input_shape[0] ({known}, "
                f"input_shape={self.input_shape!r}), got {in_features}"
            )
        in_features = known if in_features is None else in_features
        if parameterization is not None and parameterization not in ("ntk", "standard", "mup"):
            raise NtklabValueError(
                "parameterization: expected None, 'ntk', 'standard' or 'mup', got "
                f"{parameterization!r}"
            )
        if not isinstance(zero_output, bool):
            raise NtklabTypeError(f"zero_output: expected a bool, got {zero_output!r}")
        if zero_output and width % 2:
            raise NtklabValueError(
                "width: expected an even width with zero_output=True (two halves of width "
                f"width // 2), got {width}"
            )
        if parameterization is not None:
            other = [type(layer).__name__ for layer in _leaves(self.layers) if _fixed(layer)]
            if other:
                raise NtklabValueError(
                    f"parameterization: expected an architecture whose layers with weights are "
                    f"all Dense (the override applies to Dense only), got {', '.join(other)}"
                )
        options = ModuleOptions(
            hidden=width // 2 if zero_output else width,
            generator=generator,
            dtype=dtype,
            device=device,
            parameterization=parameterization,
        )
        if mask_constant is not None:
            from .masking import check_maskable

            check_mask_constant(mask_constant)
            check_maskable(self.layers)
        modules = build_modules(self.layers, in_features, out_features, options, top=True)
        graph = any(layer.reads_adjacency for layer in self.layers)
        if modules and hasattr(modules[0], "check_layout") and not graph:
            first: Any = modules[0]
            first.check_layout = True  # refuse channels-last inputs, as kernel() does
        net: nn.Module = nn.Sequential(*modules)
        if mask_constant is not None:
            from .masking import MaskedNetwork

            net = MaskedNetwork(net, self.layers, mask_constant)  # type: ignore[arg-type]
        if graph:
            net = GraphNetwork(net)  # takes GraphBatch(features, adjacency)
        if zero_output:
            net = AntisymmetricPair(net)
        if alpha != 1.0:
            net = ScaledOutput(net, alpha)
        return net

    def _known_in_features(self) -> int | None:
        """The width entering the first module, from ``input_shape``: ``d`` for flat
        inputs, ``C`` when the first layer is a convolution (otherwise a Flatten or pooling
        may come first, and the first Dense stays lazy)."""
        if self.input_shape is None:
            return None
        first = self.layers[0]
        if len(self.input_shape) == 1 or (first.has_parameters and first.spatial_ndim):
            return self.input_shape[0]
        return None


def _leaves(layers: Sequence[Layer]) -> list[Layer]:
    out: list[Layer] = []
    for layer in layers:
        out.extend(_leaves(layer.sublayers) if layer.sublayers else [layer])
    return out


def _fixed(layer: Layer) -> bool:
    """A layer with weights whose parameterization ``to_torch`` cannot override."""
    return layer.has_parameters and not layer.takes_role


@dataclass(frozen=True)
class ModuleOptions:
    """What every finite module of one ``to_torch`` call shares."""

    hidden: int
    generator: torch.Generator | None
    dtype: torch.dtype
    device: torch.device | str | None
    parameterization: Literal["ntk", "standard", "mup"] | None = None


Features: TypeAlias = "int | tuple[int | None, ...] | None"
"""The width entering a finite module: one int, one per branch, or unknown (lazy)."""


def build_modules(
    layers: Sequence[Layer],
    in_features: Features,
    out_features: int | None,
    options: ModuleOptions,
    *,
    top: bool = False,
) -> list[nn.Module]:
    """The finite modules of a chain: the last layer with parameters gets ``out_features``
    outputs, the others ``options.hidden`` (unless they set their own width). ``top``: the
    chain is the whole network (Dense layers then get their muP role)."""
    params = [i for i, layer in enumerate(layers) if layer.has_parameters]
    last = params[-1] if params else -1
    dense = [i for i, layer in enumerate(layers) if layer.takes_role]
    modules: list[nn.Module] = []
    features = in_features
    for i, layer in enumerate(layers):
        out = out_features if i == last else options.hidden
        if isinstance(layer, GraphLayer):
            mod = layer.build(features, out, options)
        elif layer.takes_role:
            role: Role = "hidden"
            if top:
                role = (
                    "only"
                    if len(dense) == 1
                    else "input"
                    if i == dense[0]
                    else "output"
                    if i == dense[-1]
                    else "hidden"
                )
            mod = layer.module(  # type: ignore[call-arg]
                features,  # type: ignore[arg-type]
                out,
                generator=options.generator,
                dtype=options.dtype,
                device=options.device,
                parameterization=options.parameterization,
                role=role,
            )
        else:
            mod = layer.module(
                features,  # type: ignore[arg-type]
                out,
                generator=options.generator,
                dtype=options.dtype,
                device=options.device,
            )
        modules.append(mod)
        features = next_features(layer, mod, features)
    return modules


def next_features(layer: Layer, module: nn.Module, features: Features) -> Features:
    """The width after ``module``: its ``out_features`` when it changes the width (a layer
    with parameters, a graph layer, a fan-in); ``None`` (the next Dense is lazy) when such a
    module does not say; ``features`` itself otherwise."""
    found = getattr(module, "out_features", None)
    if layer.has_parameters or found is not None or isinstance(features, tuple):
        return found if isinstance(found, int | tuple) else None
    return features


class GraphLayer(Layer):
    """A layer whose finite module is built from its branches (graph layers); it acts on
    whole flows (:meth:`Layer.step`), never on one state."""

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        raise NtklabValueError(  # pragma: no cover - run_chain calls step()
            f"{type(self).__name__}: expected to be run by Architecture.kernel (it acts on "
            "branches), got a bare propagate call"
        )

    @abstractmethod
    def build(
        self, in_features: Features, out_features: int | None, options: ModuleOptions
    ) -> nn.Module:
        """The finite module, its branches built by :func:`build_modules`."""

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        hidden = out_features if out_features is not None else (in_features or 1)
        return self.build(
            in_features, out_features, ModuleOptions(hidden, generator, dtype, device)
        )


def serial(
    *layers: Layer | Architecture | Sequence[Layer],
    input_shape: Sequence[int | None] | None = None,
) -> Architecture:
    """Compose layers (and architectures) in sequence.

    Parameters
    ----------
    *layers : Layer, Architecture or sequence of layers
    input_shape : tuple of int or None, optional
        The shape of one input without the batch axis, ``(d,)`` or ``(C, *S)`` (``None``
        for an unknown size): see :class:`Architecture`. Default: that of the first item
        when it is an architecture with one (the input of the others is a hidden layer's).

    Examples
    --------
    >>> import ntklab as nl
    >>> block = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu())
    >>> arch = nl.serial(block, block, nl.Dense(w_std=1.5, b_std=0.1))
    >>> len(arch)
    5
    """

    def flatten(items: Sequence[object]) -> list[Layer]:
        flat: list[Layer] = []
        for item in items:
            if isinstance(item, Architecture):
                flat.extend(item.layers)
            elif isinstance(item, list | tuple):
                flat.extend(flatten(item))
            else:
                flat.append(item)  # type: ignore[arg-type]  # checked by Architecture
        return flat

    if input_shape is None and layers and isinstance(layers[0], Architecture):
        input_shape = layers[0].input_shape
    return Architecture(tuple(flatten(layers)), input_shape)  # type: ignore[arg-type]
