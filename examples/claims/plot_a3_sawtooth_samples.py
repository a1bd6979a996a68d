r"""
A3: the NTK needs exponentially many samples to learn the sawtooth
==================================================================

Bietti & Mairal (2019) and Telgarsky (2016): NTK regression needs a number of samples that
grows geometrically in :math:`L` to learn the tent map :math:`s_L`, while the network that
computes it grows linearly.

Experiment ``sawtooth-samples`` (:mod:`ntklab.experiments.sawtooth_samples`);
``ntklab show sawtooth-samples`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/sawtooth-samples.json`` and
# ``results/paper/sawtooth-samples.json``, each made by
# ``ntklab run sawtooth-samples --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("sawtooth-samples")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("sawtooth-samples")
print(run)
figures = run.show()
