r"""
The empirical NTK converges to the analytic NTK as the width grows
==================================================================

At initialization the empirical NTK of a finite network,
:math:`\hat\Theta_m(x, x') = \nabla_\theta f(x) \cdot \nabla_\theta f(x')`, is random;
as the width :math:`m` grows it concentrates around the deterministic analytic NTK
:math:`\Theta` (Jacot, Gabriel & Hongler 2018, arXiv:1806.07572), with fluctuations of order
:math:`m^{-1/2}` (Arora et al. 2019, arXiv:1904.11955). This page measures the distance over
a fixed set of inputs, in the sup norm and in the Frobenius norm, for networks of growing width
and several random initializations, and fits the slope on a log-log scale. Claim B3
(``ntk-concentration``) tests the same rate as a claim, over depths and activations.
"""

# %%
# The architecture, the inputs and the analytic NTK
# -------------------------------------------------
import matplotlib.pyplot as plt
import torch

import ntklab as nl
from ntklab.report.gallery import gallery_scale

widths, n_seeds = {
    "tiny": ([32, 64, 128, 256, 512, 1024], 5),
    "quick": ([32, 64, 128, 256, 512, 1024, 2048, 4096], 10),
    "paper": ([32, 64, 128, 256, 512, 1024, 2048, 4096, 8192], 20),
}[gallery_scale()]

arch = nl.serial(
    nl.Dense(w_std=1.5, b_std=0.1),
    nl.Erf(),
    nl.Dense(w_std=1.5, b_std=0.1),
    nl.Erf(),
    nl.Dense(w_std=1.5, b_std=0.1),
)
gen = torch.Generator().manual_seed(0)
x = nl.data.uniform_sphere(16, 5, generator=gen)  # 16 inputs on S^4, float64
theta = arch.kernel(x).ntk  # shape: (16, 16)

# %%
# Empirical NTKs of random networks
# ---------------------------------
# ``arch.to_torch(m)`` draws a network of hidden width ``m`` in the same (NTK)
# parameterization; :func:`ntklab.empirical.ntk` computes its tangent kernel on the inputs.
sup = torch.empty(len(widths), n_seeds, dtype=torch.float64)
frobenius = torch.empty_like(sup)
for i, width in enumerate(widths):
    for s in range(n_seeds):
        net = arch.to_torch(width, in_features=5, generator=gen, dtype=torch.float64)
        gap = nl.empirical.ntk(net, x) - theta
        sup[i, s] = gap.abs().max() / theta.abs().max()
        frobenius[i, s] = torch.linalg.norm(gap) / torch.linalg.norm(theta)
    last = net  # the widest network, kept for the last figure

# The sup distance alone, vectorized over networks, is one call:
# nl.analysis.ntk_sup_distance(arch, x, widths=widths, n_seeds=n_seeds, relative=True)

# %%
# The rate
# --------
# A least-squares line through the log of the median over seeds against the log of the width
# (:func:`ntklab.analysis.fit_power_law`, with a 95% interval on the slope).
fits = {}
fig, ax = plt.subplots(figsize=(6.4, 4))
for (name, values), color in zip(
    {"sup norm": sup, "Frobenius norm": frobenius}.items(), ("C0", "C1"), strict=True
):
    median = values.median(dim=1).values
    fit = nl.analysis.fit_power_law(widths, median)
    fits[name] = fit
    for s in range(n_seeds):
        ax.scatter(widths, values[:, s], color=color, s=8, alpha=0.35)
    ax.plot(widths, median, "o", color=color, label=f"{name}: median over {n_seeds} networks")
    ax.plot(
        widths,
        fit.predict(widths),
        "-",
        color=color,
        label=f"fit: slope {fit.slope:.2f} [{fit.ci_low:.2f}, {fit.ci_high:.2f}]",
    )
    print(f"{name:15s} slope {fit.slope:.3f}  95% interval [{fit.ci_low:.3f}, {fit.ci_high:.3f}]")
reference = [float(fits["sup norm"].predict(widths[0])) * (w / widths[0]) ** -0.5 for w in widths]
ax.plot(widths, reference, "k:", label="slope -1/2")
ax.set(xscale="log", yscale="log", xlabel="width m", ylabel="relative distance to the NTK")
ax.set_title("Empirical vs analytic NTK: 2 hidden erf layers, 16 inputs")
ax.legend(fontsize=8)
fig.tight_layout()

# %%
# Entry by entry
# --------------
# Each entry of the empirical NTK of the widest network against the analytic one: they lie on
# the diagonal up to the :math:`m^{-1/2}` fluctuations measured above.
narrow = arch.to_torch(widths[0], in_features=5, generator=gen, dtype=torch.float64)
fig, ax = plt.subplots(figsize=(4.4, 4.2))
for net, width, color in ((narrow, widths[0], "C3"), (last, widths[-1], "C2")):
    ax.scatter(
        theta.flatten(),
        nl.empirical.ntk(net, x).flatten(),
        s=8,
        color=color,
        label=f"width {width}",
    )
lims = [float(theta.min()), float(theta.max())]
ax.plot(lims, lims, "k-", lw=0.8)
ax.set(xlabel=r"analytic $\Theta(x, x')$", ylabel=r"empirical $\hat\Theta_m(x, x')$")
ax.legend(fontsize=8)
fig.tight_layout()
