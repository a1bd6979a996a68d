"""
Getting started in ten lines
============================

One architecture object gives both the infinite-width kernels of a network, its NNGP (the
Gaussian process of its outputs at initialization) and its NTK (the kernel of gradient descent
on its parameters), and a finite :class:`torch.nn.Module` with the same parameterization,
whose empirical NTK approaches the analytic one as the width grows (Jacot, Gabriel & Hongler
2018, arXiv:1806.07572). This page runs the ten lines of the README, then looks at each part.
"""

# %%
# The ten lines
# -------------
import math

import matplotlib.pyplot as plt
import torch

import ntklab as nl

torch.manual_seed(0)
arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
x1, x2 = torch.randn(100, 10, dtype=torch.float64), torch.randn(20, 10, dtype=torch.float64)
k = arch.kernel(x1, x2)  # k.nngp, k.ntk: (100, 20); arch.kernel(x1) means x2 = x1
net = arch.to_torch(width=1024, out_features=1, dtype=torch.float64)  # same parameterization
y = net(x1)  # a finite network: its empirical NTK converges to k.ntk as the width grows
theta = nl.empirical.ntk(net, x1, x2)  # empirical NTK of any nn.Module, (100, 20)
print(k.nngp.shape, k.ntk.shape, y.shape, theta.shape)
print(f"relative distance, width 1024: {float((theta - k.ntk).norm() / k.ntk.norm()):.3f}")

# %%
# Kernel regression on the circle
# -------------------------------
# Inputs on the unit circle, :math:`x = (\cos a, \sin a)`, and a noisy target
# :math:`\sin 3a`. Kernel ridge regression with the NTK is the prediction of the infinitely
# wide network trained to convergence by gradient flow (with a ridge: with weight decay); with
# the NNGP it is the posterior mean of Bayesian inference with the network's prior. The
# ridge, 0.05, is absolute (in the units of the kernel).
gen = torch.Generator().manual_seed(1)
a_train = 2 * math.pi * torch.rand(24, generator=gen, dtype=torch.float64)
a_test = torch.linspace(0, 2 * math.pi, 400, dtype=torch.float64)


def on_circle(a: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.cos(a), torch.sin(a)], dim=1)  # shape: (n, 2)


x_train, x_test = on_circle(a_train), on_circle(a_test)
y_train = torch.sin(3 * a_train)[:, None] + 0.1 * torch.randn(24, 1, generator=gen)

k_train = arch.kernel(x_train)  # NNGP and NTK, (24, 24)
k_test = arch.kernel(x_test, x_train)  # (400, 24)
fits = {
    get: nl.dynamics.kernel_ridge_regression(
        getattr(k_train, get), y_train, getattr(k_test, get), ridge=0.05
    )
    for get in ("ntk", "nngp")
}

fig, ax = plt.subplots(figsize=(7, 3.2))
ax.plot(a_test, torch.sin(3 * a_test), color="0.6", lw=3, label=r"target $\sin 3a$")
for get, f in fits.items():
    ax.plot(a_test, f[:, 0], label=f"{get.upper()} regression")
ax.scatter(a_train, y_train[:, 0], color="k", s=14, zorder=3, label="training points")
ax.set(xlabel="angle a", ylabel="f(a)", title="Kernel regression with a ReLU network's kernels")
ax.legend(fontsize=8, loc="lower left")
fig.tight_layout()

# %%
# The finite network and its empirical NTK
# ----------------------------------------
# ``arch.to_torch(width)`` is a :class:`torch.nn.Module` in NTK parameterization (weights
# :math:`N(0, 1)` scaled by :math:`\sigma_w / \sqrt{\text{fan-in}}` in the forward pass), so
# its empirical NTK :math:`\hat\Theta(x, x') = \nabla_\theta f(x) \cdot \nabla_\theta f(x')`
# is random at finite width and tends to the analytic NTK as the width grows. One row of the
# kernel, :math:`\Theta(x, x_0)` against the angle of :math:`x` for a fixed :math:`x_0`:
x0 = x_test[:1]
row = arch.kernel(x_test, x0).ntk[:, 0]
fig, ax = plt.subplots(figsize=(7, 3.2))
ax.plot(a_test, row, color="k", lw=2.5, label="analytic NTK")
for width in (16, 256, 4096):
    finite = arch.to_torch(width, in_features=2, dtype=torch.float64, generator=gen)
    ax.plot(a_test, nl.empirical.ntk(finite, x_test, x0)[:, 0], lw=1, label=f"width {width}")
ax.set(xlabel="angle of x", ylabel=r"$\Theta(x, x_0)$", title="Empirical NTK of finite networks")
ax.legend(fontsize=8)
fig.tight_layout()

# %%
# What next
# ---------
# The same architecture object takes convolutions and pooling (:class:`ntklab.Conv`,
# :class:`ntklab.GlobalAvgPool`) for image kernels (next tutorial), gives random features
# (``arch.features``), and feeds the closed-form training dynamics of :mod:`ntklab.dynamics`.
