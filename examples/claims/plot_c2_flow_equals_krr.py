r"""
C2: gradient flow on the NTK is kernel regression
=================================================

Jacot, Gabriel & Hongler (2018, arXiv:1806.07572), "Neural tangent kernel"; Lee et al.
(2019, arXiv:1902.06720), "Wide neural networks of any depth evolve as linear models under
gradient descent": gradient flow reaches the minimum-norm kernel interpolant, follows the
matrix exponential at finite time, and gradient descent converges to it; and networks of
growing width trained by gradient descent follow that flow ever more closely, their distance
to it falling like :math:`n^{-1/2}` in the width :math:`n` (Lee et al. 2019, Theorem 2.1).

Experiment ``flow-equals-krr`` (:mod:`ntklab.experiments.flow_equals_krr`);
``ntklab show flow-equals-krr`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/flow-equals-krr.json`` and
# ``results/paper/flow-equals-krr.json``, each made by
# ``ntklab run flow-equals-krr --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("flow-equals-krr")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("flow-equals-krr")
print(run)
figures = run.show()
