"""Output covariances of finite networks, and Monte Carlo estimates of infinite-width kernels.

A network at initialization is a random function; as its width :math:`m` grows, its outputs
tend to a Gaussian process with covariance the NNGP kernel :math:`K` (arXiv:1711.00165) and
its empirical NTK tends to the deterministic :math:`\\Theta` (arXiv:1806.07572). Averaging
over :math:`S` independent initializations of width :math:`m` with :math:`k` outputs
estimates both, the check neural-tangents uses for its analytic kernels (arXiv:1912.02803,
``monte_carlo_kernel_fn``):

- the NTK of one network already concentrates, so the error is of order :math:`(m S)^{-1/2}`;
- the NNGP sample :math:`f(x) f(x')` of one network does not (it is a product of two
  Gaussians however wide the network), so the error is of order :math:`(S k)^{-1/2}`;

both plus a bias of order :math:`1/m`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .._checks import check_positive_int
from .._inputs import check_kernel_inputs
from ..errors import NtklabTypeError, NtklabValueError
from ..kernels.engine import Architecture, Layer, serial
from ..memory import format_bytes, resolve_max_memory
from ._functional import FunctionalModel, Outputs, check_batch, functional_model
from ._guards import check_modules, check_per_example

__all__ = [
    "MonteCarloKernel",
    "check_architecture",
    "monte_carlo_kernel",
    "nngp",
    "per_network_kernels",
]

_OUTPUTS = ("trace", "full", "diagonal")


# -------------------------------------------------------------------------------------- nngp
def nngp(
    model: nn.Module,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    outputs: Outputs = "trace",
    max_memory: int | None = None,
) -> Tensor:
    """The empirical NNGP of one network: the outer product of its outputs.

    .. math:: \\hat K_{ab}(x, x') = f_a(x) \\, f_b(x'),

    a one-sample estimate of the NNGP kernel when the network is drawn at random.

    Parameters
    ----------
    model : nn.Module
        A module with parameters, mapping ``(n, ...)`` inputs to ``(n, k)`` (or ``(n,)``,
        ``k = 1``; other output shapes are flattened to ``(n, k)``).
    x1 : Tensor of shape (n1, ...)
    x2 : Tensor of shape (n2, ...), optional
        Defaults to ``x1``.
    outputs : {"trace", "full", "diagonal"}
        neural-tangents' conventions: ``"trace"`` averages over the ``k`` outputs,
        :math:`\\frac1k \\sum_a f_a(x) f_a(x')`, shape ``(n1, n2)``; ``"full"`` keeps every
        pair of outputs, ``(n1, n2, k, k)``; ``"diagonal"`` the equal pairs, ``(n1, n2, k)``.
    max_memory : int, optional
        Bytes the result may take; a larger one is refused after the forward passes, before
        it is allocated. Default ``None``: the policy of :mod:`ntklab.memory` (half of the
        memory this process may still use on the model's device).

    Returns
    -------
    Tensor
        On the inputs' dtype and device; differentiable in the inputs and in the module's
        parameters.

    Raises
    ------
    NtklabTypeError
        ``model`` is not a module; an input is not a tensor or not of the model's dtype.
    NtklabValueError
        The model has no parameters; an input is on another device or rejected by the model;
        ``outputs`` is not one of the three conventions; the result does not fit
        ``max_memory``.

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    >>> nngp(net, torch.randn(4, 3), torch.randn(5, 3), outputs="full").shape
    torch.Size([4, 5, 2, 2])
    """
    _check_outputs(outputs)
    if max_memory is not None:
        resolve_max_memory(max_memory)  # the type and sign, before any work
    fm = functional_model(model)
    check_modules(fm.module)
    x1 = check_batch("x1", x1, fm)
    if x2 is not None:
        x2 = check_batch("x2", x2, fm)
    check_per_example(fm, x1, x2)
    live = dict(model.named_parameters())
    params = {name: live[name] for name in fm.names}  # not detached: differentiable
    f1 = fm(params, x1)  # shape: (n1, k)
    f2 = f1 if x2 is None else fm(params, x2)  # shape: (n2, k)
    n1, n2, k = f1.shape[0], f2.shape[0], f1.shape[1]
    need = n1 * n2 * {"trace": 1, "full": k * k, "diagonal": k}[outputs] * f1.element_size()
    budget = resolve_max_memory(max_memory, f1.device)
    if need > budget:
        raise NtklabValueError(
            f"max_memory: expected at least the {need:,} bytes ({format_bytes(need)}) of the "
            f"{outputs!r} result for n1 = {n1} and n2 = {n2} inputs with k = {k} outputs, "
            f"got max_memory = {budget:,} bytes"
        )
    return _outer(f1, f2, outputs)


def _check_outputs(outputs: object) -> None:
    if outputs not in _OUTPUTS:
        raise NtklabValueError(
            f"outputs: expected one of {', '.join(map(repr, _OUTPUTS))}, got {outputs!r}"
        )


def _outer(f1: Tensor, f2: Tensor, outputs: Outputs) -> Tensor:
    """``f1 (n1, k)`` and ``f2 (n2, k)`` to the kernel in the ``outputs`` convention."""
    if outputs == "trace":
        return (f1 @ f2.T) / f1.shape[1]
    if outputs == "diagonal":
        return torch.einsum("ia,ja->ija", f1, f2)
    return torch.einsum("ia,jb->ijab", f1, f2)


# ------------------------------------------------------------------------------ Monte Carlo
@dataclass(frozen=True)
class MonteCarloKernel:
    """Monte Carlo estimates of an architecture's NNGP and NTK.

    Attributes
    ----------
    nngp : Tensor of shape (n1, n2)
        :math:`\\bar K = \\frac{1}{S} \\sum_s \\frac1k \\sum_a f^{(s)}_a(x_1) f^{(s)}_a(x_2)`.
    ntk : Tensor of shape (n1, n2)
        :math:`\\bar\\Theta = \\frac{1}{S} \\sum_s \\frac1k \\sum_a \\langle \\partial_\\theta
        f^{(s)}_a(x_1), \\partial_\\theta f^{(s)}_a(x_2) \\rangle` (the trace convention).
    nngp_stderr : Tensor of shape (n1, n2)
        Standard error of ``nngp``: the across-sample standard deviation (``ddof=1``) over
        :math:`\\sqrt{S}`.
    ntk_stderr : Tensor of shape (n1, n2)
        Standard error of ``ntk``.
    n_samples : int
        :math:`S`, the number of networks.
    width : int or None
        Width of their hidden layers (``None`` for networks from a module factory).
    out_features : int
        :math:`k`, outputs per network (averaged over).
    """

    nngp: Tensor
    ntk: Tensor
    nngp_stderr: Tensor
    ntk_stderr: Tensor
    n_samples: int
    width: int | None
    out_features: int = 1


@dataclass(frozen=True)
class _Moments:
    """Running mean and sum of squared deviations of a stream of samples (Chan et al.)."""

    count: int
    mean: Tensor
    m2: Tensor

    @staticmethod
    def of(samples: Tensor) -> _Moments:  # samples: (b, ...)
        mean = samples.mean(dim=0)
        return _Moments(int(samples.shape[0]), mean, (samples - mean).square_().sum(dim=0))

    def merge(self, other: _Moments) -> _Moments:
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / count)
        m2 = self.m2 + other.m2 + delta.square() * (self.count * other.count / count)
        return _Moments(count, mean, m2)

    def stderr(self) -> Tensor:
        return (self.m2 / ((self.count - 1) * self.count)).sqrt()


def monte_carlo_kernel(
    arch: Architecture | Layer | Callable[[], nn.Module],
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    width: int | None = None,
    n_samples: int,
    generator: torch.Generator | None = None,
    batch_size: int | None = None,
    dtype: torch.dtype | None = None,
    out_features: int = 1,
    max_memory: int | None = None,
) -> MonteCarloKernel:
    """Monte Carlo estimate of an architecture's NNGP and NTK over random finite networks.

    Draws ``n_samples`` networks ``arch.to_torch(width, out_features, generator=generator)``
    one after the other (so the result is a deterministic function of the generator's state,
    and equals a plain loop over the same draws), and averages over them

    .. math:: \\bar K(x_1, x_2) = \\frac{1}{S k} \\sum_{s, a} f^{(s)}_a(x_1) f^{(s)}_a(x_2),
              \\qquad
              \\bar\\Theta(x_1, x_2) = \\frac{1}{S k} \\sum_{s, a} J^{(s)}_a(x_1)
              J^{(s)}_a(x_2)^T,

    which tend to ``arch.kernel(x1, x2)``: the NTK with an error of order
    :math:`(m S)^{-1/2}`, the NNGP with an error of order :math:`(S k)^{-1/2}` (one network's
    output covariance sample does not concentrate with width), both with biases of order
    :math:`1/m`. The standard errors are the across-network standard deviations over
    :math:`\\sqrt S`.

    The networks are evaluated ``batch_size`` at a time, vectorized: their parameters are
    stacked (``torch.func.stack_module_state``) and one ``vmap`` over networks computes each
    network's outputs and per-example Jacobians (``vmap`` of ``jacrev``), contracted to its
    NTK.

    Parameters
    ----------
    arch : Architecture, Layer, or callable returning an nn.Module
        An architecture from :func:`ntklab.serial` with at least one ``Dense`` layer, whose
        networks are ``arch.to_torch(width, out_features, generator=generator)``; or a module
        factory, a function of no argument that returns a freshly initialized network each
        time it is called (for any ``torch.nn`` model, e.g. one that
        :func:`ntklab.kernels.from_torch` cannot read). The factory draws from its own
        randomness (seed torch's global generator for reproducible draws); ``width``,
        ``out_features`` and ``generator`` do not apply to it.
    x1 : Tensor of shape (n1, d), or images (n1, C, *S) for an architecture with spatial layers
    x2 : Tensor of the same shape but for n2, optional
        Defaults to ``x1`` (then the Jacobians are computed once).
    width : int
        Width (channels) of the hidden ``Dense`` and ``Conv`` layers without a width of their
        own. Required for an architecture, ``None`` for a module factory.
    n_samples : int
        Number of networks :math:`S \\ge 2` (two are needed for a standard error).
    generator : torch.Generator, optional
        Source of the initializations (default: torch's global generator).
    batch_size : int, optional
        Networks per vectorized batch. Default: as many as fit ``max_memory`` beside the
        running moments (:math:`8 n_1 n_2` numbers), at :math:`3 (n_1 + n_2) k P + 4 n_1 n_2`
        numbers per network (its per-example Jacobians and kernels) for ``P`` parameters.
    dtype : torch.dtype, optional
        Of the networks and the computation (default: ``x1``'s); the inputs are converted.
    out_features : int
        Outputs per network; the estimates average over them.
    max_memory : int, optional
        Bytes the estimate may allocate; it sizes the default ``batch_size``. Default
        ``None``: the policy of :mod:`ntklab.memory` (half of the memory this process may
        still use on ``x1``'s device).

    Returns
    -------
    MonteCarloKernel
        Estimates and their standard errors, of shape ``(n1, n2)``, on ``x1``'s device; not
        differentiable.

    Raises
    ------
    NtklabTypeError
        ``arch`` is not an architecture; an input is not a floating tensor; an integer
        argument is not an int; ``dtype`` is not floating.
    NtklabValueError
        The architecture has no ``Dense`` layer; the inputs are not ``(n, d)`` batches (or
        ``(n, C, *S)`` images for a spatial architecture) of one shape, dtype and device;
        ``n_samples < 2``; a size is not positive; not even one network (its Jacobians and
        kernels beside the moments) fits ``max_memory``.

    Examples
    --------
    >>> import torch, ntklab as nl
    >>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
    >>> x = torch.randn(3, 2, dtype=torch.float64)
    >>> mc = monte_carlo_kernel(arch, x, width=256, n_samples=8,
    ...                         generator=torch.Generator().manual_seed(0))
    >>> mc.ntk.shape, mc.n_samples
    (torch.Size([3, 3]), 8)
    """
    factory = _module_factory(arch)
    if factory is None:
        arch = check_architecture(arch)
    if isinstance(x1, Tensor) and isinstance(x2, Tensor) and x1.device != x2.device:
        raise NtklabValueError(f"x2: expected the device of x1 ({x1.device}), got {x2.device}")
    a, b = check_kernel_inputs(arch if factory is None else None, x1, x2)
    if factory is not None:
        if width is not None:
            raise NtklabValueError(
                f"width: expected None with a module factory (the factory sets the widths), "
                f"got {width!r}"
            )
    else:
        assert isinstance(arch, Architecture)
        if width is None:
            raise NtklabValueError(
                "width: expected a positive int (the hidden width of the networks of an "
                "architecture), got None"
            )
        check_positive_int("width", width)
    check_positive_int("n_samples", n_samples)
    if n_samples < 2:
        raise NtklabValueError(
            f"n_samples: expected an int >= 2 (a standard error needs two), got {n_samples}"
        )
    if batch_size is not None:
        check_positive_int("batch_size", batch_size)
    check_positive_int("out_features", out_features)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise NtklabTypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
    budget = resolve_max_memory(max_memory, a.device)
    dtype = a.dtype if dtype is None else dtype
    a = a.to(dtype)
    b = None if b is None else b.to(dtype)

    def draw() -> nn.Module:
        if factory is not None:
            net = factory()
            if not isinstance(net, nn.Module):
                raise NtklabTypeError(
                    f"arch: expected a factory that returns an nn.Module, got one that returns "
                    f"{type(net).__name__}"
                )
            net = net.to(dtype=dtype, device=a.device)
            with torch.no_grad():  # create lazy parameters; read the number of outputs
                outputs[0] = int(net(a[:1]).reshape(1, -1).shape[1])
            return net
        assert isinstance(arch, Architecture) and width is not None
        net = arch.to_torch(
            width,
            out_features,
            in_features=int(a.shape[1]) if a.ndim == 2 else None,
            generator=generator,
            dtype=dtype,
            device=a.device,
        )
        if a.ndim > 2:  # the convolutions are lazy in their input channels: create them
            with torch.no_grad():
                net(a[:1])
        return net

    outputs = [out_features]
    first = draw()
    fm = functional_model(first)
    if factory is not None:  # a user's network: no Dropout in training mode, no batch statistics
        check_modules(first)
    out_features = outputs[0]
    if batch_size is None:
        n1, n2 = a.shape[0], (a if b is None else b).shape[0]
        item = _itemsize(dtype)
        per_net = (3 * (n1 + n2) * out_features * fm.n_params + 4 * n1 * n2) * item
        fixed = 8 * n1 * n2 * item  # the running mean and M2 of both kernels, and a merge
        if fixed + per_net > budget:
            raise NtklabValueError(
                f"max_memory: expected at least {fixed + per_net:,} bytes "
                f"({format_bytes(fixed + per_net)}: one network's Jacobians and kernels for "
                f"n1 = {n1}, n2 = {n2} inputs and {fm.n_params} parameters, beside the "
                f"moments), got {budget:,}"
            )
        batch_size = max(1, min(n_samples, (budget - fixed) // per_net))
    kernels = per_network_kernels(fm, a, b)

    nngp_moments: _Moments | None = None
    ntk_moments: _Moments | None = None
    drawn = 0
    with torch.no_grad():
        while drawn < n_samples:
            size = min(batch_size, n_samples - drawn)
            nets = [first] if drawn == 0 else []
            nets += [draw() for _ in range(size - len(nets))]
            drawn += size
            stacked, _ = torch.func.stack_module_state(nets)  # name -> (size, *shape)
            params = {name: stacked[name].detach() for name in fm.names}
            k_batch, theta_batch = kernels(params)  # shapes: (size, n1, n2)
            batch_nngp, batch_ntk = _Moments.of(k_batch), _Moments.of(theta_batch)
            nngp_moments = batch_nngp if nngp_moments is None else nngp_moments.merge(batch_nngp)
            ntk_moments = batch_ntk if ntk_moments is None else ntk_moments.merge(batch_ntk)
    assert nngp_moments is not None and ntk_moments is not None  # n_samples >= 2
    return MonteCarloKernel(
        nngp=nngp_moments.mean,
        ntk=ntk_moments.mean,
        nngp_stderr=nngp_moments.stderr(),
        ntk_stderr=ntk_moments.stderr(),
        n_samples=n_samples,
        width=width,
        out_features=out_features,
    )


def _module_factory(arch: object) -> Callable[[], nn.Module] | None:
    """``arch`` when it is a module factory (a callable that is not an ntklab architecture or
    layer), ``None`` when it is an architecture or layer; an error for a module itself."""
    if isinstance(arch, Architecture | Layer):
        return None
    if isinstance(arch, nn.Module):
        raise NtklabTypeError(
            f"arch: expected an ntklab Architecture or a factory of freshly initialized "
            f"networks, got the module {type(arch).__name__} itself (one initialization); pass "
            "a function that builds it, e.g. lambda: MyNet(), or use ntklab.empirical.ntk for "
            "the kernel of this one network"
        )
    if callable(arch):
        return arch
    return None


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def check_architecture(arch: object) -> Architecture:
    """Return ``arch`` as an architecture with parameters (a layer becomes ``serial(layer)``)."""
    if isinstance(arch, Layer):
        arch = serial(arch)
    if not isinstance(arch, Architecture):
        raise NtklabTypeError(
            f"arch: expected an ntklab Architecture (from ntklab.serial), got {type(arch).__name__}"
        )
    if not any(layer.has_parameters for layer in arch.layers):
        raise NtklabValueError(
            "arch: expected an architecture with at least one Dense layer (a network with "
            "parameters), got none"
        )
    return arch


def per_network_kernels(
    fm: FunctionalModel, x1: Tensor, x2: Tensor | None
) -> Callable[[dict[str, Tensor]], tuple[Tensor, Tensor]]:
    """A function of stacked parameters ``name -> (b, *shape)`` returning each network's
    NNGP and NTK sample, both of shape ``(b, n1, n2)`` (trace convention)."""

    def single(p: dict[str, Tensor], xi: Tensor) -> tuple[Tensor, Tensor]:
        out = fm.single(p, xi)  # shape: (k,)
        return out, out

    per_example = torch.func.vmap(torch.func.jacrev(single, has_aux=True), in_dims=(None, 0))

    def one_network(params: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        jac1, f1 = per_example(params, x1)  # name -> (n1, k, *shape); (n1, k)
        jac2, f2 = (jac1, f1) if x2 is None else per_example(params, x2)
        n1, n2, k = f1.shape[0], f2.shape[0], f1.shape[1]
        theta = sum(  # shape: (n1, n2); sum over outputs a and parameters p
            (jac1[name].reshape(n1, -1) @ jac2[name].reshape(n2, -1).T for name in fm.names),
            torch.zeros(n1, n2, dtype=f1.dtype, device=f1.device),
        )
        return (f1 @ f2.T) / k, theta / k

    return torch.func.vmap(one_network)
