"""ntklab: a PyTorch-native laboratory for Neural Tangent Kernel theory.

>>> import torch, ntklab as nl
>>> arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
>>> x = torch.randn(5, 3, dtype=torch.float64)
>>> k = arch.kernel(x)
>>> k.nngp.shape, k.ntk.shape
(torch.Size([5, 5]), torch.Size([5, 5]))
"""

from importlib.metadata import PackageNotFoundError, version

from . import analysis, data, dynamics, empirical, nets, predict, solvers
from .errors import (
    ConvergenceWarning,
    NtklabError,
    NtklabTypeError,
    NtklabValueError,
    NumericalWarning,
)
from .kernels import (
    Abs,
    Architecture,
    AvgPool,
    Conv,
    Cos,
    Dense,
    Dropout,
    Elementwise,
    Erf,
    Flatten,
    Gelu,
    GlobalAvgPool,
    Identity,
    Kernel,
    LayerNorm,
    LeakyRelu,
    Relu,
    Residual,
    Sigmoid,
    Silu,
    Sin,
    Softplus,
    Tanh,
    from_torch,
    serial,
)

try:
    __version__ = version("ntklab")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

__all__ = [
    "Abs",
    "Architecture",
    "AvgPool",
    "Conv",
    "ConvergenceWarning",
    "Cos",
    "Dense",
    "Dropout",
    "Elementwise",
    "Erf",
    "Flatten",
    "Gelu",
    "GlobalAvgPool",
    "Identity",
    "Kernel",
    "LayerNorm",
    "LeakyRelu",
    "NtklabError",
    "NtklabTypeError",
    "NtklabValueError",
    "NumericalWarning",
    "Relu",
    "Residual",
    "Sigmoid",
    "Silu",
    "Sin",
    "Softplus",
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
