r"""
CNTK: convolutional NTKs with global average pooling classify images
====================================================================

Arora, Du, Hu, Li, Salakhutdinov & Wang (2019, arXiv:1904.11955), "On exact computation with
an infinitely wide neural net": kernel regression with the convolutional NTK with global
average pooling classifies images at least as well as the MLP NTK.

Experiment ``cntk-vs-cnn`` (:mod:`ntklab.experiments.cntk_vs_cnn`);
``ntklab show cntk-vs-cnn`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/cntk-vs-cnn.json`` and
# ``results/paper/cntk-vs-cnn.json``, each made by
# ``ntklab run cntk-vs-cnn --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("cntk-vs-cnn")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("cntk-vs-cnn")
print(run)
figures = run.show()
