"""Graphs of layers: branches and their combinations, with kernels and finite modules.

neural-tangents' ``stax`` combinators (arXiv:1912.02803), with its kernel semantics:

- :func:`FanOut` ``(n)`` copies one input into ``n`` branches;
- :func:`parallel` applies one chain of layers to each branch;
- :class:`FanInSum` adds the branches: :math:`K = \\sum_i K_i`, :math:`\\Theta = \\sum_i
  \\Theta_i`;
- :class:`FanInConcat` concatenates them along the channel (feature) axis: the kernels are
  averaged over the concatenated channels, :math:`K = \\sum_i n_i K_i / \\sum_i n_i` with
  :math:`n_i` the width of branch :math:`i`;
- :class:`FanInProd` multiplies them elementwise: :math:`K = \\prod_i K_i`, :math:`\\Theta =
  \\sum_i \\Theta_i \\prod_{j \\ne i} K_j`;
- :func:`repeat` ``(layer, n)`` chains ``n`` copies; :class:`Residual` is
  ``FanOut(2) >> parallel(Identity(), branch * scale) >> FanInSum()``.

The sums assume the branches uncorrelated: every branch but at most one must end with a layer
with fresh weights (``Dense``/``Conv``, possibly followed by pooling, ``LayerNorm`` or
``Dropout``), whose output is a zero-mean Gaussian process independent of the others at
infinite width. The product is exact when a layer with parameters follows it, which averages
the products over infinitely many channels.

Each combinator's finite module passes tuples of branch outputs through ``nn.Sequential``
(:class:`FanOutLayer`, :class:`ParallelLayer`, :class:`FanInSumLayer`,
:class:`FanInConcatLayer`, :class:`FanInProdLayer`, :class:`ResidualBlock`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from .._checks import check_positive_int
from ..errors import NtklabTypeError, NtklabValueError
from . import _compiled_conv, _fused
from .activations import Identity
from .covariance import self_variances
from .engine import (
    Architecture,
    Features,
    Flow,
    Flows,
    GraphLayer,
    Layer,
    ModuleOptions,
    Plan,
    build_modules,
    next_features,
    plan_chain,
    run_chain,
)
from .kernel import KernelState

__all__ = [
    "FanInConcat",
    "FanInConcatLayer",
    "FanInProd",
    "FanInProdLayer",
    "FanInSum",
    "FanInSumLayer",
    "FanOut",
    "FanOutLayer",
    "Parallel",
    "ParallelLayer",
    "Residual",
    "ResidualBlock",
    "Scale",
    "ScaleLayer",
    "parallel",
    "repeat",
]

# --------------------------------------------------------------------------------------------
# finite modules


class FanOutLayer(nn.Module):
    """``x`` to the tuple ``(x, ..., x)`` of ``n`` branches."""

    def __init__(self, n: int, features: Features = None) -> None:
        super().__init__()
        self.n = n
        if isinstance(features, int):
            self.out_features = (features,) * n

    def forward(self, input: Tensor) -> tuple[Tensor, ...]:
        return (input,) * self.n

    def extra_repr(self) -> str:
        return f"n={self.n}"


class ParallelLayer(nn.Module):
    """Applies ``branches[i]`` to the ``i``-th input of a tuple."""

    def __init__(self, branches: Sequence[nn.Module], features: Features = None) -> None:
        super().__init__()
        self.branches = nn.ModuleList(branches)
        if features is not None:
            self.out_features = features

    def forward(self, inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        if not isinstance(inputs, tuple) or len(inputs) != len(self.branches):
            got = f"{len(inputs)} inputs" if isinstance(inputs, tuple) else "one tensor"
            raise NtklabValueError(
                f"inputs: expected a tuple of {len(self.branches)} tensors (from FanOutLayer), "
                f"got {got}"
            )
        return tuple(branch(x) for branch, x in zip(self.branches, inputs, strict=True))


class FanInSumLayer(nn.Module):
    """The sum of a tuple of tensors."""

    def __init__(self, features: int | None = None) -> None:
        super().__init__()
        if features is not None:
            self.out_features = features

    def forward(self, inputs: tuple[Tensor, ...]) -> Tensor:
        out = inputs[0]
        for x in inputs[1:]:
            out = out + x
        return out


class FanInProdLayer(nn.Module):
    """The elementwise product of a tuple of tensors."""

    def __init__(self, features: int | None = None) -> None:
        super().__init__()
        if features is not None:
            self.out_features = features

    def forward(self, inputs: tuple[Tensor, ...]) -> Tensor:
        out = inputs[0]
        for x in inputs[1:]:
            out = out * x
        return out


class FanInConcatLayer(nn.Module):
    """The concatenation of a tuple of tensors along ``axis``."""

    def __init__(self, axis: int = 1, features: int | None = None) -> None:
        super().__init__()
        self.axis = axis
        if features is not None:
            self.out_features = features

    def forward(self, inputs: tuple[Tensor, ...]) -> Tensor:
        return torch.cat(inputs, dim=self.axis)

    def extra_repr(self) -> str:
        return f"axis={self.axis}"


class ResidualBlock(nn.Module):
    """:math:`y = x + \\alpha\\, g(x)` for a branch module :math:`g`."""

    def __init__(self, branch: nn.Module, scale: float = 1.0, features: int | None = None) -> None:
        super().__init__()
        self.branch = branch
        self.scale = float(scale)
        if features is not None:
            self.out_features = features

    def forward(self, input: Tensor) -> Tensor:
        out: Tensor = input + self.scale * self.branch(input)
        return out

    def extra_repr(self) -> str:
        return f"scale={self.scale}"


# --------------------------------------------------------------------------------------------
# kernel rules


class _NoPropagate(Layer):
    """A layer that only acts on whole flows (through :meth:`step`)."""

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        raise NtklabValueError(  # pragma: no cover - Architecture.kernel calls step()
            f"{type(self).__name__}: expected to be run by Architecture.kernel (it acts on "
            "branches), got a bare propagate call"
        )


@dataclass(frozen=True)
class FanOut(_NoPropagate):
    """Copy the input into ``n`` branches (neural-tangents' ``stax.FanOut``).

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import FanInConcat, FanOut, parallel
    >>> arch = nl.serial(nl.Dense(w_std=1.0, width=64), FanOut(2),
    ...                  parallel(nl.Relu(), nl.Erf()), FanInConcat(), nl.Dense(w_std=1.0))
    >>> arch.kernel(torch.randn(3, 4, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
    """

    n: int

    def __post_init__(self) -> None:
        check_positive_int("n", self.n)

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        if not isinstance(flow, Flow):
            raise NtklabValueError(
                f"FanOut: expected one input, got {len(flow)} branches; combine them first "
                "with FanInSum(), FanInConcat() or FanInProd()"
            )
        return (flow,) * self.n

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return FanOutLayer(self.n, in_features)


def _branch(item: object, where: str) -> tuple[Layer, ...]:
    """The layers of one branch (an activation may come first: it reads the block's input)."""
    if isinstance(item, Architecture):
        return item.layers
    if isinstance(item, Layer):
        return (item,)
    if isinstance(item, list | tuple) and item:
        out: list[Layer] = []
        for sub in item:
            out.extend(_branch(sub, where))
        return tuple(out)
    raise NtklabTypeError(
        f"{where}: expected an Architecture, a Layer or a non-empty sequence of layers, got "
        f"{type(item).__name__}"
    )


def _clone_shared(flows: tuple[Flow, ...]) -> tuple[Flow, ...]:
    """Copies of the pair kernels that more than one branch would overwrite in place."""
    seen: set[int] = set()
    out = []
    for f in flows:
        if id(f.pair.cov) in seen:
            ntk = None if f.pair.ntk is None else f.pair.ntk.clone()
            f = dataclasses.replace(
                f, pair=dataclasses.replace(f.pair, cov=f.pair.cov.clone(), ntk=ntk)
            )
        seen.add(id(f.pair.cov))
        out.append(f)
    return tuple(out)


@dataclass(frozen=True)
class Parallel(GraphLayer):
    """One chain of layers per branch (neural-tangents' ``stax.parallel``); build it with
    :func:`parallel`."""

    branches: tuple[tuple[Layer, ...], ...]

    def __post_init__(self) -> None:
        if not isinstance(self.branches, tuple) or not self.branches:
            raise NtklabValueError(f"branches: expected at least one branch, got {self.branches!r}")
        branches = tuple(_branch(b, f"branches[{i}]") for i, b in enumerate(self.branches))
        for i, branch in enumerate(branches):
            for j, layer in enumerate(branch):
                if not isinstance(layer, Layer):
                    raise NtklabTypeError(
                        f"branches[{i}][{j}]: expected an ntklab layer, got {type(layer).__name__}"
                    )
        object.__setattr__(self, "branches", branches)

    @property
    def sublayers(self) -> tuple[Layer, ...]:
        return tuple(layer for branch in self.branches for layer in branch)

    def check_in_chain(
        self, layers: Sequence[Layer], index: int, where: str, in_branch: bool
    ) -> None:
        for i, branch in enumerate(self.branches):
            for j, layer in enumerate(branch):
                layer.check_in_chain(branch, j, f"{where}[{index}].branches[{i}]", True)

    def branch_plans(self, keep_full: bool) -> tuple[Plan, ...]:
        return tuple(plan_chain(branch, keep_full) for branch in self.branches)

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        n = len(self.branches)
        if isinstance(flow, Flow) or len(flow) != n:
            got = "one input" if isinstance(flow, Flow) else f"{len(flow)} branches"
            raise NtklabValueError(f"parallel: expected {n} branches (from FanOut({n})), got {got}")
        if inplace:
            flow = _clone_shared(flow)
        out = []
        for branch, plan, f in zip(self.branches, plans, flow, strict=True):
            # graph inputs carry their adjacency, which the fused kernels do not (as at the top)
            plain = inplace and f.pair.adjacency is None
            fusable = plain and _fused.supports(f.pair.cov)
            compiled = plain and _compiled_conv.enabled(f.pair.cov)
            result = run_chain(branch, plan, f, inplace=inplace, fusable=fusable, compiled=compiled)
            if not isinstance(result, Flow):
                raise NtklabValueError(
                    f"parallel: expected each branch to end with one output, got "
                    f"{len(result)} branches; close inner FanOuts with a FanIn layer"
                )
            out.append(result)
        return tuple(out)

    def build(
        self, in_features: Features, out_features: int | None, options: ModuleOptions
    ) -> nn.Module:
        modules = []
        widths: list[int | None] = []
        for i, branch in enumerate(self.branches):
            features = in_features[i] if isinstance(in_features, tuple) else in_features
            mods = build_modules(branch, features, out_features, options)
            widths.append(_features_after(branch, mods, features))
            modules.append(nn.Sequential(*mods))
        return ParallelLayer(modules, tuple(widths))


def _features_after(
    branch: Sequence[Layer], mods: Sequence[nn.Module], features: Features
) -> int | None:
    """The output width of a built branch (``None`` when lazy)."""
    for layer, mod in zip(branch, mods, strict=True):
        features = next_features(layer, mod, features)
    return features if isinstance(features, int) else None


def parallel(*branches: Layer | Architecture | Sequence[Layer]) -> Parallel:
    """Apply one chain of layers to each branch of a :func:`FanOut` (``stax.parallel``).

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> from ntklab.kernels import FanInSum, FanOut, parallel
    >>> branch = [nl.Relu(), nl.Dense(w_std=1.0)]
    >>> block = nl.serial(FanOut(2), parallel(nl.Identity(), branch), FanInSum())
    >>> arch = nl.serial(nl.Dense(w_std=1.0), block, nl.Relu(), nl.Dense(w_std=1.0))
    >>> arch.kernel(torch.randn(3, 4, dtype=torch.float64)).nngp.shape
    torch.Size([3, 3])
    """
    return Parallel(tuple(branches))  # type: ignore[arg-type]  # normalized in __post_init__


def _check_independent(name: str, layers: Sequence[Layer], index: int, where: str) -> None:
    """Raise when the ``parallel`` just before a sum or product has two branches without
    parameters (``x + x`` is ``2 x``, not the sum of independent branches)."""
    before = layers[index - 1] if index > 0 else None
    if not isinstance(before, Parallel):
        return
    free = [i for i, b in enumerate(before.branches) if not any(lay.has_parameters for lay in b)]
    if len(free) > 1:
        raise NtklabValueError(
            f"{where}[{index}]: expected at most one branch without parameters before "
            f"{name} (the others independent through their own weights), got branches {free}; "
            "a sum or product of the same values is not one of independent branches"
        )


def _branch_flows(name: str, flow: Flows) -> tuple[Flow, ...]:
    if isinstance(flow, Flow):
        return (flow,)
    shapes = {tuple(f.pair.cov.shape) for f in flow}
    if len(shapes) > 1:
        raise NtklabValueError(
            f"{name}: expected branches of one shape (the same spatial size and layout), got "
            f"kernels of shapes {sorted(shapes)}"
        )
    return flow


def _common_width(name: str, flows: tuple[Flow, ...]) -> int | None:
    widths = {f.pair.fan_in for f in flows if f.pair.fan_in is not None}
    if len(widths) > 1:
        raise NtklabValueError(
            f"{name}: expected branches of one width (elementwise), got widths {sorted(widths)}"
        )
    return widths.pop() if widths else None


def _combine(
    flows: tuple[Flow, ...],
    combine: Callable[[list[KernelState]], tuple[Tensor, Tensor | None]],
    *,
    fan_in: int | None,
    gaussian: bool,
    product: bool = False,
) -> Flow:
    """One flow whose pair and per-input kernels are ``combine`` of the branches'."""
    product = product or any(f.pair.product for f in flows)

    def merged(states: list[KernelState]) -> KernelState:
        cov, ntk = combine(states)
        return dataclasses.replace(
            states[0], cov=cov, ntk=ntk, fan_in=fan_in, gaussian=gaussian, product=product
        )

    pair = merged([f.pair for f in flows])
    diag1 = self_variances(merged([f.diag1 for f in flows]))
    diag2 = None
    if flows[0].diag2 is not None:
        diag2 = self_variances(merged([f.diag2 for f in flows]))  # type: ignore[misc]
    return Flow(pair, diag1, diag2).refreshed()


@dataclass(frozen=True)
class FanInSum(_NoPropagate):
    """Sum the branches (``stax.FanInSum``): :math:`K = \\sum_i K_i`, :math:`\\Theta = \\sum_i
    \\Theta_i`.

    Every branch but at most one must end with fresh weights (see :mod:`this module
    <ntklab.kernels.graphs>`), so that the cross-covariances vanish.
    """

    def check_in_chain(
        self, layers: Sequence[Layer], index: int, where: str, in_branch: bool
    ) -> None:
        _check_independent("FanInSum", layers, index, where)

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        flows = _branch_flows("FanInSum", flow)
        other = [i for i, f in enumerate(flows) if not f.pair.gaussian]
        if len(other) > 1:
            raise NtklabValueError(
                "FanInSum: expected at most one branch whose output is not a zero-mean Gaussian "
                "process (the others ending with a Dense or Conv layer, possibly followed by "
                f"pooling, LayerNorm or Dropout), got branches {other}; their sum's kernel "
                "would need their cross-covariances"
            )
        return _combine(
            flows,
            _sum,
            fan_in=_common_width("FanInSum", flows),
            gaussian=not other,
        )

    def module(
        self,
        in_features: Features,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return FanInSumLayer(_known_common(in_features))


def _sum(states: list[KernelState]) -> tuple[Tensor, Tensor | None]:
    cov = states[0].cov.clone()
    for s in states[1:]:
        cov += s.cov
    ntks = [s.ntk for s in states if s.ntk is not None]
    if not ntks:
        return cov, None
    ntk = ntks[0].clone()
    for t in ntks[1:]:
        ntk += t
    return cov, ntk


def _known_common(features: Features) -> int | None:
    if isinstance(features, tuple):
        known = {f for f in features if f is not None}
        return known.pop() if len(known) == 1 and None not in features else None
    return features


@dataclass(frozen=True)
class FanInProd(_NoPropagate):
    """Multiply the branches elementwise (``stax.FanInProd``):

    .. math:: K = \\prod_i K_i, \\qquad \\Theta = \\sum_i \\Theta_i \\prod_{j \\ne i} K_j.

    The product of branches is not Gaussian: a nonlinearity or ``LayerNorm`` cannot read it
    directly; a ``Dense`` or ``Conv`` layer after it makes the kernel exact at infinite width.
    """

    def check_in_chain(
        self, layers: Sequence[Layer], index: int, where: str, in_branch: bool
    ) -> None:
        _check_independent("FanInProd", layers, index, where)

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        flows = _branch_flows("FanInProd", flow)
        width = _common_width("FanInProd", flows)
        return _combine(flows, _prod, fan_in=width, gaussian=False, product=True)

    def module(
        self,
        in_features: Features,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return FanInProdLayer(_known_common(in_features))


def _prod(states: list[KernelState]) -> tuple[Tensor, Tensor | None]:
    # neural-tangents' accumulation: Theta <- Theta K_i + K Theta_i, K <- K K_i
    cov: Tensor = states[0].cov
    ntk: Tensor | None = states[0].ntk
    for s in states[1:]:
        terms = []
        if ntk is not None:
            terms.append(ntk * s.cov)
        if s.ntk is not None:
            terms.append(cov * s.ntk)
        ntk = (terms[0] + terms[1] if len(terms) == 2 else terms[0]) if terms else None
        cov = cov * s.cov
    if ntk is not None and ntk is states[0].ntk:
        ntk = ntk.clone()
    return (cov.clone() if cov is states[0].cov else cov), ntk


@dataclass(frozen=True)
class FanInConcat(_NoPropagate):
    """Concatenate the branches along the channel axis (``stax.FanInConcat``).

    Parameters
    ----------
    axis : {1, -1}
        The channel (feature) axis of torch's ``(n, C, *S)`` or ``(n, d)`` batches; ``-1`` is
        accepted for flat ``(n, d)`` representations (neural-tangents' default). Other axes
        (spatial or batch) are not implemented.

    Notes
    -----
    With :math:`n_i` the width (channels) of branch :math:`i`, the next layer averages over
    all :math:`\\sum_i n_i` channels:

    .. math:: K = \\frac{\\sum_i n_i K_i}{\\sum_i n_i}, \\qquad
              \\Theta = \\frac{\\sum_i n_i \\Theta_i}{\\sum_i n_i}.

    The widths are those the branches declare (``Dense(width)``, ``Conv(width)``, the input
    dimension for a branch without parameters); a branch of unknown width is refused.
    """

    axis: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.axis, bool) or self.axis not in (1, -1):
            raise NtklabValueError(
                f"axis: expected 1 (the channel or feature axis) or -1 (for flat inputs), got "
                f"{self.axis!r}; concatenation along spatial axes is not implemented"
            )

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        flows = _branch_flows("FanInConcat", flow)
        if self.axis == -1 and flows[0].pair.spatial_ndim:
            raise NtklabValueError(
                "FanInConcat: expected axis=1 (channels) for image representations, got "
                "axis=-1, a spatial axis of torch's (n, C, *S) layout (not implemented)"
            )
        widths = [f.pair.fan_in for f in flows]
        unknown = [i for i, w in enumerate(widths) if w is None]
        if unknown and len(flows) > 1:
            raise NtklabValueError(
                f"FanInConcat: expected the width of every branch (its kernel is the "
                f"width-weighted average), got none for branches {unknown}; give their last "
                "Dense or Conv layer a width, e.g. Dense(256)"
            )
        known = [int(w) for w in widths if w is not None]
        total = sum(known)
        weights = [w / total for w in known] if len(flows) > 1 else [1.0]

        def average(states: list[KernelState]) -> tuple[Tensor, Tensor | None]:
            cov = weights[0] * states[0].cov
            for w, st in zip(weights[1:], states[1:], strict=True):
                cov = cov + w * st.cov
            ntk = None
            for w, st in zip(weights, states, strict=True):
                if st.ntk is not None:
                    ntk = w * st.ntk if ntk is None else ntk + w * st.ntk
            return cov, ntk

        gaussian = all(f.pair.gaussian for f in flows)
        return _combine(flows, average, fan_in=total or None, gaussian=gaussian)

    def module(
        self,
        in_features: Features,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        total = None
        if isinstance(in_features, tuple) and None not in in_features:
            total = sum(int(f) for f in in_features if f is not None)
        return FanInConcatLayer(self.axis, total)


def repeat(layer: Layer | Architecture | Sequence[Layer], n: int) -> tuple[Layer, ...]:
    """``n`` copies of ``layer`` (or of a chain of layers) in sequence (``stax.repeat``).

    Returns the layers as a tuple, for :func:`~ntklab.kernels.serial` (a chain may start with
    an activation, which reads the layer before the repetition).

    Examples
    --------
    >>> import ntklab as nl
    >>> arch = nl.serial(nl.Dense(), nl.kernels.repeat([nl.Relu(), nl.Dense()], 3))
    >>> len(arch)
    7
    """
    check_positive_int("n", n)
    return _branch(layer, "layer") * n


class ScaleLayer(nn.Module):
    """Multiplies its input by a constant."""

    def __init__(self, alpha: float) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, input: Tensor) -> Tensor:
        return input * self.alpha

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


@dataclass(frozen=True)
class Scale(Layer):
    """Multiplies the representation by a constant ``alpha`` (the branch scale of a
    residual block, the sign of a difference): :math:`K' = \\alpha^2 K`,
    :math:`\\Theta' = \\alpha^2 \\Theta`."""

    alpha: float

    @property
    def passes_through(self) -> bool:
        return True

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        a2 = float(self.alpha) ** 2
        if a2 == 1.0:
            return state
        ntk = None if state.ntk is None else state.ntk * a2
        return dataclasses.replace(state, cov=state.cov * a2, ntk=ntk)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
    ) -> nn.Module:
        return ScaleLayer(self.alpha)


@dataclass(frozen=True)
class Residual(GraphLayer):
    """Identity plus a scaled branch: :math:`y = x + \\alpha\\, g(x)`.

    The same as ``serial(FanOut(2), parallel(Identity(), [*branch, scale]), FanInSum())``,
    whose finite module is one :class:`ResidualBlock`.

    Parameters
    ----------
    branch : Architecture, Layer or sequence of layers
        Must end with a layer with parameters (``Dense``/``Conv``, possibly followed by
        pooling, ``LayerNorm`` or ``Dropout``) and keep the shape of its input.
    scale : float
        The branch scale :math:`\\alpha`.

    Notes
    -----
    The branch's output is linear in its last layer's fresh zero-mean weights, so at
    infinite width it is uncorrelated with the identity path and (neural-tangents'
    ``FanInSum`` of ``FanOut``)

    .. math:: K' = K + \\alpha^2 K_g, \\qquad \\Theta' = \\Theta + \\alpha^2 \\Theta_g.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> block = nl.kernels.Residual([nl.Relu(), nl.Dense(w_std=1.4)], scale=0.5)
    >>> arch = nl.serial(nl.Dense(w_std=1.0), block, block, nl.Relu(), nl.Dense(w_std=1.0))
    >>> arch.kernel(torch.randn(3, 4, dtype=torch.float64)).ntk.shape
    torch.Size([3, 3])
    """

    branch: Architecture | Layer | Sequence[Layer]
    scale: float = 1.0
    _graph: Parallel = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        layers = _branch(self.branch, "branch")
        object.__setattr__(self, "branch", layers)
        if not isinstance(self.scale, int | float) or not math.isfinite(self.scale):
            raise NtklabValueError(f"scale: expected a finite float, got {self.scale!r}")
        graph = Parallel(((Identity(),), (*layers, Scale(float(self.scale)))))
        object.__setattr__(self, "_graph", graph)

    @property
    def layers(self) -> tuple[Layer, ...]:
        """The branch's layers."""
        return self.branch  # type: ignore[return-value]  # a tuple after __post_init__

    @property
    def sublayers(self) -> tuple[Layer, ...]:
        return self.layers

    def check_in_chain(
        self, layers: Sequence[Layer], index: int, where: str, in_branch: bool
    ) -> None:
        for j, layer in enumerate(self.layers):
            layer.check_in_chain(self.layers, j, f"{where}[{index}].branch", True)

    def branch_plans(self, keep_full: bool) -> tuple[Plan, ...]:
        return self._graph.branch_plans(keep_full)

    def step(self, flow: Flows, plans: tuple[Plan, ...], *, inplace: bool) -> Flows:
        one = flow if isinstance(flow, Flow) else None
        if one is None:
            raise NtklabValueError(
                f"Residual: expected one input, got {len(flow)} branches"  # type: ignore[arg-type]
            )
        identity, out = self._graph.step((one, one), plans, inplace=inplace)  # type: ignore[misc]
        if not out.pair.gaussian:
            raise NtklabValueError(
                "Residual: expected a branch that ends with a Dense or Conv layer (possibly "
                "followed by pooling, LayerNorm or Dropout), so that its output is "
                "uncorrelated with the identity path; got one that ends with "
                f"{type(self.layers[-1]).__name__}"
            )
        if out.pair.cov.shape != identity.pair.cov.shape:
            raise NtklabValueError(
                f"Residual: expected the branch to keep the kernel's shape "
                f"{tuple(identity.pair.cov.shape)} (same spatial size), got "
                f"{tuple(out.pair.cov.shape)}"
            )
        fan_in = out.pair.fan_in if out.pair.fan_in is not None else identity.pair.fan_in
        return _combine((identity, out), _sum, fan_in=fan_in, gaussian=identity.pair.gaussian)

    def build(
        self, in_features: Features, out_features: int | None, options: ModuleOptions
    ) -> nn.Module:
        features = in_features if isinstance(in_features, int) else None
        last = max((i for i, layer in enumerate(self.layers) if layer.has_parameters), default=-1)
        if features is None and (last < 0 or self.layers[last].takes_role):
            raise NtklabValueError(
                "Residual: expected the number of input features (the branch's last Dense must "
                "return as many), got None; put a Dense layer before the block or pass "
                "in_features to to_torch"
            )
        hidden = options.hidden if out_features is None else out_features
        inner = dataclasses.replace(options, hidden=hidden)
        mods = build_modules(self.layers, features, features, inner)
        return ResidualBlock(nn.Sequential(*mods), float(self.scale), features)
