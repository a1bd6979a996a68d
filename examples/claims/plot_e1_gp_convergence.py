r"""
E1: trained networks converge in law to a Gaussian process
==========================================================

Mosig, Agazzi & Trevisan (2025, arXiv:2509.24544): the outputs of trained one-hidden-layer
networks approach in law the Gaussian process :math:`\mathcal{G}_t` of the NNGP and NTK, with
:math:`W_2^2 = O(\log n_1 / n_1)` in the width :math:`n_1`.

Experiment ``gp-convergence`` (:mod:`ntklab.experiments.gp_convergence`);
``ntklab show gp-convergence`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/gp-convergence.json`` and
# ``results/paper/gp-convergence.json``, each made by
# ``ntklab run gp-convergence --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("gp-convergence")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("gp-convergence")
print(run)
figures = run.show()
