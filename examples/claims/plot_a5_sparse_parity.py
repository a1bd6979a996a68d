r"""
A5: on a sparse parity an SGD-trained network beats the NTK
===========================================================

Barak, Edelman, Goel, Kakade, Malach & Zhang (2022, arXiv:2207.08799), "Hidden progress in
deep learning: SGD learns parities near the computational limit"; Ghorbani et al. (2021,
arXiv:1904.12191), as Ganguli & Constantinescu (2026) test it: a two-layer network trained by
SGD learns a 3-sparse parity (0-1 test error near 0) that NTK regression cannot (near chance).

Experiment ``sparse-parity`` (:mod:`ntklab.experiments.sparse_parity`);
``ntklab show sparse-parity`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/sparse-parity.json`` and
# ``results/paper/sparse-parity.json``, each made by
# ``ntklab run sparse-parity --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("sparse-parity")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("sparse-parity")
print(run)
figures = run.show()
