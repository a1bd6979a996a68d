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
from .kernel import Kernel
from .layers import Architecture, Dense, Layer, serial

__all__ = [
    "Abs",
    "Activation",
    "Architecture",
    "Cos",
    "Dense",
    "Elementwise",
    "Erf",
    "Gelu",
    "Identity",
    "Kernel",
    "Layer",
    "LeakyRelu",
    "Relu",
    "Sigmoid",
    "Silu",
    "Sin",
    "Softplus",
    "Tanh",
    "serial",
]
