r"""
B1: early-stopped kernel gradient descent attains the minimax rate
==================================================================

Yao, Rosasco & Caponnetto (2007); Caponnetto & De Vito (2007); Lin & Rosasco (2017,
arXiv:1605.08882): kernel gradient descent with the ReLU NTK on :math:`S^1`, stopped early,
has excess risk :math:`n^{-2\beta/(2\beta+\gamma)}` for a target of source condition
:math:`\beta`.

Experiment ``kernel-rates`` (:mod:`ntklab.experiments.kernel_rates`);
``ntklab show kernel-rates`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/kernel-rates.json`` and
# ``results/paper/kernel-rates.json``, each made by
# ``ntklab run kernel-rates --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("kernel-rates")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("kernel-rates")
print(run)
figures = run.show()
