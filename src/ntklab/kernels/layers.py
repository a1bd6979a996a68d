"""Layers with parameters and the ``serial`` combinator.

Conventions are those of neural-tangents' ``stax`` (arXiv:1912.02803): the input kernel of an
``(n, d)`` batch is :math:`K_0(x, x') = \\langle x, x' \\rangle / d` with :math:`\\Theta_0 = 0`,
and a ``Dense`` layer in NTK parameterization computes
:math:`y = \\sigma_w W x / \\sqrt{n_{in}} + \\sigma_b b` with unit Gaussian ``W`` and ``b``.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor, nn

from .._checks import check_inputs, check_nonnegative, check_positive_int
from ..errors import NtklabTypeError, NtklabValueError
from .kernel import Kernel, KernelState

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["Architecture", "Dense", "Layer", "serial"]

Parameterization = Literal["ntk", "standard"]


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
        return False

    def _requires_grad(self) -> bool:
        return False

    @property
    def spatial_ndim(self) -> int | None:
        """Spatial dimensions of the inputs the layer acts on (``Conv``, ``AvgPool``), else
        ``None``."""
        return None

    @property
    def spatial_layer(self) -> bool:
        """Whether the layer reads image batches ``(n, C, *S)`` (convolutions, pooling,
        ``Flatten``): an architecture with one accepts images."""
        return self.spatial_ndim is not None

    @property
    def mixes_space(self) -> bool:
        """Whether the layer reads covariances between different positions (pooling)."""
        return False

    def step(
        self,
        state: KernelState,
        diag1: KernelState,
        diag2: KernelState | None,
        *,
        inplace: bool,
    ) -> tuple[KernelState, KernelState, KernelState | None]:
        """One step of :meth:`Architecture.kernel`: propagate the pair state and the
        per-input states (``diag2=None``: ``x2`` is ``x1``), then refresh the variances."""
        from .spatial import with_variances

        state = self.propagate(state, inplace=inplace)
        diag1 = _next_diagonal(self, diag1)
        diag2 = None if diag2 is None else _next_diagonal(self, diag2)
        return with_variances(state, diag1, diag1 if diag2 is None else diag2), diag1, diag2

    # A single layer is also a (one-layer) architecture.
    def kernel(self, x1: Tensor, x2: Tensor | None = None) -> Kernel:
        """The kernel of the one-layer architecture ``serial(self)``."""
        return serial(self).kernel(x1, x2)


@dataclass(frozen=True)
class Dense(Layer):
    """Fully-connected layer.

    Parameters
    ----------
    w_std : float or Tensor
        Weight scale :math:`\\sigma_w >= 0`.
    b_std : float, Tensor or None
        Bias scale :math:`\\sigma_b >= 0`; ``None`` means no bias (which differs from
        ``0.0`` only in the standard parameterization's NTK, where a bias, even initialized
        at zero, contributes 1).
    parameterization : {"ntk", "standard"}
        ``"ntk"``: :math:`y = \\sigma_w W x/\\sqrt{n_{in}} + \\sigma_b b`, unit Gaussian
        ``W, b``. ``"standard"``: :math:`y = W x + b` with
        :math:`W_{ij} \\sim N(0, \\sigma_w^2 / n_{in})`, :math:`b \\sim N(0, \\sigma_b^2)`; its
        NTK depends on the widths.
    width : int or None
        Output width of this layer. Needed for the kernel only by the standard
        parameterization (for the fan-in of the next Dense); ``to_torch(width=...)`` fills
        unspecified hidden widths.

    Notes
    -----
    Kernel recursion (neural-tangents' conventions). NTK parameterization:

    .. math:: K' = \\sigma_w^2 K + \\sigma_b^2, \\qquad \\Theta' = K' + \\sigma_w^2 \\Theta.

    Standard parameterization, with :math:`n_{in}` the fan-in width:

    .. math:: K' = \\sigma_w^2 K + \\sigma_b^2, \\qquad
              \\Theta' = n_{in} K + \\sigma_w^2 \\Theta + [\\text{bias}].
    """

    w_std: float | Tensor = 1.0
    b_std: float | Tensor | None = 0.0
    parameterization: Parameterization = "ntk"
    width: int | None = None

    def __post_init__(self) -> None:
        check_nonnegative("w_std", self.w_std)
        if self.b_std is not None:
            check_nonnegative("b_std", self.b_std)
        if self.parameterization not in ("ntk", "standard"):
            raise NtklabValueError(
                f"parameterization: expected 'ntk' or 'standard', got {self.parameterization!r}"
            )
        if self.width is not None:
            check_positive_int("width", self.width)

    @property
    def has_parameters(self) -> bool:
        return True

    def _requires_grad(self) -> bool:
        return any(isinstance(v, Tensor) and v.requires_grad for v in (self.w_std, self.b_std))

    def propagate(self, state: KernelState, *, inplace: bool) -> KernelState:
        if state.spatial_ndim:
            raise NtklabValueError(
                "Dense: expected a flat (n, d) representation, got one with "
                f"{state.spatial_ndim} spatial dimension(s); put Flatten() or GlobalAvgPool() "
                "before it, or use a Conv with filter_shape 1 for a per-position dense layer"
            )
        w2 = self.w_std**2
        b2 = 0.0 if self.b_std is None else self.b_std**2
        cov, ntk = state.cov, state.ntk
        if self.parameterization == "ntk":
            # shape: (n1, n2). K' = w^2 K + b^2 ;  Theta' = K' + w^2 Theta
            cov = _affine(cov, w2, b2, inplace)
            if ntk is None:
                ntk = cov.clone()
            elif inplace and not isinstance(w2, Tensor):
                ntk = torch.add(cov, ntk, alpha=w2, out=ntk)
            else:
                ntk = cov + w2 * ntk
        else:
            if state.fan_in is None:
                raise NtklabValueError(
                    "Dense(parameterization='standard'): expected the width of the previous "
                    "Dense layer (its NTK scales with the fan-in), got width=None; pass "
                    "Dense(..., width=N) to that layer"
                )
            fan_in = float(state.fan_in)
            bias = 0.0 if self.b_std is None else 1.0
            # Theta' = n_in K + w^2 Theta + [bias], with the incoming K
            if ntk is None:
                ntk = torch.mul(cov, fan_in)
            elif inplace and not isinstance(w2, Tensor):
                ntk = ntk.mul_(w2).add_(cov, alpha=fan_in)
            else:
                ntk = fan_in * cov + w2 * ntk
            if bias:
                ntk = ntk.add_(bias) if inplace else ntk + bias
            cov = _affine(cov, w2, b2, inplace)
        return dataclasses.replace(state, cov=cov, ntk=ntk, fan_in=self.width, gaussian=True)

    def propagate_variance(self, var: Tensor) -> Tensor:
        """The diagonal recursion :math:`v' = \\sigma_w^2 v + \\sigma_b^2`."""
        b2 = 0.0 if self.b_std is None else self.b_std**2
        return _affine(var, self.w_std**2, b2, inplace=False)

    def module(
        self,
        in_features: int | None,
        out_features: int | None,
        *,
        generator: torch.Generator | None,
        dtype: torch.dtype,
        device: torch.device | str | None,
        parameterization: Literal["ntk", "standard", "mup"] | None = None,
        role: Literal["input", "hidden", "output", "only"] = "hidden",
    ) -> nn.Module:
        """A :class:`~ntklab.nets.modules.DenseLayer`; ``parameterization`` (default: this
        layer's own) may override it, e.g. with ``"mup"``, which reads ``role`` (where the
        layer sits: ``"input"``, ``"hidden"``, ``"output"`` or ``"only"``)."""
        from ..nets.modules import DenseLayer

        out = self.width if self.width is not None else out_features
        if out is None:
            raise NtklabValueError("width: expected an int for the hidden Dense layers, got None")
        return DenseLayer(
            in_features,
            out,
            w_std=_as_float(self.w_std),
            b_std=None if self.b_std is None else _as_float(self.b_std),
            parameterization=parameterization or self.parameterization,
            role=role,
            generator=generator,
            dtype=dtype,
            device=device,
        )


def _as_float(v: float | Tensor) -> float:
    return float(v.detach()) if isinstance(v, Tensor) else float(v)


def _affine(x: Tensor, scale: float | Tensor, shift: float | Tensor, inplace: bool) -> Tensor:
    """``scale * x + shift``, in place when allowed and the coefficients are plain numbers."""
    if inplace and not isinstance(scale, Tensor) and not isinstance(shift, Tensor):
        x = x.mul_(scale)
        return x.add_(shift) if shift != 0.0 else x
    return x * scale + shift


@dataclass(frozen=True)
class Architecture:
    """A sequence of layers with its infinite-width kernels and finite-width networks.

    Build it with :func:`serial`. ``arch.kernel(x1, x2)`` returns the NNGP and NTK;
    ``arch.to_torch(width)`` a ``torch.nn.Module`` with the same parameterization, whose
    empirical NTK and output covariance converge to ``arch.kernel`` as the width grows.
    """

    layers: tuple[Layer, ...]

    def __post_init__(self) -> None:
        if not self.layers:
            raise NtklabValueError("layers: expected at least one layer, got none")
        for i, layer in enumerate(self.layers):
            if not isinstance(layer, Layer):
                raise NtklabTypeError(
                    f"layers[{i}]: expected an ntklab layer (Dense, Relu, ...), got "
                    f"{type(layer).__name__}"
                )
        from .activations import Activation

        first_dense = next((i for i, layer in enumerate(self.layers) if layer.has_parameters), None)
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Activation) and (first_dense is None or i < first_dense):
                raise NtklabValueError(
                    f"layers[{i}]: expected a Dense layer before the activation "
                    f"{type(layer).__name__} (an activation reads the pre-activations of a Dense "
                    "layer), got it before any Dense"
                )
        from .spatial import check_affine_layernorm

        check_affine_layernorm(self.layers, "layers")

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def _requires_grad(self) -> bool:
        return any(layer._requires_grad() for layer in self.layers)

    def kernel(
        self, x1: Tensor, x2: Tensor | None = None, *, max_memory: int | None = None
    ) -> Kernel:
        """NNGP and NTK between the rows of ``x1`` and ``x2``.

        Parameters
        ----------
        x1 : Tensor of shape (n1, d), or (n1, C, *S) for an architecture with spatial layers
            Images are torch's channels-first batches: ``(n, C, L)`` or ``(n, C, H, W)``.
        x2 : Tensor of the same shape but for n2, optional
            Defaults to ``x1``.
        max_memory : int, optional
            Bytes available to one block of input pairs, for image inputs (default ``None``:
            the policy of :mod:`ntklab.memory`, half of the memory this process may still use
            on the inputs' device). The full spatial covariance needed by pooling holds
            :math:`n_1 n_2 |S|^2` numbers per kernel; pairs are computed in blocks that fit,
            and an error says when not even one pair fits. For flat inputs the recursion
            holds :data:`FLAT_MATRICES` matrices of shape (n1, n2) at its peak; a kernel
            that needs more than ``max_memory`` is refused before anything is computed (use
            :func:`ntklab.solvers.kernel_operator` for a matrix-free kernel at that size).

        Returns
        -------
        Kernel
            ``nngp`` and ``ntk`` of shape (n1, n2), on ``x1``'s dtype and device;
            differentiable in the inputs and in tensor-valued ``w_std``/``b_std``.

        Examples
        --------
        >>> import torch, ntklab as nl
        >>> arch = nl.serial(nl.Dense(1.5, 0.1), nl.Relu(), nl.Dense(1.5, 0.1))
        >>> k = arch.kernel(torch.randn(4, 3, dtype=torch.float64))
        >>> k.ntk.shape
        torch.Size([4, 4])
        """
        if not any(layer.spatial_layer for layer in self.layers):
            a, b = check_inputs(x1, x2)
            _check_flat_fits(a, b, max_memory)
            return self._kernel(a, b)
        from . import spatial

        if max_memory is not None:
            from ..memory import resolve_max_memory

            resolve_max_memory(max_memory)  # the type and sign
        a, b = spatial.check_images(x1, x2, spatial.architecture_spatial_ndim(self.layers))
        full = a.ndim > 2 and spatial.last_mixing_layer(self.layers) >= 0
        return spatial.kernel_in_blocks(self._kernel, a, b, full=full, max_memory=max_memory)

    def _kernel(self, a: Tensor, b: Tensor | None) -> Kernel:
        """The kernel of validated inputs (flat ``(n, d)`` or images ``(n, C, *S)``)."""
        from . import _fused, spatial

        inplace = not (
            torch.is_grad_enabled()
            and (a.requires_grad or (b is not None and b.requires_grad) or self._requires_grad())
        )
        diagonal_after = -1
        if a.ndim > 2:
            diagonal_after = spatial.last_mixing_layer(self.layers)
            state, diag1, diag2 = spatial.input_states(a, b, full=diagonal_after >= 0)
            segments: list[tuple[tuple[Layer, ...], bool]] = [(self.layers, False)]
        else:
            d = a.shape[1]
            var1 = a.square().mean(dim=1)  # shape: (n1,)
            var2 = var1 if b is None else b.square().mean(dim=1)  # shape: (n2,)
            fusable = inplace and _fused.supports(a)
            scale = d**-0.5  # fold the 1/d of the input kernel into the (n, d) inputs
            a_scaled = a * scale
            b_scaled = a_scaled if b is None else b * scale
            n1, n2 = a.shape[0], b_scaled.shape[0]
            out = _fused.empty_matrix(n1, n2, a) if fusable else None
            cov = torch.matmul(a_scaled, b_scaled.T, out=out)  # shape: (n1, n2)
            state = KernelState(cov, None, var1[:, None], var2[None, :], d)
            diag1 = KernelState(var1, None, var1, var1, d)
            diag2 = diag1 if b is None else KernelState(var2, None, var2, var2, d)
            # fused dispatch: runs of [Relu, Dense(ntk)] go through one C pass (see _fused)
            segments = _fused.split_runs(self.layers) if fusable else [(self.layers, False)]
        done = 0
        for layers, fused in segments:
            if fused:
                run = _fused.propagate_run(layers, state, diag1, None if b is None else diag2)
                if run is not None:
                    state, diag1, diag2 = run
                    done += len(layers)
                    continue
            state, diag1, d2 = spatial.run_layers(
                layers,
                state,
                diag1,
                None if b is None else diag2,
                inplace=inplace,
                diagonal_after=diagonal_after - done,
            )
            diag2 = diag1 if d2 is None else d2
            done += len(layers)
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
    ) -> nn.Module:
        """A finite network with this architecture.

        Parameters
        ----------
        width : int
            Output width of every hidden Dense layer that has no ``width`` of its own.
        out_features : int
            Output width of the last Dense layer (when it has no ``width`` of its own).
        in_features : int, optional
            Input dimension d. When omitted, the first Dense layer is lazy: its weights are
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

        Returns
        -------
        torch.nn.Module
            An ``nn.Sequential`` (possibly wrapped as above). Its parameters are initialized as
            the parameterization prescribes (unit Gaussian in NTK parameterization, the scale
            applied in ``forward``).

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
        dense = [i for i, layer in enumerate(self.layers) if isinstance(layer, Dense)]
        if parameterization is not None:
            other = [
                type(layer).__name__
                for layer in self.layers
                if layer.has_parameters and not isinstance(layer, Dense)
            ]
            if other:
                raise NtklabValueError(
                    f"parameterization: expected an architecture whose layers with weights are "
                    f"all Dense (the override applies to Dense only), got {', '.join(other)}"
                )
        hidden = width // 2 if zero_output else width
        last_dense = max(i for i, layer in enumerate(self.layers) if layer.has_parameters)
        modules: list[nn.Module] = []
        features: int | None = in_features
        for i, layer in enumerate(self.layers):
            out = out_features if i == last_dense else hidden
            if isinstance(layer, Dense):
                role: Literal["input", "hidden", "output", "only"] = (
                    "only"
                    if len(dense) == 1
                    else "input"
                    if i == dense[0]
                    else "output"
                    if i == dense[-1]
                    else "hidden"
                )
                mod = layer.module(
                    features,
                    out,
                    generator=generator,
                    dtype=dtype,
                    device=device,
                    parameterization=parameterization,
                    role=role,
                )
            else:
                mod = layer.module(features, out, generator=generator, dtype=dtype, device=device)
            modules.append(mod)
            if layer.has_parameters:
                # a module without ``out_features`` leaves the next Dense lazy
                found = getattr(mod, "out_features", None)
                features = found if isinstance(found, int) else None
        from ..nets.conv_modules import ConvLayer

        if modules and isinstance(modules[0], ConvLayer):
            modules[0].check_layout = True  # refuse channels-last inputs, as kernel() does
        net: nn.Module = nn.Sequential(*modules)
        if zero_output or alpha != 1.0:
            from ..nets.wrappers import AntisymmetricPair, ScaledOutput

            if zero_output:
                net = AntisymmetricPair(net)
            if alpha != 1.0:
                net = ScaledOutput(net, alpha)
        return net


def _next_diagonal(layer: Layer, diag: KernelState) -> KernelState:
    """Propagate the per-input variances through ``layer`` (the kernel on the diagonal)."""
    from .spatial import self_variances

    return self_variances(layer.propagate(diag, inplace=False))


def serial(*layers: Layer | Architecture | Sequence[Layer]) -> Architecture:
    """Compose layers (and architectures) in sequence.

    Examples
    --------
    >>> import ntklab as nl
    >>> block = nl.serial(nl.Dense(1.5, 0.1), nl.Relu())
    >>> arch = nl.serial(block, block, nl.Dense(1.5, 0.1))
    >>> len(arch)
    5
    """
    flat: list[Layer] = []
    for item in layers:
        if isinstance(item, Architecture):
            flat.extend(item.layers)
        elif isinstance(item, list | tuple):
            flat.extend(serial(*item).layers)
        else:
            flat.append(item)  # type: ignore[arg-type]
    return Architecture(tuple(flat))


#: Matrices of shape (n1, n2) that the flat recursion holds at its peak (NNGP, NTK, the
#: correlation and two scratch buffers of the activation's dual).
FLAT_MATRICES = 5
_ALWAYS_FITS = 2**26


def _check_flat_fits(a: Tensor, b: Tensor | None, max_memory: int | None) -> None:
    """Refuse a flat kernel whose (n1, n2) matrices cannot fit ``max_memory``."""
    from ..memory import format_bytes, resolve_max_memory

    n1, n2 = a.shape[0], (a if b is None else b).shape[0]
    needed = FLAT_MATRICES * n1 * n2 * a.element_size()
    if max_memory is None and needed <= _ALWAYS_FITS:
        return  # small kernels skip reading the memory policy on every call
    budget = resolve_max_memory(max_memory, a.device)
    if needed > budget:
        source = "the memory policy's default" if max_memory is None else "max_memory"
        raise NtklabValueError(
            f"max_memory: the kernel of n1 = {n1} by n2 = {n2} inputs needs about "
            f"{format_bytes(needed)} ({FLAT_MATRICES} matrices of {n1} x {n2}), more than "
            f"{source} of {format_bytes(budget)}; use ntklab.solvers.kernel_operator for a "
            "matrix-free kernel, or compute it in blocks of rows"
        )
