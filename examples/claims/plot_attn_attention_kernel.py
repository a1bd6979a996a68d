r"""
ATTN: the empirical NTK of a transformer block approaches its infinite-width limit
==================================================================================

Hron, Bahri, Sohl-Dickstein & Novak (2020, arXiv:2006.10540), "Infinite attention: NNGP and
NTK for deep attention networks": the empirical NTK of a one-block transformer with linearly
scaled attention converges to its analytic NTK as :math:`m^{-1/2}` in the width.

Experiment ``attention-kernel`` (:mod:`ntklab.experiments.attention_kernel`);
``ntklab show attention-kernel`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/attention-kernel.json`` and
# ``results/paper/attention-kernel.json``, each made by
# ``ntklab run attention-kernel --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("attention-kernel")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("attention-kernel")
print(run)
figures = run.show()
