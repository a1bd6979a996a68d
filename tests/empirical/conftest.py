"""Models and the naive reference shared by the empirical-kernel tests.

The reference computes the Jacobian one example and one output at a time with plain
``torch.autograd.grad``, then forms every product explicitly: slow, obvious, independent of
``ntklab.empirical``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
import torch
from torch import Tensor, nn

F64 = torch.float64


def naive_ntk(
    model: nn.Module, x1: Tensor, x2: Tensor | None = None, names: Iterable[str] | None = None
) -> Tensor:
    """Theta[i, j, a, b] = <d f_a(x1_i)/d theta, d f_b(x2_j)/d theta>, shape (n1, n2, k, k)."""
    named = dict(model.named_parameters())
    chosen = [named[n] for n in (names if names is not None else named)]

    def jacobian(x: Tensor) -> Tensor:  # shape: (n, k, P)
        rows = []
        for i in range(x.shape[0]):
            out = model(x[i : i + 1]).reshape(-1)
            per_output = []
            for a in range(out.shape[0]):
                grads = torch.autograd.grad(out[a], chosen, retain_graph=True, allow_unused=True)
                per_output.append(
                    torch.cat(
                        [
                            (g if g is not None else torch.zeros_like(p)).reshape(-1)
                            for g, p in zip(grads, chosen, strict=True)
                        ]
                    )
                )
            rows.append(torch.stack(per_output))
        return torch.stack(rows)

    j1 = jacobian(x1)
    j2 = j1 if x2 is None else jacobian(x2)
    return torch.einsum("iap,jbp->ijab", j1, j2)


def mlp3(k: int = 1) -> nn.Module:
    return nn.Sequential(
        nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 12), nn.Tanh(), nn.Linear(12, k)
    )


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(6, 10)
        self.norm = nn.LayerNorm(10)
        self.branch = nn.Sequential(nn.Linear(10, 10), nn.GELU(), nn.Linear(10, 10))
        self.out = nn.Linear(10, 3)

    def forward(self, x: Tensor) -> Tensor:
        h = self.inp(x)
        h = h + self.branch(self.norm(h))
        return self.out(h)


def cnn(k: int = 2) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=1, padding=1),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Conv2d(4, 5, 3, stride=2, padding=1, bias=False),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(5 * 2 * 2, k),
    )


def batchnorm_net() -> nn.Module:
    net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    with torch.no_grad():  # non-trivial running statistics, then eval mode
        net[1].running_mean.uniform_(-0.5, 0.5)
        net[1].running_var.uniform_(0.5, 2.0)
    return net.eval()


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp3": (lambda: mlp3(1), (5,)),
    "mlp3_10_outputs": (lambda: mlp3(10), (5,)),
    "cnn": (cnn, (3, 8, 8)),
    "residual_layernorm": (Residual, (6,)),
    "batchnorm_eval": (batchnorm_net, (4,)),
}


@pytest.fixture(params=sorted(MODELS))
def model_and_inputs(request: pytest.FixtureRequest) -> tuple[str, nn.Module, Tensor, Tensor]:
    """Each test model in float64 with two input batches of different sizes."""
    name = request.param
    factory, shape = MODELS[name]
    torch.manual_seed(0)
    model = factory().to(F64)
    gen = torch.Generator().manual_seed(1)
    x1 = torch.randn(5, *shape, dtype=F64, generator=gen)
    x2 = torch.randn(3, *shape, dtype=F64, generator=gen)
    return name, model, x1, x2
