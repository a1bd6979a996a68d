r"""
D1: labels align with the top eigenvectors of the empirical NTK
===============================================================

"Label-NTK alignments and a tighter convergence bound in the NTK regime", after Arora et al.
(2019), "Fine-grained analysis of optimization and generalization for overparameterized
two-layer neural networks": the labels' and the initial residual's projections on the
empirical NTK's eigenvectors grow with the eigenvalues, with slopes 2 and 1.

Experiment ``label-alignment`` (:mod:`ntklab.experiments.label_alignment`);
``ntklab show label-alignment`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/label-alignment.json`` and
# ``results/paper/label-alignment.json``, each made by
# ``ntklab run label-alignment --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("label-alignment")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("label-alignment")
print(run)
figures = run.show()
