"""Linear algebra for kernel matrices: dense factorizations, lazy blocked operators, CG and
Nystrom (FALKON) solvers, and top eigenpairs."""

from .cg import CGResult, conjugate_gradient
from .dense import (
    Cholesky,
    Eigh,
    check_symmetric,
    cholesky_with_jitter,
    psd_eigh,
    symmetrize,
)
from .eigen import EigenPairs, flow_predict, top_eigenpairs
from .low_rank import FeatureOperator, pseudo_inverse_values
from .nystrom import NystromFit, falkon, rpcholesky_centres, select_centres
from .operator import (
    ArchitectureKernel,
    BlockKernel,
    DenseOperator,
    KernelOperator,
    LinearOperator,
    as_operator,
    kernel_operator,
    operator_columns,
)
from .solve import SolveResult, predict, solve

__all__ = [
    "ArchitectureKernel",
    "BlockKernel",
    "CGResult",
    "Cholesky",
    "DenseOperator",
    "EigenPairs",
    "Eigh",
    "FeatureOperator",
    "KernelOperator",
    "LinearOperator",
    "NystromFit",
    "SolveResult",
    "as_operator",
    "check_symmetric",
    "cholesky_with_jitter",
    "conjugate_gradient",
    "falkon",
    "flow_predict",
    "kernel_operator",
    "operator_columns",
    "predict",
    "psd_eigh",
    "pseudo_inverse_values",
    "rpcholesky_centres",
    "select_centres",
    "solve",
    "symmetrize",
    "top_eigenpairs",
]
