"""Wrappers that change a network's scale or its initial function (defined beside the layer
modules that ``Architecture.to_torch`` builds, :mod:`ntklab.kernels.network_wrappers`)."""

from ..kernels.network_wrappers import AntisymmetricPair, ScaledOutput, output_scale

__all__ = ["AntisymmetricPair", "ScaledOutput", "output_scale"]
