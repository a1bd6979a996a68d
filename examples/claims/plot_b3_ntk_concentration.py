r"""
B3: the empirical NTK concentrates at rate m^-1/2
=================================================

Zhou, Wang, Lei, Kloft & Ying (2026), with Jacot, Gabriel & Hongler (2018, arXiv:1806.07572)
and Lee et al. (2019, arXiv:1902.06720): the sup over input pairs of the empirical-minus-
analytic NTK falls as :math:`m^{-1/2}`, and a trained network stays within
:math:`O(m^{-1/2})` of kernel gradient descent.

Experiment ``ntk-concentration`` (:mod:`ntklab.experiments.ntk_concentration`);
``ntklab show ntk-concentration`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/ntk-concentration.json`` and
# ``results/paper/ntk-concentration.json``, each made by
# ``ntklab run ntk-concentration --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("ntk-concentration")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("ntk-concentration")
print(run)
figures = run.show()
