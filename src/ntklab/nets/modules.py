"""Finite-width modules with the parameterizations of ``ntklab.kernels`` (defined beside their
kernel rules: :mod:`ntklab.kernels.dense`, :mod:`ntklab.kernels.activations`)."""

from ..kernels.activations import ElementwiseActivation
from ..kernels.dense import DenseLayer

__all__ = ["DenseLayer", "ElementwiseActivation"]
