r"""
A1: the ReLU NTK's spectrum on the circle decays as k^-2 at every depth
=======================================================================

Bietti & Mairal (2019), "On the inductive bias of neural tangent kernels", and Bietti & Bach
(2021), "Deep equals shallow for ReLU networks in kernel regimes": on :math:`S^1` the
eigenvalues of the ReLU NTK decay as :math:`k^{-2}` whatever the depth, the NNGP's as
:math:`k^{-4}`; smooth activations decay faster than any power.

Experiment ``spectrum-s1`` (:mod:`ntklab.experiments.spectrum_s1`);
``ntklab show spectrum-s1`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/spectrum-s1.json`` and
# ``results/paper/spectrum-s1.json``, each made by
# ``ntklab run spectrum-s1 --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("spectrum-s1")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("spectrum-s1")
print(run)
figures = run.show()
