"""benchmarks/bench_fashion_mnist.py on tiny synthetic Fashion-MNIST idx files: the rows'
accuracies and ridges against a dense numpy recomputation, resume, the budget rule, and the
atomic JSON."""

from __future__ import annotations

import importlib.util
import json
import struct
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from ntklab.data import Dataset, load_fashion_mnist
from ntklab.errors import NtklabValueError
from ntklab.report import kernel_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_fashion_mnist.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_fashion_mnist", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = load_script()


def write_idx(path: Path, array: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    path.write_bytes(header + array.astype(np.uint8).tobytes())


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Dataset, Dataset]:
    """80 training and 30 test 8 x 8 images; class c has a bright row c (mod 8) and, for
    c >= 8, a bright column: learnable, not trivially."""
    folder = tmp_path_factory.mktemp("fashion")
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 80), ("t10k", 30)):
        labels = np.arange(n) % 10
        images = rng.integers(0, 120, (n, 8, 8))
        for i, c in enumerate(labels):
            images[i, c % 8] += 120
            if c >= 8:
                images[i, :, c - 5] += 100
        write_idx(folder / f"{prefix}-images-idx3-ubyte", images)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte", labels)
    return load_fashion_mnist("train", folder), load_fashion_mnist("test", folder)


def numpy_ridge_scores(k: np.ndarray, kt: np.ndarray, labels: np.ndarray, r: float) -> np.ndarray:
    """Scores of dense ridge on one-hot targets, lambda = r tr(K) / n (numpy)."""
    n = k.shape[0]
    return kt @ np.linalg.solve(k + r * np.trace(k) / n * np.eye(n), np.eye(10)[labels])


def numpy_ridge_predict(k: np.ndarray, kt: np.ndarray, labels: np.ndarray, r: float) -> np.ndarray:
    """Classes predicted by :func:`numpy_ridge_scores`."""
    return numpy_ridge_scores(k, kt, labels, r).argmax(1)


def dense_kernels(method: Any, sub: Dataset, test: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """K(X, X) and K(X_test, X) by one ``arch.kernel`` call (exact) or Phi Phi^T (features)."""
    arch = bench.architecture(method.family, method.depth)
    x, xt = bench.inputs(method.family, sub.x), bench.inputs(method.family, test.x)
    if method.exact:
        k, kt = arch.kernel(x).ntk, arch.kernel(xt, x).ntk
        return k.double().numpy(), kt.double().numpy()
    phi = arch.features(x, method.num_features, seed=0).double().numpy()
    phit = arch.features(xt, method.num_features, seed=0).double().numpy()
    return phi @ phi.T, phit @ phi.T


METHODS = [
    bench.Method("mlp-ntk", "mlp", 2),
    bench.Method("mlp-ntk-rf", "mlp", 2, 256),
    bench.Method("flat-cntk", "flat", 2),
    bench.Method("flat-cntk-rf", "flat", 1, 128),
    bench.Method("cntk-gap", "gap", 1),
    bench.Method("cntk-gap-rf", "gap", 1, 128),
]


@pytest.mark.parametrize("method", METHODS, ids=lambda m: m.name)
def test_row_matches_a_dense_numpy_recomputation(
    method: Any, data: tuple[Dataset, Dataset]
) -> None:
    train, test = data
    row = bench.run_row(method, 40, train, test, seed=3)
    sub = train.balanced_subsample(40, torch.Generator().manual_seed(3))
    k, kt = dense_kernels(method, sub, test)
    labels = sub.labels.numpy()
    # the ridge rule: best held-out accuracy over the grid (ties: the larger r), last 8 held out
    held = [
        np.mean(numpy_ridge_predict(k[:32, :32], k[32:, :32], labels[:32], r) == labels[32:])
        for r in bench.RIDGE_GRID
    ]
    best = max(range(len(held)), key=lambda i: (round(held[i], 9), i))
    assert row["ridge_rel"] == bench.RIDGE_GRID[best]
    pred = numpy_ridge_predict(k, kt, labels, row["ridge_rel"])
    assert row["accuracy"] == pytest.approx(np.mean(pred == test.labels.numpy()), abs=1e-12)
    # the scores themselves (not only their argmax), through the fit functions
    fit = bench.exact_fit if method.exact else bench.feature_fit
    arch = bench.architecture(method.family, method.depth)
    x, xt = bench.inputs(method.family, sub.x), bench.inputs(method.family, test.x)
    extra = () if method.exact else (method.num_features,)
    scores, r, _ = fit(arch, x, xt, sub, test, *extra)
    assert r == row["ridge_rel"]
    want = numpy_ridge_scores(k, kt, labels, r)
    np.testing.assert_allclose(scores.numpy(), want, rtol=1e-3, atol=1e-3 * np.abs(want).max())
    assert row["accuracy"] > 0.3  # better than chance (0.1) on the learnable toy classes
    assert row["n"] == 40 and row["n_test"] == 30 and row["peak_rss_mib"] > 10
    assert 0 <= row["kernel_s"] <= row["total_s"]
    # CPU seconds over the row's threads: positive, at most threads x wall (plus timer slack)
    assert 0 < row["cpu_s"] <= row["threads"] * row["total_s"] + 0.05


def fake_row(times: dict[int, float], calls: list[int]) -> Any:
    def run_row(method: Any, n: int, train: Dataset, test: Dataset, seed: int) -> dict:
        calls.append(n)
        return {
            "method": method.name, "n": n, "n_test": len(test), "num_features":
            method.num_features, "depth": method.depth, "seed": seed, "accuracy": 0.5,
            "ridge_rel": 1.0, "kernel_s": times[n], "solve_s": 0.0, "total_s": times[n],
            "peak_rss_mib": 1.0, "threads": 1,
        }  # fmt: skip

    return run_row


def test_budget_rule_stops_growth(
    data: tuple[Dataset, Dataset], monkeypatch: pytest.MonkeyPatch
) -> None:
    train, test = data
    # exact: t = n^2 / 100; after 10 (1 s) and 20 (4 s) the exponent is 2: 40 -> 16 s, 80 -> 64 s
    times = {n: n**2 / 100 for n in (10, 20, 40, 80)}
    calls: list[int] = []
    monkeypatch.setattr(bench, "run_row", fake_row(times, calls))
    method = bench.Method("flat-cntk", "flat", 1)
    rows = bench.sweep([method], [80, 10, 40, 20], train, lambda m: test, budget_s=20, log=str)
    assert calls == [10, 20, 40] and [r["n"] for r in rows] == [10, 20, 40]
    # features: exponent 1 after one row, their own budget
    calls.clear()
    feats = bench.Method("flat-cntk-rf", "flat", 1, 64)
    bench.sweep([feats], [10, 20, 40], train, lambda m: test, budget_s=0.5,
                feature_budget_s=3.5, log=str)  # fmt: skip
    assert calls == [10, 20]  # 40: 4 * (40 / 20) ** 2 = 16 s predicted
    # features grow with n + n_test: one row at n = 10 (1 s) predicts (40 + m) / (10 + m) s
    calls.clear()
    m = len(test)
    bench.sweep([feats], [10, 40], train, lambda _: test, budget_s=0.5,
                feature_budget_s=(40 + m) / (10 + m) + 1e-9, log=str)  # fmt: skip
    assert calls == [10, 40] and times[10] == 1.0 and m > 0
    calls.clear()
    bench.sweep([feats], [10, 40], train, lambda _: test, budget_s=0.5,
                feature_budget_s=(40 + m) / (10 + m) - 1e-9, log=str)  # fmt: skip
    assert calls == [10]
    # the budget reads CPU seconds over threads where a row has them, wall seconds otherwise
    assert bench.row_seconds({"cpu_s": 10.0, "threads": 2, "total_s": 99.0}) == 5.0
    assert bench.row_seconds({"threads": 2, "total_s": 99.0}) == 99.0
    assert bench.predict_seconds([(10, 1.0), (20, 4.0), (40, 16.0)], 80, True) == 64.0
    # one row: exponent 2 (exact) or 1 (features); the exponent is clamped to [1, 3]
    assert bench.predict_seconds([(10, 3.0)], 20, True) == 12.0
    assert bench.predict_seconds([(10, 3.0)], 20, False) == 6.0
    assert bench.predict_seconds([(10, 1.0), (20, 1.0)], 40, False) == 2.0
    assert bench.predict_seconds([(10, 1.0), (20, 32.0)], 40, True) == 256.0


def test_resume_skips_finished_rows(
    data: tuple[Dataset, Dataset], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train, test = data
    times = {n: float(n) for n in (10, 20, 40)}
    calls: list[int] = []
    monkeypatch.setattr(bench, "run_row", fake_row(times, calls))
    path = tmp_path / "rows.json"
    method = bench.Method("mlp-ntk", "mlp", 2)
    first = bench.sweep([method], [10, 20], train, lambda m: test, budget_s=1e9,
                        json_path=path, log=str)  # fmt: skip
    assert calls == [10, 20] and json.loads(path.read_text())["rows"] == first
    second = bench.sweep([method], [10, 20, 40], train, lambda m: test, budget_s=1e9,
                         json_path=path, log=str)  # fmt: skip
    assert calls == [10, 20, 40] and second[:2] == first
    assert [r["n"] for r in json.loads(path.read_text())["rows"]] == [10, 20, 40]
    # another depth is another row
    deeper = bench.Method("mlp-ntk", "mlp", 3)
    bench.sweep([deeper], [10], train, lambda m: test, budget_s=1e9, json_path=path, log=str)
    assert calls == [10, 20, 40, 10]


def test_json_is_written_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rows.json"
    bench.write_json(path, {"rows": [1]})

    def broken(obj: Any, f: Any, **kwargs: Any) -> None:
        f.write('{"rows": [')
        raise OSError("disk full")

    monkeypatch.setattr(bench.json, "dump", broken)
    with pytest.raises(OSError, match="disk full"):
        bench.write_json(path, {"rows": [1, 2]})
    assert json.loads(path.read_text()) == {"rows": [1]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.json"]


def test_markdown_and_plot(tmp_path: Path) -> None:
    """The benchmark's --markdown and --plot read its JSON through ntklab.report."""
    row = {
        "method": "mlp-ntk", "n": 10, "n_test": 5, "num_features": 0, "depth": 2, "seed": 0,
        "accuracy": 0.875, "ridge_rel": 0.01, "kernel_s": 1.0, "solve_s": 0.5, "total_s": 1.5,
        "peak_rss_mib": 300.0, "threads": 1,
    }  # fmt: skip
    path = tmp_path / "rows.json"
    bench.write_json(path, {"rows": [row, {**row, "n": 20, "total_s": 3.0, "cpu_s": 2.5}]})
    rows = kernel_benchmark.read_rows(path)
    table = kernel_benchmark.markdown_table(rows).splitlines()
    assert len(table) == 4
    assert table[2] == "| mlp-ntk | 2 | exact | 10 | 5 | 0.01 | 87.50 | 1.0 | 1.5 | - | 300 |"
    assert table[3].endswith("| 3.0 | 2 | 300 |")  # 2.5 CPU-s rounds to even
    assert bench.format_row(row).split() == kernel_benchmark.row_cells(rows[0])
    pytest.importorskip("matplotlib")
    fig = kernel_benchmark.accuracy_figure(rows)
    left, right = fig.axes
    (line,) = left.get_lines()
    assert list(line.get_xdata()) == [10, 20] and list(line.get_ydata()) == [87.5, 87.5]
    assert list(right.get_lines()[0].get_xdata()) == [1.5, 3.0]
    fig.savefig(tmp_path / "fm.png")
    assert (tmp_path / "fm.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("not json", "expected JSON"),
        ("[1, 2]", "expected an object with a list 'rows'"),
        ('{"rows": [{"method": "mlp-ntk"}]}', r"rows\[0\]"),
    ],
)
def test_bad_benchmark_json_is_refused(tmp_path: Path, payload: str, message: str) -> None:
    path = tmp_path / "rows.json"
    path.write_text(payload)
    with pytest.raises(NtklabValueError, match=message):
        kernel_benchmark.read_rows(path)
    with pytest.raises(NtklabValueError, match="expected the benchmark's JSON file"):
        kernel_benchmark.read_rows(tmp_path / "missing.json")


def test_committed_rows_are_valid() -> None:
    """The committed results/fashion_mnist.json reads, and accuracies are percentages of
    whole test images."""
    rows = kernel_benchmark.read_rows(Path(__file__).parents[1] / "results" / "fashion_mnist.json")
    assert rows
    for row in rows:
        assert abs(row.accuracy * row.n_test - round(row.accuracy * row.n_test)) < 1e-6
