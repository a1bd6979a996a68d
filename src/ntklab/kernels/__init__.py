"""Analytic infinite-width kernels (NNGP and NTK) of architectures, in torch.

One module per layer family, each with its kernel rule and its finite module: :mod:`.dense`,
:mod:`.activations`, :mod:`.conv`, :mod:`.pooling`, :mod:`.normalization`, :mod:`.dropout`
and :mod:`.graphs` (branches: ``FanOut``, ``parallel``, ``FanIn*``, ``repeat``,
``Residual``), over the engine (:mod:`.engine`: the carried state, validation, blocking,
``Architecture`` and ``serial``) and the fused CPU backend (:mod:`._fused`).
"""

from .activations import (
    Abs,
    Activation,
    Cos,
    Elementwise,
    Erf,
    Gelu,
    Identity,
    LeakyRelu,
    Relu,
    Sigmoid,
    Silu,
    Sin,
    Softplus,
    Tanh,
)
from .conv import Conv
from .dense import Dense
from .dropout import Dropout
from .engine import Architecture, Layer, serial
from .from_torch import from_torch
from .graphs import (
    FanInConcat,
    FanInProd,
    FanInSum,
    FanOut,
    Parallel,
    Residual,
    parallel,
    repeat,
)
from .kernel import Kernel
from .normalization import LayerNorm
from .pooling import AvgPool, Flatten, GlobalAvgPool

__all__ = [
    "Abs",
    "Activation",
    "Architecture",
    "AvgPool",
    "Conv",
    "Cos",
    "Dense",
    "Dropout",
    "Elementwise",
    "Erf",
    "FanInConcat",
    "FanInProd",
    "FanInSum",
    "FanOut",
    "Flatten",
    "Gelu",
    "GlobalAvgPool",
    "Identity",
    "Kernel",
    "Layer",
    "LayerNorm",
    "LeakyRelu",
    "Parallel",
    "Relu",
    "Residual",
    "Sigmoid",
    "Silu",
    "Sin",
    "Softplus",
    "Tanh",
    "from_torch",
    "parallel",
    "repeat",
    "serial",
]
