r"""Random and deterministic inputs: the sphere, the circle and the hypercube.

Every random sampler takes a ``torch.Generator`` (keyword ``generator``); draws are made on the
generator's device and then moved to ``device``, so the same seed gives the same points on any
device. Nothing touches the global RNG.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ntklab._checks import check_positive_int

from ._validation import check_float_dtype, check_generator, draw_normal

__all__ = ["circle_grid", "hypercube", "uniform_circle", "uniform_sphere"]


def uniform_sphere(
    n: int,
    dim: int,
    *,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""``n`` points drawn uniformly from the unit sphere :math:`S^{d-1} \subset \mathbb{R}^d`.

    Normalized Gaussians: :math:`x = g / \|g\|` with :math:`g \sim \mathcal{N}(0, I_d)`, whose
    law is rotation invariant, hence uniform (Muller 1959). Moments: :math:`E[x] = 0`,
    :math:`E[x x^\top] = I_d / d`, :math:`E[x_1^4] = 3 / (d (d + 2))`.

    Parameters
    ----------
    n : int
        Number of points, ``>= 1``.
    dim : int
        Ambient dimension ``d >= 1`` (``d = 1`` gives the two points ``+-1``).
    generator : torch.Generator
        Source of randomness.
    dtype, device
        Of the result (real floating dtype).

    Returns
    -------
    Tensor of shape (n, dim)
        Rows of unit Euclidean norm.

    Examples
    --------
    >>> x = uniform_sphere(4, 3, generator=torch.Generator().manual_seed(0))
    >>> torch.allclose(x.norm(dim=1), torch.ones(4, dtype=torch.float64))
    True
    """
    n = check_positive_int("n", n)
    dim = check_positive_int("dim", dim)
    dtype = check_float_dtype(dtype)
    gen = check_generator(generator)
    g = draw_normal((n, dim), gen, torch.float64, None)  # shape: (n, d)
    norms = g.norm(dim=1, keepdim=True)
    # A zero Gaussian vector has probability zero; guard it anyway (no NaN ever).
    g = torch.where(norms > 0, g, torch.ones_like(g))
    x: Tensor = g / g.norm(dim=1, keepdim=True)
    return x.to(dtype=dtype, device=device)


def uniform_circle(
    n: int,
    *,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    r"""``n`` uniform points on the circle :math:`S^1`, as angles and as points.

    .. math::

        a \sim \mathrm{Uniform}[0, 2\pi), \qquad x = (\cos a, \sin a).

    Parameters
    ----------
    n : int
        Number of points, ``>= 1``.
    generator : torch.Generator
        Source of randomness.
    dtype, device
        Of the results.

    Returns
    -------
    angles : Tensor of shape (n,)
        In ``[0, 2 pi)``.
    points : Tensor of shape (n, 2)
        ``(cos a, sin a)``.

    Examples
    --------
    >>> a, x = uniform_circle(3, generator=torch.Generator().manual_seed(0))
    >>> torch.allclose(torch.atan2(x[:, 1], x[:, 0]) % (2 * math.pi), a)
    True
    """
    n = check_positive_int("n", n)
    dtype = check_float_dtype(dtype)
    gen = check_generator(generator)
    u = torch.rand(n, generator=gen, dtype=torch.float64, device=gen.device)
    angles = (2.0 * math.pi) * u.to(device=device)
    angles = torch.where(angles < 2.0 * math.pi, angles, torch.zeros_like(angles))
    return _angles_and_points(angles, dtype)


def circle_grid(
    n: int,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> tuple[Tensor, Tensor]:
    r"""``n`` equispaced points on :math:`S^1`: :math:`a_j = 2\pi j / n`, ``j = 0..n-1``.

    The trapezoid rule on this grid integrates every trigonometric polynomial of degree
    ``< n`` exactly: :math:`\frac{1}{n}\sum_j e^{i k a_j} = [k \equiv 0 \bmod n]`.

    Parameters
    ----------
    n : int
        Number of points, ``>= 1``.
    dtype, device
        Of the results.

    Returns
    -------
    angles : Tensor of shape (n,)
    points : Tensor of shape (n, 2)
        ``(cos a_j, sin a_j)``.

    Examples
    --------
    >>> a, x = circle_grid(4)
    >>> x.round(decimals=12) + 0.0
    tensor([[ 1.,  0.],
            [ 0.,  1.],
            [-1.,  0.],
            [ 0., -1.]], dtype=torch.float64)
    """
    n = check_positive_int("n", n)
    dtype = check_float_dtype(dtype)
    angles = torch.arange(n, dtype=torch.float64, device=device) * (2.0 * math.pi / n)
    return _angles_and_points(angles, dtype)


def hypercube(
    n: int,
    dim: int,
    *,
    generator: torch.Generator,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
) -> Tensor:
    r"""``n`` points drawn uniformly from the hypercube vertices :math:`\{-1, 1\}^d`.

    Independent Rademacher coordinates: :math:`P(x_i = 1) = P(x_i = -1) = 1/2`.

    Parameters
    ----------
    n : int
        Number of points, ``>= 1``.
    dim : int
        Dimension ``d >= 1``.
    generator : torch.Generator
        Source of randomness.
    dtype, device
        Of the result.

    Returns
    -------
    Tensor of shape (n, dim)
        Entries exactly ``-1.0`` or ``1.0``.

    Examples
    --------
    >>> x = hypercube(2, 3, generator=torch.Generator().manual_seed(0))
    >>> bool((x.abs() == 1).all())
    True
    """
    n = check_positive_int("n", n)
    dim = check_positive_int("dim", dim)
    dtype = check_float_dtype(dtype)
    gen = check_generator(generator)
    bits = torch.randint(0, 2, (n, dim), generator=gen, device=gen.device)
    return (2 * bits - 1).to(dtype=dtype, device=device)


def _angles_and_points(angles: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """Cast float64 angles to ``dtype`` and build ``(cos, sin)`` in float64 first."""
    points = torch.stack([torch.cos(angles), torch.sin(angles)], dim=1)
    return angles.to(dtype), points.to(dtype)
