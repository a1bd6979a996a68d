"""Self-attention: the kernel rule :class:`GlobalSelfAttention` and its finite module
:class:`SelfAttentionLayer`.

The infinite-width limit of multi-head dot-product self-attention over all positions of a
sequence ``(n, C, L)`` or an image ``(n, C, H, W)``, as the heads, key, value and output
channels grow (Hron, Bahri, Sohl-Dickstein & Novak, 2020, arXiv:2006.10540; neural-tangents'
``stax.GlobalSelfAttention``). Positions are flattened into one axis :math:`g = 1..P`.

**Linear scaling** (logits divided by the key width :math:`d_k`, query weights tied to the key
weights): the logits converge to :math:`\\sigma_{QK} K(x, x)_{gg'}` (:math:`\\sigma_{QK} =
\\sigma_Q \\sigma_K`), so the attention weights :math:`A(x) = \\phi(\\sigma_{QK} K(x, x))`
(:math:`\\phi` softmax over the key positions :math:`g'`, identity, abs or relu) are
deterministic and, with :math:`\\sigma_{OV} = \\sigma_O \\sigma_V`,

.. math::

    K'(x, x') = \\sigma_{OV}^2 A(x) K(x, x') A(x')^T + \\sigma_b^2, \\qquad
    \\Theta'(x, x') = \\sigma_{OV}^2 A(x) \\Theta(x, x') A(x')^T + \\sigma_b^2
    + 2 \\sigma_{OV}^2 A(x) K(x, x') A(x')^T.

**Square-root scaling** (logits divided by :math:`\\sqrt{d_k}`, independent queries and keys)
has a closed form for the identity mechanism only,

.. math::

    K'_{hh'} = \\sigma_{QK}^2 \\sigma_{OV}^2 K_{hh'} \\sum_{g g'} K_{gg'}^2 + \\sigma_b^2, \\qquad
    \\Theta'_{hh'} = \\sigma_{QK}^2 \\sigma_{OV}^2 \\Big[2 K_{hh'} \\sum_{gg'} K_{gg'}
    \\Theta_{gg'} + \\sum_{gg'} K_{gg'}^2 (\\Theta_{hh'} + 4 K_{hh'})\\Big] + \\sigma_b^2.

**Positional embeddings** (``pos_emb_type="SUM"`` or ``"CONCAT"``): Gaussian embeddings with
covariance :math:`\\sigma_{pe}^2 R` across positions, :math:`R_{gg'} = \\text{decay}(\\sum_a
|g_a - g'_a|^p)` (one-hot, :math:`R = I`, without a decay function), enter the keys and queries
(and the values with ``val_pos_emb``): the kernels they read become :math:`w_x K + w_{pe} R`,
with :math:`w_x = 1, w_{pe} = \\sigma_{pe}^2` for ``"SUM"`` and the channel fractions
:math:`w_x = C / (C + C_{pe})`, :math:`w_{pe} = \\sigma_{pe}^2 C_{pe} / (C + C_{pe})` for
``"CONCAT"``. The embeddings are parameters too: the NTKs they read become :math:`w_x \\Theta
+ w_{pe} R`.

The layer reads the covariances between every pair of positions (``mixes_space``), so the
engine carries the full spatial covariance up to it; it writes the full covariance.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedParameter

from .._checks import check_channels_first, check_nonnegative, check_positive_int
from ..errors import NtklabTypeError, NtklabValueError
from .covariance import require_full, self_variances
from .engine import Flow, Flows, Layer, Plan, single_flow
from .kernel import KernelState

__all__ = ["GlobalSelfAttention", "SelfAttentionLayer", "positional_covariance"]

Mechanism = Literal["SOFTMAX", "IDENTITY", "ABS", "RELU"]
PosEmb = Literal["NONE", "SUM", "CONCAT"]
DecayFn = Callable[[Tensor], Tensor]

_MECHANISMS = ("SOFTMAX", "IDENTITY", "ABS", "RELU")
_POS_EMBS = ("NONE", "SUM", "CONCAT")


def _check_width(name: str, value: object) -> None:
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise NtklabTypeError(f"{name}: expected a positive int or None, got {value!r}")
        check_positive_int(name, value)


@dataclass(frozen=True)
class GlobalSelfAttention(Layer):
    """Global multi-head dot-product self-attention (neural-tangents'
    ``stax.GlobalSelfAttention``, arXiv:2006.10540) on sequences ``(n, C, L)`` or images
    ``(n, C, H, W)`` (channels first).

    Each head computes :math:`\\phi(Q K^T / \\text{norm}) V` over all positions; the heads are
    concatenated and mixed by the output weights, :math:`f = [\\text{heads}] W_O + \\sigma_b b`.
    Every weight is a unit Gaussian in the NTK parameterization, scaled by its ``w_*_std``
    over the square root of its fan-in.

    Parameters
    ----------
    n_chan_out, n_chan_key, n_chan_val : int, optional
        Output, key/query and value channels of the finite module (the kernel, their
        infinite-width limit, does not depend on them). ``None``: the width ``to_torch`` gives
        the layer's output (set them when the layer is the last one with weights).
        ``n_chan_out`` is also the fan-in the next layer reads.
    n_heads : int
        Number of heads of the finite module.
    linear_scaling : bool
        ``True``: logits :math:`\\sigma_Q \\sigma_K Q K^T / (C d_k)` with the query weights
        tied to the key weights (the kernel has a closed form for every mechanism);
        ``False``: :math:`\\sigma_Q \\sigma_K Q K^T / (C \\sqrt{d_k})` with independent
        queries (the standard attention; a closed form for ``"IDENTITY"`` only).
    w_key_std, w_value_std, w_query_std, w_out_std : float
        Weight scales; the kernel reads only :math:`\\sigma_Q \\sigma_K` and
        :math:`\\sigma_O \\sigma_V`.
    b_std : float, optional
        Bias scale of the output (``None``: no bias).
    attention_mechanism : {"SOFTMAX", "IDENTITY", "ABS", "RELU"}
        :math:`\\phi`: the softmax over the key positions, or an elementwise map. Spelled as
        neural-tangents does (upper case, as ntklab's ``padding="SAME"``).
    pos_emb_type : {"NONE", "SUM", "CONCAT"}
        Gaussian positional embeddings added to, or concatenated with, the inputs of the keys
        and queries (and of the values with ``val_pos_emb``).
    pos_emb_p_norm : float
        :math:`p` of the distance :math:`\\sum_a |g_a - g'_a|^p` between positions.
    pos_emb_decay_fn : callable, optional
        Maps the tensor of distances to the embeddings' covariance :math:`R` (elementwise,
        e.g. ``lambda d: torch.exp(-d)``; positive definite for the finite module). ``None``:
        one-hot embeddings, :math:`R = I`.
    n_chan_pos_emb : int, optional
        Channels of ``"CONCAT"`` embeddings (``None``: those of the input; otherwise the
        kernel needs the input's channel count, the ``width`` of the previous layer). Must be
        ``None`` for ``"SUM"``.
    w_pos_emb_std : float
        Scale of the embeddings.
    val_pos_emb : bool
        Whether the values read the embeddings too.

    Notes
    -----
    The formulas are in :mod:`ntklab.kernels.attention`. Masked inputs (variable-length
    sequences padded with ``mask_constant`` in ``arch.kernel`` and ``arch.to_torch``, as
    neural-tangents' ``mask_constant``) are supported with every mechanism and both
    scalings: masked key positions get no weight (logits :math:`-\\infty` before
    ``"SOFTMAX"``, weight 0 for the elementwise mechanisms), the outputs at masked query
    positions are zeroed, and the positional embeddings stay those of the positions counted
    from the start, so a sequence padded at its end has the kernel of the unpadded sequence.
    Checked against neural-tangents 0.6.5 for ``"SOFTMAX"`` with linear scaling, and against
    the unpadded sequences and the finite masked network (``tests/kernels/test_masks.py``).

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import Conv, GlobalAvgPool, GlobalSelfAttention
    >>> arch = nl.serial(Conv(filter_shape=(1,)), GlobalSelfAttention(), nl.Relu(),
    ...                  GlobalAvgPool(), nl.Dense())
    >>> arch.kernel(torch.randn(4, 3, 6, dtype=torch.float64)).nngp.shape
    torch.Size([4, 4])
    """

    n_chan_out: int | None = None
    n_chan_key: int | None = None
    n_chan_val: int | None = None
    n_heads: int = 1
    linear_scaling: bool = True
    w_key_std: float = 1.0
    w_value_std: float = 1.0
    w_query_std: float = 1.0
    w_out_std: float = 1.0
    b_std: float | None = None
    attention_mechanism: Mechanism = "SOFTMAX"
    pos_emb_type: PosEmb = "NONE"
    pos_emb_p_norm: float = 2.0
    pos_emb_decay_fn: DecayFn | None = None
    n_chan_pos_emb: int | None = None
    w_pos_emb_std: float = 1.0
    val_pos_emb: bool = False

    def __post_init__(self) -> None:
        for name in ("n_chan_out", "n_chan_key", "n_chan_val", "n_chan_pos_emb"):
            _check_width(name, getattr(self, name))
        check_positive_int("n_heads", self.n_heads)
        for name in ("linear_scaling", "val_pos_emb"):
            if not isinstance(getattr(self, name), bool):
                raise NtklabTypeError(f"{name}: expected a bool, got {getattr(self, name)!r}")
        for name in ("w_key_std", "w_value_std", "w_query_std", "w_out_std", "w_pos_emb_std"):
            check_nonnegative(name, getattr(self, name))
        if self.b_std is not None:
            check_nonnegative("b_std", self.b_std)
        if self.attention_mechanism not in _MECHANISMS:
            raise NtklabValueError(
                f"attention_mechanism: expected one of {', '.join(map(repr, _MECHANISMS))}, "
                f"got {self.attention_mechanism!r}"
            )
        if self.pos_emb_type not in _POS_EMBS:
            raise NtklabValueError(
                f"pos_emb_type: expected one of {', '.join(map(repr, _POS_EMBS))}, got "
                f"{self.pos_emb_type!r}"
            )
        p = self.pos_emb_p_norm
        if isinstance(p, bool) or not isinstance(p, int | float) or not p > 0:
            raise NtklabValueError(f"pos_emb_p_norm: expected a number > 0, got {p!r}")
        if self.pos_emb_decay_fn is not None and not callable(self.pos_emb_decay_fn):
            raise NtklabTypeError(
                f"pos_emb_decay_fn: expected None or a callable, got {self.pos_emb_decay_fn!r}"
            )
        if self.pos_emb_type == "SUM" and self.n_chan_pos_emb is not None:
            raise NtklabValueError(
                "n_chan_pos_emb: expected None with pos_emb_type='SUM' (summed embeddings have "
                f"the input's channels), got {self.n_chan_pos_emb}"
            )

    @property
    def has_parameters(self) -> bool:
        return True

    @property
    def spatial_layer(self) -> bool:
        return True

    @property
    def mixes_space(self) -> bool:
        return True

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        raise NtklabValueError(  # pragma: no cover - run_chain calls step()
            "GlobalSelfAttention: expected to be run by Architecture.kernel (it reads each "
            "input's own covariance), got a bare propagate call"
        )

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        """Propagate the pair state and the per-input states: the attention weights of each
        input come from its own covariance (``diag1``, ``diag2``)."""
        one = single_flow(self, flow)
        self._check_state(one.pair)
        size = math.prod(one.pair.spatial_shape)
        r = positional_covariance(
            one.pair.spatial_shape,
            self.pos_emb_p_norm,
            self.pos_emb_decay_fn,
            dtype=one.pair.cov.dtype,
            device=one.pair.cov.device,
        )
        w_x, w_pe = self._weights(one.pair)
        d1 = _Flat.of(one.diag1, size)
        d2 = d1 if one.diag2 is None else _Flat.of(one.diag2, size)
        pair = _Flat.of(one.pair, size)
        keys1 = None if one.diag1.mask is None else one.diag1.mask[0].reshape(-1, size)
        a1 = self._attention(d1.cov, r, w_x, w_pe, keys1)
        if one.diag2 is not None:
            keys2 = None if one.diag2.mask is None else one.diag2.mask[0].reshape(-1, size)
            a2 = self._attention(d2.cov, r, w_x, w_pe, keys2)
        else:
            a2 = a1
        new_pair = self._combine(pair, a1, a2, r, w_x, w_pe).write(one.pair)
        new_d1 = self._combine(d1, a1, a1, r, w_x, w_pe).write(one.diag1)
        new_d2 = None
        if one.diag2 is not None:
            new_d2 = self_variances(self._combine(d2, a2, a2, r, w_x, w_pe).write(one.diag2))
        return Flow(new_pair, self_variances(new_d1), new_d2).refreshed()

    def _check_state(self, state: KernelState) -> None:
        if state.spatial_ndim == 0:
            raise NtklabValueError(
                "GlobalSelfAttention: expected sequences (n, C, L) or images (n, C, H, W) "
                "(attention mixes positions), got a flat (n, d) representation"
            )
        require_full("GlobalSelfAttention", state)
        if not self.linear_scaling and self.attention_mechanism != "IDENTITY":
            raise NtklabValueError(
                "GlobalSelfAttention: the infinite-width kernel of square-root scaled "
                f"attention (linear_scaling=False) with attention_mechanism="
                f"{self.attention_mechanism!r} has no known closed form; expected "
                "attention_mechanism='IDENTITY' or linear_scaling=True"
            )

    def _weights(self, state: KernelState) -> tuple[float, float]:
        """The weights :math:`(w_x, w_{pe})` of the input kernel and of :math:`R`."""
        pe = self.w_pos_emb_std**2
        if self.pos_emb_type != "CONCAT":
            return 1.0, pe
        if self.n_chan_pos_emb is None:
            return 0.5, 0.5 * pe
        if state.fan_in is None:
            raise NtklabValueError(
                "GlobalSelfAttention(pos_emb_type='CONCAT', n_chan_pos_emb=...): expected the "
                "channel count of the previous layer (the kernel weighs inputs and embeddings "
                "by their channels), got width=None; pass width=N to that layer"
            )
        total = state.fan_in + self.n_chan_pos_emb
        return state.fan_in / total, pe * self.n_chan_pos_emb / total

    def _interp(self, k: Tensor, r: Tensor, w_x: float, w_pe: float) -> Tensor:
        """The kernel of the embedded inputs, :math:`w_x K + w_{pe} R`."""
        return k if self.pos_emb_type == "NONE" else w_x * k + w_pe * r

    def _attention(
        self, cov: Tensor, r: Tensor, w_x: float, w_pe: float, keys: Tensor | None = None
    ) -> Tensor | None:
        """The limit attention weights :math:`\\phi(\\sigma_{QK} K(x, x))`, ``(n, P, P')``
        (``None`` with square-root scaling, whose logits stay random); ``keys`` ``(n, P')``:
        the masked positions of padded inputs, which get no weight (logits :math:`-\\infty`
        before a softmax, weights 0 otherwise, as neural-tangents)."""
        if not self.linear_scaling:
            return None
        logits = (self.w_query_std * self.w_key_std) * self._interp(cov, r, w_x, w_pe)
        if keys is not None:
            fill = -math.inf if self.attention_mechanism == "SOFTMAX" else 0.0
            logits = logits.masked_fill(keys.unsqueeze(1), fill)
        mech = self.attention_mechanism
        if mech == "SOFTMAX":
            return torch.softmax(logits, dim=-1)
        if mech == "ABS":
            return logits.abs()
        if mech == "RELU":
            return logits.clamp(min=0.0)
        return logits

    def _combine(
        self, s: _Flat, a1: Tensor | None, a2: Tensor | None, r: Tensor, w_x: float, w_pe: float
    ) -> _Flat:
        """The output kernels of a flattened state (a pair, or one input's)."""
        b2 = 0.0 if self.b_std is None else self.b_std**2
        ov2 = (self.w_out_std * self.w_value_std) ** 2
        ntk_in = s.ntk if s.ntk is not None else torch.zeros_like(s.cov)
        cov_t = self._interp(s.cov, r, w_x, w_pe)
        ntk_t = self._interp(ntk_in, r, w_x, w_pe)
        if a1 is not None and a2 is not None:
            spec = "ahg,abgk,bjk->abhj" if s.pair else "ahg,agk,ajk->ahj"
            use_pe = self.val_pos_emb
            weigh = torch.einsum(spec, a1, cov_t if use_pe else s.cov, a2) * ov2
            cov = weigh + b2
            ntk_w = torch.einsum(spec, a1, ntk_t if use_pe else ntk_in, a2) * ov2
            return _Flat(cov, ntk_w + b2 + 2 * weigh, s.pair)
        # square-root scaling, identity mechanism
        std2 = ov2 * (self.w_query_std * self.w_key_std) ** 2
        dims = (-2, -1)
        plain = self.val_pos_emb or self.pos_emb_type == "NONE"
        dot = (cov_t * (cov_t if plain else s.cov)).sum(dim=dims, keepdim=True)
        if plain:
            dot_ntk = 2 * (cov_t * ntk_t).sum(dim=dims, keepdim=True)
        else:
            dot_ntk = (cov_t * ntk_in + s.cov * ntk_t).sum(dim=dims, keepdim=True)
        cov = std2 * dot * cov_t + b2
        ntk = std2 * (dot_ntk * cov_t + dot * (ntk_t + 4 * cov_t)) + b2
        return _Flat(cov, ntk, s.pair)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        # None: as many channels as the input, resolved on the first forward call (the last
        # layer of a residual branch keeps its input's width, as ConvLayer does)
        default = out_features if out_features is not None else in_features
        return SelfAttentionLayer(
            in_features,
            self.n_chan_out if self.n_chan_out is not None else default,
            self.n_chan_key if self.n_chan_key is not None else default,
            self.n_chan_val if self.n_chan_val is not None else default,
            self.n_heads,
            options=self._options(),
            generator=generator,
            dtype=dtype,
            device=device,
        )

    def _options(self) -> AttentionOptions:
        return AttentionOptions(
            linear_scaling=self.linear_scaling,
            w_key_std=self.w_key_std,
            w_value_std=self.w_value_std,
            w_query_std=self.w_query_std,
            w_out_std=self.w_out_std,
            b_std=self.b_std,
            attention_mechanism=self.attention_mechanism,
            pos_emb_type=self.pos_emb_type,
            pos_emb_p_norm=self.pos_emb_p_norm,
            pos_emb_decay_fn=self.pos_emb_decay_fn,
            n_chan_pos_emb=self.n_chan_pos_emb,
            w_pos_emb_std=self.w_pos_emb_std,
            val_pos_emb=self.val_pos_emb,
        )


@dataclass(frozen=True)
class AttentionOptions:
    """The scalings of :class:`SelfAttentionLayer` (those of :class:`GlobalSelfAttention`)."""

    linear_scaling: bool = True
    w_key_std: float = 1.0
    w_value_std: float = 1.0
    w_query_std: float = 1.0
    w_out_std: float = 1.0
    b_std: float | None = None
    attention_mechanism: Mechanism = "SOFTMAX"
    pos_emb_type: PosEmb = "NONE"
    pos_emb_p_norm: float = 2.0
    pos_emb_decay_fn: DecayFn | None = None
    n_chan_pos_emb: int | None = None
    w_pos_emb_std: float = 1.0
    val_pos_emb: bool = False


_ATTENTION_OPTIONS = AttentionOptions()


@dataclass(frozen=True)
class _Flat:
    """Kernels with the positions flattened: ``(n1, n2, P, P')`` (``pair``) or ``(n, P, P')``."""

    cov: Tensor
    ntk: Tensor | None
    pair: bool

    @staticmethod
    def of(state: KernelState, size: int) -> _Flat:
        b = state.batch_ndim
        return _Flat(
            _flatten_positions(state.cov, b, state.spatial_ndim, size),
            None
            if state.ntk is None
            else _flatten_positions(state.ntk, b, state.spatial_ndim, size),
            b == 2,
        )

    def write(self, state: KernelState) -> KernelState:
        """``state`` with these kernels, back in the interleaved full layout."""
        shape = state.spatial_shape
        b = state.batch_ndim
        ntk = None if self.ntk is None else _interleave_positions(self.ntk, b, shape)
        return dataclasses.replace(
            state,
            cov=_interleave_positions(self.cov, b, shape),
            ntk=ntk,
            gaussian=True,
            product=False,
        )


def _flatten_positions(x: Tensor, batch_ndim: int, spatial_ndim: int, size: int) -> Tensor:
    """``(batch..., H, H', W, W')`` to ``(batch..., H W, H' W')``."""
    b, s = batch_ndim, spatial_ndim
    order = [*range(b), *(b + 2 * k for k in range(s)), *(b + 2 * k + 1 for k in range(s))]
    return x.permute(order).reshape(*x.shape[:b], size, size)


def _interleave_positions(x: Tensor, batch_ndim: int, shape: tuple[int, ...]) -> Tensor:
    """``(batch..., H W, H' W')`` to ``(batch..., H, H', W, W')``."""
    b, s = batch_ndim, len(shape)
    y = x.reshape(*x.shape[:b], *shape, *shape)
    order = [*range(b), *(a for k in range(s) for a in (b + k, b + s + k))]
    return y.permute(order).contiguous()


def positional_covariance(
    shape: tuple[int, ...],
    p_norm: float,
    decay_fn: DecayFn | None,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    """The covariance :math:`R` ``(P, P)`` of positional embeddings over the positions of
    ``shape`` (flattened in row-major order): :math:`R_{gg'} = \\text{decay}(\\sum_a |g_a -
    g'_a|^p)`, or the identity when ``decay_fn`` is None."""
    size = math.prod(shape)
    if decay_fn is None:
        return torch.eye(size, dtype=dtype, device=device)
    grids = torch.meshgrid(
        *[torch.arange(n, dtype=dtype, device=device) for n in shape], indexing="ij"
    )
    coords = torch.stack([g.reshape(-1) for g in grids], dim=-1)  # shape: (P, s)
    dist = (coords[:, None, :] - coords[None, :, :]).abs().pow(p_norm).sum(dim=-1)
    r = decay_fn(dist)
    if not isinstance(r, Tensor) or r.shape != dist.shape:
        raise NtklabValueError(
            f"pos_emb_decay_fn: expected a tensor of the distances' shape {tuple(dist.shape)}, "
            f"got {getattr(r, 'shape', type(r).__name__)}"
        )
    return r.to(dtype)


class SelfAttentionLayer(LazyModuleMixin, nn.Module):
    """Multi-head self-attention over all positions of ``(n, C, *S)``, NTK-parameterized.

    Unit Gaussian weights ``key``/``query`` ``(heads, C_k, d_k)``, ``value`` ``(heads, C_v,
    d_v)``, ``out`` ``(heads d_v, n_out)``, ``bias`` ``(n_out,)`` and, with positional
    embeddings, ``pos_emb`` ``(C_pe, *S)``. With :math:`x` the inputs flattened to ``(n, P,
    C)``, :math:`x_k` the inputs of the keys (with the embeddings), per head

    .. math::

        G = \\phi\\Big(\\frac{\\sigma_Q \\sigma_K}{C_k d_k^{\\,a}} (x_k W_Q)(x_k W_K)^T\\Big),
        \\qquad f = \\frac{\\sigma_O \\sigma_V}{\\sqrt{d_v h C_v}}
        [G x_v W_V]_{\\text{heads}} W_O + \\sigma_b b,

    :math:`a = 1` and :math:`W_Q = W_K` with linear scaling, :math:`a = 1/2` otherwise. The
    embeddings are :math:`\\sigma_{pe} L E` with unit Gaussian :math:`E` and :math:`L L^T = R`
    (:func:`positional_covariance`). ``in_channels=None``: created on the first forward call
    (the embeddings always are: they need the spatial shape). ``n_chan_out``, ``n_chan_key``
    or ``n_chan_val`` ``None``: as many as the input's channels (known on the first call when
    ``in_channels`` is None).
    """

    cls_to_become = None

    def __init__(
        self,
        in_channels: int | None,
        n_chan_out: int | None,
        n_chan_key: int | None,
        n_chan_val: int | None,
        n_heads: int,
        *,
        options: AttentionOptions = _ATTENTION_OPTIONS,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.n_chan_out = n_chan_out if n_chan_out is not None else in_channels
        self.out_features = self.n_chan_out
        self.n_chan_key = n_chan_key if n_chan_key is not None else in_channels
        self.n_chan_val = n_chan_val if n_chan_val is not None else in_channels
        self.n_heads = n_heads
        self.options = options
        self.in_channels = in_channels or 0
        self.check_layout = False
        self.key_mask: Tensor | None = None  # (n, *S), set for a call by MaskedNetwork
        self._generator = generator
        self._dtype, self._device = dtype, device
        self.key = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg]
        self.value = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg]
        self.out = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg]
        self.query: nn.Parameter | None = None
        if not options.linear_scaling:
            self.query = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg,assignment]
        self.bias: nn.Parameter | None = None
        if options.b_std is not None:
            self.bias = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg,assignment]
        self.pos_emb: nn.Parameter | None = None
        if options.pos_emb_type != "NONE":
            self.pos_emb = UninitializedParameter(device=device, dtype=dtype)  # type: ignore[call-arg,assignment]
        self.register_buffer("pos_chol", None)

    def _channels(self, c: int) -> tuple[int, int, int]:
        """Channels of the embeddings, of the keys' inputs and of the values' inputs."""
        o = self.options
        c_pe = 0
        if o.pos_emb_type != "NONE":
            c_pe = c if o.n_chan_pos_emb is None else o.n_chan_pos_emb
        c_k = c + c_pe if o.pos_emb_type == "CONCAT" else c
        c_v = c_k if o.val_pos_emb else c
        return c_pe, c_k, c_v

    def initialize_parameters(self, input: Tensor) -> None:
        if not self.has_uninitialized_params():
            return
        self._check_input(input)
        c = int(input.shape[1])
        self.in_channels = c
        self.n_chan_out = c if self.n_chan_out is None else self.n_chan_out
        self.out_features = self.n_chan_out
        self.n_chan_key = c if self.n_chan_key is None else self.n_chan_key
        self.n_chan_val = c if self.n_chan_val is None else self.n_chan_val
        c_pe, c_k, c_v = self._channels(c)
        h = self.n_heads
        self.key.materialize((h, c_k, self.n_chan_key))
        if self.query is not None:
            self.query.materialize((h, c_k, self.n_chan_key))  # type: ignore[attr-defined]
        self.value.materialize((h, c_v, self.n_chan_val))
        self.out.materialize((h * self.n_chan_val, self.n_chan_out))
        if self.bias is not None:
            self.bias.materialize((self.n_chan_out,))  # type: ignore[attr-defined]
        if self.pos_emb is not None:
            shape = tuple(int(s) for s in input.shape[2:])
            self.pos_emb.materialize((c_pe, *shape))  # type: ignore[attr-defined]
            self.pos_chol = self._cholesky(shape)
        self.reset_parameters()

    def _cholesky(self, shape: tuple[int, ...]) -> Tensor | None:
        o = self.options
        if o.pos_emb_decay_fn is None:
            return None
        r = positional_covariance(shape, o.pos_emb_p_norm, o.pos_emb_decay_fn)
        chol, info = torch.linalg.cholesky_ex(r)
        if int(info) != 0:
            raise NtklabValueError(
                "pos_emb_decay_fn: expected a positive definite covariance R of the positional "
                "embeddings (the finite module draws them as L E with L L^T = R), got one that "
                "is not"
            )
        out: Tensor = chol.to(dtype=self._dtype, device=self._device)
        return out

    def reset_parameters(self) -> None:
        """Draw the parameters again (unit Gaussians, from the layer's generator)."""
        if self.has_uninitialized_params():
            return
        with torch.no_grad():
            for p in self.parameters():
                p.normal_(0.0, 1.0, generator=self._generator)

    def _check_input(self, input: Tensor) -> None:
        if input.ndim not in (3, 4):
            raise NtklabValueError(
                "input: expected sequences (n, C, L) or images (n, C, H, W), got shape "
                f"{tuple(input.shape)}"
            )
        if self.check_layout:
            check_channels_first("input", input)

    def _embedded(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The inputs of the keys and of the values, ``(n, P, C_k)`` and ``(n, P, C_v)``."""
        o = self.options
        flat = x.flatten(2).transpose(1, 2)  # shape: (n, P, C)
        if self.pos_emb is None:
            return flat, flat
        pe = self.pos_emb.flatten(1)  # shape: (C_pe, P)
        if self.pos_chol is not None:
            pe = pe @ self.pos_chol.T
        pe = (o.w_pos_emb_std * pe).T  # shape: (P, C_pe)
        if o.pos_emb_type == "SUM":
            keys = flat + pe
        else:
            keys = torch.cat([flat, pe.expand(flat.shape[0], -1, -1)], dim=-1)
        return keys, keys if o.val_pos_emb else flat

    def forward(self, input: Tensor) -> Tensor:
        self._check_input(input)
        o = self.options
        xk, xv = self._embedded(input)
        keys = torch.einsum("npc,hcd->hnpd", xk, self.key)
        query = self.key if self.query is None else self.query
        queries = keys if self.query is None else torch.einsum("npc,hcd->hnpd", xk, query)
        power = 1.0 if o.linear_scaling else 0.5
        norm = o.w_query_std * o.w_key_std / (xk.shape[-1] * self.key.shape[-1] ** power)
        logits = torch.einsum("hnpd,hnqd->hnpq", queries, keys) * norm
        if self.key_mask is not None:  # padded keys get no weight
            fill = -math.inf if o.attention_mechanism == "SOFTMAX" else 0.0
            logits = logits.masked_fill(self.key_mask.flatten(1)[None, :, None, :], fill)
        if o.attention_mechanism == "SOFTMAX":
            weights = torch.softmax(logits, dim=-1)
        elif o.attention_mechanism == "ABS":
            weights = logits.abs()
        elif o.attention_mechanism == "RELU":
            weights = logits.clamp(min=0.0)
        else:
            weights = logits
        values = torch.einsum("npc,hcd->hnpd", xv, self.value)
        heads = torch.einsum("hnpq,hnqd->nphd", weights, values).flatten(2)
        scale = o.w_out_std * o.w_value_std / math.sqrt(heads.shape[-1] * xv.shape[-1])
        out = (heads @ self.out) * scale  # shape: (n, P, n_out)
        if self.bias is not None:
            out = out + float(o.b_std or 0.0) * self.bias
        return out.transpose(1, 2).reshape(input.shape[0], -1, *input.shape[2:])

    def extra_repr(self) -> str:
        o = self.options
        return (
            f"in_channels={self.in_channels}, n_chan_out={self.n_chan_out}, "
            f"n_chan_key={self.n_chan_key}, n_chan_val={self.n_chan_val}, "
            f"n_heads={self.n_heads}, linear_scaling={o.linear_scaling}, "
            f"attention_mechanism={o.attention_mechanism!r}, pos_emb_type={o.pos_emb_type!r}"
        )
