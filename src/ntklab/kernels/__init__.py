"""Analytic infinite-width kernels (NNGP and NTK) of architectures, in torch.

One module per layer family, each with its kernel rule and its finite module: :mod:`.dense`,
:mod:`.activations` (and :mod:`.stax_activations`), :mod:`.conv`, :mod:`.pooling`,
:mod:`.spatial_maps` (resizing, indexing), :mod:`.aggregate` (graph neural networks and
multiplication by constants; their inputs in :mod:`.graph_batch`), :mod:`.attention`,
:mod:`.normalization`, :mod:`.dropout` and :mod:`.graphs` (branches: ``FanOut``,
``parallel``, ``FanIn*``, ``repeat``, ``Residual``), over the engine (:mod:`.engine`: the
carried state, validation, blocking, ``Architecture`` and ``serial``) and the fused CPU
backend (:mod:`._fused`).
"""

from .activations import (
    ABRelu,
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
from .aggregate import Aggregate, DotGeneral
from .attention import GlobalSelfAttention
from .conv import Conv, ConvLocal, ConvTranspose
from .dense import Dense
from .dropout import Dropout
from .engine import Architecture, Layer, serial
from .from_torch import from_torch
from .graph_batch import GraphBatch, GraphNetwork, edges_to_adjacency
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
from .masking import MaskedNetwork
from .normalization import LayerNorm
from .pooling import AvgPool, Flatten, GlobalAvgPool, GlobalSumPool, SumPool
from .spatial_maps import ImageResize, Index, Slice
from .stax_activations import (
    Exp,
    ExpNormalized,
    Gabor,
    GaussianBump,
    Hermite,
    Monomial,
    Polynomial,
    Rbf,
    RectifiedMonomial,
    SigmoidLike,
    Sign,
)

__all__ = [
    "ABRelu",
    "Abs",
    "Activation",
    "Aggregate",
    "Architecture",
    "AvgPool",
    "Conv",
    "ConvLocal",
    "ConvTranspose",
    "Cos",
    "Dense",
    "DotGeneral",
    "Dropout",
    "Elementwise",
    "Erf",
    "Exp",
    "ExpNormalized",
    "FanInConcat",
    "FanInProd",
    "FanInSum",
    "FanOut",
    "Flatten",
    "Gabor",
    "GaussianBump",
    "Gelu",
    "GlobalAvgPool",
    "GlobalSelfAttention",
    "GlobalSumPool",
    "GraphBatch",
    "GraphNetwork",
    "Hermite",
    "Identity",
    "ImageResize",
    "Index",
    "Kernel",
    "Layer",
    "LayerNorm",
    "LeakyRelu",
    "MaskedNetwork",
    "Monomial",
    "Parallel",
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
    "edges_to_adjacency",
    "from_torch",
    "parallel",
    "repeat",
    "serial",
]
