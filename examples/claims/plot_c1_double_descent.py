r"""
C1: double descent, and the ridge that removes it
=================================================

Hastie, Montanari, Rosset & Tibshirani (2019, arXiv:1903.08560); Belkin, Hsu, Ma & Mandal
(2019, arXiv:1812.11118); Mei & Montanari (2019, arXiv:1908.05355): min-norm regression
peaks at the interpolation threshold, the linear risk follows its exact curve, and the
optimal ridge removes the peak.

Experiment ``double-descent`` (:mod:`ntklab.experiments.double_descent`);
``ntklab show double-descent`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/double-descent.json`` and
# ``results/paper/double-descent.json``, each made by
# ``ntklab run double-descent --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("double-descent")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("double-descent")
print(run)
figures = run.show()
