"""Analytic infinite-width kernels (NNGP and NTK) of architectures, in torch."""

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
from .from_torch import from_torch
from .kernel import Kernel
from .layers import Architecture, Dense, Layer, serial
from .spatial import AvgPool, Conv, Dropout, Flatten, GlobalAvgPool, LayerNorm, Residual

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
    "Flatten",
    "Gelu",
    "GlobalAvgPool",
    "Identity",
    "Kernel",
    "Layer",
    "LayerNorm",
    "LeakyRelu",
    "Relu",
    "Residual",
    "Sigmoid",
    "Silu",
    "Sin",
    "Softplus",
    "Tanh",
    "from_torch",
    "serial",
]
