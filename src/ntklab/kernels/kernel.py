"""The state that an infinite-width kernel recursion carries from layer to layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

__all__ = ["Kernel", "KernelState"]


@dataclass(frozen=True)
class Kernel:
    """Infinite-width kernels of an architecture on two batches of inputs.

    Attributes
    ----------
    nngp : Tensor of shape (n1, n2)
        The NNGP kernel :math:`K(x, x') = \\lim_{m\\to\\infty} E[f(x) f(x')]` (the output
        covariance at initialization, per output unit).
    ntk : Tensor of shape (n1, n2)
        The neural tangent kernel :math:`\\Theta(x, x') = \\lim_{m\\to\\infty}
        \\langle \\partial_\\theta f(x), \\partial_\\theta f(x') \\rangle`.
    var1 : Tensor of shape (n1,)
        The NNGP on the diagonal of ``x1``: :math:`K(x_i, x_i)`.
    var2 : Tensor of shape (n2,)
        The NNGP on the diagonal of ``x2``.
    """

    nngp: Tensor
    ntk: Tensor
    var1: Tensor
    var2: Tensor

    @property
    def shape(self) -> tuple[int, int]:
        """``(n1, n2)``."""
        return (int(self.nngp.shape[0]), int(self.nngp.shape[1]))

    def to(self, *args: Any, **kwargs: Any) -> Kernel:
        """The kernel with every tensor converted by ``Tensor.to(*args, **kwargs)`` (a device,
        a dtype, or both), as ``torch.nn.Module.to``.

        Examples
        --------
        >>> import torch, ntklab as nl
        >>> k = nl.serial(nl.Dense(), nl.Relu(), nl.Dense()).kernel(torch.randn(3, 2))
        >>> k.to(torch.float64).ntk.dtype
        torch.float64
        """
        return Kernel(
            nngp=self.nngp.to(*args, **kwargs),
            ntk=self.ntk.to(*args, **kwargs),
            var1=self.var1.to(*args, **kwargs),
            var2=self.var2.to(*args, **kwargs),
        )


@dataclass(frozen=True)
class KernelState:
    """What one layer of the recursion reads and writes (internal to the layers).

    ``cov`` and ``ntk`` hold the kernels between pairs of inputs; ``var1`` and ``var2`` the
    NNGP of each input with itself, shaped so that they broadcast against ``cov`` (``(n1, 1)``
    and ``(1, n2)`` for a matrix; ``(n,)`` each for the diagonal pass, where ``cov`` is the
    diagonal itself). ``ntk`` is ``None`` while it is identically zero (before the first
    layer with parameters). ``fan_in`` is the width of the representation that the next
    ``Dense`` layer reads (the input dimension at first), ``None`` when no width was given.

    Spatial inputs (images of shape ``(n, C, *S)``) add trailing axes (see
    :mod:`ntklab.kernels.spatial`): ``spatial_ndim`` is ``len(S)``; with ``full_spatial`` the
    covariance between every pair of positions is kept, in neural-tangents' interleaved layout
    ``(batch..., H, H', W, W')``, otherwise only the same-position diagonal ``(batch..., H, W)``.
    ``gaussian`` says that the representation is a zero-mean Gaussian process linear in the
    last layer's fresh weights (after ``Dense``/``Conv``, not after a nonlinearity): what
    ``LayerNorm`` and the residual sum assume. ``product`` says that it is a product of
    branches (``FanInProd``), not Gaussian, until the next ``Dense``/``Conv``: activations
    (whose duals are Gaussian expectations) cannot read it. ``adjacency`` holds, for graph
    inputs (:class:`~ntklab.kernels.GraphBatch`), the adjacency of the row inputs and of the
    column inputs, ``(n1, N, N)`` and ``(n2, N, N)`` (on the diagonal pass both are the
    input's own), which :class:`~ntklab.kernels.Aggregate` reads; ``None`` otherwise.
    ``mask`` holds, for masked inputs (``Architecture.kernel(..., mask_constant=c)``), which
    positions of the row inputs and of the column inputs are padding, boolean ``(n1, *S)``
    and ``(n2, *S)`` (``True``: masked; on the diagonal pass both are the input's own): the
    covariances involving a masked position are zero, and the layers that average over
    positions (``GlobalAvgPool``, ``GlobalSelfAttention``) skip them; ``None`` otherwise.
    """

    cov: Tensor
    ntk: Tensor | None
    var1: Tensor
    var2: Tensor
    fan_in: int | None
    spatial_ndim: int = 0
    full_spatial: bool = False
    gaussian: bool = False
    product: bool = False
    adjacency: tuple[Tensor, Tensor] | None = None
    mask: tuple[Tensor, Tensor] | None = None

    @property
    def batch_ndim(self) -> int:
        """Number of leading batch axes of ``cov``: 2 for a pair of batches, 1 on the diagonal."""
        return self.cov.ndim - self.spatial_ndim * (2 if self.full_spatial else 1)

    @property
    def spatial_shape(self) -> tuple[int, ...]:
        """The spatial shape ``S`` of the representation (``()`` for a flat one)."""
        step = 2 if self.full_spatial else 1
        return tuple(int(s) for s in self.cov.shape[self.batch_ndim :: step])
