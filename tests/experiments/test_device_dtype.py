"""``--device`` and ``--dtype``: checked before a run, carried by the run context, recorded in
``result.json``; a tiny run in float32 computes and records float32 (CPU only here)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner, Result

from experiment_helpers import FakeConfig, fake_experiment, registered
from ntklab.cli import app
from ntklab.errors import NtklabValueError
from ntklab.experiments import Measurement, RunContext, RunResult, run_experiment
from ntklab.experiments.placement import check_dtype, dtype_overrides, resolve_device


def _placed_measure(config: FakeConfig, ctx: RunContext) -> Measurement:
    """Creates its data on the context's device and dtype, and says what it got."""
    dtype = "not allocated"
    if ctx.torch_device.type == "cpu":  # no GPU in the tests: the plumbing only
        data = torch.ones(config.n, dtype=ctx.torch_dtype, device=ctx.torch_device)
        dtype = str(data.dtype)
    base = _BASE.measure(config, ctx)  # the fake's metrics and arrays, which judge and draw read
    notes = (f"ctx.device={ctx.device}", f"ctx.dtype={ctx.dtype}", f"data={dtype}")
    return dataclasses.replace(base, notes=notes)


_BASE = fake_experiment("fake-placed", "Z7")


PLACED = dataclasses.replace(
    _BASE,
    measure=_placed_measure,
    dtype_field="dtype",
    uses_device=True,
)
FIXED = fake_experiment("fake-fixed", "Z8")  # fixed float64, CPU only


@pytest.fixture(autouse=True)
def fakes() -> Iterator[None]:
    with registered(PLACED, FIXED):
        yield


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that says it has one CUDA device (nothing is allocated on it)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def read_result(root: Path, name: str) -> dict:
    (path,) = (root / name).glob("*/result.json")
    return json.loads(path.read_text())


# ------------------------------------------------------------------------------ checks
def test_device_strings_are_checked_against_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    for bad in ("gpu", "cuda:x", "meta", ""):
        with pytest.raises(NtklabValueError, match=r"device \(--device\): expected 'cpu', 'cuda'"):
            resolve_device(bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        NtklabValueError,
        match=r"device \(--device\): cuda:1 is not available on this machine "
        r"\(torch.cuda.is_available\(\) is False\)",
    ):
        resolve_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(NtklabValueError, match=r"cuda:2 is not available .* has 2 CUDA device"):
        resolve_device("cuda:2")


def test_dtype_names_and_where_they_go() -> None:
    assert check_dtype("float32") == "float32"
    for bad in ("float16", "half", "torch.float32", None):
        with pytest.raises(NtklabValueError, match=r"dtype \(--dtype\): expected 'float32' or"):
            check_dtype(bad)
    assert dtype_overrides(PLACED, "float32", {"n": "3"}) == {"n": "3", "dtype": "float32"}
    assert dtype_overrides(FIXED, "float64", {}) == {}  # its own fixed precision
    with pytest.raises(NtklabValueError, match="'fake-fixed' computes in float64"):
        dtype_overrides(FIXED, "float32", {})
    with pytest.raises(NtklabValueError, match="same precision as --set dtype=float64"):
        dtype_overrides(PLACED, "float32", {"dtype": "float64"})


# ------------------------------------------------------------------------------ runs
def test_cli_options_reach_the_context_and_the_result(tmp_path: Path) -> None:
    out = invoke(
        "run",
        "fake-placed",
        "--scale",
        "tiny",
        "--dtype",
        "float32",
        "--device",
        "cpu",
        "--out",
        str(tmp_path),
    )
    assert out.exit_code == 0, out.output
    assert "device: cpu, dtype: float32" in out.output
    data = read_result(tmp_path, "fake-placed")
    assert (data["device"], data["dtype"], data["config"]["dtype"]) == ("cpu", "float32", "float32")
    assert data["notes"] == ["ctx.device=cpu", "ctx.dtype=float32", "data=torch.float32"]
    # the default precision is the config's, and a new precision is a new run
    out64 = invoke("run", "fake-placed", "--scale", "tiny", "--out", str(tmp_path))
    assert out64.exit_code == 0 and "device: cpu, dtype: float64" in out64.output
    assert len(list((tmp_path / "fake-placed").glob("tiny-*"))) == 2


def test_a_cuda_run_has_its_own_folder_and_records_its_device(
    tmp_path: Path, fake_cuda: None
) -> None:
    cpu = run_experiment("fake-placed", "tiny", out_root=tmp_path)
    gpu = run_experiment("fake-placed", "tiny", out_root=tmp_path, device="cuda")
    assert not gpu.reused and gpu.run_dir == cpu.run_dir.with_name(cpu.run_dir.name + "-cuda")
    assert (gpu.device, cpu.device) == ("cuda", "cpu")
    assert "ctx.device=cuda" in gpu.notes and gpu.run_key == cpu.run_key
    again = run_experiment("fake-placed", "tiny", out_root=tmp_path, device="cuda")
    assert again.reused and again.run_dir == gpu.run_dir
    assert RunResult.from_json(gpu.run_dir / "result.json").device == "cuda"


def test_errors_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cases = [
        (
            ("fake-placed", "--device", "cuda"),
            "cuda is not available on this machine (torch.cuda.is_available() is False)",
        ),
        (("fake-placed", "--device", "tpu"), "expected 'cpu', 'cuda', 'cuda:N' or 'mps'"),
        (("fake-placed", "--dtype", "float16"), "expected 'float32' or 'float64', got 'float16'"),
        (("fake-fixed", "--dtype", "float32"), "'fake-fixed' computes in float64"),
    ]
    for args, message in cases:
        out = invoke("run", *args, "--scale", "tiny", "--out", str(tmp_path))
        assert out.exit_code == 2 and message in " ".join(out.output.split()), out.output
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing ran


def test_cpu_only_experiments_refuse_a_gpu(tmp_path: Path, fake_cuda: None) -> None:
    with pytest.raises(NtklabValueError, match="'fake-fixed' runs on the CPU only"):
        run_experiment("fake-fixed", "tiny", out_root=tmp_path, device="cuda")


def test_results_written_before_device_and_dtype_read_as_cpu(tmp_path: Path) -> None:
    result = run_experiment("fake-fixed", "tiny", out_root=tmp_path)
    assert (result.device, result.dtype) == ("cpu", "float64")
    path = result.run_dir / "result.json"
    data = json.loads(path.read_text())
    del data["device"], data["dtype"], data["content_digest"]  # as written before they existed
    path.write_text(json.dumps(data))
    old = RunResult.from_json(path)
    assert (old.device, old.dtype) == ("cpu", "")


def test_tiny_ntk_concentration_in_float32_computes_and_records_float32(tmp_path: Path) -> None:
    out = invoke(
        "run", "ntk-concentration", "--scale", "tiny", "--dtype", "float32", "--out", str(tmp_path)
    )
    assert out.exit_code == 0, out.output
    data = read_result(tmp_path, "ntk-concentration")
    assert (data["device"], data["dtype"], data["config"]["dtype"]) == ("cpu", "float32", "float32")
    (run_dir,) = (tmp_path / "ntk-concentration").glob("tiny-*")
    arrays = np.load(run_dir / "arrays.npz")
    assert arrays["ntk_sup_erf_depth2"].dtype == np.float32  # the sup distances ran in float32
    assert np.isfinite(arrays["ntk_sup_erf_depth2"]).all()


def test_show_says_where_an_experiment_runs() -> None:
    placed = " ".join(invoke("show", "fake-placed").output.split())
    assert "runs on: cpu, cuda, mps (--device); --dtype sets dtype" in placed
    fixed = " ".join(invoke("show", "fake-fixed").output.split())
    assert "runs on: cpu only; fixed precision float64" in fixed
