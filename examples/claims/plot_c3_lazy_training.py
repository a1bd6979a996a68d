r"""
C3: lazy training in NTK parameterization, feature learning in muP
==================================================================

Dyer & Gur-Ari (2020, arXiv:1909.11304); Chizat, Oyallon & Bach (2019), "On lazy training in
differentiable programming"; Yang & Hu (2021, arXiv:2011.14522): in NTK parameterization the
relative change of the tangent kernel during training falls with the width; in muP it stays
of order one.

Experiment ``lazy-training`` (:mod:`ntklab.experiments.lazy_training`);
``ntklab show lazy-training`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/lazy-training.json`` and
# ``results/paper/lazy-training.json``, each made by
# ``ntklab run lazy-training --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("lazy-training")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("lazy-training")
print(run)
figures = run.show()
