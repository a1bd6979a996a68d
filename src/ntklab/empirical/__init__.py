"""Finite-width kernels of any ``torch.nn.Module``: the empirical NTK and NNGP.

- :func:`ntk`: the empirical NTK, by structured derivatives, Jacobian contraction or
  NTK-vector products (``method="auto"`` picks by a cost model), blocked under ``max_memory``
  (default: the policy of :mod:`ntklab.memory`), refusing a result that cannot fit;
- :func:`ntk_operator`: the NTK as a matrix-free operator (matvec, diagonal) for iterative
  solvers and eigenpairs;
- :func:`nngp`: the output covariance sample :math:`f(x) f(x')^T`;
- :func:`monte_carlo_kernel`: Monte Carlo estimates of an architecture's infinite-width
  kernels over many random initializations, vectorized over networks.
"""

from ._functional import FunctionalModel, functional_model
from .monte_carlo import MonteCarloKernel, monte_carlo_kernel, nngp
from .ntk import METHODS, Method, ntk, plan
from .operator import NTKOperator, ntk_operator

__all__ = [
    "METHODS",
    "FunctionalModel",
    "Method",
    "MonteCarloKernel",
    "NTKOperator",
    "functional_model",
    "monte_carlo_kernel",
    "nngp",
    "ntk",
    "ntk_operator",
    "plan",
]
