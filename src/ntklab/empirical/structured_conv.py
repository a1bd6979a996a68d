r"""Structured derivatives of convolutions and of normalization layers' affine parameters.

The formulas that :mod:`.structured` uses for ``nn.Conv1d``/``nn.Conv2d``/``nn.Conv3d``
(any stride, padding including ``"same"``, padding mode, dilation and groups, with or
without bias), for ``nn.Linear`` on sequences, and for the affine parameters of BatchNorm
(eval mode) and LayerNorm. Novak, Sohl-Dickstein & Schoenholz, "Fast Finite Width Neural
Tangent Kernel" (ICML 2022, arXiv:2206.08720), section on convolutions: a convolution is a
dense layer applied to the input patches ``u_p`` of every output position ``p`` with one
shared weight, so with ``g_{a p}`` the cotangent (the gradient of output ``a`` in the layer's
output at ``p``) its share of the NTK is

.. math::

    \Theta_W(x, x')_{ab} = \sum_{p, p'} \langle g_{ap}(x), g_{bp'}(x') \rangle
                                          \langle u_p(x), u_{p'}(x') \rangle
                         = \langle G_a(x), G_b(x') \rangle_F,
    \qquad G_a(x) = \sum_p g_{ap}(x) u_p(x)^\top,

two contraction orders whose costs differ by orders of magnitude: the ``(P x P')`` Gram
products (pairwise, cheap for few positions) or the per-example weight gradients ``G``
(``C x D``, cheap for many positions). A grouped convolution is ``groups`` independent
convolutions, each with its own patch slice and output channels.

A third order wins when the cotangents factor per channel. If, for each example and output
channel ``c``, the ``k x P`` matrix :math:`g_{\cdot \cdot c}` has rank one,

.. math:: g_{apc}(x) = \alpha_{ac}(x)\, h_{pc}(x),

which holds exactly for a layer followed only by per-channel operations (elementwise
activations, BatchNorm, residual additions of such layers) and a spatial average with a
linear readout (global average pooling: :math:`\alpha_{ac} = W_{ac}`, :math:`h_{pc}` the
activation derivative over ``P``), then :math:`G_a(x)_{c\cdot} = \alpha_{ac} H_c(x)` with
:math:`H_c(x) = \sum_p h_{pc} u_p` formed once instead of ``k`` times, and

.. math::

    \Theta_W(x, x')_{ab} = \sum_c \alpha_{ac}(x) \alpha_{bc}(x')
                           \langle H_c(x), H_c(x') \rangle,

``2 n n' C (D + k)`` flops for the traced kernel instead of ``2 n n' k C D``. The rank is
checked numerically on every example (:func:`factor_cotangents`); the factorization is used
only when it reproduces the cotangents to a few units of rounding.

Normalization layers ``y = \gamma \odot \hat x + \beta`` (``\hat x`` normalized with the running
statistics of BatchNorm in eval mode, or per position by LayerNorm) have per-example gradients
:math:`\partial f_a / \partial \gamma_c = \sum_p g_{apc} \hat x_{pc}` and
:math:`\partial f_a / \partial \beta_c = \sum_p g_{apc}` (the first is
:func:`affine_gradients`): ``C`` numbers per output, whose Gram is the layer's share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn
from torch.nn.functional import batch_norm, layer_norm, pad, unfold
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

from ..errors import NtklabTypeError, NtklabValueError
from . import _compiled_cotangents

__all__ = [
    "CONVOLUTIONS",
    "FACTOR_RTOL",
    "NORMALIZATIONS",
    "add_factored",
    "affine_gradients",
    "channel_rows",
    "channels_first",
    "conv_patches",
    "factor_cotangents",
    "factored_flops",
    "factored_inputs",
    "input_cotangent_flops",
    "input_cotangents",
    "normalized_input",
    "pairwise_flops",
    "per_example_flops",
    "per_example_gradients",
]

Conv = _ConvNd  # nn.Conv1d, nn.Conv2d or nn.Conv3d
Norm = _BatchNorm | nn.LayerNorm

#: Convolutions covered (exact types: subclasses may override ``forward``).
CONVOLUTIONS: tuple[type[Conv], ...] = (nn.Conv1d, nn.Conv2d, nn.Conv3d)

#: Normalization layers whose affine parameters are covered (BatchNorm in eval mode only).
NORMALIZATIONS: tuple[type[Norm], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.LayerNorm,
)

#: Relative residual (in units of the dtype's machine epsilon) below which cotangents count
#: as factored (:func:`factor_cotangents`); exactly factored cotangents computed by a
#: backward pass leave a residual of a few units.
FACTOR_RTOL = 64.0

Outputs = Literal["trace", "full", "diagonal"]

#: Cost of one element of an elementwise pass (memory bound), in GEMM flops.
ELEMENTWISE_FLOPS = 30.0


# ------------------------------------------------------------------------------- layouts


def _padding(conv: Conv, dims: int) -> list[int]:
    """``F.pad`` amounts (last spatial axis first) that the convolution applies."""
    kernel, dilation = conv.kernel_size, conv.dilation
    padding = conv.padding
    pads: list[int] = []
    for axis in reversed(range(dims)):
        if isinstance(padding, str):
            total = dilation[axis] * (kernel[axis] - 1) if padding == "same" else 0
            pads += [total // 2, total - total // 2]
        else:
            pads += [padding[axis], padding[axis]]
    return pads


def _plane(values: Sequence[int], dims: int, row: int = 1) -> tuple[int, int]:
    """A 1-d or 2-d size (``row = 1``) or offset (``row = 0``) as 2-d: a 1-d one as one row."""
    return (row, int(values[0])) if dims == 1 else (int(values[0]), int(values[1]))


def conv_patches(conv: nn.Module, x: Tensor) -> Tensor:
    """Input patches of a convolution, one row per output position and group.

    .. math:: u_{p, g} = x[\\,g\\text{'s input channels},\\;
              s \\odot p + d \\odot q\\,]_{q \\in \\text{kernel}}

    Parameters
    ----------
    conv : nn.Conv1d, nn.Conv2d or nn.Conv3d
        Any stride ``s``, dilation ``d``, padding (ints, tuple, ``"same"``, ``"valid"``),
        padding mode and groups ``G``.
    x : Tensor of shape (n, C_in, *spatial)
        The convolution's input.

    Returns
    -------
    Tensor of shape (n, P, G, D)
        ``P`` output positions, ``D = C_in / G * prod(kernel_size)``, ordered like
        ``conv.weight.reshape(C_out, D)`` (output channel ``o`` belongs to group
        ``o // (C_out / G)``). Always new memory (safe from later in-place operations on
        ``x``); for 1-d and 2-d convolutions a strided view of ``F.unfold``'s ``(n, G D, P)``
        result.

    Examples
    --------
    >>> import torch
    >>> conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    >>> conv_patches(conv, torch.randn(5, 4, 8, 8)).shape
    torch.Size([5, 16, 2, 18])
    """
    if not isinstance(conv, CONVOLUTIONS):
        raise NtklabTypeError(
            f"conv: expected nn.Conv1d, nn.Conv2d or nn.Conv3d, got {type(conv).__name__}"
        )
    dims = conv.weight.ndim - 2
    if x.ndim != dims + 2:
        raise NtklabValueError(
            f"x: expected a batch of shape (n, C_in, {dims} spatial axes), got {tuple(x.shape)}"
        )
    pads = _padding(conv, dims)
    groups = conv.groups
    d = conv.in_channels // groups * math.prod(conv.kernel_size)
    if dims <= 2:  # im2col (F.unfold), faster than a strided copy
        kernel, stride, dilation = conv.kernel_size, conv.stride, conv.dilation
        symmetric = all(pads[2 * i] == pads[2 * i + 1] for i in range(dims))
        padding = (0, 0)
        if symmetric and conv.padding_mode == "zeros":  # unfold pads, no copy of x
            padding = (pads[2], pads[0]) if dims == 2 else (0, pads[0])
        elif any(pads):
            mode = "constant" if conv.padding_mode == "zeros" else conv.padding_mode
            x = pad(x, pads, mode=mode)
        if dims == 1:
            x, kernel, stride, dilation = x.unsqueeze(2), (1, *kernel), (1, *stride), (1, *dilation)
        cols = unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)
        n, p = cols.shape[0], cols.shape[2]
        return cols.transpose(1, 2).view(n, p, groups, d)  # shape: (n, P, G, D)
    if any(pads):
        mode = "constant" if conv.padding_mode == "zeros" else conv.padding_mode
        x = pad(x, pads, mode=mode)
    n, c = x.shape[:2]
    kernel, stride, dilation = conv.kernel_size, conv.stride, conv.dilation
    sizes = [
        (x.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(dims)
    ]
    st = x.stride()
    view = x.as_strided(
        (n, *sizes, c, *kernel),
        (
            st[0],
            *(st[2 + i] * stride[i] for i in range(dims)),
            st[1],
            *(st[2 + i] * dilation[i] for i in range(dims)),
        ),
    )
    patches = x.new_empty(view.shape).copy_(view)
    return patches.view(n, math.prod(sizes), groups, d)


def channel_rows(module: nn.Module, y: Tensor) -> Tensor:
    """A layer's input or output (or cotangent) as rows of positions by channels.

    Parameters
    ----------
    module : nn.Module
        Channels first (axis 1) for convolutions and BatchNorm, last for ``nn.Linear`` and
        LayerNorm (its ``normalized_shape`` flattened).
    y : Tensor of shape (n, ...)

    Returns
    -------
    Tensor of shape (n, P, C)
        A view where possible.
    """
    n = y.shape[0]
    if isinstance(module, nn.LayerNorm):
        return y.reshape(n, -1, math.prod(module.normalized_shape))
    if isinstance(module, (*CONVOLUTIONS, *NORMALIZATIONS)):
        return y.reshape(n, y.shape[1], -1).transpose(1, 2)
    return y.reshape(n, -1, y.shape[-1])


def channels_first(module: nn.Module, y: Tensor) -> Tensor:
    """A layer's output (or its cotangent) as channels by positions, ``(n, C, P)``: a view
    for convolutions and BatchNorm, a transposed view for ``nn.Linear`` and LayerNorm."""
    if isinstance(module, (*CONVOLUTIONS, *NORMALIZATIONS)) and not isinstance(
        module, nn.LayerNorm
    ):
        return y.reshape(y.shape[0], y.shape[1], -1)
    return channel_rows(module, y).transpose(1, 2)


def normalized_input(module: nn.Module, x: Tensor) -> Tensor:
    """The normalized input :math:`\\hat x` of a BatchNorm (eval) or LayerNorm layer.

    .. math::

        \\hat x = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}}

    with BatchNorm's running statistics per channel, or LayerNorm's mean and (biased)
    variance over ``normalized_shape`` per position: the layer's output is
    :math:`\\gamma \\odot \\hat x + \\beta`.

    Parameters
    ----------
    module : nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d or nn.LayerNorm
    x : Tensor of shape (n, ...)
        The layer's input.

    Returns
    -------
    Tensor of shape (n, P, C)
        :math:`\\hat x` as rows (see :func:`channel_rows`), detached.
    """
    x = x.detach()
    if isinstance(module, nn.LayerNorm):
        xhat = layer_norm(x, module.normalized_shape, None, None, module.eps)
    elif isinstance(module, _BatchNorm):
        mean, var = module.running_mean, module.running_var
        if module.training or not isinstance(mean, Tensor) or not isinstance(var, Tensor):
            raise NtklabValueError(
                f"module: expected {type(module).__name__} in eval mode with running "
                "statistics, got one using batch statistics"
            )
        xhat = batch_norm(x, mean, var, None, None, False, 0.0, module.eps)
    else:
        raise NtklabTypeError(
            f"module: expected a BatchNorm or LayerNorm layer, got {type(module).__name__}"
        )
    return channel_rows(module, xhat)


# ----------------------------------------------------------------------------- formulas


def per_example_gradients(cot: Tensor, patches: Tensor, out: Tensor | None = None) -> Tensor:
    """Per-example weight gradients of a (grouped) convolution or dense layer, every output.

    .. math:: G_a(x)_{c, \\cdot} = \\sum_p g_{acp}(x)\\, u_{p, \\mathrm{group}(c)}(x)

    Parameters
    ----------
    cot : Tensor of shape (n, k, C, P)
        Cotangents ``g``: gradients of the ``k`` outputs in the layer's output.
    patches : Tensor of shape (n, P, G, D)
        Inputs (patches) ``u`` per position and group; ``C`` divisible by ``G``.
    out : Tensor of shape (n, k, C, D), optional
        Written in place (without a copy when contiguous and ``G = 1``).

    Returns
    -------
    Tensor of shape (n, k, C, D)
        Entry ``[i, a, c, d]`` is the gradient of output ``a`` of example ``i`` in the weight
        ``[c, d]`` (``weight.reshape(C, D)``). One batched matrix product, ``2 n k P C D``
        flops.
    """
    n, k, c, p = cot.shape
    groups, d = patches.shape[2], patches.shape[3]
    if groups == 1 and (out is None or out.is_contiguous()):
        left, right = cot.reshape(n, k * c, p), patches.reshape(n, p, d)
        if out is None:  # shape: (n, k C, P) @ (n, P, D)
            return torch.bmm(left, right).view(n, k, c, d)
        torch.bmm(left, right, out=out.view(n, k * c, d))
        return out
    grouped = cot.reshape(n, k, groups, c // groups, p)
    result = torch.einsum("nkgcp,npgd->nkgcd", grouped, patches).reshape(n, k, c, d)
    if out is None:
        return result
    out.copy_(result)
    return out


def affine_gradients(cot: Tensor, xhat: Tensor) -> Tensor:
    """Per-example gradients of a normalization layer's scale, one output.

    .. math:: \\frac{\\partial f_a}{\\partial \\gamma_c} = \\sum_p g_{acp} \\hat x_{cp}

    (the shift's, :math:`\\sum_p g_{acp}`, is the cotangents' sum over positions).

    Parameters
    ----------
    cot : Tensor of shape (n, C, P)
        The gradients of output ``a`` in the layer's output.
    xhat : Tensor of shape (n, C, P)
        The normalized input (:func:`normalized_input`, channels first).

    Returns
    -------
    Tensor of shape (n, C)
        One elementwise product and one reduction over positions (memory bound, as the
        batched ``1 x P @ P x 1`` products it replaces, which were slower).
    """
    return (cot * xhat).sum(2)


def factor_cotangents(
    cot: Tensor | Sequence[Tensor | None], rtol: float | None = None
) -> tuple[Tensor, Tensor] | None:
    """Write cotangents as :math:`g_{acp} = \\alpha_{ac} h_{cp}` per example, if they factor.

    For each example and channel, ``h`` is the cotangent of the output of largest norm and
    ``alpha_ac = g_{a c p*} / h_{c p*}`` at the position ``p*`` where ``|h|`` is largest (a
    rank-one skeleton: exact up to one rounding when the cotangents factor, unlike a
    projection, whose sums over positions round more). The factorization is accepted when
    the residual of every example and channel is at most ``rtol`` times the norm of its
    cotangents.

    Parameters
    ----------
    cot : Tensor of shape (n, k, C, P), or a sequence of k (Tensor of shape (n, C, P) or None)
        Stacked, or one tensor per output (None: zeros, an output that ignores the layer).
        On the CPU in float32 and float64 a compiled loop (:mod:`._compiled_cotangents`)
        reads them once; elsewhere they are stacked and factored in torch.
    rtol : float, optional
        Default :data:`FACTOR_RTOL` times the dtype's machine epsilon.

    Returns
    -------
    (alpha, h) or None
        ``alpha`` of shape (n, k, C), ``h`` of shape (n, C, P); None when some example's
        cotangents have rank above one in some channel, or are not finite.

    Raises
    ------
    NtklabValueError
        If every output is None.

    Examples
    --------
    >>> import torch
    >>> alpha, h = torch.randn(2, 4, 3), torch.randn(2, 3, 5)
    >>> found = factor_cotangents(alpha.unsqueeze(3) * h.unsqueeze(1))
    >>> found is not None and found[0].shape == (2, 4, 3)
    True
    >>> factor_cotangents(torch.randn(2, 4, 3, 5)) is None
    True
    """
    rows = [cot[:, a] for a in range(cot.shape[1])] if isinstance(cot, Tensor) else list(cot)
    like = next((g for g in rows if g is not None), None)
    if like is None:
        raise NtklabValueError(
            f"cot: expected a tensor of shape (n, k, C, P) or per-output tensors, at least "
            f"one of them not None; got {len(rows)} outputs, all None"
        )
    if rtol is None:
        rtol = FACTOR_RTOL * torch.finfo(like.dtype).eps
    rows_in_place = (
        like.stride(2) == 1
        and like.stride(1) == like.shape[2]
        and all(
            g is None or (g.shape, g.stride(), g.dtype) == (like.shape, like.stride(), like.dtype)
            for g in rows
        )
    )  # each output's (C, P) contiguous, one example stride: read where they lie
    if rows_in_place and _compiled_cotangents.factor_available(like):
        return _compiled_cotangents.factor(rows, rtol)
    if not isinstance(cot, Tensor):
        cot = torch.stack([torch.zeros_like(like) if g is None else g for g in rows], dim=1)
    n, k, c, p = cot.shape
    norms = torch.linalg.vector_norm(cot, dim=3)  # shape: (n, k, C)
    ref = norms.argmax(1, keepdim=True)  # shape: (n, 1, C)
    h = cot.gather(1, ref.unsqueeze(3).expand(n, 1, c, p)).squeeze(1)  # shape: (n, C, P)
    pivot = h.abs().argmax(2, keepdim=True)  # shape: (n, C, 1)
    top = h.gather(2, pivot).squeeze(2)  # shape: (n, C)
    at_pivot = cot.gather(3, pivot.unsqueeze(1).expand(n, k, c, 1)).squeeze(3)  # (n, k, C)
    alpha = at_pivot.div_(torch.where(top != 0, top, torch.ones_like(top)).unsqueeze(1))
    residual = torch.addcmul(cot, alpha.unsqueeze(3), h.unsqueeze(1), value=-1.0)
    # the norm over (outputs, positions) as a norm of per-output norms: one reduction
    # over the contiguous axis (a reduction over two strided axes is several times slower)
    worst = torch.linalg.vector_norm(torch.linalg.vector_norm(residual, dim=3), dim=1)
    if bool((worst <= rtol * torch.linalg.vector_norm(norms, dim=1)).all()):
        return alpha, h
    return None


def factored_inputs(h: Tensor, patches: Tensor, bias_scale: float | None) -> Tensor:
    """The per-channel inputs :math:`H_c(x) = \\sum_p h_{cp} u_{p, \\mathrm{group}(c)}` of
    factored cotangents, with the bias column :math:`s_b \\sum_p h_{cp}` appended.

    Parameters
    ----------
    h : Tensor of shape (n, C, P)
    patches : Tensor of shape (n, P, G, D)
    bias_scale : float or None
        ``s_b`` if the bias is differentiated, else None (no bias column).

    Returns
    -------
    Tensor of shape (n, C, D + [bias])
        Costs ``2 n P C D`` flops: the cost of one output's weight gradients.
    """
    n, c, p = h.shape
    groups, d = patches.shape[2], patches.shape[3]
    if groups == 1:  # shape: (n, C, P) @ (n, P, D)
        product = torch.bmm(h, patches.reshape(n, p, d))
    else:
        grouped = h.reshape(n, groups, c // groups, p)
        product = torch.einsum("ngcp,npgd->ngcd", grouped, patches).reshape(n, c, d)
    if bias_scale is None:
        return product
    out = h.new_empty((n, c, d + 1))
    out[:, :, :d] = product
    out[:, :, d] = h.sum(2) if bias_scale == 1.0 else h.sum(2).mul_(bias_scale)
    return out


#: Input positions whose per-channel products ``Z`` (:func:`input_cotangents`) are formed and
#: combined at once, so that their ``C x C_in x 128`` numbers (1 MiB in float32 for 64 x 32
#: channels) are combined while still in cache instead of written out for a whole image.
_Z_POSITIONS = 128


def input_cotangents(
    conv: Conv, alpha: Tensor, h: Tensor, in_shape: Sequence[int], out: Tensor | None = None
) -> Tensor:
    """Cotangents at a convolution's input, for every output, from factored cotangents at its
    output, propagated channel by channel.

    .. math::

        \\bar g_a(x) = \\mathrm{conv}^\\top\\Big(\\sum_c \\alpha_{ac}\\, e_c \\otimes h_c\\Big)
                    = \\sum_c \\alpha_{ac}\\, Z_c, \\qquad
        Z_c = \\mathrm{conv}^\\top(e_c \\otimes h_c)

    Each ``Z_c`` (``C_in / G`` channels) is the correlation of ``h_c``, with zeros inserted
    between positions for a stride and padded, with the flipped kernel of output channel
    ``c``: a product of ``(C_in / G) x taps`` by ``taps x P_in`` per channel, together the
    flops of one backward pass instead of ``k``; their combination costs
    ``2 k C (C_in / G) P_in`` flops. One example at a time (and, without groups, a block of
    input positions at a time), so that the ``Z`` stay small.

    Parameters
    ----------
    conv : nn.Conv1d, nn.Conv2d or nn.Conv3d
        With ``padding_mode="zeros"`` (any stride, padding, dilation, groups).
    alpha : Tensor of shape (n, k, C)
    h : Tensor of shape (n, C, P)
        :func:`factor_cotangents` of the cotangents at the output.
    in_shape : sequence of int
        The input's shape ``(n, C_in, *spatial)``.
    out : Tensor of shape (n, k, C_in, *spatial), optional
        Contiguous; written in place.

    Returns
    -------
    Tensor of shape (n, k, C_in, *spatial)
        The gradient of output ``a`` in the input, for each ``a``.

    Examples
    --------
    >>> import torch
    >>> conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1, groups=1)
    >>> x = torch.randn(2, 3, 7, 7, requires_grad=True)
    >>> y = conv(x)
    >>> alpha, h = torch.randn(2, 5, 4), torch.randn(2, 4, 16)
    >>> g = input_cotangents(conv, alpha, h, x.shape)
    >>> (grad,) = torch.autograd.grad(y, x, (alpha[:, 1, :, None] * h).view(y.shape))
    >>> torch.allclose(g[:, 1], grad, atol=1e-5)
    True
    """
    if conv.padding_mode != "zeros":
        raise NtklabValueError(f"conv: expected padding_mode='zeros', got {conv.padding_mode!r}")
    dims = conv.weight.ndim - 2
    n, k, c = alpha.shape
    groups = conv.groups
    weight = conv.weight.detach()
    cin = weight.shape[1]  # C_in / G
    spatial = list(in_shape[2:])
    kernel, stride, dilation = conv.kernel_size, conv.stride, conv.dilation
    pads = _padding(conv, dims)  # last axis first
    before = [pads[2 * (dims - 1 - i)] for i in range(dims)]
    padded = [spatial[i] + before[i] + pads[2 * (dims - 1 - i) + 1] for i in range(dims)]
    sizes = [(padded[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(dims)]
    reach = [dilation[i] * (kernel[i] - 1) for i in range(dims)]
    # h with zeros between positions (stride), padded by the kernel's reach on both sides
    inner = [(sizes[i] - 1) * stride[i] + 1 for i in range(dims)]
    compiled = (
        _compiled_cotangents.available(h, groups, dims)
        and weight.dtype == h.dtype
        and alpha.dtype == h.dtype
    )
    # the compiled loop reads one vector past the last column of a row: zeros there
    extra = _compiled_cotangents.VECTOR_BYTES // h.element_size() if compiled else 0
    up = h.new_zeros(
        (n, c, *(inner[i] + 2 * reach[i] + (extra if i == dims - 1 else 0) for i in range(dims)))
    )
    index = tuple(
        slice(reach[i], reach[i] + inner[i], stride[i]) for i in range(dims)
    )  # shape: the output positions
    up[(slice(None), slice(None), *index)] = h.reshape(n, c, *sizes)
    full = [inner[i] + reach[i] for i in range(dims)]  # positions reached, from the start
    taps = math.prod(kernel)
    flipped = weight.flip(list(range(2, 2 + dims))).reshape(c, cin, taps)
    lo = [min(before[i], full[i]) for i in range(dims)]
    hi = [min(before[i] + spatial[i], full[i]) for i in range(dims)]
    whole = all(lo[j] == before[j] and hi[j] == before[j] + spatial[j] for j in range(dims))
    if out is None:
        out = h.new_zeros((n, k, groups * cin, *spatial))
    elif not whole:
        out.zero_()  # positions no output position reaches
    if compiled:  # z_c and their combination in registers, one pass over the cotangents
        first = _plane(lo, dims, row=0)
        u = (up if dims == 2 else up.unsqueeze(2))[:, :, first[0] :, first[1] :]
        _compiled_cotangents.run(
            u,
            flipped.transpose(0, 1).contiguous(),
            alpha.transpose(1, 2).contiguous(),
            out.view(n, k, cin, *_plane(spatial, dims)),
            _plane(kernel, dims),
            _plane(dilation, dims),
            _plane([lo[j] - before[j] for j in range(dims)], dims, row=0),
            _plane([hi[j] - lo[j] for j in range(dims)], dims),
        )
        return out
    st = up.stride()
    for i in range(n):
        if dims <= 2:  # im2col of the window of positions reached
            window = up[i : i + 1][
                (slice(None), slice(None), *(slice(lo[j], hi[j] + reach[j]) for j in range(dims)))
            ]
            if dims == 1:
                window = window.unsqueeze(2)
            size = (1, *kernel) if dims == 1 else tuple(kernel)
            dil = (1, *dilation) if dims == 1 else tuple(dilation)
            cols = unfold(window, size, dilation=dil).view(c, taps, -1)  # shape: (C, taps, P)
        else:
            view = up[i].as_strided(
                (c, *kernel, *full),
                (st[1], *(st[2 + j] * dilation[j] for j in range(dims)), *st[2:]),
            )
            region = (
                slice(None),
                *(slice(None),) * dims,
                *(slice(lo[j], hi[j]) for j in range(dims)),
            )
            cols = view[region].reshape(c, taps, -1)  # shape: (C, taps, P_window)
        if whole and groups == 1:  # a few positions at a time, their Z in cache
            target = out[i].view(k, cin, -1)
            for s in range(0, cols.shape[2], _Z_POSITIONS):
                z = torch.bmm(flipped, cols[:, :, s : s + _Z_POSITIONS])  # (C, C_in, p)
                target[:, :, s : s + _Z_POSITIONS] = (alpha[i] @ z.view(c, -1)).view(k, cin, -1)
            continue
        z = torch.bmm(flipped, cols)  # shape: (C, C_in / G, P_window)
        z = z.view(groups, c // groups, cin * cols.shape[2])
        weights = alpha[i].view(k, groups, c // groups).transpose(0, 1)  # shape: (G, k, C / G)
        mixed = torch.bmm(weights, z)  # shape: (G, k, C_in / G * P_window)
        target = out[i][
            (
                slice(None),
                slice(None),
                *(slice(lo[j] - before[j], hi[j] - before[j]) for j in range(dims)),
            )
        ]
        target.copy_(
            mixed.view(groups, k, cin, *(hi[j] - lo[j] for j in range(dims)))
            .transpose(0, 1)
            .reshape(target.shape)
        )
    return out


def input_cotangent_flops(
    conv: Conv, p_out: int, p_in: int, k: int, compiled: bool = False
) -> float:
    """Flops of :func:`input_cotangents` per example: the per-channel products
    ``2 C (C_in / G) taps P_in``, the combination ``2 k C (C_in / G) P_in``, and the
    elementwise traffic, weighted as :data:`ELEMENTWISE_FLOPS`: in torch, the zero-inserted,
    unfolded cotangents ``C taps P_in``, the products ``C (C_in / G) P_in`` written and read,
    and the result ``k C_in P_in``; in the compiled loop (``compiled``), which keeps the
    products in registers, the padded cotangents ``C P_in`` and the result."""
    c, cin = conv.out_channels, conv.in_channels // conv.groups
    taps = math.prod(conv.kernel_size)
    products = c * cin * p_in
    result = k * conv.in_channels * p_in
    moved = c * p_in + result if compiled else c * taps * p_in + 2 * products + result
    return 2.0 * products * taps + 2.0 * k * products + ELEMENTWISE_FLOPS * moved


def add_factored(
    acc: Tensor, h1: Tensor, alpha1: Tensor, h2: Tensor, alpha2: Tensor, outputs: Outputs
) -> None:
    """Add the share of a layer with factored cotangents to a kernel tile, in place.

    .. math::

        \\Theta(x_i, x'_j)_{ab} \\mathrel{+}= \\sum_c \\alpha_{ac}(x_i)\\, \\alpha_{bc}(x'_j)\\,
            B_{cij}, \\qquad B_{cij} = \\langle H_c(x_i), H_c(x'_j) \\rangle

    Parameters
    ----------
    acc : Tensor
        Trace ``(n1, n2)`` (the sum over ``a = b``, not divided by ``k``), diagonal
        ``(k, n1, n2)`` or full ``(k, n1, k, n2)``; possibly a strided block.
    h1, h2 : Tensor of shape (n1, C, D), (n2, C, D)
        :func:`factored_inputs` of the two batches.
    alpha1, alpha2 : Tensor of shape (n1, k, C), (n2, k, C)
    outputs : {"trace", "diagonal", "full"}

    Notes
    -----
    Flops: ``2 n1 n2 C D`` for ``B``, then ``2 n1 n2 C k`` (trace), ``3 n1 n2 C k``
    (diagonal, elementwise) or ``2 n1 n2 C k^2`` (full) to weigh it.
    """
    b = torch.bmm(h1.transpose(0, 1), h2.permute(1, 2, 0))  # shape: (C, n1, n2)
    if outputs == "trace":
        a = torch.bmm(alpha1.permute(2, 0, 1), alpha2.permute(2, 1, 0))  # shape: (C, n1, n2)
        acc.add_(a.mul_(b).sum(0))
    elif outputs == "diagonal":
        k = alpha1.shape[1]
        bt = b.permute(1, 0, 2)  # shape: (n1, C, n2)
        for out in range(k):
            weighted = bt * alpha2[:, out, :].T.unsqueeze(0)  # shape: (n1, C, n2)
            acc[out].add_(torch.bmm(alpha1[:, out, :].unsqueeze(1), weighted).squeeze(1))
    else:
        n1, k, c = alpha1.shape
        n2 = alpha2.shape[0]
        # shape: (n1, C, k, n2): alpha2[j, b, c] B[c, i, j]
        y = b.permute(1, 0, 2).unsqueeze(2) * alpha2.permute(2, 1, 0).unsqueeze(0)
        full = torch.bmm(alpha1, y.reshape(n1, c, k * n2))  # shape: (n1, k, k n2)
        acc.add_(full.view(n1, k, k, n2).permute(1, 0, 2, 3))


# ----------------------------------------------------------------------------- flops


def _entries(k: int, outputs: Outputs) -> int:
    return {"trace": 1, "diagonal": k, "full": k * k}[outputs]


def pairwise_flops(
    n1: int, n2: int, p1: int, p2: int, k: int, c: int, d: int, outputs: Outputs
) -> float:
    """GEMM-equivalent flops of the Gram products over positions, per group of a layer.

    ``n1 n2 P1 P2 (2 D + 2 k C [x k for full])`` for the two Grams plus the elementwise
    product and the sum over positions (``n1 n2 P1 P2`` elements per output pair, weighted
    as :data:`ELEMENTWISE_FLOPS`); ``d = 0`` for a bias alone.
    """
    pairs = float(n1 * n2 * p1 * p2)
    gemm = 2 * pairs * (c * (k * k if outputs == "full" else k) + d)
    return gemm + ELEMENTWISE_FLOPS * pairs * _entries(k, outputs) * (2.0 if p1 * p2 > 1 else 1.0)


def per_example_flops(
    n1: int, n2: int, p1: int, p2: int, k: int, c: int, d: int, outputs: Outputs, same: bool
) -> float:
    """Flops of forming per-example gradients and of their Gram, per layer.

    ``2 k C D (n1 P1 + n2 P2)`` to form (once when ``same``), ``2 n1 n2 k C D`` (times
    ``k`` for full) for the Gram; ``d`` counts the bias column.
    """
    formed = 2.0 * k * c * d * (n1 * p1 + (0 if same else n2 * p2))
    gram = 2.0 * n1 * n2 * k * c * d * (k if outputs == "full" else 1)
    return formed + gram


def factored_flops(
    n1: int, n2: int, p1: int, p2: int, k: int, c: int, d: int, outputs: Outputs, same: bool
) -> float:
    """Flops of the factored contraction, per layer.

    Stacking, checking and factoring the cotangents (three elementwise passes over the
    ``n P k C`` cotangents, each weighted as :data:`ELEMENTWISE_FLOPS`), forming ``H``
    (``2 n P C D``), the per-channel Gram ``2 n1 n2 C D`` and its weighting (see
    :func:`add_factored`).
    """
    inputs = n1 * p1 + (0 if same else n2 * p2)
    check = ELEMENTWISE_FLOPS * 3.0 * inputs * k * c
    formed = 2.0 * c * d * inputs
    pairs = float(n1 * n2 * c)
    weigh = {
        "trace": 2.0 * k + 2 * ELEMENTWISE_FLOPS,
        "diagonal": k * (2.0 + 2 * ELEMENTWISE_FLOPS),
        "full": 2.0 * k * k + ELEMENTWISE_FLOPS * (k + k * k),
    }[outputs]
    return check + formed + pairs * (2.0 * d + weigh)
