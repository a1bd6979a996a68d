"""ntklab: a PyTorch-native laboratory for Neural Tangent Kernel theory.

>>> import torch, ntklab as nl
>>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
>>> x = torch.randn(5, 3, dtype=torch.float64)
>>> k = arch.kernel(x)
>>> k.nngp.shape, k.ntk.shape
(torch.Size([5, 5]), torch.Size([5, 5]))
"""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    ConvergenceError,
    ConvergenceWarning,
    NtklabError,
    NtklabTypeError,
    NtklabValueError,
    NumericalWarning,
)
from .kernels import (
    ABRelu,
    Abs,
    Aggregate,
    Architecture,
    AvgPool,
    Conv,
    ConvLocal,
    ConvTranspose,
    Cos,
    Dense,
    DotGeneral,
    Dropout,
    Elementwise,
    Erf,
    Exp,
    ExpNormalized,
    Flatten,
    Gabor,
    GaussianBump,
    Gelu,
    GlobalAvgPool,
    GlobalSelfAttention,
    GlobalSumPool,
    GraphBatch,
    Hermite,
    Identity,
    ImageResize,
    Index,
    Kernel,
    LayerNorm,
    LeakyRelu,
    Monomial,
    Polynomial,
    Rbf,
    RectifiedMonomial,
    Relu,
    Residual,
    Sigmoid,
    SigmoidLike,
    Sign,
    Silu,
    Sin,
    Slice,
    Softplus,
    SumPool,
    Tanh,
    from_torch,
    serial,
)

if TYPE_CHECKING:
    from . import analysis, data, dynamics, empirical, nets, predict, solvers

# The subpackages are imported on first access (``nl.dynamics``, ``import ntklab.nets``), so
# ``import ntklab`` loads only the kernels: scipy, scikit-learn, matplotlib and dask are
# imported by the functions that use them.
_SUBPACKAGES = frozenset(
    {
        "analysis",
        "data",
        "distributed",
        "dynamics",
        "empirical",
        "experiments",
        "nets",
        "predict",
        "report",
        "solvers",
    }
)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("ntklab")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            return "0.0.0+unknown"
    if name in _SUBPACKAGES:
        module = importlib.import_module(f".{name}", __name__)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _SUBPACKAGES)


__all__ = [
    "ABRelu",
    "Abs",
    "Aggregate",
    "Architecture",
    "AvgPool",
    "Conv",
    "ConvLocal",
    "ConvTranspose",
    "ConvergenceError",
    "ConvergenceWarning",
    "Cos",
    "Dense",
    "DotGeneral",
    "Dropout",
    "Elementwise",
    "Erf",
    "Exp",
    "ExpNormalized",
    "Flatten",
    "Gabor",
    "GaussianBump",
    "Gelu",
    "GlobalAvgPool",
    "GlobalSelfAttention",
    "GlobalSumPool",
    "GraphBatch",
    "Hermite",
    "Identity",
    "ImageResize",
    "Index",
    "Kernel",
    "LayerNorm",
    "LeakyRelu",
    "Monomial",
    "NtklabError",
    "NtklabTypeError",
    "NtklabValueError",
    "NumericalWarning",
    "Polynomial",
    "Rbf",
    "RectifiedMonomial",
    "Relu",
    "Residual",
    "Sigmoid",
    "SigmoidLike",
    "Sign",
    "Silu",
    "Sin",
    "Slice",
    "Softplus",
    "SumPool",
    "Tanh",
    "__version__",
    "analysis",
    "data",
    "dynamics",
    "empirical",
    "from_torch",
    "nets",
    "predict",
    "serial",
    "solvers",
]
