"""Random features of the NNGP and the NTK: kernels linear in the number of inputs.

:func:`kernel_features` maps a batch to a matrix :math:`\\Phi` of ``num_features`` columns whose
inner products approximate the architecture's kernel, :math:`\\Phi(X_1)\\Phi(X_2)^T \\approx
K(X_1, X_2)` (NNGP) or :math:`\\Theta(X_1, X_2)` (NTK), so that regression costs
:math:`O(n F)` per pass instead of the :math:`O(n^2)` of the exact kernel. It is the method
``Architecture.features``.

The construction follows Zandieh, Han, Avron, Shoham, Kapralov & Mahoney (2021, "Scaling Neural
Tangent Kernels via Sketching and Random Features", arXiv:2106.07880). Two feature maps are
carried along the layers: :math:`g` for the NNGP, :math:`K = \\langle g, g' \\rangle`, and
:math:`t` for the NTK, :math:`\\Theta = \\langle t, t' \\rangle`; images carry one feature
vector per position, :math:`K_{hh'} = \\langle g_h, g'_{h'} \\rangle`.

- Input: :math:`g = x / \\sqrt{d}` (images: :math:`x / \\sqrt{C}`), :math:`t = 0`.
- ``Dense`` and ``Conv`` (NTK parameterization) are exact:
  :math:`g' = [\\sigma_w g, \\sigma_b]` and :math:`t' = [g', \\sigma_w t]`; a convolution
  stacks the :math:`|f|` positions of its filter scaled by :math:`|f|^{-1/2}`, as the CNTK
  recursion averages them (Arora et al. 2019, arXiv:1904.11955).
- An activation :math:`\\phi` draws the arc-cosine random features of Cho & Saul (2009) of
  orders 1 and 0 (for ReLU; any :math:`\\phi` in general): with :math:`W, W_0` unit
  Gaussian and :math:`R` a random projection (below),

  .. math::

      g'' = \\phi(W g') / \\sqrt{m}, \\qquad
      t'' = (R\\, t') \\odot \\phi'(W_0 g') / \\sqrt{m_t}.

  :math:`E_W \\langle \\phi(Wg'_x), \\phi(Wg'_{x'}) \\rangle / m = E[\\phi(u)\\phi(v)]` over the
  Gaussian pair with covariance :math:`K'` (the dual kernel), and :math:`t''` is a sketch of
  the tensor product :math:`t' \\otimes \\phi'(W_0 g')` whose inner products are unbiased,
  :math:`E \\langle t''_x, t''_{x'} \\rangle = \\Theta' E[\\phi'(u)\\phi'(v)]`, the NTK
  recursion. As in Zandieh et al.'s TensorSRHT (after Ahle et al. 2020), the rows of
  :math:`R` are sampled rows of a randomized Hadamard transform, :math:`(H(s \\odot t'))_{p_i}`,
  :math:`O(D \\log D)` per input (:class:`SRHT`); the other factor of the tensor product
  needs no transform, its coordinates (order-0 features) being independent already, so each
  coordinate pairs one Hadamard row with one order-0 feature. On images :math:`R` is a bank
  of Gaussian filters instead (a Gaussian tensor sketch, unbiased in the same way), because
  the projection of a convolution's stacked patch by Gaussian rows is itself a convolution:
  the CNTK features cost :math:`O(|S|\\,|f|\\,m^2)` per image, linear in the number of
  pixels (the paper's observation), and never form the :math:`|S|^2` covariance.
- ``AvgPool`` and ``GlobalAvgPool`` average the per-position features (exact);
  ``Flatten`` stacks them scaled by :math:`|S|^{-1/2}` and reduces them with a CountSketch
  (Charikar, Chen & Farach-Colton 2002) to the layer's width, an unbiased linear sketch.

Inner products are unbiased for one hidden layer (one activation); deeper, each activation
reads features that are themselves random, and the bias is :math:`O(1/m)` against a standard
deviation :math:`O(m^{-1/2})` (tested). Activations other than ReLU use the same Monte Carlo
features with :math:`\\phi` and its autograd derivative; the polynomial sketches of Han, Avron,
Shoham, Kim & Shin (2022, "Fast Neural Kernel Embeddings for General Activations") are not
implemented.

The random draws come from a generator seeded with ``seed`` before any input is read, so two
calls with the same seed use the same features: ``x1`` and ``x2`` can be featurized
separately, and in blocks of rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

from .._checks import check_matrix, check_positive_int
from ..errors import NtklabTypeError, NtklabValueError
from ..memory import resolve_max_memory
from .activations import Activation, Relu
from .conv import CONVOLUTIONS, Conv
from .covariance import Padding, output_size, pad_images, pads_for
from .dense import Dense
from .engine import Layer, architecture_spatial_ndim, check_images
from .pooling import AvgPool, AvgPoolLayer, Flatten, GlobalAvgPool
from .quadrature import derivative

__all__ = ["kernel_features"]

Get = Literal["ntk", "nngp"]
Draw = Callable[[tuple[int, ...]], Tensor]
"""Standard Gaussian draws of a shape, in float64 on the CPU (the same on every device)."""
Place = Callable[[Tensor], Tensor]
"""Moves a tensor to the inputs' device (and floating tensors to their dtype)."""

SUPPORTED = (
    "Dense and Conv (NTK parameterization), activations (Relu, Erf, Gelu, Elementwise, ...), "
    "AvgPool, GlobalAvgPool and Flatten"
)


@dataclass(frozen=True)
class Maps:
    """The feature maps after a step: ``g`` (NNGP) and ``t`` (NTK, None when not carried),
    of shape (n, channels, *S)."""

    g: Tensor
    t: Tensor | None


@dataclass(frozen=True)
class Linear:
    """A Dense or Conv layer (NTK parameterization) as the features see it: ``filt = ()``
    for Dense; the identity source of an activation that follows no linear layer has
    ``w = 1``, no bias and filters of one position."""

    w: float | Tensor
    b: float | Tensor | None
    filt: tuple[int, ...]
    strides: tuple[int, ...]
    padding: Padding

    @property
    def size(self) -> int:
        return math.prod(self.filt)

    def apply(self, x: Tensor, weight: Tensor) -> Tensor:
        """:math:`\\sigma_w |f|^{-1/2} (W * x)` for a weight of shape (m, C, *filt)."""
        if not self.filt:
            return (x @ weight.T) * self.w  # shape: (n, m)
        x = pad_images(x, self.filt, self.strides, self.padding)
        conv = CONVOLUTIONS[len(self.filt)]
        return conv(x, weight, stride=self.strides) * (self.w / math.sqrt(self.size))

    def bias(self, b_weight: Tensor, ndim: int) -> Tensor | float:
        """:math:`\\sigma_b` times a bias weight of shape (m,), broadcast over positions."""
        if self.b is None:
            return 0.0
        return self.b * b_weight.reshape((1, -1) + (1,) * (ndim - 2))

    def patches(self, x: Tensor) -> Tensor:
        """The exact output features: the filter's positions stacked, (n, C |f|, *S')."""
        if not self.filt:
            return x * self.w
        x = pad_images(x, self.filt, self.strides, self.padding)
        if len(self.filt) == 1:
            p = x.unfold(2, self.filt[0], self.strides[0])  # shape: (n, C, L', f)
            p = p.permute(0, 1, 3, 2).reshape(x.shape[0], -1, p.shape[2])
        else:
            out = [(x.shape[2 + k] - self.filt[k]) // self.strides[k] + 1 for k in range(2)]
            p = nn.functional.unfold(x, self.filt, stride=self.strides)
            p = p.reshape(x.shape[0], -1, *out)
        return p * (self.w / math.sqrt(self.size))

    def out_shape(self, spatial: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(
            output_size(s, f, st, *pads_for(self.padding, s, f, st, k), what="features")
            for k, (s, f, st) in enumerate(zip(spatial, self.filt, self.strides, strict=True))
        )


def identity_source(spatial_ndim: int) -> Linear:
    """The source of an activation that reads features directly (after pooling)."""
    ones = (1,) * spatial_ndim
    return Linear(1.0, None, ones if spatial_ndim else (), ones, "VALID")


def _with_bias(x: Tensor, b: float | Tensor | None) -> Tensor:
    """``x`` with one constant channel :math:`\\sigma_b` appended (none when no bias)."""
    if b is None:
        return x
    col = torch.ones_like(x[:, :1]) * b
    return torch.cat([x, col], dim=1)


@dataclass(frozen=True)
class Materialize:
    """The exact features of a Dense or Conv: :math:`g' = [\\sigma_w g, \\sigma_b]`,
    :math:`t' = [g', \\sigma_w t]`."""

    lin: Linear

    def apply(self, m: Maps, ntk: bool) -> Maps:
        g = _with_bias(self.lin.patches(m.g), self.lin.b)
        if not ntk:
            return Maps(g, None)
        t = g if m.t is None else torch.cat([g, self.lin.patches(m.t)], dim=1)
        return Maps(g, t)


def walsh_hadamard(x: Tensor) -> Tensor:
    """:math:`x H` for the unnormalized Walsh-Hadamard matrix :math:`H` (entries :math:`\\pm 1`)
    of order P, a power of 2, in :math:`O(P \\log P)` per row. x: (n, P)."""
    n, size = x.shape
    h = 1
    while h < size:
        y = x.reshape(n, size // (2 * h), 2, h)
        x = torch.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), dim=2)
        x = x.reshape(n, size)
        h *= 2
    return x


@dataclass(frozen=True)
class SRHT:
    """Rows of a subsampled randomized Hadamard transform: :math:`r_i \\cdot a = (H (s \\odot
    a))_{p_i}` with random signs :math:`s` (length P, a power of 2 at least the input
    dimension) and uniform rows :math:`p_i`. Each row has entries :math:`\\pm 1`, so
    :math:`E[(r_i \\cdot a)(r_i \\cdot a')] = \\langle a, a' \\rangle`; one factor of the
    TensorSRHT of Ahle et al. (2020) and Zandieh et al. (2021)."""

    signs: Tensor
    rows: Tensor

    def __call__(self, a: Tensor) -> Tensor:
        """Shape (n, m) from a of shape (n, d <= P)."""
        d = a.shape[1]
        x = a.new_zeros(a.shape[0], self.signs.numel())
        x[:, :d] = a * self.signs[:d]
        return walsh_hadamard(x)[:, self.rows]


@dataclass(frozen=True)
class Act:
    """An activation's random features from the (unmaterialized) output of ``lin``.

    ``w_in`` stacks the Gaussian projections of ``g``: :math:`W` (``m`` rows), then for the
    NTK :math:`W_0` (``m_t`` rows) and, on images when ``lin`` is a layer (``from_layer``:
    :math:`t' = [g', \\sigma_w t]`), the ``g`` part of :math:`R` (``m_t`` rows); ``b_in``
    their bias weights; ``r_t`` the ``t`` part of :math:`R` on images (None without
    incoming NTK features). On flat representations ``srht`` is :math:`R` instead, applied
    to the materialized :math:`t'`.
    """

    lin: Linear
    phi: Callable[[Tensor], Tensor]
    dphi: Callable[[Tensor], Tensor]
    m: int
    m_t: int
    w_in: Tensor
    b_in: Tensor
    r_t: Tensor | None
    from_layer: bool
    srht: SRHT | None = None

    def apply(self, maps: Maps, ntk: bool) -> Maps:
        u = self.lin.apply(maps.g, self.w_in)
        u = u + self.lin.bias(self.b_in, u.ndim)
        g = self.phi(u[:, : self.m]) * (1.0 / math.sqrt(self.m))
        if not ntk:
            return Maps(g, None)
        u0 = u[:, self.m : self.m + self.m_t]
        t = self._project_t(maps, u, u0) * self.dphi(u0) * (1.0 / math.sqrt(self.m_t))
        return Maps(g, t)

    def _project_t(self, maps: Maps, u: Tensor, u0: Tensor) -> Tensor:
        """:math:`R\\, t'`: sampled Hadamard rows of the materialized :math:`t'` (flat), or
        Gaussian filters over the stacked patches (images)."""
        if self.srht is not None:
            tp = Materialize(self.lin).apply(maps, True).t if self.from_layer else maps.t
            return torch.zeros_like(u0) if tp is None else self.srht(tp)
        proj = u[:, self.m + self.m_t :] if self.from_layer else torch.zeros_like(u0)
        if maps.t is not None and self.r_t is not None:
            proj = proj + self.lin.apply(maps.t, self.r_t)
        return proj


@dataclass(frozen=True)
class Pool:
    """``GlobalAvgPool`` (``layer=None``) or ``AvgPool``: the per-position features averaged."""

    layer: AvgPoolLayer | None

    def apply(self, maps: Maps, ntk: bool) -> Maps:
        def pool(x: Tensor) -> Tensor:
            if self.layer is None:
                return x.mean(dim=tuple(range(2, x.ndim))) if x.ndim > 2 else x
            out: Tensor = self.layer(x)
            return out

        return Maps(pool(maps.g), None if maps.t is None else pool(maps.t))


@dataclass(frozen=True)
class Sketch:
    """``Flatten``: the positions stacked, :math:`|S|^{-1/2}`, then a CountSketch of each map
    (bucket and sign per input coordinate)."""

    buckets_g: Tensor
    signs_g: Tensor
    m: int
    buckets_t: Tensor | None
    signs_t: Tensor | None
    m_t: int

    def apply(self, maps: Maps, ntk: bool) -> Maps:
        def sketch(x: Tensor, buckets: Tensor, signs: Tensor, width: int) -> Tensor:
            n, positions = x.shape[0], math.prod(x.shape[2:])
            flat = x.reshape(n, -1) * (signs.to(x.dtype) / math.sqrt(positions))
            out = x.new_zeros(n, width)
            return out.index_add_(1, buckets, flat)

        g = sketch(maps.g, self.buckets_g, self.signs_g, self.m)
        if not ntk or maps.t is None or self.buckets_t is None or self.signs_t is None:
            return Maps(g, None)
        return Maps(g, sketch(maps.t, self.buckets_t, self.signs_t, self.m_t))


Step = Materialize | Act | Pool | Sketch


@dataclass(frozen=True)
class Plan:
    """The steps of one featurization, their random draws made, and the output width."""

    steps: tuple[Step, ...]
    out_dim: int
    scratch: int  # numbers held per input row at the widest step (an estimate)


def _no_draw(shape: tuple[int, ...]) -> Tensor:
    return torch.empty(0)


def _stay(x: Tensor) -> Tensor:
    return x


def _relu_derivative(x: Tensor) -> Tensor:
    return (x > 0).to(x.dtype)


def _activation_maps(
    layer: Activation,
) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor], Tensor]]:
    if type(layer) is Relu:
        return torch.relu, _relu_derivative
    return layer.phi, derivative(layer.phi)


def _linear_of(layer: Dense | Conv, index: int, spatial: tuple[int, ...]) -> Linear:
    name = type(layer).__name__
    if layer.parameterization != "ntk":
        raise NtklabValueError(
            f"layers[{index}]: features support {SUPPORTED}; got {name} with "
            f"parameterization={layer.parameterization!r}"
        )
    b = layer.b_std
    if b is not None and not isinstance(b, Tensor) and b == 0:
        b = None  # a zero bias adds a zero column
    if isinstance(layer, Dense):
        if spatial:
            raise NtklabValueError(
                f"layers[{index}]: Dense expects a flat representation, got {len(spatial)} "
                "spatial dimension(s); put Flatten() or GlobalAvgPool() before it"
            )
        return Linear(layer.w_std, b, (), (), "VALID")
    filt: tuple[int, ...] = layer.filter_shape  # type: ignore[assignment]
    if len(filt) != len(spatial):
        raise NtklabValueError(
            f"layers[{index}]: Conv expects {len(filt)} spatial dimension(s), got {len(spatial)}"
        )
    strides: tuple[int, ...] = layer.strides  # type: ignore[assignment]
    return Linear(layer.w_std, b, filt, strides, layer.padding)


@dataclass
class _Walk:
    """Mutable bookkeeping of :func:`plan_features`: channels of ``g`` and ``t`` (0: no
    ``t``), spatial shape, the pending linear layer and the steps so far."""

    cg: int
    ct: int
    spatial: tuple[int, ...]
    pending: Linear | None
    steps: list[Step]
    scratch: int = 0

    def note(self, channels: int) -> None:
        self.scratch = max(self.scratch, channels * max(1, math.prod(self.spatial)))

    def materialize(self, ntk: bool) -> None:
        lin = self.pending
        if lin is None:
            return
        cg = self.cg * max(1, lin.size) + (lin.b is not None)
        ct = cg + self.ct * max(1, lin.size) if ntk else 0
        self.spatial = lin.out_shape(self.spatial) if lin.filt else self.spatial
        self.cg, self.ct, self.pending = cg, ct, None
        self.note(cg + ct)
        self.steps.append(Materialize(lin))


def _act_step(
    walk: _Walk, layer: Activation, m: int, m_t: int, ntk: bool, draw: Draw, place: Place
) -> Act:
    """The activation's draws: Gaussian :math:`W, W_0`; :math:`R` as sampled Hadamard rows
    on flat representations (TensorSRHT), as Gaussian filters on images."""
    from_layer = walk.pending is not None
    lin = walk.pending or identity_source(len(walk.spatial))
    hadamard = ntk and not lin.filt
    rows = m + (2 * m_t if from_layer and not hadamard else m_t) if ntk else m
    w_in = place(draw((rows, walk.cg, *lin.filt)))
    b_in = place(draw((rows,)))
    r_t = place(draw((m_t, walk.ct, *lin.filt))) if ntk and walk.ct and not hadamard else None
    srht = None
    if hadamard:
        dim = (walk.cg + (lin.b is not None) if from_layer else 0) + walk.ct
        size = 1 << max(0, dim - 1).bit_length()  # the next power of 2
        signs = place(torch.sign(draw((size,))))
        srht = SRHT(signs, place(uniform_index(draw((m_t,)), size)))
        walk.note(4 * size)
    phi, dphi = _activation_maps(layer)
    walk.note((walk.cg + walk.ct) * max(1, lin.size) + 2 * rows)
    if lin.filt:
        walk.spatial = lin.out_shape(walk.spatial)
    walk.cg, walk.ct, walk.pending = m, (m_t if ntk else 0), None
    return Act(lin, phi, dphi, m, m_t, w_in, b_in, r_t, from_layer, srht)


def plan_features(
    layers: Sequence[Layer],
    in_shape: tuple[int, ...],
    m: int,
    m_t: int,
    ntk: bool,
    draw: Draw = _no_draw,
    place: Place = _stay,
) -> Plan:
    """The steps of the featurization of inputs of shape ``(n, *in_shape)`` with ``m`` NNGP
    and ``m_t`` NTK features per activation and Flatten, drawing with ``draw`` and moving the
    draws with ``place`` (the default draws nothing: shapes only)."""
    walk = _Walk(in_shape[0], 0, tuple(in_shape[1:]), None, [])
    walk.note(in_shape[0])
    for i, layer in enumerate(layers):
        if isinstance(layer, Dense | Conv):
            walk.materialize(ntk)
            walk.pending = _linear_of(layer, i, walk.spatial)
        elif isinstance(layer, Activation):
            walk.steps.append(_act_step(walk, layer, m, m_t, ntk, draw, place))
        elif isinstance(layer, GlobalAvgPool | AvgPool):
            walk.materialize(ntk)
            if isinstance(layer, GlobalAvgPool):
                walk.steps.append(Pool(None))
                walk.spatial = ()
                continue
            pool = AvgPoolLayer(
                layer.window_shape,  # type: ignore[arg-type]
                layer.strides,  # type: ignore[arg-type]
                layer.padding,
                normalize_edges=layer.normalize_edges,
            )
            walk.steps.append(Pool(pool))
            walk.spatial = Linear(
                1.0, None, pool.window_shape, pool.strides, pool.padding
            ).out_shape(walk.spatial)
        elif isinstance(layer, Flatten):
            walk.materialize(ntk)
            if walk.spatial:
                size = math.prod(walk.spatial)
                bg, sg = draw_count_sketch(walk.cg * size, m, draw)
                bt, st = draw_count_sketch(walk.ct * size, m_t, draw) if walk.ct else (None, None)
                bt, st = (None, None) if bt is None or st is None else (place(bt), place(st))
                walk.steps.append(Sketch(place(bg), place(sg), m, bt, st, m_t))
                walk.cg, walk.ct, walk.spatial = m, (m_t if walk.ct else 0), ()
        else:
            raise NtklabValueError(
                f"layers[{i}]: features support {SUPPORTED}; got {type(layer).__name__}"
            )
    walk.materialize(ntk)
    if walk.spatial:
        raise NtklabValueError(
            "layers: expected an architecture whose output is flat (ending with Flatten() or "
            f"GlobalAvgPool() before the readout), got one that ends with {len(walk.spatial)} "
            "spatial dimension(s)"
        )
    return Plan(tuple(walk.steps), walk.ct if ntk else walk.cg, walk.scratch)


def draw_count_sketch(dim: int, width: int, draw: Draw) -> tuple[Tensor, Tensor]:
    """Bucket (in ``[0, width)``) and sign of each of ``dim`` coordinates of a CountSketch,
    from two Gaussian draws per coordinate (the bucket from its normal CDF, which is uniform;
    the sign from the other's sign)."""
    u = draw((dim,))
    v = draw((dim,))
    return uniform_index(u, width), torch.sign(v)


def uniform_index(u: Tensor, size: int) -> Tensor:
    """Uniform integers in ``[0, size)`` from standard Gaussian draws ``u`` (their normal CDF
    is uniform)."""
    if u.numel() == 0:
        return u.long()
    return (0.5 * (1 + torch.erf(u / math.sqrt(2))) * size).long().clamp_(0, size - 1)


def choose_widths(
    layers: Sequence[Layer], in_shape: tuple[int, ...], num_features: int, ntk: bool
) -> tuple[int, int, int]:
    """``(m, m_t, out_dim)``: the widths per activation for which the output has at most
    ``num_features`` columns, as many as the tail allows (the output width is affine in
    ``m`` and ``m_t``; one readout Dense after the last activation gives exactly
    ``num_features``)."""
    e = plan_features(layers, in_shape, 0, 0, ntk).out_dim
    a = plan_features(layers, in_shape, 1, 0, ntk).out_dim - e
    c = plan_features(layers, in_shape, 0, 1, ntk).out_dim - e if ntk else 0
    if a == 0 and c == 0:
        if e > num_features:
            raise NtklabValueError(
                f"num_features: expected at least {e} for an architecture without activations "
                f"or Flatten (its features are exact, {e} columns), got {num_features}"
            )
        return 1, 1, e
    room = num_features - e
    m_t = max(1, room // (a + c)) if ntk else 0
    m = (room - c * m_t) // a if a else m_t
    if m < 1 or room < a + c:
        raise NtklabValueError(
            f"num_features: expected at least {e + a + c} for this architecture (it adds {e} "
            f"exact columns to the random ones), got {num_features}"
        )
    return m, max(m_t, 1), a * m + c * m_t + e


def kernel_features(
    layers: Sequence[Layer],
    x: Tensor,
    num_features: int,
    *,
    seed: int = 0,
    get: Get = "ntk",
    block_size: int | None = None,
    max_memory: int | None = None,
) -> Tensor:
    """Random features :math:`\\Phi(x)` with :math:`\\Phi(x_1)\\Phi(x_2)^T \\approx` the NTK
    (or NNGP) of the chain ``layers`` (see the module docstring for the construction).

    Parameters
    ----------
    layers : sequence of Layer
        The chain of an :class:`~ntklab.kernels.engine.Architecture`.
    x : Tensor of shape (n, d), or (n, C, *S) for an architecture with spatial layers
    num_features : int
        Columns of the output. The widths of the random layers are chosen so that the
        output has exactly this many columns when one readout Dense follows the last
        activation; otherwise the last few columns may be zero.
    seed : int
        Seeds every random draw: equal seeds give the same feature map.
    get : {"ntk", "nngp"}
    block_size : int, optional
        Rows featurized at once (default: as many as fit ``max_memory``).
    max_memory : int, optional
        Bytes for one block (default: the policy of :mod:`ntklab.memory`). The random draws
        are held besides: :math:`O(F^2 |f|)` numbers (a few times F x F per activation).

    Returns
    -------
    Tensor of shape (n, num_features)
        On ``x``'s dtype and device.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels.features import kernel_features
    >>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5))
    >>> x = torch.randn(5, 3, dtype=torch.float64)
    >>> phi = kernel_features(arch.layers, x, 4096, seed=0)
    >>> k = arch.kernel(x).ntk
    >>> bool(torch.linalg.norm(phi @ phi.T - k) < 0.1 * torch.linalg.norm(k))
    True
    """
    if get not in ("ntk", "nngp"):
        raise NtklabValueError(f"get: expected 'ntk' or 'nngp', got {get!r}")
    check_positive_int("num_features", num_features)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise NtklabTypeError(f"seed: expected an int, got {type(seed).__name__}")
    if not -(2**63) <= seed < 2**64:
        raise NtklabValueError(f"seed: expected an int in [-2**63, 2**64), got {seed}")
    if block_size is not None:
        check_positive_int("block_size", block_size)
    if any(layer.spatial_layer for layer in layers):
        a, _ = check_images(x, None, architecture_spatial_ndim(layers))
    else:
        a = check_matrix("x", x)
    ntk = get == "ntk"
    in_shape = tuple(int(s) for s in a.shape[1:])
    m, m_t, _ = choose_widths(layers, in_shape, num_features, ntk)
    gen = torch.Generator().manual_seed(seed)

    def draw(shape: tuple[int, ...]) -> Tensor:
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    def place(t: Tensor) -> Tensor:
        return t.to(a.device, a.dtype) if t.is_floating_point() else t.to(a.device)

    plan = plan_features(layers, in_shape, m, m_t, ntk, draw, place)
    rows = _block_rows(a, plan, block_size, max_memory)
    out = a.new_zeros(a.shape[0], num_features)
    for start in range(0, a.shape[0], rows):
        block = a[start : start + rows]
        maps = Maps(block * (1.0 / math.sqrt(in_shape[0])), None)
        for step in plan.steps:
            maps = step.apply(maps, ntk)
        feats = maps.t if ntk else maps.g
        if feats is None:  # an architecture without Dense/Conv has NTK 0
            continue
        out[start : start + rows, : feats.shape[1]] = feats.reshape(feats.shape[0], -1)
    return out


def _block_rows(a: Tensor, plan: Plan, block_size: int | None, max_memory: int | None) -> int:
    """Rows per block: ``block_size``, or as many as fit ``max_memory`` (four arrays of the
    widest step per row)."""
    n = int(a.shape[0])
    if block_size is not None:
        return min(block_size, n)
    budget = resolve_max_memory(max_memory, a.device)
    per_row = 4 * plan.scratch * a.element_size()
    if per_row > budget:
        raise NtklabValueError(
            f"max_memory: expected at least {per_row} bytes (one input row of shape "
            f"{tuple(a.shape[1:])} at its widest step), got {budget}; use fewer features"
        )
    return max(1, min(n, budget // per_row))
