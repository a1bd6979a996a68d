r"""
D2: under gradient descent the loss follows the trace of the NTK's spectrum
===========================================================================

"Label-NTK alignments and a tighter convergence bound in the NTK regime" (Theorem 4.5): the
loss under gradient descent follows the trace prediction
:math:`c\,\mathrm{tr}[(I - \eta K)^{2t} K]`, while the classical bound in
:math:`\lambda_{\min}` barely moves.

Experiment ``trace-bound`` (:mod:`ntklab.experiments.trace_bound`);
``ntklab show trace-bound`` lists its config at each scale.
"""

# %%
# The claim and its committed results
# -----------------------------------
# The figure the paper reports beside the results committed in
# ``results/quick/trace-bound.json`` and
# ``results/paper/trace-bound.json``, each made by
# ``ntklab run trace-bound --scale SCALE --commit-to results``.
from ntklab.report import gallery

gallery.claim_table("trace-bound")

# %%
# The experiment at a small scale
# -------------------------------
# The same code on a grid small enough for the documentation build (the scale is
# ``NTKLAB_GALLERY_SCALE``, ``tiny`` by default). A tiny run is a smoke run: it shows the
# figures the experiment draws, but its grid is too small for the criterion to be judged.
run = gallery.run_claim("trace-bound")
print(run)
figures = run.show()
