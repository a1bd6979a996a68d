"""Finite-width networks: the modules that ``Architecture.to_torch`` builds."""

from .modules import DenseLayer, ElementwiseActivation

__all__ = ["DenseLayer", "ElementwiseActivation"]
