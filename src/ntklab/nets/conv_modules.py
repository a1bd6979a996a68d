"""Finite-width counterparts of the convolutional, pooling, normalization and residual layers,
defined beside their kernel rules (:mod:`ntklab.kernels.conv`, :mod:`ntklab.kernels.pooling`,
:mod:`ntklab.kernels.normalization`, :mod:`ntklab.kernels.graphs`) and re-exported here.
"""

from ..kernels.conv import ConvLayer
from ..kernels.graphs import ResidualBlock
from ..kernels.normalization import LayerNormLayer
from ..kernels.pooling import AvgPoolLayer, GlobalAvgPoolLayer

__all__ = [
    "AvgPoolLayer",
    "ConvLayer",
    "GlobalAvgPoolLayer",
    "LayerNormLayer",
    "ResidualBlock",
]
