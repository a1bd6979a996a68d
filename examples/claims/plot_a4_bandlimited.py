r"""
A4: on smooth targets the NTK is as good as a trained network
=============================================================

Ganguli & Constantinescu (2026), with Bietti & Mairal (2019, arXiv:1905.12173) and the
contrast of Barak et al. (2022): on band-limited targets NTK regression's test error is not
much worse than a trained two-layer network's (at most 3x, ntklab's own bound; the network
starts at f0 = 0); there is no exponential gap.

Experiment ``bandlimited`` (:mod:`ntklab.experiments.bandlimited`);
``ntklab show bandlimited`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/bandlimited.json`` and
# ``results/paper/bandlimited.json``, each made by
# ``ntklab run bandlimited --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("bandlimited")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("bandlimited")
print(run)
figures = run.show()
