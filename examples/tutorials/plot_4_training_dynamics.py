r"""
Training dynamics: the NTK's prediction against trained networks
================================================================

A wide network trained by gradient descent on the squared loss evolves as its linearization
around the initialization (Lee et al. 2019, arXiv:1902.06720), whose outputs have a closed
form in the NTK :math:`\Theta`: on the training inputs,
:math:`f_t = y + (I - \eta\Theta/N)^t (f_0 - y)` after :math:`t` steps of size :math:`\eta`
(gradient flow: :math:`e^{-\eta t \Theta / N}`), and on test inputs the same through
:math:`\Theta(x, X)\,\Theta^{-1}`. This page predicts the whole training run, loss curves and
test outputs at every step, from the analytic NTK alone (:mod:`ntklab.dynamics`,
:mod:`ntklab.predict`), then trains finite networks of growing width
(:func:`ntklab.nets.train`) and lays them over the prediction.
"""

# %%
# The task, the architecture and its kernel
# -----------------------------------------
# Sixteen noisy samples of a function of the angle on the unit circle, and a one-hidden-layer
# ReLU network. The learning rate is half the largest at which gradient descent on the
# analytic NTK converges (:func:`ntklab.predict.max_learning_rate`).
import math

import matplotlib.pyplot as plt
import torch

import ntklab as nl
from ntklab.report.gallery import gallery_scale

widths, steps = {
    "tiny": ([64, 1024], 1000),
    "quick": ([64, 512, 4096], 3000),
    "paper": ([64, 512, 4096, 32768], 10000),
}[gallery_scale()]

gen = torch.Generator().manual_seed(0)


def on_circle(a: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.cos(a), torch.sin(a)], dim=1)  # shape: (n, 2)


def target(a: torch.Tensor) -> torch.Tensor:
    return (torch.sin(2 * a) + 0.5 * torch.cos(5 * a))[:, None]  # shape: (n, 1)


a_train = 2 * math.pi * torch.rand(16, generator=gen, dtype=torch.float64)
a_test = torch.linspace(0, 2 * math.pi, 200, dtype=torch.float64)
x_train, x_test = on_circle(a_train), on_circle(a_test)
y_train = target(a_train) + 0.05 * torch.randn(16, 1, generator=gen, dtype=torch.float64)
y_test = target(a_test)

arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.5), nl.Relu(), nl.Dense(w_std=1.5, b_std=0.1))
k_train = arch.kernel(x_train).ntk  # shape: (16, 16)
k_test = arch.kernel(x_test, x_train).ntk  # shape: (200, 16)
learning_rate = 0.5 * nl.predict.max_learning_rate(k_train)
print(f"learning rate {learning_rate:.3g}, {steps} steps")

# %%
# The prediction
# --------------
# :func:`ntklab.dynamics.ensemble_dynamics` gives the outputs of gradient descent
# (``schedule="gd"``) at any array of times, on the training and on the test inputs, in one
# eigendecomposition of the training kernel. Networks built with ``zero_output=True`` start
# at :math:`f_0 = 0` (antisymmetric pairing of the hidden units), so the prediction for them
# is the mean of the ensemble. :func:`ntklab.predict.gradient_descent_mse` is the same in
# neural-tangents' interface, for the gradient flow (it differs from descent by
# :math:`O(\eta)`).
times = torch.unique(torch.logspace(0, math.log10(steps), 60, dtype=torch.float64).round())
times = torch.cat([torch.zeros(1, dtype=torch.float64), times])
dyn = nl.dynamics.ensemble_dynamics(
    arch, x_train, y_train, learning_rate=learning_rate, schedule="gd"
)
train_pred = dyn.predict(t=times)  # shape: (T, 16, 1)
test_pred = dyn.predict(t=times, x_test=x_test)  # shape: (T, 200, 1)
flow = nl.predict.gradient_descent_mse(k_train, y_train, learning_rate=learning_rate)
flow_train = flow(t=times, fx_train_0=torch.zeros_like(y_train))  # shape: (T, 16, 1)


def loss(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean squared loss 1/(2N) sum (f - y)^2 over the last two axes (train's)."""
    return 0.5 * ((f - y) ** 2).mean(dim=(-2, -1))


# %%
# Training finite networks
# ------------------------
# Full-batch gradient descent at the same learning rate for the same number of steps; a
# callback stores the network's test outputs at the logged steps.
runs, snapshots = {}, {}
for width in widths:
    net = arch.to_torch(width, in_features=2, zero_output=True, generator=gen, dtype=torch.float64)
    outputs = snapshots.setdefault(width, {})

    def keep(step, record, net=net, outputs=outputs):  # type: ignore[no-untyped-def]
        with torch.no_grad():
            outputs[step] = net(x_test)[:, 0].clone()

    runs[width] = nl.nets.train(
        net,
        x_train,
        y_train,
        learning_rate=learning_rate,
        t=steps,
        x_test=x_test,
        y_test=y_test,
        log_every=max(1, steps // 200),
        callback=keep,
    )
    final = float(runs[width].history.train_loss[-1])
    print(f"width {width:6d}: train loss {final:.2e} after {runs[width].steps} steps")

# %%
# Loss curves
# -----------
# The wider the network, the closer its curves to the NTK's prediction, on the training set
# and on the test set.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharex=True)
curves = ((loss(train_pred, y_train), "train"), (loss(test_pred, y_test), "test"))
for ax, (predicted, which) in zip(axes, curves, strict=True):
    for i, (width, run) in enumerate(runs.items()):
        logged = run.history.train_loss if which == "train" else run.history.test_loss
        ax.plot(run.history.step[1:], logged[1:], color=f"C{i}", lw=1.2, label=f"width {width}")
    ax.plot(times[1:], predicted[1:], "k--", lw=1.6, label="NTK prediction (GD)")
    if which == "train":
        ax.plot(times[1:], loss(flow_train, y_train)[1:], "k:", lw=1, label="NTK, gradient flow")
    ax.set(xscale="log", yscale="log", xlabel="step t", title=f"{which} loss")
axes[0].set_ylabel(r"$\frac{1}{2N}\sum (f - y)^2$")
axes[0].legend(fontsize=8)
fig.tight_layout()

# %%
# Test outputs over training
# --------------------------
# The widest network's outputs on the circle (solid) and the prediction (dashed) at a few
# times: the function is learned from its large-eigenvalue, smooth components first.
logged = runs[widths[-1]].history.step.tolist()
shown = sorted({min(logged, key=lambda s: abs(s - t)) for t in (steps // 100, steps // 10, steps)})
at_shown = dyn.predict(t=torch.tensor(shown, dtype=torch.float64), x_test=x_test)  # (3, 200, 1)
fig, ax = plt.subplots(figsize=(8, 3.4))
ax.plot(a_test, y_test[:, 0], color="0.75", lw=4, label="target")
for j, step in enumerate(shown):
    network = snapshots[widths[-1]][step]
    ax.plot(a_test, network, color=f"C{j}", lw=1.3, label=f"width {widths[-1]}, t = {step}")
    ax.plot(a_test, at_shown[j, :, 0], "--", color=f"C{j}", lw=1.3, label=f"NTK, t = {step}")
ax.scatter(a_train, y_train[:, 0], color="k", s=14, zorder=3, label="training points")
ax.set(xlabel="angle a", ylabel="f(a)")
ax.legend(fontsize=7, ncol=2, loc="lower left")
fig.tight_layout()
