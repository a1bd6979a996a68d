r"""Gaussian expectations of products of scalar functions, by polar quadrature.

For a centred Gaussian pair :math:`(u, v)` with covariance
:math:`\begin{pmatrix} a & c \\ c & b \end{pmatrix}` and correlation
:math:`\rho = c / \sqrt{ab} = \cos\varphi_0`, write :math:`u = \sqrt{a}\, r \cos\varphi`
and :math:`v = \sqrt{b}\, r \cos(\varphi - \varphi_0)` with :math:`(r\cos\varphi,
r\sin\varphi)` standard Gaussian. Folding the angle onto a half turn,

.. math::

    E[f(u) g(v)] = \frac{1}{2\pi} \int_{\pi/2}^{3\pi/2} \int_{-\infty}^{\infty}
        f(u)\, g(v)\, |r| e^{-r^2/2}\, dr\, d\varphi .

The radial integral folds :math:`\pm r` onto :math:`[0, R]`, :math:`R = 9` (the neglected tail
:math:`\int_R^\infty r^3 e^{-r^2/2} dr \approx 2\cdot 10^{-16}`), with Gauss-Legendre nodes; the
angular integral is split where :math:`u = 0` (:math:`\varphi = \pi/2`) and where :math:`v = 0`
(:math:`\varphi = \pi/2 + \varphi_0`), with Gauss-Legendre nodes on each arc. Functions that
are smooth away from 0 (ReLU, leaky ReLU, absolute value, step functions and every smooth
activation of polynomial growth) are integrated to near machine precision: the kinks sit on
arc ends and the integrand is analytic inside each cell. (Gauss-Laguerre nodes in
:math:`r^2/2` converge much more slowly for integrands that decay like :math:`e^{-u^2}`, such
as the derivative of erf, so they are not used.) Measured at degree 32 with variances up to
4: erf 1e-10, GELU 1e-11, ReLU 1e-14 against the closed forms.

Cost: ``8 degree**2`` evaluations of ``f`` and ``g`` per pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["DEFAULT_DEGREE", "derivative", "gaussian_pair_expectation"]

DEFAULT_DEGREE = 32
_CHUNK_ELEMENTS = 1 << 22  # evaluation points per chunk (bounds the scratch memory)


_RADIUS = 9.0


@lru_cache(maxsize=16)
def _rules(degree: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Radial nodes on [-R, R] with weights for |r| e^{-r^2/2}, and Gauss-Legendre on [0, 1]."""
    x, wx = np.polynomial.legendre.leggauss(degree)
    r = (x + 1.0) * (_RADIUS / 2.0)
    wr = wx * (_RADIUS / 2.0) * r * np.exp(-r * r / 2.0)
    return np.concatenate([r, -r]), np.concatenate([wr, wr]), (x + 1.0) / 2.0, wx / 2.0


class _SafeArccos(torch.autograd.Function):
    r"""``arccos`` whose derivative :math:`-(1 - x^2)^{-1/2}` is capped at :math:`1/\sqrt\epsilon`
    (finite at :math:`x = \pm 1`, where pairs of identical inputs sit)."""

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        return torch.arccos(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor], output: Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        eps = torch.finfo(x.dtype).eps
        out: Tensor = -grad * torch.rsqrt(torch.clamp(1.0 - x * x, min=eps))
        return out


def safe_arccos(x: Tensor) -> Tensor:
    r"""``torch.arccos`` with a finite gradient at :math:`\pm 1`."""
    out: Tensor = _SafeArccos.apply(x)  # type: ignore[no-untyped-call]
    return out


def derivative(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """The derivative of an elementwise function, by autograd (differentiable itself)."""

    def d(x: Tensor) -> Tensor:
        with torch.enable_grad():
            create = x.requires_grad
            xx = x if create else x.detach().requires_grad_(True)
            y = fn(xx)
            (g,) = torch.autograd.grad(y.sum(), xx, create_graph=create)
        return g

    return d


def gaussian_pair_expectation(
    f: Callable[[Tensor], Tensor],
    g: Callable[[Tensor], Tensor],
    cov: Tensor,
    var1: Tensor,
    var2: Tensor,
    degree: int = DEFAULT_DEGREE,
) -> Tensor:
    """:math:`E[f(u) g(v)]` for centred Gaussian pairs, elementwise over broadcast shapes.

    Parameters
    ----------
    f, g : callable
        Elementwise, torch-differentiable scalar functions.
    cov : Tensor
        Covariances :math:`c = E[uv]`.
    var1, var2 : Tensor
        Variances :math:`a = E[u^2]`, :math:`b = E[v^2]`, broadcastable against ``cov``.
    degree : int
        Nodes per radial half-line and per angular arc.

    Returns
    -------
    Tensor
        Of the broadcast shape of ``cov``, ``var1`` and ``var2``; differentiable in all three.
    """
    diagonal = cov is var1 and var1 is var2  # each input with itself: correlation exactly 1
    shape = torch.broadcast_shapes(cov.shape, var1.shape, var2.shape)  # type: ignore[no-untyped-call]
    c = cov.expand(shape).reshape(-1)
    a = var1.expand(shape).reshape(-1)
    b = var2.expand(shape).reshape(-1)
    radius_np, radius_w_np, t_np, wt_np = _rules(degree)
    radius, radius_w, t, wt = (
        torch.as_tensor(v, dtype=c.dtype, device=c.device)
        for v in (radius_np, radius_w_np, t_np, wt_np)
    )  # shapes: (2Q,), (2Q,), (Q,) positions in [0, 1], (Q,)
    per_pair = 4 * degree * degree
    chunk = max(1, _CHUNK_ELEMENTS // per_pair)
    out = []
    for start in range(0, c.numel(), chunk):
        out.append(
            _chunk(
                f,
                g,
                diagonal,
                c[start : start + chunk],
                a[start : start + chunk],
                b[start : start + chunk],
                radius,
                radius_w,
                t,
                wt,
            )
        )
    if not out:
        return c.new_zeros(shape)
    return torch.cat(out).reshape(shape)


def _chunk(
    f: Callable[[Tensor], Tensor],
    g: Callable[[Tensor], Tensor],
    diagonal: bool,
    c: Tensor,
    a: Tensor,
    b: Tensor,
    radius: Tensor,
    radius_w: Tensor,
    t: Tensor,
    wt: Tensor,
) -> Tensor:
    tiny = torch.finfo(c.dtype).tiny
    sa = a.clamp_min(0.0).sqrt()
    sb = b.clamp_min(0.0).sqrt()
    if diagonal:  # arccos has an infinite slope at 1: keep the exact angle 0 out of autograd
        phi0 = torch.zeros_like(c)
    else:
        phi0 = safe_arccos((c / (sa * sb).clamp_min(tiny)).clamp(-1.0, 1.0))  # shape: (P,)
    # angles on the two arcs [pi/2, pi/2 + phi0] and [pi/2 + phi0, 3 pi/2]
    start = torch.stack([torch.full_like(phi0, math.pi / 2), math.pi / 2 + phi0], dim=1)
    length = torch.stack([phi0, math.pi - phi0], dim=1)  # shape: (P, 2)
    phi = (start[:, :, None] + length[:, :, None] * t).reshape(len(c), -1)  # shape: (P, 2Q)
    w_phi = (length[:, :, None] * wt).reshape(len(c), -1)
    cu = torch.cos(phi)  # shape: (P, 2Q)
    cv = torch.cos(phi - phi0[:, None])
    u = (sa[:, None] * cu)[:, :, None] * radius  # shape: (P, 2Q, 2Q_r)
    v = (sb[:, None] * cv)[:, :, None] * radius
    vals = f(u) * g(v)
    inner = vals @ radius_w  # shape: (P, 2Q)
    return (inner * w_phi).sum(dim=1) / (2.0 * math.pi)
