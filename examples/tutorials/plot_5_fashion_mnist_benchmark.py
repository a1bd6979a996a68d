"""
Convolutional kernels on the whole of Fashion-MNIST: the committed benchmark
============================================================================

Test accuracy and cost of kernel ridge regression on Fashion-MNIST (Xiao, Rasul & Vollgraf
2017, arXiv:1708.07747) with the exact MLP NTK, the exact flat CNTK and CNTK with global
average pooling (Arora et al. 2019, arXiv:1904.11955), and with their random features
(Zandieh et al. 2021, arXiv:2106.07880), from training subsets of a hundred images up to
the full 60,000. The rows are the ones committed in ``results/fashion_mnist.json``; this
page computes nothing, it reads them. They were made by::

    python benchmarks/bench_fashion_mnist.py --json results/fashion_mnist.json

(a run of several hours on a 2-core CPU, resumable; see the script's docstring for the
methods, the ridge rule fixed before any test image is read, and the time budget that stops
each method's sweep).
"""

# %%
# The rows
# --------
# One row per method, depth, feature count ``F`` (``exact`` for the kernel itself) and
# training-set size ``n``: the chosen relative ridge ``r``, test accuracy, seconds spent on
# the kernel (or the features) and in all, the process's CPU seconds over its threads and
# its peak resident memory.
import matplotlib.pyplot as plt

from ntklab.report import kernel_benchmark
from ntklab.report.gallery import find_results_root

rows = kernel_benchmark.read_rows(find_results_root() / kernel_benchmark.FILE_NAME)
print(kernel_benchmark.markdown_table(rows))

# %%
# Accuracy against n and against time
# ------------------------------------
# Left: what each kernel makes of more data. Right: what it costs to get there (wall
# seconds on the machine of each row, log scale).
kernel_benchmark.accuracy_figure(rows, plt.figure(figsize=(10, 4)))
plt.show()

# %%
# The best of each method
# -----------------------
best = {}
for row in rows:
    if row.method not in best or row.accuracy > best[row.method].accuracy:
        best[row.method] = row
for method, row in sorted(best.items()):
    print(f"{method:>14}: {100 * row.accuracy:.2f}% at n = {row.n} ({row.total_s:.0f} s)")
