"""Forward-mode AD from several threads at once (Dask's threaded scheduler, a distributed
worker with several threads): torch keeps its dual levels process-wide, so without
:data:`ntklab._forward_mode.FORWARD_MODE_LOCK` concurrent ``jvp`` calls fail with "no level
exists" or "invalid index" (seen on a 2-thread distributed worker)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable

import torch
from torch import nn

from ntklab.dynamics import linearize, taylor_expand
from ntklab.empirical import ntk, ntk_operator


def _in_threads(work: Callable[[], torch.Tensor], threads: int = 4, repeats: int = 15) -> list:
    """Run ``work`` ``repeats`` times in each of ``threads`` threads; return the errors and
    check every result equals the first."""
    errors: list[BaseException] = []
    results: list[torch.Tensor] = []

    def loop() -> None:
        try:
            for _ in range(repeats):
                results.append(work())
        except BaseException as err:
            errors.append(err)

    pool = [threading.Thread(target=loop) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors[0]
    assert len(results) == threads * repeats
    for r in results[1:]:
        torch.testing.assert_close(r, results[0])
    return errors


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 24), nn.Tanh(), nn.Linear(24, 3)).double()


def test_ntk_vp_in_threads_matches_the_jacobian_method() -> None:
    model = _model()
    x = torch.randn(12, 5, dtype=torch.float64)
    reference = ntk(model, x, x[:5], method="jacobian", outputs="full")
    _in_threads(lambda: ntk(copy.deepcopy(model), x, x[:5], method="ntk_vp", outputs="full"))
    torch.testing.assert_close(ntk(model, x, x[:5], method="ntk_vp", outputs="full"), reference)


def test_ntk_operator_in_threads() -> None:
    model = _model()
    x = torch.randn(10, 5, dtype=torch.float64)
    v = torch.randn(10, 3, dtype=torch.float64)
    op = ntk_operator(model, x)
    dense = ntk(model, x, outputs="full").permute(0, 2, 1, 3).reshape(30, 30)
    _in_threads(lambda: op.matmul(v))
    torch.testing.assert_close(op.matmul(v).reshape(-1), dense @ v.reshape(-1))


def test_linearized_forward_in_threads() -> None:
    model = _model()
    lin = linearize(model)
    x = torch.randn(8, 5, dtype=torch.float64)
    _in_threads(lambda: lin(x).detach())
    torch.testing.assert_close(lin(x), model(x))  # at theta0 the linearization is the model


def test_taylor_expansion_forward_in_threads() -> None:
    model = _model()
    cubic = taylor_expand(model, 3)
    with torch.no_grad():
        for p in cubic.parameters():
            p.add_(0.1)
    x = torch.randn(8, 5, dtype=torch.float64)
    _in_threads(lambda: cubic(x).detach(), repeats=5)
