r"""
A2: the NTK's RKHS norm is a Sobolev norm; the sawtooth is expensive for it
===========================================================================

Bietti & Mairal (2019), "On the inductive bias of neural tangent kernels", and Telgarsky
(2016), "Benefits of depth in neural networks": the NTK RKHS norm on :math:`S^1` is
equivalent to the :math:`H^1` norm, and the tent map :math:`s_L`, a width-2 depth-:math:`L`
ReLU network, has a squared RKHS norm growing as :math:`4^L`.

Experiment ``rkhs-vs-architecture`` (:mod:`ntklab.experiments.rkhs_vs_architecture`);
``ntklab show rkhs-vs-architecture`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/rkhs-vs-architecture.json`` and
# ``results/paper/rkhs-vs-architecture.json``, each made by
# ``ntklab run rkhs-vs-architecture --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("rkhs-vs-architecture")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("rkhs-vs-architecture")
print(run)
figures = run.show()
