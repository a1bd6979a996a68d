r"""Vectorized ensembles: many independent finite networks trained together.

Two representations, one trainer (:func:`train_ensemble`):

- :class:`MLPEnsemble` (built by :func:`ensemble`): the :math:`M` members of a Dense/activation
  architecture (an MLP of any depth) as batched weights, ``weight`` of shape
  ``(M, fan_in, fan_out)`` and ``bias`` of shape ``(M, 1, fan_out)`` per Dense layer. Each
  member is drawn exactly as ``arch.to_torch`` draws one network (the multipliers and
  initialization scales are read from a template network's
  :attr:`~ntklab.nets.DenseLayer.scales`). Training uses a hand-written backward pass
  (closed-form backpropagation with batched GEMMs into preallocated buffers, ``baddbmm_``
  fusing each gradient with its update) over chunks of members sized to stay in cache; one
  hidden layer with one output (claim E1's networks) takes a rank-one shortcut that needs six
  passes over the activations per step. ``backward="autograd"`` runs the same loop with
  autograd instead (1.5-3x slower here; kept for cross-checks, tested equal).
- :class:`ModuleEnsemble` (built by :func:`stack_modules`): any list of modules of identical
  structure, stacked with ``torch.func.stack_module_state`` and trained with
  ``vmap(grad(functional_call))``: the generic path.

Training is full-batch gradient descent on the squared loss of each member (the convention of
:mod:`ntklab.nets.training`): with :math:`N` = ``y.numel()`` per member,

.. math::

    L = \frac{c}{2} \sum (f - y)^2, \quad c = 1/N \ (\text{"mean"}) \text{ or } 1 \
    (\text{"sum"}), \qquad
    \theta \leftarrow \theta - \eta \big(\nabla_\theta L / \alpha^2 + \lambda \theta\big),

with :math:`\alpha` the lazy-training output scale (``to_torch(alpha=...)``, the loss being
:math:`L(\alpha f)/\alpha^2`) and :math:`\lambda` the weight decay; time is neural-tangents'
``t``, a number of steps of size :math:`\eta`, the flow time :math:`\eta t`. The members are
independent, so the loop runs member chunk by member chunk, all steps on one chunk before the next.

With ``zero_output=True`` each member is the antisymmetric pair
:math:`f = (a - b)/\sqrt 2` of two halves of width ``width // 2``, ``b`` a copy of ``a`` at
initialization (:class:`~ntklab.nets.AntisymmetricPair`); the batched tensors then hold
:math:`2M` half-networks, interleaved (``a_0, b_0, a_1, b_1, ...``).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import Tensor, nn

from .._checks import check_nonnegative, check_positive_int
from .._repr import short_repr
from ..errors import NtklabTypeError, NtklabValueError, NumericalWarning
from ..kernels import Architecture, Dense
from ..kernels.activations import Activation, Elementwise, Erf, Identity, Relu
from ..memory import resolve_max_memory
from .modules import DenseLayer
from .training import Normalization, check_steps
from .wrappers import output_scale

__all__ = [
    "EnsembleDense",
    "EnsembleTraining",
    "MLPEnsemble",
    "ModuleEnsemble",
    "ensemble",
    "stack_modules",
    "train_ensemble",
]

Backward = Literal["manual", "autograd"]

_DEFAULT_CHUNK_ELEMENTS = 2**18  # activations per buffer and chunk: about 1 MiB in float32


# ---------------------------------------------------------------------------------------------
# the batched representation


@short_repr
@dataclass(frozen=True, eq=False)
class EnsembleDense:
    """One Dense layer of an :class:`MLPEnsemble`: :math:`y = m_W\\, x W + m_b\\, b`.

    Attributes
    ----------
    weight : Tensor of shape (P, fan_in, fan_out)
        One matrix per (half-)network; ``P = members`` (``2 * members`` with ``zero_output``).
    bias : Tensor of shape (P, 1, fan_out) or None
    weight_multiplier, bias_multiplier : float
        :math:`m_W, m_b` of the parameterization (:attr:`ntklab.nets.DenseLayer.scales`).
    """

    weight: Tensor
    bias: Tensor | None
    weight_multiplier: float
    bias_multiplier: float


@short_repr
@dataclass(frozen=True, eq=False)
class MLPEnsemble:
    """``n_samples`` independent networks of a Dense/activation architecture, batched.

    Build it with :func:`ensemble`; train it with :func:`train_ensemble`. Calling it maps
    inputs of shape (n, d) (shared by all members) or (M, n, d) (one batch per member) to
    outputs of shape (M, n, k).

    Attributes
    ----------
    layers : tuple of EnsembleDense and Activation
        The layers in order, Dense layers carrying the batched weights.
    n_samples : int
        :math:`M`, the number of networks.
    arch : Architecture
    width, out_features, in_features : int
    parameterization : str or None
    alpha : float
        Output scale (lazy training): the output is ``alpha`` times the network's.
    zero_output : bool
        Each member is an antisymmetric pair of two halves (interleaved in the tensors).
    """

    layers: tuple[EnsembleDense | Activation, ...]
    n_samples: int
    arch: Architecture
    width: int
    out_features: int
    in_features: int
    parameterization: Literal["ntk", "standard", "mup"] | None
    alpha: float
    zero_output: bool

    @property
    def copies(self) -> int:
        """Half-networks per member: 2 with ``zero_output``, else 1."""
        return 2 if self.zero_output else 1

    @property
    def dense(self) -> tuple[EnsembleDense, ...]:
        """The Dense layers (with the weights), in order."""
        return tuple(layer for layer in self.layers if isinstance(layer, EnsembleDense))

    @property
    def dtype(self) -> torch.dtype:
        return self.dense[0].weight.dtype

    @property
    def device(self) -> torch.device:
        return self.dense[0].weight.device

    def forward(self, x: Tensor) -> Tensor:
        """Outputs of every member.

        Parameters
        ----------
        x : Tensor of shape (n, d) or (M, n, d)
            Shared inputs, or one batch per member.

        Returns
        -------
        Tensor of shape (M, n, k)
        """
        shared = _check_ensemble_inputs("x", x, self.n_samples, self.in_features, self.dtype)
        with torch.no_grad():
            return self.alpha * _combine(_forward(self.layers, x, shared, self.copies), self.copies)

    __call__ = forward

    def member(self, i: int) -> nn.Module:
        """Member ``i`` as the ordinary network ``arch.to_torch`` builds, carrying its weights.

        Returns
        -------
        torch.nn.Module
            ``arch.to_torch(width, out_features, in_features=..., parameterization=...,
            alpha=..., zero_output=...)`` with member ``i``'s parameters copied in.
        """
        m = self.n_samples
        if isinstance(i, bool) or not isinstance(i, int) or not -m <= i < m:
            raise NtklabValueError(f"i: expected an int in [-{m}, {m}), got {i!r}")
        i %= m
        net = _build_template(self, device=self.device)
        layers = _dense_layers(net)
        count = len(self.dense)
        with torch.no_grad():
            for c in range(self.copies):
                for ours, theirs in zip(
                    self.dense, layers[c * count : (c + 1) * count], strict=True
                ):
                    p = i * self.copies + c
                    theirs.weight.copy_(ours.weight[p].T)
                    if ours.bias is not None and theirs.bias is not None:
                        theirs.bias.copy_(ours.bias[p, 0])
        return net

    def modules(self) -> list[nn.Module]:
        """All members as ``to_torch`` networks (for :func:`stack_modules` and checks)."""
        return [self.member(i) for i in range(self.n_samples)]


def ensemble(
    arch: Architecture,
    n_samples: int,
    width: int = 1024,
    out_features: int = 1,
    *,
    in_features: int,
    parameterization: Literal["ntk", "standard", "mup"] | None = None,
    alpha: float = 1.0,
    zero_output: bool = False,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> MLPEnsemble:
    """Draw ``n_samples`` independent networks of a Dense/activation architecture, batched.

    Each member has the distribution of ``arch.to_torch(width, out_features, in_features=...,
    parameterization=..., alpha=..., zero_output=...)``: the same multipliers and
    initialization scales (read from such a network's Dense layers), unit Gaussian draws
    scaled by the layer's init std, bias included.

    Parameters
    ----------
    arch : Architecture
        Dense layers and activations only (an MLP of any depth).
    n_samples : int
        :math:`M \\ge 1`, the number of networks (``n_samples`` as in
        :func:`ntklab.empirical.monte_carlo_kernel`).
    width, out_features : int
        As in ``to_torch``.
    in_features : int
        Input dimension d (required: the weights are drawn now).
    parameterization, alpha, zero_output
        As in ``to_torch``.
    generator : torch.Generator, optional
    dtype : torch.float32 or torch.float64
    device : optional

    Returns
    -------
    MLPEnsemble

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.nets.ensemble import ensemble
    >>> arch = nl.serial(nl.Dense(w_std=1.0, b_std=None), nl.Erf(), nl.Dense(w_std=1.0, b_std=None))
    >>> ens = ensemble(arch, 100, 64, in_features=3, generator=torch.Generator().manual_seed(0))
    >>> ens(torch.randn(5, 3)).shape
    torch.Size([100, 5, 1])
    """
    if not isinstance(arch, Architecture):
        raise NtklabTypeError(f"arch: expected an ntklab Architecture, got {type(arch).__name__}")
    members = check_positive_int("n_samples", n_samples)
    check_positive_int("in_features", in_features)
    if dtype not in (torch.float32, torch.float64):
        raise NtklabTypeError(f"dtype: expected torch.float32 or torch.float64, got {dtype}")
    for i, layer in enumerate(arch.layers):
        if not isinstance(layer, Dense | Activation):
            raise NtklabValueError(
                f"arch.layers[{i}]: expected Dense or activation layers only (batched MLP "
                f"ensembles), got {type(layer).__name__}; use stack_modules for other modules"
            )
    if not isinstance(arch.layers[-1], Dense):
        raise NtklabValueError(
            "arch: expected a Dense readout as the last layer, got "
            f"{type(arch.layers[-1]).__name__}"
        )
    probe = MLPEnsemble(
        (), members, arch, width, out_features, in_features, parameterization, alpha, zero_output
    )
    template = _build_template(probe, device="meta")  # validates width, alpha, ... cheaply
    copies = probe.copies
    found = _dense_layers(template)
    count = sum(isinstance(layer, Dense) for layer in arch.layers)
    if len(found) != copies * count:
        raise NtklabValueError(
            f"arch: expected {copies * count} DenseLayer modules in to_torch's network, got "
            f"{len(found)}"
        )
    layers: list[EnsembleDense | Activation] = []
    dense_iter = iter(found[:count])
    for layer in arch.layers:
        if isinstance(layer, Activation):
            layers.append(layer)
            continue
        mod = next(dense_iter)
        w_mult, w_std, b_mult, b_std = mod.scales
        shape = (members, mod.in_features, mod.out_features)
        weight = torch.randn(shape, generator=generator, dtype=dtype, device=device).mul_(w_std)
        bias = None
        if mod.bias is not None:
            bias = torch.randn(
                (members, 1, mod.out_features), generator=generator, dtype=dtype, device=device
            ).mul_(b_std)
        if copies == 2:  # the second half of each pair is a copy of the first
            weight = weight.repeat_interleave(2, dim=0)
            bias = None if bias is None else bias.repeat_interleave(2, dim=0)
        layers.append(EnsembleDense(weight, bias, w_mult, b_mult))
    return replace(probe, layers=tuple(layers))


def _build_template(ens: MLPEnsemble, *, device: torch.device | str) -> nn.Module:
    kwargs: dict[str, Any] = {}
    if ens.parameterization is not None:
        kwargs["parameterization"] = ens.parameterization
    if ens.alpha != 1.0:
        kwargs["alpha"] = ens.alpha
    if ens.zero_output:
        kwargs["zero_output"] = True
    dtype = ens.dtype if ens.layers else torch.float32
    return ens.arch.to_torch(
        ens.width,
        ens.out_features,
        in_features=ens.in_features,
        dtype=dtype,
        device=device,
        **kwargs,
    )


def _dense_layers(net: nn.Module) -> list[DenseLayer]:
    return [m for m in net.modules() if isinstance(m, DenseLayer)]


# ---------------------------------------------------------------------------------------------
# forward pass and the closed-form backward pass


def _activation_kind(act: Activation) -> str:
    """How the backward pass gets :math:`\\phi'`: from the output h, from z, or by autograd."""
    if isinstance(act, Identity):
        return "identity"
    if isinstance(act, Relu):
        return "relu"
    if isinstance(act, Erf):
        return "erf"
    if isinstance(act, Elementwise):
        if act.fn is torch.tanh:
            return "tanh"
        if act.fn is torch.sigmoid:
            return "sigmoid"
    return "generic"


def _dense_forward(layer: EnsembleDense, w: Tensor, b: Tensor | None, a: Tensor) -> Tensor:
    """``m_W a W + m_b b`` for a chunk: ``a`` (P, n, fan_in), ``w`` (P, fan_in, fan_out)."""
    if b is None:
        return torch.bmm(a, w).mul_(layer.weight_multiplier)
    return torch.baddbmm(b, a, w, beta=layer.bias_multiplier, alpha=layer.weight_multiplier)


def _forward(
    layers: Sequence[EnsembleDense | Activation],
    x: Tensor,
    shared: bool,
    copies: int,
    chunk: slice | None = None,
) -> Tensor:
    """Raw outputs (P, n, k) of the half-networks of ``chunk`` (all by default)."""
    h = x
    first = True
    for layer in layers:
        if isinstance(layer, EnsembleDense):
            w = layer.weight if chunk is None else layer.weight[chunk]
            b = None if layer.bias is None else (layer.bias if chunk is None else layer.bias[chunk])
            if first:
                h = _first_input(x, shared, copies, w.shape[0], chunk)
                first = False
            h = _dense_forward(layer, w, b, h)
        else:
            h = layer.phi(h)
    return h


def _first_input(x: Tensor, shared: bool, copies: int, count: int, chunk: slice | None) -> Tensor:
    """The (P, n, d) input of the first layer: ``x`` expanded, or each member's own rows."""
    if shared:
        return x.expand(count, *x.shape)
    if chunk is not None:
        start, stop = chunk.start // copies, chunk.stop // copies
        x = x[start:stop]
    return x.repeat_interleave(copies, dim=0) if copies > 1 else x


def _combine(out: Tensor, copies: int) -> Tensor:
    """Member outputs from half-network outputs: ``(a - b)/sqrt 2`` for pairs."""
    if copies == 1:
        return out
    return (out[0::2] - out[1::2]) * (1.0 / math.sqrt(2.0))


def _erf_forward(act: Erf, z: Tensor, out: Tensor) -> Tensor:
    """:math:`a\\,\\mathrm{erf}(b z) + c` written into ``out``."""
    h = torch.erf(z if act.b == 1.0 else z * act.b, out=out)
    if act.a != 1.0:
        h.mul_(act.a)
    return h if act.c == 0.0 else h.add_(act.c)


def _erf_derivative(act: Erf, z: Tensor, out: Tensor) -> Tensor:
    """:math:`\\phi'(z) = \\frac{2ab}{\\sqrt\\pi} e^{-b^2 z^2}` written into ``out`` (which
    may be ``z``), as :math:`ab\\, e^{\\log(2/\\sqrt\\pi) - b^2 z^2}`."""
    log_c = torch.full((), math.log(2.0 / math.sqrt(math.pi)), dtype=z.dtype, device=z.device)
    d = torch.addcmul(log_c, z, z, value=-(act.b * act.b), out=out).exp_()
    scale = act.a * act.b
    return d if scale == 1.0 else d.mul_(scale)


def _activation_backward(
    act: Activation, kind: str, z: Tensor, h: Tensor, g: Tensor, tmp: Tensor
) -> Tensor:
    """``g * phi'(z)``, in place on ``g`` (``tmp``: scratch of ``g``'s shape)."""
    if kind == "identity":
        return g
    if kind == "relu":  # phi' = sign(h) in {0, 1}, 0 at z = 0 as autograd's
        return g.mul_(torch.sign(h, out=tmp))
    if kind == "tanh":  # phi' = 1 - h^2:  g - g h^2
        torch.mul(h, h, out=tmp)
        return g.addcmul_(g, tmp, value=-1.0)
    if kind == "sigmoid":  # phi' = h - h^2
        torch.addcmul(h, h, h, value=-1.0, out=tmp)
        return g.mul_(tmp)
    if kind == "erf":
        assert isinstance(act, Erf)
        return g.mul_(_erf_derivative(act, z, out=tmp))
    with torch.enable_grad():
        zz = z.detach().requires_grad_(True)
        (out,) = torch.autograd.grad(act.phi(zz), zz, g)
    return g.copy_(out)


_IN_PLACE = {"tanh": torch.tanh_, "sigmoid": torch.sigmoid_, "relu": torch.relu_}


class _Workspace:
    """Buffers of one chunk, allocated on first use and reused at every step (fresh
    allocations of this size cost page faults, several times the arithmetic)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, int], Tensor] = {}

    def get(self, name: str, index: int, like: Tensor, shape: tuple[int, ...]) -> Tensor:
        buf = self._buffers.get((name, index))
        if buf is None or tuple(buf.shape) != shape:
            buf = like.new_empty(shape)
            self._buffers[(name, index)] = buf
        return buf


@dataclass
class _Chunk:
    """Views of one chunk's parameters."""

    weights: list[Tensor]
    biases: list[Tensor | None]


def _manual_step(
    ens: MLPEnsemble,
    chunk: _Chunk,
    kinds: list[str],
    x_in: Tensor,
    x_t: Tensor | None,
    y: Tensor,
    scale: float,
    lr: float,
    decay: float,
    work: _Workspace,
    update: bool,
) -> Tensor:
    """One forward pass (returns the per-member loss) and, if ``update``, one GD step.

    Closed-form backpropagation. ``x_in`` is the (P, n, d) input of the first layer, ``x_t``
    its transpose (P, d, n) when shared (else ``x_in.mT`` is used). The gradient of each Dense
    layer is fused into its update, ``W <- (1 - lr lambda) W - lr m_W a^T g`` (one
    ``baddbmm_``), after the input gradient ``m_W g W^T`` used the old ``W``.
    """
    copies = ens.copies
    saved: list[tuple[Tensor, Tensor]] = []  # (z, h) of each activation
    inputs: list[Tensor] = []  # the input of each Dense layer
    h = x_in
    di = 0
    for layer in ens.layers:
        if isinstance(layer, EnsembleDense):
            inputs.append(h)
            w, b = chunk.weights[di], chunk.biases[di]
            z = work.get("z", di, w, (w.shape[0], h.shape[1], w.shape[2]))
            if b is None:
                h = torch.baddbmm(z, h, w, beta=0.0, alpha=layer.weight_multiplier, out=z)
            else:
                h = torch.baddbmm(
                    b, h, w, beta=layer.bias_multiplier, alpha=layer.weight_multiplier, out=z
                )
            di += 1
        else:
            kind = kinds[len(saved)]
            z = h
            if kind in _IN_PLACE:  # phi' is a function of h: overwrite z
                h = _IN_PLACE[kind](z)
            elif kind == "erf":
                assert isinstance(layer, Erf)
                h = _erf_forward(layer, z, work.get("h", len(saved), z, tuple(z.shape)))
            elif kind != "identity":
                h = layer.phi(z)
            saved.append((z, h))
    # shape: (c, n, k): the residual alpha f - y of the members
    r = _combine(h, copies).mul(ens.alpha).sub_(y)
    loss = r.square().sum(dim=(1, 2)).mul_(0.5 * scale)
    if not update:
        return loss
    # dL/d(raw output) = c r / alpha, split +-1/sqrt 2 over the halves of a pair
    g = r.mul_(scale / ens.alpha)
    if copies == 2:
        g = torch.stack((g, g.neg()), dim=1).mul_(1.0 / math.sqrt(2.0)).flatten(0, 1)
    di = len(chunk.weights) - 1
    ai = len(saved) - 1
    for layer in reversed(ens.layers):
        if isinstance(layer, EnsembleDense):
            w, b, a = chunk.weights[di], chunk.biases[di], inputs[di]
            m = layer.weight_multiplier
            g_in = None
            if di > 0:  # the input gradient, with the old weights
                g_in = work.get("g", di, w, (w.shape[0], g.shape[1], w.shape[1]))
                if w.shape[2] == 1:  # an outer product: cheaper as a broadcast multiply
                    torch.mul(g * m, w.mT, out=g_in)
                else:
                    torch.baddbmm(g_in, g, w.mT, beta=0.0, alpha=m, out=g_in)
            a_t = x_t if di == 0 and x_t is not None else a.mT
            w.baddbmm_(a_t, g, beta=decay, alpha=-lr * m)
            if b is not None:
                if decay != 1.0:
                    b.mul_(decay)
                b.add_(g.sum(dim=1, keepdim=True), alpha=-lr * layer.bias_multiplier)
            if g_in is None:
                break
            g = g_in
            di -= 1
        else:
            z, h_act = saved[ai]
            tmp = work.get("tmp", 0, g, tuple(g.shape))
            g = _activation_backward(layer, kinds[ai], z, h_act, g, tmp)
            ai -= 1
    return loss


_FAST_KINDS = ("tanh", "sigmoid", "relu", "erf")


def _is_fast(ens: MLPEnsemble, kinds: list[str]) -> bool:
    """One hidden layer, one output, an activation with a closed-form derivative."""
    layers = ens.layers
    return (
        len(layers) == 3
        and isinstance(layers[0], EnsembleDense)
        and isinstance(layers[2], EnsembleDense)
        and kinds[0] in _FAST_KINDS
        and layers[2].weight.shape[2] == 1
    )


def _fast_step(
    ens: MLPEnsemble,
    chunk: _Chunk,
    kind: str,
    x_in: Tensor,
    y: Tensor,
    scale: float,
    lr: float,
    decay: float,
    work: _Workspace,
    update: bool,
) -> Tensor:
    r""":func:`_manual_step` for :math:`f = m_2\, \phi(m_1 x W + m_{b1} b_1)\, v + m_{b2} b_2`
    with one output, in six passes over the (P, n, width) activations.

    The input gradient :math:`g v^T` of the readout is rank one, so the first layer's gradient
    needs no (P, n, width) buffer of its own:

    .. math:: \nabla_{W} = m_1 m_2\, \big((x \odot g)^T \phi'(z)\big) \odot v^T,

    one batched GEMM with the small (P, n, d) matrix :math:`x \odot g` after
    :math:`\phi'` is written over the activations in place.
    """
    first, act, last = ens.layers
    assert isinstance(first, EnsembleDense) and isinstance(last, EnsembleDense)
    assert isinstance(act, Activation)
    w1, b1 = chunk.weights[0], chunk.biases[0]
    w2, b2 = chunk.weights[1], chunk.biases[1]
    m1, m2 = first.weight_multiplier, last.weight_multiplier
    z = work.get("z", 0, w1, (w1.shape[0], x_in.shape[1], w1.shape[2]))
    if b1 is None:
        torch.baddbmm(z, x_in, w1, beta=0.0, alpha=m1, out=z)
    else:
        torch.baddbmm(b1, x_in, w1, beta=first.bias_multiplier, alpha=m1, out=z)
    if kind == "erf":
        assert isinstance(act, Erf)
        h = _erf_forward(act, z, work.get("h", 0, z, tuple(z.shape)))
    else:
        h = _IN_PLACE[kind](z)
    if b2 is None:
        out = torch.bmm(h, w2).mul_(m2)
    else:
        out = torch.baddbmm(b2, h, w2, beta=last.bias_multiplier, alpha=m2)
    copies = ens.copies
    r = _combine(out, copies).mul(ens.alpha).sub_(y)
    loss = r.square().sum(dim=(1, 2)).mul_(0.5 * scale)
    if not update:
        return loss
    g = r.mul_(scale / ens.alpha)
    if copies == 2:
        g = torch.stack((g, g.neg()), dim=1).mul_(1.0 / math.sqrt(2.0)).flatten(0, 1)
    v_old = w2.mT.clone()  # shape: (P, 1, width), the readout before its update
    w2.mT.baddbmm_(g.mT, h, beta=decay, alpha=-lr * m2)
    if b2 is not None:
        if decay != 1.0:
            b2.mul_(decay)
        b2.add_(g.sum(dim=1, keepdim=True), alpha=-lr * last.bias_multiplier)
    # phi'(z), written over the activations
    if kind == "tanh":
        one = torch.ones((), dtype=h.dtype, device=h.device)
        dphi = torch.addcmul(one, h, h, value=-1.0, out=h)
    elif kind == "sigmoid":
        dphi = torch.addcmul(h, h, h, value=-1.0, out=h)
    elif kind == "relu":
        dphi = h.sign_()
    else:
        assert isinstance(act, Erf)
        dphi = _erf_derivative(act, z, out=z)
    a = work.get("a", 0, w1, tuple(w1.shape))
    torch.bmm((x_in * g).mT, dphi, out=a)  # (P, d, width)
    if decay != 1.0:
        w1.mul_(decay)
    w1.addcmul_(a, v_old, value=-lr * m1 * m2)
    if b1 is not None:
        gb = torch.bmm(g.mT, dphi).mul_(v_old)  # (P, 1, width)
        if decay != 1.0:
            b1.mul_(decay)
        b1.add_(gb, alpha=-lr * m2 * first.bias_multiplier)
    return loss


def _autograd_step(
    ens: MLPEnsemble,
    chunk: _Chunk,
    x_in: Tensor,
    y: Tensor,
    scale: float,
    lr: float,
    decay: float,
    update: bool,
) -> Tensor:
    """The same step with autograd computing the gradients."""
    params = [*chunk.weights, *[b for b in chunk.biases if b is not None]]
    with torch.enable_grad():
        leaves = [p.detach().requires_grad_(update) for p in params]
        ws = leaves[: len(chunk.weights)]
        it = iter(leaves[len(chunk.weights) :])
        bs = [None if b is None else next(it) for b in chunk.biases]
        h = x_in
        di = 0
        for layer in ens.layers:
            if isinstance(layer, EnsembleDense):
                bias = bs[di]
                h = torch.bmm(h, ws[di]) * layer.weight_multiplier
                if bias is not None:
                    h = h + layer.bias_multiplier * bias
                di += 1
            else:
                h = layer.phi(h)
        r = ens.alpha * _combine(h, ens.copies) - y
        loss = r.square().sum(dim=(1, 2)) * (0.5 * scale)
        if not update:
            return loss.detach()
        grads = torch.autograd.grad(loss.sum() / ens.alpha**2, leaves)
    with torch.no_grad():
        for p, grad in zip(params, grads, strict=True):
            if decay != 1.0:
                p.mul_(decay)
            p.add_(grad, alpha=-lr)
    return loss.detach()


# ---------------------------------------------------------------------------------------------
# the generic path


@short_repr
@dataclass(frozen=True, eq=False)
class ModuleEnsemble:
    """Any modules of identical structure, stacked for ``torch.func.vmap``.

    Build it with :func:`stack_modules`; train it with :func:`train_ensemble`.

    Attributes
    ----------
    params : dict of str to Tensor
        Each parameter stacked over the members, leading dimension M.
    buffers : dict of str to Tensor
    template : nn.Module
        A copy of the first module (structure and device).
    n_samples : int
        :math:`M`, the number of modules.
    """

    params: dict[str, Tensor]
    buffers: dict[str, Tensor]
    template: nn.Module
    n_samples: int

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.params.values())).dtype

    def _call(self, p: dict[str, Tensor], b: dict[str, Tensor], x: Tensor) -> Tensor:
        out: Tensor = torch.func.functional_call(self.template, (p, b), (x,))
        return out

    def forward(self, x: Tensor) -> Tensor:
        """Outputs (M, n, k) for shared inputs (n, d) or per-member inputs (M, n, d)."""
        shared = _check_ensemble_inputs("x", x, self.n_samples, None, self.dtype)
        with torch.no_grad():
            fn = torch.func.vmap(self._call, in_dims=(0, 0, None if shared else 0))
            out: Tensor = fn(self.params, self.buffers, x)
        return out

    __call__ = forward

    def member(self, i: int) -> nn.Module:
        """Member ``i`` as an ordinary module (a copy of the template with its parameters)."""
        m = self.n_samples
        if isinstance(i, bool) or not isinstance(i, int) or not -m <= i < m:
            raise NtklabValueError(f"i: expected an int in [-{m}, {m}), got {i!r}")
        net = copy.deepcopy(self.template)
        with torch.no_grad():
            for name, p in net.named_parameters():
                p.copy_(self.params[name][i])
            for name, buf in net.named_buffers():
                buf.copy_(self.buffers[name][i])
        return net


def stack_modules(modules: Sequence[nn.Module]) -> ModuleEnsemble:
    """Stack identical-structure modules (e.g. ``to_torch`` networks) into a
    :class:`ModuleEnsemble` (``torch.func.stack_module_state``); the modules are not changed.

    Examples
    --------
    >>> import torch
    >>> ens = stack_modules([torch.nn.Linear(3, 1) for _ in range(4)])
    >>> ens(torch.randn(5, 3)).shape
    torch.Size([4, 5, 1])
    """
    if isinstance(modules, nn.Module) or not isinstance(modules, Sequence) or not modules:
        raise NtklabValueError(
            f"modules: expected a non-empty sequence of nn.Module, got {type(modules).__name__}"
        )
    for i, m in enumerate(modules):
        if not isinstance(m, nn.Module):
            raise NtklabTypeError(f"modules[{i}]: expected an nn.Module, got {type(m).__name__}")
    names = [n for n, _ in modules[0].named_parameters()]
    for i, m in enumerate(modules[1:], start=1):
        shapes = [(n, tuple(p.shape)) for n, p in m.named_parameters()]
        want = [(n, tuple(p.shape)) for n, p in modules[0].named_parameters()]
        if shapes != want or type(m) is not type(modules[0]):
            raise NtklabValueError(
                f"modules[{i}]: expected the structure of modules[0] (parameters {names}), got "
                f"{[n for n, _ in shapes]} with other shapes or another type"
            )
    params, buffers = torch.func.stack_module_state(list(modules))
    params = {k: v.detach().clone() for k, v in params.items()}
    buffers = {k: v.detach().clone() for k, v in buffers.items()}
    template = copy.deepcopy(modules[0])
    return ModuleEnsemble(params, buffers, template, len(modules))


# ---------------------------------------------------------------------------------------------
# the trainer


@short_repr
@dataclass(frozen=True, eq=False)
class EnsembleTraining:
    """Result of :func:`train_ensemble`.

    Attributes
    ----------
    ensemble : MLPEnsemble or ModuleEnsemble
        The trained members (the input ensemble is left unchanged).
    steps : Tensor of shape (T,), int64
        The recorded times ``t`` in steps (0 and the last unless ``record_t`` was given).
    flow_times : Tensor of shape (T,), float64
        Continuous gradient-flow times ``learning_rate * steps``.
    train_losses : Tensor of shape (T, M)
        Each member's data loss :math:`L(\\alpha f)` at the recorded steps (as
        :func:`ntklab.nets.train` logs it: without the weight-decay term and the
        :math:`1/\\alpha^2` of lazy training).
    test_outputs : Tensor of shape (T, M, n_test, k) or None
        Each member's outputs on ``x_test`` at the recorded steps.
    learning_rate : float
    """

    ensemble: MLPEnsemble | ModuleEnsemble
    steps: Tensor
    flow_times: Tensor
    train_losses: Tensor
    test_outputs: Tensor | None
    learning_rate: float


def train_ensemble(
    ens: MLPEnsemble | ModuleEnsemble,
    x: Tensor,
    y: Tensor,
    *,
    learning_rate: float,
    t: int,
    normalization: Normalization = "mean",
    weight_decay: float = 0.0,
    x_test: Tensor | None = None,
    record_t: Sequence[int] | None = None,
    backward: Backward = "manual",
    chunk_size: int | None = None,
    max_memory: int | None = None,
) -> EnsembleTraining:
    r"""Train every member of an ensemble by full-batch gradient descent on the squared loss.

    Each member follows, independently of the others,

    .. math:: \theta \leftarrow (1 - \eta\lambda)\,\theta - \eta\,\nabla_\theta
              \frac{c}{2\alpha^2} \sum (\alpha f_\theta(x) - y)^2,

    :math:`c = 1/N` (``"mean"``, :math:`N` = one member's ``y.numel()``) or 1 (``"sum"``),
    which is what :func:`ntklab.nets.train` does to one network (plain SGD, full batch).
    Time is neural-tangents' ``t``, as in :mod:`ntklab.dynamics`: ``t`` steps at
    ``learning_rate``, the flow time :math:`\eta t`.

    Parameters
    ----------
    ens : MLPEnsemble or ModuleEnsemble
    x : Tensor of shape (n, d) or (M, n, d)
        Training inputs shared by the members, or one training set per member.
    y : Tensor of shape (n, k) or (M, n, k)
        Targets, shared or per member.
    learning_rate : float
        :math:`\eta > 0`.
    t : int
        Time in steps at ``learning_rate`` (the number of GD steps; a float with a whole value
        is accepted): the flow time is ``learning_rate * t``.
    normalization : {"mean", "sum"}
    weight_decay : float
        :math:`\lambda \ge 0`.
    x_test : Tensor of shape (n_test, d) or (M, n_test, d), optional
        Inputs whose outputs are recorded.
    record_t : sequence of int, optional
        Times ``t`` (steps) in [0, t] at which to record (default: 0 and ``t``).
    backward : {"manual", "autograd"}
        :class:`MLPEnsemble` only: the closed-form backward pass (default, faster) or
        autograd. A :class:`ModuleEnsemble` always uses ``vmap(grad(functional_call))``.
    chunk_size : int, optional
        Members trained together (all steps on one chunk, then the next). Default: about
        :math:`2^{18}` activations per buffer (cache-sized), within ``max_memory``.
    max_memory : int, optional
        Bytes of per-chunk training buffers at most (caps the default chunk size). Default
        ``None``: the policy of :mod:`ntklab.memory` (half of the memory this process may
        still use on the device of ``x``).

    Returns
    -------
    EnsembleTraining

    Warns
    -----
    NumericalWarning
        When some members' losses became non-finite (the learning rate is too large).

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.nets.ensemble import ensemble, train_ensemble
    >>> arch = nl.serial(nl.Dense(w_std=1.0, b_std=None), nl.Erf(), nl.Dense(w_std=1.0, b_std=None))
    >>> g = torch.Generator().manual_seed(0)
    >>> ens = ensemble(arch, 50, 32, in_features=2, generator=g, dtype=torch.float64)
    >>> x, y = torch.randn(4, 2, dtype=torch.float64), torch.randn(4, 1, dtype=torch.float64)
    >>> run = train_ensemble(ens, x, y, learning_rate=0.1, t=10, x_test=x)
    >>> run.test_outputs.shape, run.train_losses.shape
    (torch.Size([2, 50, 4, 1]), torch.Size([2, 50]))
    """
    if not isinstance(ens, MLPEnsemble | ModuleEnsemble):
        raise NtklabTypeError(
            f"ens: expected an MLPEnsemble or ModuleEnsemble, got {type(ens).__name__}"
        )
    members = ens.n_samples
    d = ens.in_features if isinstance(ens, MLPEnsemble) else None
    shared_x = _check_ensemble_inputs("x", x, members, d, ens.dtype)
    n = x.shape[-2]
    shared_y = _check_targets(y, members, n, ens.dtype)
    shared_t = True
    if x_test is not None:
        shared_t = _check_ensemble_inputs("x_test", x_test, members, x.shape[-1], ens.dtype)
    lr = _positive_float("learning_rate", learning_rate)
    total = check_steps("t", t)
    if normalization not in ("mean", "sum"):
        raise NtklabValueError(f"normalization: expected 'mean' or 'sum', got {normalization!r}")
    check_nonnegative("weight_decay", weight_decay)
    if backward not in ("manual", "autograd"):
        raise NtklabValueError(f"backward: expected 'manual' or 'autograd', got {backward!r}")
    record = _resolve_record(record_t, total)
    if chunk_size is not None:
        check_positive_int("chunk_size", chunk_size)
    budget = resolve_max_memory(max_memory, x.device)
    scale = 1.0 if normalization == "sum" else 1.0 / (y.numel() // (1 if shared_y else members))
    decay = 1.0 - lr * float(weight_decay)
    common = (x, y, shared_x, shared_y, x_test, shared_t, scale, lr, decay, total, record)
    trained: MLPEnsemble | ModuleEnsemble
    if isinstance(ens, MLPEnsemble):
        trained, losses, outputs = _train_mlp(ens, *common, backward, chunk_size, budget)
    else:
        trained, losses, outputs = _train_modules(ens, *common, chunk_size)
    bad = int((~torch.isfinite(losses)).any(dim=0).sum())
    if bad:
        warnings.warn(
            f"train_ensemble: the loss of {bad} of {members} members became non-finite "
            f"(learning_rate={lr} is too large for their curvature)",
            NumericalWarning,
            stacklevel=2,
        )
    rec = torch.tensor(record, dtype=torch.int64)
    return EnsembleTraining(
        ensemble=trained,
        steps=rec,
        flow_times=rec.to(torch.float64) * lr,
        train_losses=losses,
        test_outputs=outputs,
        learning_rate=lr,
    )


def _chunk_members(
    members: int,
    per_member: int,
    chunk_size: int | None,
    max_memory: int,
    itemsize: int,
) -> int:
    """Members per chunk: ``chunk_size`` or a cache-sized default within the budget."""
    if chunk_size is not None:
        return min(chunk_size, members)
    by_cache = max(1, _DEFAULT_CHUNK_ELEMENTS // max(1, per_member))
    by_budget = max(1, max_memory // max(1, 4 * per_member * itemsize))
    return max(1, min(members, by_cache, by_budget))


def _train_mlp(
    ens: MLPEnsemble,
    x: Tensor,
    y: Tensor,
    shared_x: bool,
    shared_y: bool,
    x_test: Tensor | None,
    shared_t: bool,
    scale: float,
    lr: float,
    decay: float,
    total: int,
    record: list[int],
    backward: str,
    chunk_size: int | None,
    max_memory: int,
) -> tuple[MLPEnsemble, Tensor, Tensor | None]:
    members, copies = ens.n_samples, ens.copies
    trained_layers: list[EnsembleDense | Activation] = []
    for layer in ens.layers:
        if isinstance(layer, EnsembleDense):
            bias = None if layer.bias is None else layer.bias.clone()
            layer = replace(layer, weight=layer.weight.clone(), bias=bias)
        trained_layers.append(layer)
    trained = replace(ens, layers=tuple(trained_layers))
    dense = trained.dense
    kinds = [_activation_kind(a) for a in trained.layers if isinstance(a, Activation)]
    fast = backward == "manual" and _is_fast(trained, kinds)
    n = x.shape[-2]
    widest = max(max(layer.weight.shape[1:]) for layer in dense)
    per_member = copies * n * widest
    c = _chunk_members(members, per_member, chunk_size, max_memory, x.element_size())
    losses = torch.empty((len(record), members), dtype=ens.dtype, device=ens.device)
    outputs = None
    if x_test is not None:
        k = dense[-1].weight.shape[-1]
        shape = (len(record), members, x_test.shape[-2], k)
        outputs = torch.empty(shape, dtype=ens.dtype, device=ens.device)
    record_set = {s: j for j, s in enumerate(record)}
    x_shared_t = x.T.contiguous() if shared_x else None
    with torch.no_grad():
        for start in range(0, members, c):
            stop = min(members, start + c)
            sub = slice(start * copies, stop * copies)
            count = sub.stop - sub.start
            chunk = _Chunk(
                [layer.weight[sub] for layer in dense],
                [None if layer.bias is None else layer.bias[sub] for layer in dense],
            )
            x_in = _first_input(x, shared_x, copies, count, sub)
            x_t = None if x_shared_t is None else x_shared_t.expand(count, *x_shared_t.shape)
            y_c = y if shared_y else y[start:stop]
            work = _Workspace()
            for step in range(total + 1):
                j = record_set.get(step)
                if j is not None and outputs is not None and x_test is not None:
                    out = _forward(trained.layers, x_test, shared_t, copies, sub)
                    outputs[j, start:stop] = trained.alpha * _combine(out, copies)
                update = step < total
                if fast:
                    loss = _fast_step(
                        trained, chunk, kinds[0], x_in, y_c, scale, lr, decay, work, update
                    )
                elif backward == "manual":
                    loss = _manual_step(
                        trained, chunk, kinds, x_in, x_t, y_c, scale, lr, decay, work, update
                    )
                else:
                    loss = _autograd_step(trained, chunk, x_in, y_c, scale, lr, decay, update)
                if j is not None:
                    losses[j, start:stop] = loss
    return trained, losses, outputs


def _train_modules(
    ens: ModuleEnsemble,
    x: Tensor,
    y: Tensor,
    shared_x: bool,
    shared_y: bool,
    x_test: Tensor | None,
    shared_t: bool,
    scale: float,
    lr: float,
    decay: float,
    total: int,
    record: list[int],
    chunk_size: int | None,
) -> tuple[ModuleEnsemble, Tensor, Tensor | None]:
    members = ens.n_samples
    alpha = output_scale(ens.template)
    coef = 0.5 * scale / alpha**2

    def loss_fn(p: dict[str, Tensor], b: dict[str, Tensor], xb: Tensor, yb: Tensor) -> Tensor:
        out = ens._call(p, b, xb)
        return (out - yb).square().sum() * coef

    xd, yd = None if shared_x else 0, None if shared_y else 0
    grad_fn = torch.func.vmap(torch.func.grad_and_value(loss_fn), in_dims=(0, 0, xd, yd))
    test_fn = torch.func.vmap(ens._call, in_dims=(0, 0, None if shared_t else 0))
    params = {k: v.clone() for k, v in ens.params.items()}
    c = members if chunk_size is None else min(chunk_size, members)
    device = next(iter(params.values())).device
    losses = torch.empty((len(record), members), dtype=ens.dtype, device=device)
    outputs: Tensor | None = None
    record_set = {s: j for j, s in enumerate(record)}
    for start in range(0, members, c):
        stop = min(members, start + c)
        p = {k: v[start:stop] for k, v in params.items()}
        b = {k: v[start:stop] for k, v in ens.buffers.items()}
        x_c = x if shared_x else x[start:stop]
        y_c = y if shared_y else y[start:stop]
        t_c = None if x_test is None else (x_test if shared_t else x_test[start:stop])
        for step in range(total + 1):
            grads, loss = grad_fn(p, b, x_c, y_c)
            j = record_set.get(step)
            if j is not None:
                losses[j, start:stop] = loss.detach() * alpha**2  # the data loss L(alpha f)
                if t_c is not None:
                    with torch.no_grad():
                        out = test_fn(p, b, t_c)
                    if outputs is None:
                        outputs = out.new_empty((len(record), members, *out.shape[1:]))
                    outputs[j, start:stop] = out
            if step == total:
                break
            with torch.no_grad():
                p = {k: v * decay - lr * grads[k] for k, v in p.items()}
        with torch.no_grad():
            for k, v in p.items():
                params[k][start:stop] = v
    return replace(ens, params=params), losses, outputs


# ---------------------------------------------------------------------------------------------
# validation


def _check_ensemble_inputs(
    name: str, x: object, members: int, features: int | None, dtype: torch.dtype
) -> bool:
    """Validate (n, d) shared or (M, n, d) per-member inputs; return whether shared."""
    if not isinstance(x, Tensor):
        raise NtklabTypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.ndim not in (2, 3) or x.shape[-2] == 0:
        raise NtklabValueError(
            f"{name}: expected shape (n, d) or (n_samples={members}, n, d) with n >= 1, got "
            f"{tuple(x.shape)}"
        )
    if x.ndim == 3 and x.shape[0] != members:
        raise NtklabValueError(
            f"{name}: expected a leading dimension of n_samples={members}, got shape "
            f"{tuple(x.shape)}"
        )
    if features is not None and x.shape[-1] != features:
        raise NtklabValueError(
            f"{name}: expected {features} features (in_features), got shape {tuple(x.shape)}"
        )
    if x.dtype != dtype:
        raise NtklabTypeError(f"{name}: expected the ensemble's dtype {dtype}, got {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise NtklabValueError(f"{name}: expected finite values, got {bad} NaN or inf entries")
    return x.ndim == 2


def _check_targets(y: object, members: int, n: int, dtype: torch.dtype) -> bool:
    if not isinstance(y, Tensor):
        raise NtklabTypeError(f"y: expected a torch.Tensor, got {type(y).__name__}")
    if y.ndim not in (2, 3) or y.shape[-2] != n or (y.ndim == 3 and y.shape[0] != members):
        raise NtklabValueError(
            f"y: expected shape (n={n}, k) or (n_samples={members}, n={n}, k), got {tuple(y.shape)}"
        )
    if y.dtype != dtype:
        raise NtklabTypeError(f"y: expected the ensemble's dtype {dtype}, got {y.dtype}")
    if not bool(torch.isfinite(y).all()):
        raise NtklabValueError("y: expected finite values, got NaN or inf entries")
    return y.ndim == 2


def _positive_float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NtklabTypeError(f"{name}: expected a float > 0, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise NtklabValueError(f"{name}: expected a finite float > 0, got {value!r}")
    return float(value)


def _resolve_record(record_t: Sequence[int] | None, total: int) -> list[int]:
    if record_t is None:
        return [0, total]
    steps = list(record_t)
    for s in steps:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= total:
            raise NtklabValueError(f"record_t: expected ints in [0, t={total}], got {s!r}")
    if not steps:
        raise NtklabValueError("record_t: expected at least one time, got none")
    return sorted(set(steps))
