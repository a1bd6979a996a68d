r"""
B2: wide networks trained by GD and SGD track early-stopped kernel GD
=====================================================================

Zhou, Wang, Lei, Kloft & Ying (2026), "Generalization in deep neural networks: minimax rates
for gradient methods": wide networks trained by gradient descent or SGD with the early-stopping
rule of kernel gradient descent reach its risk, hence its minimax rate.

Experiment ``network-rates`` (:mod:`ntklab.experiments.network_rates`);
``ntklab show network-rates`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/network-rates.json`` and
# ``results/paper/network-rates.json``, each made by
# ``ntklab run network-rates --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("network-rates")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("network-rates")
print(run)
figures = run.show()
