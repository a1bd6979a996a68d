r"""Concentration of the empirical NTK around the analytic one as the width grows.

At initialization the empirical NTK of a width-:math:`m` network concentrates around the
deterministic infinite-width NTK :math:`\Theta` with fluctuations of order :math:`m^{-1/2}`
(Jacot et al., arXiv:1806.07572; Arora et al., arXiv:1904.11955). Claim B3 measures it as the
sup over a fixed grid of input pairs,

.. math:: D(m, s) = \max_{i, j} \big|\hat\Theta^{(s)}_m(x_i, x'_j) - \Theta(x_i, x'_j)\big|,

for several widths :math:`m` and seeds :math:`s` (:func:`ntk_sup_distance`), whose median over
seeds should fall with slope :math:`-1/2` in :math:`m`
(:func:`~ntklab.analysis.fit_power_law_bootstrap` with ``aggregate="median"``).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ntklab._inputs import check_kernel_inputs
from ntklab.empirical import functional_model, ntk
from ntklab.empirical.monte_carlo import check_architecture, per_network_kernels
from ntklab.errors import NtklabTypeError, NtklabValueError
from ntklab.kernels.engine import Architecture, Layer
from ntklab.memory import resolve_max_memory

from ._validate import integer

__all__ = ["ntk_sup_distance"]

# Jacobian bytes beyond which vectorizing over networks stops paying: measured (2 CPU threads,
# depth-4 erf network, 8 inputs, 10 seeds, float64) vectorized / one by one through ntk:
# width 256 0.17 s / 1.76 s, width 512 0.94 s / 2.06 s, width 1024 (605 MB of Jacobians per
# network) 2.98 s with all ten under an 11 GiB budget / 2.46 s one by one.
_VECTORIZED_BYTES = 2**30


def _widths(widths: object) -> list[int]:
    if isinstance(widths, numbers.Integral) and not isinstance(widths, bool):
        values: list[object] = [int(widths)]
    elif isinstance(widths, Tensor):
        values = [int(w) for w in widths.reshape(-1).tolist()]
    elif isinstance(widths, Sequence) and not isinstance(widths, str):
        values = list(widths)
    else:
        raise NtklabTypeError(
            f"widths: expected an int or a sequence of ints, got {type(widths).__name__} {widths!r}"
        )
    if not values:
        raise NtklabValueError("widths: expected at least one width, got none")
    return [integer(f"widths[{i}]", w, 1) for i, w in enumerate(values)]


def _generator_on(generator: object, device: torch.device) -> torch.Generator:
    if generator is None:
        return torch.Generator(device=device).manual_seed(0)
    if isinstance(generator, int) and not isinstance(generator, bool):
        return torch.Generator(device=device).manual_seed(generator)
    if isinstance(generator, torch.Generator):
        return generator
    raise NtklabTypeError(
        f"generator: expected a torch.Generator, an int seed or None, got "
        f"{type(generator).__name__}"
    )


def ntk_sup_distance(
    arch: Architecture | Layer,
    x1: Tensor,
    x2: Tensor | None = None,
    *,
    widths: int | Sequence[int],
    n_seeds: int,
    generator: torch.Generator | int | None = None,
    dtype: torch.dtype | None = None,
    out_features: int = 1,
    relative: bool = False,
    max_memory: int | None = None,
) -> Tensor:
    r"""Sup-norm distance between empirical NTKs of random finite networks and the analytic NTK.

    .. math:: D_{w s} = \max_{i, j} \big|\hat\Theta^{(s)}_{m_w}(x_{1,i}, x_{2,j})
              - \Theta(x_{1,i}, x_{2,j})\big|
              \quad \Big(\text{divided by } \max_{i,j} |\Theta(x_{1,i}, x_{2,j})|
              \text{ if } \texttt{relative}\Big),

    with :math:`\Theta` = ``arch.kernel(x1, x2).ntk`` and :math:`\hat\Theta^{(s)}_m` the
    empirical NTK (trace convention, averaged over ``out_features`` outputs) of the ``s``-th
    network ``arch.to_torch(m, out_features, generator=generator)``. For each width in order,
    the ``n_seeds`` networks are drawn one after the other from ``generator``, so the result
    is a deterministic function of its state and equals a plain loop over the same draws.

    Small networks are evaluated several at a time, vectorized over networks as
    :func:`~ntklab.empirical.monte_carlo_kernel` does (stacked parameters, ``vmap`` of
    per-example Jacobians), in batches whose Jacobians fit in ``max_memory`` bytes and in
    1 GiB (beyond which vectorizing was measured not to pay); networks too large for two at
    a time go one by one through :func:`~ntklab.empirical.ntk`, whose structured method
    never forms per-example weight Jacobians.

    Parameters
    ----------
    arch : Architecture or Layer
        An architecture with at least one ``Dense`` layer.
    x1 : Tensor of shape (n1, d), or channels-first images (n1, C, *S)
        Whatever ``arch.kernel`` takes (:func:`ntklab._inputs.check_kernel_inputs`).
    x2 : Tensor of shape (n2, ...) with the trailing shape of ``x1``, optional
        Defaults to ``x1``; the fixed set of pairs is the grid ``x1 x x2``.
    widths : int or sequence of ints
        Hidden widths :math:`m_w`.
    n_seeds : int
        Networks per width (>= 1).
    generator : torch.Generator or int or None
        Source of the initializations (an int is a seed; ``None`` means seed 0); on the
        inputs' device.
    dtype : torch.dtype, optional
        Of the networks and kernels (default ``x1``'s); the inputs are converted.
    out_features : int
        Outputs per network.
    relative : bool
        Divide by :math:`\max |\Theta|` over the grid.
    max_memory : int, optional
        Bytes of per-network Jacobians held at once by the vectorized path (at most 1 GiB
        are used). Default
        ``None``: the policy of :mod:`ntklab.memory` (half of the memory this process may
        still use on the inputs' device), also :func:`~ntklab.empirical.ntk`'s default on
        the one-by-one path.

    Returns
    -------
    Tensor of shape (n_widths, n_seeds)
        In ``dtype`` on the inputs' device; not differentiable.

    Examples
    --------
    >>> import ntklab as nl
    >>> arch = nl.serial(nl.Dense(w_std=1.0, b_std=0.1), nl.Erf(), nl.Dense(w_std=1.0, b_std=0.1))
    >>> x = torch.randn(4, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> d = ntk_sup_distance(arch, x, widths=[16, 1024], n_seeds=5, generator=1)
    >>> d.shape, bool(d[1].median() < d[0].median())
    (torch.Size([2, 5]), True)
    """
    architecture = check_architecture(arch)
    if isinstance(x1, Tensor) and isinstance(x2, Tensor) and x1.device != x2.device:
        raise NtklabValueError(f"x2: expected the device of x1 ({x1.device}), got {x2.device}")
    a, b = check_kernel_inputs(architecture, x1, x2)
    sizes = _widths(widths)
    seeds = integer("n_seeds", n_seeds, 1)
    outputs = integer("out_features", out_features, 1)
    budget = resolve_max_memory(max_memory, a.device)
    if not isinstance(relative, bool):
        raise NtklabTypeError(f"relative: expected a bool, got {type(relative).__name__}")
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise NtklabTypeError(f"dtype: expected a floating torch.dtype, got {dtype!r}")
    dtype = a.dtype if dtype is None else dtype
    a = a.detach().to(dtype)
    b = None if b is None else b.detach().to(dtype)
    gen = _generator_on(generator, a.device)

    with torch.no_grad():
        analytic = architecture.kernel(a, b).ntk  # shape: (n1, n2)
    scale = analytic.abs().max() if relative else torch.ones((), dtype=dtype, device=a.device)
    result = torch.empty(len(sizes), seeds, dtype=dtype, device=a.device)
    n_rows = a.shape[0] + (0 if b is None else b.shape[0])
    itemsize = torch.empty((), dtype=dtype).element_size()

    for w, width in enumerate(sizes):

        def draw(width: int = width) -> nn.Module:
            net = architecture.to_torch(
                width,
                outputs,
                in_features=int(a.shape[1]) if a.ndim == 2 else None,
                generator=gen,
                dtype=dtype,
                device=a.device,
            )
            if a.ndim > 2:  # the convolutions are lazy in their input channels: create them
                with torch.no_grad():
                    net(a[:1])
            return net

        first = draw()
        fm = functional_model(first)
        per_net = 3 * n_rows * outputs * fm.n_params * itemsize
        batch = min(seeds, min(budget, _VECTORIZED_BYTES) // max(per_net, 1))
        if batch < 2:
            for s in range(seeds):
                net = first if s == 0 else draw()
                theta = ntk(net, a, b).detach()  # shape: (n1, n2)
                result[w, s] = (theta - analytic).abs().max() / scale
            continue
        kernels = per_network_kernels(fm, a, b)
        done = 0
        with torch.no_grad():
            while done < seeds:
                size = min(batch, seeds - done)
                nets = [first] if done == 0 else []
                nets += [draw() for _ in range(size - len(nets))]
                stacked, _ = torch.func.stack_module_state(nets)
                params = {name: stacked[name].detach() for name in fm.names}
                _, theta_batch = kernels(params)  # shape: (size, n1, n2)
                distance = (theta_batch - analytic).abs().amax(dim=(1, 2)) / scale
                result[w, done : done + size] = distance
                done += size
    return result
