r"""The cost model that ``method="auto"`` of :func:`ntklab.empirical.ntk` chooses by.

Each method's cost on a kernel is predicted as two numbers, measured on one example of the
batch (one forward pass for the Jacobian methods, one forward and ``k`` backward passes for
the structured one):

- ``flops``: floating-point operations of the matrix products and convolutions (forward
  and backward passes, contractions), which run near the machine's matrix-product rate;
- ``elements``: elements read or written by memory-bound passes (the elementwise parts of
  backward passes, copies into Jacobian rows, patches and cotangent buffers).

Their sum in matrix-product-equivalent flops, times the method's slowdown ``s``,

.. math:: \mathrm{cost} = s \, (\mathrm{flops} + w\, \mathrm{elements}),
          \qquad w = \texttt{ELEMENTWISE\_FLOPS} = 30,

orders the methods; divided by a measured matrix-product rate it predicts seconds
(``benchmarks/bench_empirical.py --cost-model`` prints both beside measured times). ``w``
is the ratio of a CPU's matrix-product rate to its rate of elementwise operations on
tensors larger than its caches (about 30 on the 2-core AVX-512 machine this was written
on, in float32 and float64 alike: both rates halve from float32 to float64). ``s``
(:data:`SLOWDOWN`) is each method's measured time over ``flops + w elements`` at the
matrix-product rate, the median over six models of one benchmark run: the structured
method's many small per-example products, and the Python around them, run further below
that rate than the Jacobian contraction's batched passes.

With ``n1, n2`` inputs, ``k`` outputs, ``P`` parameters, ``F`` forward flops and ``A``
saved activations per example (:func:`.jacobian.probe`), ``m`` the examples whose factors
are computed (``n1`` for a symmetric kernel, ``n1 + n2`` otherwise) and ``e`` result entries
per pair (1 trace, ``k`` diagonal, ``k^2`` full):

===============  =====================================================  =====================
method           flops                                                  elements
===============  =====================================================  =====================
``jacobian``     ``m (1 + 2k) F + 2 pairs k P`` (``x k`` full)          ``m k (2A + P)``
``ntk_vp``       ``n2 (1 + 2k) F + n1 F + 2 n1 n2 k F``                 ``n2 k (2A + P) +
                                                                        2 n1 n2 k A``
``structured``   :func:`.structured.structured_flops`                   :func:`.structured.
                                                                        structured_elements`
===============  =====================================================  =====================

(``pairs``: the input pairs contracted, ``n1 n2``, or for a symmetric kernel the blocks of
256 rows on and above the diagonal.) Novak, Sohl-Dickstein & Schoenholz, "Fast Finite Width
Neural Tangent Kernel" (ICML 2022, arXiv:2206.08720) tabulate the asymptotic costs of the
three algorithms; this model adds the constants and the memory traffic that decide between
them at the sizes met in practice.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._functional import FunctionalModel, Outputs
from .jacobian import Probe
from .structured_conv import ELEMENTWISE_FLOPS

__all__ = [
    "ELEMENTWISE_FLOPS",
    "SLOWDOWN",
    "Cost",
    "jacobian_cost",
    "ntk_vp_cost",
    "structured_cost",
]

#: Rows of the symmetric Jacobian contraction's blocks (as :func:`.jacobian.ntk_jacobian`).
_BLOCK = 256

#: Measured time over the model's ``(flops + w elements) / rate`` per method: the medians
#: over the MLP 784-512-512-10, the CNN 3-32-64 (float32, float64), the ResNet block
#: (float32, float64) and ResNet-18 of ``benchmarks/bench_empirical.py --cost-model``
#: (2026-12-03, 2 threads, commit 602de60; ``results/cost_model_empirical.json`` in the
#: repository). Structured: 1.20 (MLP), 1.91-2.40 otherwise (median 1.98); Jacobian
#: contraction: 1.38-1.73 and 5.79 on ResNet-18, whose Jacobian rows (11.2 M parameters) the
#: model underweights (median 1.65); NTK-vector products: 0.75, 2.00, 1.07 on the three
#: models where it ran.
SLOWDOWN = {"structured": 2.0, "jacobian": 1.6, "ntk_vp": 1.1}


@dataclass(frozen=True)
class Cost:
    """The predicted work of one method on one kernel.

    Attributes
    ----------
    flops : float
        Floating-point operations of matrix products and convolutions.
    elements : float
        Elements read or written by memory-bound passes.
    itemsize : int
        Bytes per element (4 for float32, 8 for float64).
    slowdown : float
        The method's measured time over its model time (:data:`SLOWDOWN`).
    """

    flops: float
    elements: float
    itemsize: int
    slowdown: float = 1.0

    @property
    def bytes(self) -> float:
        """Bytes moved by the memory-bound passes."""
        return self.elements * self.itemsize

    @property
    def equivalent(self) -> float:
        """``slowdown * (flops + ELEMENTWISE_FLOPS * elements)``: the number
        ``method="auto"`` minimizes."""
        return self.slowdown * (self.flops + ELEMENTWISE_FLOPS * self.elements)

    def seconds(self, rate: float) -> float:
        """Predicted seconds at ``rate`` matrix-product flops per second."""
        return self.equivalent / rate


def _itemsize(fm: FunctionalModel) -> int:
    return torch.empty((), dtype=fm.dtype).element_size()


def _pairs(n1: int, n2: int, symmetric: bool) -> float:
    """Input pairs a symmetric block contraction computes: the blocks on and above the
    diagonal, all of them when one block holds every row."""
    if not symmetric:
        return float(n1 * n2)
    blocks = -(-n1 // _BLOCK)
    if blocks == 1:
        return float(n1 * n1)
    return float(blocks * (blocks + 1) // 2 * _BLOCK * _BLOCK)


def jacobian_cost(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    probe: Probe,
    *,
    symmetric: bool = False,
) -> Cost:
    """Cost of :func:`.jacobian.ntk_jacobian` (Jacobian contraction).

    Per example a forward and ``k`` backward passes with parameter gradients
    (``(1 + 2k) F`` flops; ``2 k A`` elements for their elementwise parts, ``k P`` for the
    Jacobian rows), then the contraction ``2 k P`` per input pair (``2 k^2 P`` for full).

    Parameters
    ----------
    fm : FunctionalModel
    n1, n2 : int
        Numbers of inputs.
    k : int
        Outputs per example.
    outputs : {"trace", "full", "diagonal"}
    probe : Probe
        :func:`.jacobian.probe` of one example.
    symmetric : bool
        ``x2`` is None (one Jacobian, the blocks on and above the diagonal).
    """
    p = fm.n_params
    m = n1 if symmetric else n1 + n2
    contraction = 2.0 * _pairs(n1, n2, symmetric) * p * (k * k if outputs == "full" else k)
    flops = m * (1 + 2 * k) * probe.forward_flops + contraction
    elements = m * k * (2.0 * probe.activations + p)
    return Cost(flops, elements, _itemsize(fm), SLOWDOWN["jacobian"])


def ntk_vp_cost(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    probe: Probe,
    *,
    symmetric: bool = False,
) -> Cost:
    """Cost of :func:`.jacobian.ntk_vp` (NTK-vector products), the same for every
    ``outputs``: the Jacobian rows of ``x2`` as for :func:`jacobian_cost`, then one tangent
    pass (``2 F`` flops, ``2 A`` elements) of every ``x1`` example per row. Parameters as for
    :func:`jacobian_cost` (``symmetric`` is accepted for the common signature)."""
    f, a, p = probe.forward_flops, float(probe.activations), fm.n_params
    flops = n2 * (1 + 2 * k) * f + n1 * f + 2.0 * n1 * n2 * k * f
    elements = n2 * k * (2.0 * a + p) + 2.0 * n1 * n2 * k * a
    return Cost(flops, elements, _itemsize(fm), SLOWDOWN["ntk_vp"])


def structured_cost(
    fm: FunctionalModel,
    n1: int,
    n2: int,
    k: int,
    outputs: Outputs,
    x: Tensor | None,
    probe: Probe | None = None,
    *,
    symmetric: bool = False,
) -> Cost:
    """Cost of :func:`.structured.ntk_structured`: :func:`.structured.structured_flops`
    (whose per-layer contractions already weigh their elementwise parts) and
    :func:`.structured.structured_elements`, measured on ``x[:1]``; the backward passes'
    forward flops and elementwise traffic from ``probe`` (as for :func:`jacobian_cost`)
    when given. Parameters
    as for :func:`jacobian_cost`, with the sample ``x``."""
    from .structured import structured_elements, structured_flops

    forward = None if probe is None else probe.forward_flops
    flops = structured_flops(
        fm, n1, n2, k, outputs, x=x, symmetric=symmetric, forward_flops=forward
    )
    activations = None if probe is None else probe.activations
    elements = structured_elements(
        fm, n1, n2, k, outputs, x=x, symmetric=symmetric, activations=activations
    )
    return Cost(flops, elements, _itemsize(fm), SLOWDOWN["structured"])
