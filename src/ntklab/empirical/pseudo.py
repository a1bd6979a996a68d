r"""The pseudo-NTK: the NTK of the sum of the logits, scaled by :math:`1/\sqrt{k}`.

Mohamadi, Bae & Sutherland, "A Fast, Well-Founded Approximation to the Empirical Neural
Tangent Kernel" (ICML 2023, arXiv:2206.12543) approximate the ``(n k, n k)`` empirical NTK
of a ``k``-output network by the ``(n, n)`` kernel

.. math::

    \hat\Theta(x, x') = \nabla_\theta \Big(\tfrac{1}{\sqrt k} \sum_{c} f_c(x)\Big)
                        \cdot \nabla_\theta \Big(\tfrac{1}{\sqrt k} \sum_{c'} f_{c'}(x')\Big)
                      = \frac{1}{k} \sum_{c, c'} \Theta_{cc'}(x, x'),

times :math:`I_k`; it converges to the empirical NTK at initialization as the readout widens
(the off-diagonal :math:`\Theta_{cc'}` vanish relative to the diagonal, which becomes the
same for every ``c``). It is *not* the trace kernel :math:`\frac{1}{k} \sum_c \Theta_{cc}`,
which keeps only the diagonal blocks: the two agree when the cross-output blocks vanish, and
differ otherwise (a trained or narrow readout, coupled outputs).

It costs one vector-Jacobian product per example (a cotangent of ones divided by
:math:`\sqrt k`) instead of ``k``: every method of :func:`ntklab.empirical.ntk` computes it
as the single-output NTK of :class:`PseudoModel`, whose output is that scaled sum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor

from ._functional import FunctionalModel

__all__ = ["PseudoModel", "pseudo_model"]


@dataclass(frozen=True)
class PseudoModel(FunctionalModel):
    """``f_p(params, x) = sum_c f_c(params, x) / sqrt(k)``, shape ``(n, 1)``.

    The same module, parameters and buffers as the :class:`FunctionalModel` it wraps (layer
    hooks and parameter names are unchanged); only the output is reduced, so the backward
    pass of any method sends the cotangent :math:`\\mathbf{1}/\\sqrt{k}` into the logits.
    """

    def __call__(self, params: Mapping[str, Tensor], x: Tensor) -> Tensor:
        out = FunctionalModel.__call__(self, params, x)  # shape: (n, k)
        return out.sum(dim=1, keepdim=True).mul(1.0 / math.sqrt(out.shape[1]))


def pseudo_model(fm: FunctionalModel) -> PseudoModel:
    """The model whose (single-output) NTK is the pseudo-NTK of ``fm``.

    Parameters
    ----------
    fm : FunctionalModel

    Returns
    -------
    PseudoModel
        Sharing ``fm``'s module, differentiated parameters and frozen tensors.

    Examples
    --------
    >>> import torch
    >>> from ntklab.empirical import functional_model
    >>> net = torch.nn.Linear(3, 4)
    >>> pm = pseudo_model(functional_model(net))
    >>> pm(pm.params, torch.ones(2, 3)).shape
    torch.Size([2, 1])
    """
    if isinstance(fm, PseudoModel):
        return fm
    return PseudoModel(fm.module, fm.params, fm.frozen)
