"""The Erf network of depth 100 (``w_std=1.5``): a valid covariance, equal to an independent
layer-by-layer float64 recursion, and no correlation warning.

Issue 31 reported a warning "correlation outside [-1, 1] by 0.425" in float64 for this
network. It does not reproduce on this code (checked over inputs of dimension 1 to 784, 2 to
200 points, scales 1e-3 to 1e3, duplicated and cross inputs, biases and Erf(a, b, c)); and the
Erf rule cannot produce it by itself: its arcsine argument
:math:`2K_{12}/\\sqrt{(1 + 2K_{11})(1 + 2K_{22})}` is below 1 whenever the incoming kernel obeys
Cauchy-Schwarz, which the Dense-Erf recursion preserves. This test pins the quantities: the
depth-100 recursion converges to the chaotic fixed point (diagonal about 1.0768, correlations
near 0), the NTK grows geometrically (chi = 1.5^2 E[erf'(u)^2] > 1), and both match numpy.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch.testing import assert_close

import ntklab as nl

DEPTH = 100
W2 = 1.5**2


def _numpy_recursion(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NNGP and NTK of (Dense(w_std=1.5), Erf) x DEPTH, Dense(w_std=1.5), NTK parameterization
    (Jacot et al., 2018; Williams, 1997 for erf): K <- w^2 E[phi phi], Theta <- K + w^2
    E[phi' phi'] Theta."""
    k = W2 * (x @ x.T) / x.shape[1]
    theta = k.copy()
    for _ in range(DEPTH):
        d = np.diag(k)
        p = np.outer(1.0 + 2.0 * d, 1.0 + 2.0 * d)
        ratio = 2.0 * k / np.sqrt(p)
        assert np.abs(ratio).max() < 1.0
        phi = (2.0 / math.pi) * np.arcsin(ratio)
        dphi = (4.0 / math.pi) / np.sqrt(p - 4.0 * k * k)
        k = W2 * phi
        theta = k + W2 * dphi * theta
    return k, theta


def test_depth_100_erf_is_a_valid_covariance_equal_to_numpy() -> None:
    arch = nl.serial(*[nl.Dense(w_std=1.5), nl.Erf()] * DEPTH, nl.Dense(w_std=1.5))
    g = torch.Generator().manual_seed(0)
    x = torch.cat(
        [
            torch.randn(5, 3, generator=g, dtype=torch.float64),
            1e-3 * torch.randn(2, 3, generator=g, dtype=torch.float64),
            30.0 * torch.randn(2, 3, generator=g, dtype=torch.float64),
        ]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no correlation clamped beyond rounding
        k = arch.kernel(x)
    nngp, ntk = _numpy_recursion(x.numpy())
    assert_close(k.nngp, torch.from_numpy(nngp), rtol=1e-10, atol=1e-12)
    assert_close(k.ntk, torch.from_numpy(ntk), rtol=1e-10, atol=1e-12)
    for m in (k.nngp, k.ntk):
        d = m.diagonal()
        assert bool((m.abs() <= (d[:, None] * d[None, :]).sqrt() * (1 + 1e-12)).all())
    # the regime: the NNGP at the chaotic fixed point q* = w^2 (2/pi) arcsin(2q*/(1+2q*))
    q = float(k.nngp[0, 0])
    assert abs(q - W2 * (2 / math.pi) * math.asin(2 * q / (1 + 2 * q))) < 1e-12
    off = k.nngp - torch.diag(k.nngp.diagonal())
    assert float(off.abs().max()) < 1e-2 * q
    # and the NTK grows by chi = w^2 (4/pi) / sqrt(1 + 4 q*) per layer
    chi = W2 * (4 / math.pi) / math.sqrt(1 + 4 * q)
    assert chi > 1 and float(k.ntk.diagonal().min()) > chi ** (DEPTH / 2)
