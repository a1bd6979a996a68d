r"""Fashion-MNIST with convolutional kernels: test accuracy, wall time and peak memory of
kernel ridge regression with exact kernels and with random features, over a sweep of n.

Data: Fashion-MNIST (Xiao, Rasul & Vollgraf 2017), ``ntklab.data.load_fashion_mnist``
(pixels standardized by the training mean and std), a class-balanced training subset of ``n``
images per row and ``--n-test`` test images (class-balanced; all 10,000 by default).

Methods (``--methods``; ``*-rf`` are random features, Zandieh et al. 2021, via
``Architecture.features`` with ``--features`` columns, seed 0; the others the exact kernel,
``kernel_operator(...).to_dense()``, float32 entries, float64 solves):

- ``mlp-ntk`` / ``mlp-ntk-rf``: NTK of ``depth x [Dense(sqrt 2, 0.1), Relu()] + Dense`` on the
  784 flattened pixels (``--mlp-depth``, default 2);
- ``flat-cntk`` / ``flat-cntk-rf``: ``depth x [Conv(3x3, SAME, sqrt 2, 0.1), Relu()]``,
  ``Flatten()``, ``Dense`` (``--flat-depth``, default 1: the only convolutional depth whose
  features reach the full training set in an hour here, see below);
- ``cntk-gap`` / ``cntk-gap-rf``: the same with ``GlobalAvgPool()`` (``--gap-depth``, default
  2: depth 5 runs at 30-40 pairs/s here, depth 2 at about 120, so that exact CNTK-GAP reaches
  n of about 250 in 30 minutes; depth 1 is a bag of 3x3 patches, 74% at n = 1000). Both are
  scored on the same ``--n-test-gap`` test images (default 500: the exact cross kernel costs
  n x n_test pairs, and depth-2 features about 0.2 s per image at 1024 features).

Ridge regression on one-hot targets, :math:`\hat f(x) = K(x, X)(K + \lambda I)^{-1} Y` (for
features the primal :math:`\Phi(x)(\Phi^T\Phi + \lambda I)^{-1}\Phi^T Y`, the same predictor
with :math:`K = \Phi\Phi^T`), class = argmax. Ridge rule, fixed before any test image is read:
the last ``n // 5`` images of the (randomly ordered) training subset are held out,
:math:`\lambda = r \operatorname{tr}(K_{fit}) / n_{fit}` for ``r`` in
``RIDGE_GRID = 1e-6 ... 1``, the ``r`` with the best held-out accuracy is kept (ties: the
larger ``r``), and the predictor is refitted on all ``n`` images with
:math:`\lambda = r \operatorname{tr}(K) / n`.

Sweep: ``--n 100 200 500 1000 2000 5000 10000 20000 60000``; a method stops growing ``n``
when the predicted time of its next row exceeds ``--budget-s`` (default 1800; features:
``--feature-budget-s``, default 3600, the issue's hour for the full set): the time of the last
row times :math:`(s_{next}/s_{last})^p`, ``p`` measured from its last two rows (clamped to
``[1, 3]``), or ``p = 2`` (exact) / ``1`` (features) after one row, with the size :math:`s = n`
for exact kernels and :math:`s = n + n_{test}` for features (every image, training or test, is
featurized once); a row's time is its CPU seconds over its threads, the wall time it would take
alone (its wall time for rows written before CPU time was recorded). Each row: test accuracy,
chosen ``r``, wall seconds (kernel or features, solve, total), the process's CPU seconds over
all its threads (``CPU s``: on a machine shared with other work the wall time grows while the
CPU time does not; CPU s / threads is the wall time the row would take alone), peak resident
memory of the process during the row (``/proc/self/statm`` sampled every 20 ms; the loaded
data set is about 500 MiB of it). Each method's last row is near its budget, so the default
run is expected to take 6-8 hours; run it under ``nohup`` with ``--json`` and rerun the same
command to resume. Rows go to ``--json`` (written atomically after every row; rows already
there, same method, n, n_test, features, depth and seed, are skipped, so a killed run
resumes), a table is printed, ``--plot`` draws accuracy vs n and vs time (one
figure), ``--markdown`` prints the README table.

Measured (2026-12-02, 2-core CPU shared with other jobs, one thread, ``nice``; dry run
``--n 500 1000 2000 5000 --n-test 2000``): features per image, amortized over a few hundred
images, at F features: ``flat-cntk-rf`` depth 1: 37 ms (F = 2048), 78 ms (F = 4096);
``cntk-gap-rf`` depth 1: 29 ms (F = 1024); depth 2: 182 ms (F = 1024), about 4x at F = 2048
(a convolution of ``m ~ F/2`` channels costs :math:`|S| |f| m^2` per image); ``mlp-ntk-rf``
under 1 ms. Exact kernels: ``flat-cntk`` depth 1 about 170,000 pairs/s, depth 3 27,000;
``cntk-gap`` depth 2 about 120; ``mlp-ntk`` n = 5000 in 27 s (eight Cholesky solves, float64).
Projection of the full-set row ``flat-cntk-rf`` (depth 1, F = 2048): 70,000 images x 37-43 ms
= 43-50 minutes of one shared core, plus the F x F normal equations (60,000 x 2048^2 x 2 flops,
about a minute): under an hour, just; F = 4096 doubles it. Its accuracy matched the exact
kernel's at n = 1000 (80.75% against 80.90%, 2,000 test images). Measured on the full set
(2026-12-02, 2 threads, all 10,000 test images): 86.83% in 5,054 CPU-s, 42 minutes alone;
the rows are in ``results/fashion_mnist.json`` and the README. Usage::

    python benchmarks/bench_fashion_mnist.py [--n 100 200 500 ...] [--n-test 10000]
        [--methods mlp-ntk flat-cntk ...] [--features 2048] [--budget-s 1800]
        [--feature-budget-s 3600] [--json results/fashion_mnist.json] [--plot fm.png]
        [--markdown]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

import ntklab as nl
from ntklab.data import Dataset, load_fashion_mnist
from ntklab.report.kernel_benchmark import (
    COLUMNS,
    BenchmarkRow,
    accuracy_figure,
    markdown_table,
    row_cells,
)
from ntklab.solvers import kernel_operator

RIDGE_GRID = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)
METHODS = ("mlp-ntk", "mlp-ntk-rf", "flat-cntk", "flat-cntk-rf", "cntk-gap", "cntk-gap-rf")
SQRT2 = math.sqrt(2.0)


@dataclass(frozen=True)
class Method:
    """One row kind: ``family`` in {"mlp", "flat", "gap"}, ``num_features`` 0 for exact."""

    name: str
    family: str
    depth: int
    num_features: int = 0

    @property
    def exact(self) -> bool:
        return self.num_features == 0


def architecture(family: str, depth: int) -> nl.Architecture:
    """The NTK architecture of a method family (see the module docstring)."""
    top = nl.Dense(w_std=SQRT2, b_std=0.1)
    if family == "mlp":
        return nl.serial(*([nl.Dense(w_std=SQRT2, b_std=0.1), nl.Relu()] * depth), top)
    conv = nl.Conv(filter_shape=(3, 3), padding="SAME", w_std=SQRT2, b_std=0.1)
    pool = nl.GlobalAvgPool() if family == "gap" else nl.Flatten()
    return nl.serial(*([conv, nl.Relu()] * depth), pool, top)


def inputs(family: str, x: torch.Tensor) -> torch.Tensor:
    """Images ``(n, 1, 28, 28)`` for the convolutional kernels, flat pixels for the MLP."""
    return x.reshape(x.shape[0], -1) if family == "mlp" else x


# ---------------------------------------------------------------------------------------------
# ridge regression with the held-out rule


def accuracy(pred: torch.Tensor, labels: torch.Tensor) -> float:
    return float((pred.argmax(dim=1) == labels).double().mean())


def ridge_solve(gram: torch.Tensor, rhs: torch.Tensor, ridge: float) -> torch.Tensor:
    """:math:`(G + \\lambda I)^{-1} B` by Cholesky, float64."""
    shifted = gram.clone()
    shifted.diagonal().add_(ridge)
    factor = torch.linalg.cholesky(shifted)
    del shifted
    return torch.cholesky_solve(rhs, factor)


def choose_ridge_dual(k: torch.Tensor, y: torch.Tensor, labels: torch.Tensor) -> float:
    """The rule's ``r`` from the kernel matrix of the subset (last ``n // 5`` held out)."""
    n_fit = k.shape[0] - k.shape[0] // 5
    k_fit, k_val = k[:n_fit, :n_fit], k[n_fit:, :n_fit]
    scale = float(k_fit.diagonal().mean())
    scores = [
        accuracy(k_val @ ridge_solve(k_fit, y[:n_fit], r * scale), labels[n_fit:])
        for r in RIDGE_GRID
    ]
    return RIDGE_GRID[max(range(len(scores)), key=lambda i: (scores[i], i))]


def choose_ridge_primal(phi: torch.Tensor, y: torch.Tensor, labels: torch.Tensor) -> float:
    """The same rule in feature space (:math:`\\operatorname{tr}(K) = \\|\\Phi\\|_F^2`)."""
    n = phi.shape[0]
    n_fit = n - n // 5
    fit = phi[:n_fit].double()
    gram, rhs = fit.T @ fit, fit.T @ y[:n_fit]
    scale = float(gram.diagonal().sum()) / n_fit
    val = phi[n_fit:].double()
    scores = [accuracy(val @ ridge_solve(gram, rhs, r * scale), labels[n_fit:]) for r in RIDGE_GRID]
    return RIDGE_GRID[max(range(len(scores)), key=lambda i: (scores[i], i))]


def exact_fit(
    arch: nl.Architecture, x: torch.Tensor, xt: torch.Tensor, train: Dataset, test: Dataset
) -> tuple[float, float, float]:
    """``(test scores (n_test, 10), r, kernel seconds)`` of exact kernel ridge regression."""
    t0 = time.perf_counter()
    with torch.no_grad():
        op = kernel_operator(arch, x)
        k = op.to_dense().double()
        kt = op.cross(xt).to_dense().double()
    seconds = time.perf_counter() - t0
    y = train.targets("onehot").double()
    r = choose_ridge_dual(k, y, train.labels)
    alpha = ridge_solve(k, y, r * float(k.diagonal().mean()))
    return kt @ alpha, r, seconds


def feature_fit(
    arch: nl.Architecture, x: torch.Tensor, xt: torch.Tensor, train: Dataset, test: Dataset, m: int
) -> tuple[float, float, float]:
    """``(test scores (n_test, 10), r, featurization seconds)`` of random-feature ridge
    regression."""
    t0 = time.perf_counter()
    with torch.no_grad():
        phi = arch.features(x, m, seed=0)
        phit = arch.features(xt, m, seed=0)
    seconds = time.perf_counter() - t0
    y = train.targets("onehot").double()
    r = choose_ridge_primal(phi, y, train.labels)
    p = phi.double()
    gram = p.T @ p
    w = ridge_solve(gram, p.T @ y, r * float(gram.diagonal().sum()) / p.shape[0])
    return phit.double() @ w, r, seconds


# ---------------------------------------------------------------------------------------------
# one row, the sweep and its budget rule


@contextmanager
def peak_rss() -> Iterator[list[float]]:
    """Yields a one-element list that holds, on exit, the peak resident MiB seen meanwhile."""
    page = os.sysconf("SC_PAGE_SIZE")
    out = [0.0]
    stop = threading.Event()

    def rss() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page / 2**20

    def sample() -> None:
        while not stop.is_set():
            out[0] = max(out[0], rss())
            stop.wait(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join()
        out[0] = max(out[0], rss())


def row_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row[k] for k in ("method", "n", "n_test", "num_features", "depth", "seed"))


def run_row(method: Method, n: int, train: Dataset, test: Dataset, seed: int) -> dict[str, Any]:
    """Fit on a balanced subset of ``n`` training images, score on ``test``."""
    sub = train.balanced_subsample(n, torch.Generator().manual_seed(seed))
    arch = architecture(method.family, method.depth)
    x, xt = inputs(method.family, sub.x), inputs(method.family, test.x)
    with peak_rss() as peak:
        t0, c0 = time.perf_counter(), time.process_time()
        if method.exact:
            scores, r, k_s = exact_fit(arch, x, xt, sub, test)
        else:
            scores, r, k_s = feature_fit(arch, x, xt, sub, test, method.num_features)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "method": method.name,
        "n": n,
        "n_test": len(test),
        "num_features": method.num_features,
        "depth": method.depth,
        "seed": seed,
        "accuracy": accuracy(scores, test.labels),
        "ridge_rel": r,
        "kernel_s": k_s,
        "solve_s": total - k_s,
        "total_s": total,
        "cpu_s": cpu,
        "peak_rss_mib": peak[0],
        "threads": torch.get_num_threads(),
    }


def row_seconds(row: dict[str, Any]) -> float:
    """The row's time for the budget rule: CPU seconds over its threads (what it takes alone,
    however loaded the machine was), or its wall seconds where CPU time was not recorded."""
    if "cpu_s" in row:
        return float(row["cpu_s"]) / max(1, int(row["threads"]))
    return float(row["total_s"])


def predict_seconds(done: list[tuple[int, float]], n_next: int, exact: bool) -> float:
    """Predicted time at size ``n_next`` from the measured ``(size, seconds)`` rows (module
    docstring: the size is n for exact kernels, n + n_test for features); 0 without any row."""
    if not done:
        return 0.0
    (n1, t1), (n2, t2) = (done[-2] if len(done) > 1 else (0, 0.0)), done[-1]
    p = 2.0 if exact else 1.0
    if len(done) > 1 and n2 > n1 and t1 > 0 and t2 > 0:
        p = min(3.0, max(1.0, math.log(t2 / t1) / math.log(n2 / n1)))
    return t2 * (n_next / n2) ** p


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (a temporary file in the folder, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=1)
        os.chmod(tmp, 0o644)  # mkstemp's 0o600 is for the temporary only
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sweep(
    methods: list[Method],
    ns: list[int],
    train: Dataset,
    tests: Callable[[Method], Dataset],
    *,
    budget_s: float,
    feature_budget_s: float | None = None,
    json_path: Path | None = None,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """All rows (earlier ones from ``json_path`` included), method by method, n increasing;
    feature methods grow under ``feature_budget_s`` (default: ``budget_s``)."""
    rows: list[dict[str, Any]] = []
    if json_path is not None and json_path.exists():
        rows = json.loads(json_path.read_text())["rows"]
    for method in methods:
        test = tests(method)
        budget = budget_s if method.exact or feature_budget_s is None else feature_budget_s
        done: list[tuple[int, float]] = []
        for n in sorted(n for n in ns if n <= len(train)):
            key = (method.name, n, len(test), method.num_features, method.depth, seed)
            size = n if method.exact else n + len(test)
            old = [r for r in rows if row_key(r) == key]
            if old:
                log(f"{method.name} n={n}: already in the JSON, skipped")
                done.append((size, row_seconds(old[0])))
                continue
            guess = predict_seconds(done, size, method.exact)
            if guess > budget:
                log(f"{method.name}: stops before n={n} (predicted {guess:.0f} s > budget)")
                break
            row = run_row(method, n, train, test, seed)
            rows.append(row)
            done.append((size, row_seconds(row)))
            log(format_row(row))
            if json_path is not None:
                write_json(json_path, {"rows": rows})
    return rows


# ---------------------------------------------------------------------------------------------
# output


def format_row(row: dict[str, Any]) -> str:
    return "  ".join(f"{c:>12}" for c in row_cells(BenchmarkRow.model_validate(row)))


def make_methods(args: argparse.Namespace) -> list[Method]:
    depth = {"mlp": args.mlp_depth, "flat": args.flat_depth, "gap": args.gap_depth}
    out = []
    for name in args.methods:
        family = {"mlp-ntk": "mlp", "flat-cntk": "flat", "cntk-gap": "gap"}[
            name.removesuffix("-rf")
        ]
        m = args.features if name.endswith("-rf") else 0
        out.append(Method(name, family, depth[family], m))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--n", type=int, nargs="+", default=[100, 200, 500, 1000, 2000, 5000, 10000, 20000, 60000]
    )
    parser.add_argument("--n-test", type=int, default=10_000)
    parser.add_argument("--n-test-gap", type=int, default=500, help="test images, CNTK-GAP")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--features", type=int, default=2048)
    parser.add_argument("--mlp-depth", type=int, default=2)
    parser.add_argument("--flat-depth", type=int, default=1)
    parser.add_argument("--gap-depth", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=1800.0, help="seconds, exact rows")
    parser.add_argument("--feature-budget-s", type=float, default=3600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", type=str, default=None, help="Fashion-MNIST folder")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()

    train = load_fashion_mnist("train", args.root)
    full_test = load_fashion_mnist("test", args.root)

    def tests(method: Method) -> Dataset:
        n_test = args.n_test_gap if method.family == "gap" else args.n_test
        if n_test >= len(full_test):
            return full_test
        return full_test.balanced_subsample(n_test, torch.Generator().manual_seed(args.seed))

    print("  ".join(f"{c:>12}" for c in COLUMNS))
    rows = sweep(
        make_methods(args),
        args.n,
        train,
        tests,
        budget_s=args.budget_s,
        feature_budget_s=args.feature_budget_s,
        json_path=args.json,
        seed=args.seed,
    )
    valid = [BenchmarkRow.model_validate(row) for row in rows]
    if args.plot is not None:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        accuracy_figure(valid).savefig(args.plot, dpi=120)
    if args.markdown:
        print(markdown_table(valid))


if __name__ == "__main__":
    main()
