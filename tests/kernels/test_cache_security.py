"""The cache of compiled kernels cannot be planted (nothing runs that the user did not build).

A "planted" library is a small C library whose constructor writes a marker file: if it is
ever loaded, the marker exists. It is given the exact name ntklab loads, and every checksum
the cache records (the ``.sha256`` of earlier versions, the manifest) is rewritten to its
digest, so only the folder's and the file's owner and mode, and a manifest written by the
user's own build, can keep it out. Kernels are compared with the eager path
(``NTKLAB_DISABLE_FUSED=1``).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import ntklab as nl
from ntklab.kernels import _fused

F64 = torch.float64
RTOL = 1e-12  # fused vs eager in float64 (the fused kernel is within 1e-13)

_REAL_CC = shutil.which(shlex.split(_fused._compiler())[0])
pytestmark = pytest.mark.skipif(
    _REAL_CC is None or sys.platform == "win32",
    reason="no C compiler on PATH (or no POSIX permissions)",
)

# The kernel every subprocess computes: a [Relu, Dense] chain (the fused path when it loads).
_SCRIPT = """
import json, logging, os, sys, time
from pathlib import Path
import torch
import ntklab as nl
from ntklab.kernels import _fused
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
ready, go = sys.argv[1:3]
if ready:
    Path(ready).touch()
    while not Path(go).exists():
        time.sleep(0.01)
x = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.4, b_std=0.1))
k = arch.kernel(x)
print(json.dumps({"fused": _fused.available(), "nngp": k.nngp.tolist(), "ntk": k.ntk.tolist()}))
"""

_PLANTED = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void)
{
    const char *path = getenv("NTKLAB_TEST_MARKER");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f) { fputs("the planted library ran\n", f); fclose(f); }
}
"""


def _eager() -> dict[str, torch.Tensor]:
    """The reference kernel of :data:`_SCRIPT`, on the eager path in this process."""
    x = torch.randn(7, 3, dtype=F64, generator=torch.Generator().manual_seed(5))
    arch = nl.serial(nl.Dense(w_std=1.5, b_std=0.1), nl.Relu(), nl.Dense(w_std=1.4, b_std=0.1))
    with pytest.MonkeyPatch.context() as m:
        m.setenv("NTKLAB_DISABLE_FUSED", "1")
        k = arch.kernel(x)
    return {"nngp": k.nngp, "ntk": k.ntk}


def _check_kernel(out: dict[str, Any]) -> None:
    for name, ref in _eager().items():
        got = torch.tensor(out[name], dtype=F64)
        torch.testing.assert_close(got, ref, rtol=RTOL, atol=RTOL * float(ref.abs().max()))


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A compiler wrapper that logs each call (``CC``), and the planted library."""
    bin_dir = tmp_path_factory.mktemp("bin")
    log = bin_dir / "cc.log"
    wrapper = bin_dir / "logging-cc"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {shlex.quote(str(log))}\nexec {_REAL_CC} "$@"\n')
    wrapper.chmod(0o755)
    src = bin_dir / "planted.c"
    src.write_text(_PLANTED)
    planted = bin_dir / "planted.so"
    subprocess.run(
        [str(_REAL_CC), "-shared", "-fPIC", str(src), "-o", str(planted)], check=True, timeout=60
    )
    return {"cc": wrapper, "log": log, "planted": planted}


def _env(cache: Path, tools: dict[str, Path], marker: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NTKLAB_DISABLE_FUSED"}
    env.update(
        NTKLAB_CACHE=str(cache),
        CC=str(tools["cc"]),
        NTKLAB_TEST_MARKER=str(marker),
        OMP_NUM_THREADS="1",
        OMP_WAIT_POLICY="PASSIVE",
    )
    return env


def _start(
    cache: Path, tools: dict[str, Path], marker: Path, ready: str = "", go: str = ""
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, ready, go],
        env=_env(cache, tools, marker),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[dict[str, Any], str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


@pytest.fixture(scope="module")
def built(tools: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Four processes started together on an empty private cache (one real build, shared by
    the tests below): their outputs, their logs, the compiler's log and the folder."""
    root = tmp_path_factory.mktemp("concurrent")
    cache = root / "cache"
    marker = root / "marker"
    procs = [
        _start(cache, tools, marker, str(root / f"ready{i}"), str(root / "go")) for i in range(4)
    ]
    deadline = time.monotonic() + 240
    while not all((root / f"ready{i}").exists() for i in range(4)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.02)
    (root / "go").touch()  # all four reach the cache at the same moment
    results = [_finish(p) for p in procs]
    calls = tools["log"].read_text().splitlines() if tools["log"].exists() else []
    return {"cache": cache, "results": results, "calls": calls}


def _plant(
    target: Path, built: dict[str, Any], tools: dict[str, Path], *, manifest: bool = True
) -> Path:
    """Copy the built cache into ``target`` with the planted library under the real
    library's name, and its digest in every recorded checksum (in the manifest too unless
    ``manifest=False``). Returns the planted file."""
    target.mkdir(exist_ok=True)
    source: Path = built["cache"]
    (real,) = source.glob("fused_relu_*.so")
    old = hashlib.sha256(real.read_bytes()).hexdigest()
    new = hashlib.sha256(tools["planted"].read_bytes()).hexdigest()
    for f in source.iterdir():
        if f.is_file() and not f.name.startswith("."):
            shutil.copy(f, target / f.name)
    shutil.copy(tools["planted"], target / real.name)
    (target / (real.name + ".sha256")).write_text(new + "\n")  # what earlier versions checked
    for f in target.iterdir():
        if f.suffix != ".so" and (manifest or f.name != "manifest.json"):
            f.write_text(f.read_text().replace(old, new))
    return target / real.name


# --------------------------------------------------------------------------------------------
# concurrent first use


def test_concurrent_first_use_compiles_once(built: dict[str, Any]) -> None:
    compiles = [c for c in built["calls"] if " -c " in f" {c} "]
    links = [c for c in built["calls"] if c.startswith("-shared")]
    flag_sets = collections.Counter(c.split(" -c ")[0] for c in compiles)
    assert compiles and max(flag_sets.values()) == 1, built["calls"]  # no set compiled twice
    assert len(links) == 1, built["calls"]
    for out, _ in built["results"]:
        assert out["fused"] is True
        _check_kernel(out)
    cache = built["cache"]
    assert (cache.stat().st_mode & 0o777) == 0o700
    (lib,) = cache.glob("fused_relu_*.so")
    assert lib.name in json.loads((cache / "manifest.json").read_text())["libraries"]


# --------------------------------------------------------------------------------------------
# a folder that others can write to


def test_a_planted_library_in_a_world_writable_folder_never_runs(
    built: dict[str, Any], tools: dict[str, Path], tmp_path: Path
) -> None:
    cache = tmp_path / "shared"
    planted = _plant(cache, built, tools)
    cache.chmod(0o777)
    marker = tmp_path / "marker"
    out, err = _finish(_start(cache, tools, marker))
    assert not marker.exists()
    assert out["fused"] is False
    _check_kernel(out)
    real = os.path.realpath(cache)
    assert f"WARNING not using the cache of ntklab's C kernels: {real} is writable" in err
    assert "mode 0777" in err and f"chmod 700 {cache}" in err and "NTKLAB_CACHE" in err
    assert planted.read_bytes() == tools["planted"].read_bytes()  # left alone, not rebuilt


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_a_planted_library_in_a_foreign_owned_folder_never_runs(
    built: dict[str, Any], tools: dict[str, Path], tmp_path: Path
) -> None:
    cache = tmp_path / "theirs"
    _plant(cache, built, tools)
    cache.chmod(0o755)
    for f in [cache, *cache.iterdir()]:
        os.chown(f, 65534, 65534)  # nobody
    marker = tmp_path / "marker"
    out, err = _finish(_start(cache, tools, marker))
    assert not marker.exists()
    assert out["fused"] is False
    _check_kernel(out)
    assert f"{os.path.realpath(cache)} is owned by" in err and "uid 65534" in err


def test_a_folder_writable_through_a_parent_is_refused(
    built: dict[str, Any], tools: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tmp_path / "open"
    cache = parent / "cache"
    parent.mkdir()
    _plant(cache, built, tools)
    parent.chmod(0o777)  # others can rename the private folder away and put theirs there
    marker = tmp_path / "marker"
    for k, v in _env(cache, tools, marker).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    assert _fused._folder_problem(cache) == (
        f"the folder above it, {parent}, is writable by group or others (mode 0777, no sticky bit)"
    )
    assert _fused.available() is False
    assert not marker.exists()
    parent.chmod(0o1777)  # as /tmp: the sticky bit keeps others from renaming it
    assert _fused._folder_problem(cache) is None


# --------------------------------------------------------------------------------------------
# a private folder: only what the user built and recorded is loaded


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Compiling fails at once (recorded): the tests below need no real build."""
    seen: list[Path] = []

    def failing(target: Path, flags: tuple[str, ...]) -> None:
        seen.append(target)
        raise RuntimeError("compiler disabled by the test")

    monkeypatch.setattr(_fused, "_compile", failing)
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    return seen


@pytest.mark.parametrize("tamper", ["no manifest", "manifest mismatch", "symlink", "mode 0775"])
def test_a_planted_library_in_a_private_folder_is_not_loaded(
    tamper: str,
    built: dict[str, Any],
    tools: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_build: list[Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = tmp_path / "cache"
    lib = _plant(cache, built, tools, manifest=tamper != "manifest mismatch")
    if tamper == "no manifest":
        (cache / "manifest.json").unlink()
    elif tamper == "symlink":
        elsewhere = tmp_path / "elsewhere.so"
        lib.replace(elsewhere)
        lib.symlink_to(elsewhere)
    elif tamper == "mode 0775":
        lib.chmod(0o775)
    cache.chmod(0o700)
    marker = tmp_path / "marker"
    for k, v in _env(cache, tools, marker).items():
        monkeypatch.setenv(k, v)
    with caplog.at_level(logging.INFO, logger="ntklab"):
        assert _fused.available() is False
    assert not marker.exists()
    assert no_build and no_build[0] == lib  # refused, so compiled again (here: failing)
    refusals = [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and "not loading" in r.getMessage()
    ]
    expected = {
        "no manifest": "has no entry in",
        "manifest mismatch": "does not match its entry",
        "symlink": "is a symbolic link",
        "mode 0775": "mode 0775",
    }[tamper]
    assert len(refusals) == 1 and expected in refusals[0].getMessage()


def test_the_cache_folder_is_created_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_build: list[Path]
) -> None:
    monkeypatch.setenv("NTKLAB_CACHE", str(tmp_path / "new" / "cache"))
    old = os.umask(0o000)
    try:
        assert _fused.available() is False
    finally:
        os.umask(old)
    folder = tmp_path / "new" / "cache"
    assert (folder.stat().st_mode & 0o777) == 0o700
    assert (folder.parent.stat().st_mode & 0o777) == 0o700
    assert len(no_build) == len(_fused._flag_sets())  # the folder was used, not refused


# --------------------------------------------------------------------------------------------
# failure markers expire; the build lock


def test_a_failure_marker_holds_a_day_then_the_build_is_retried(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_build: list[Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("NTKLAB_CACHE", str(tmp_path))
    assert _fused.available() is False
    markers = sorted(tmp_path.glob("*.failed"))
    assert len(markers) == len(no_build) == len(_fused._flag_sets())
    # fresh: the next process does not try again
    no_build.clear()
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    assert _fused.available() is False
    assert no_build == []
    # 23 hours old: still held
    for m in markers:
        os.utime(m, (time.time() - 23 * 3600,) * 2)
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    assert _fused.available() is False
    assert no_build == []
    # 25 hours old: expired, retried, and the retry is announced
    for m in markers:
        os.utime(m, (time.time() - 25 * 3600,) * 2)
    monkeypatch.setattr(_fused, "_loader", _fused._Loader())
    with caplog.at_level(logging.INFO, logger="ntklab"):
        assert _fused.available() is False
    assert sorted(_fused._failure_path(p) for p in no_build) == markers
    retries = [r for r in caplog.records if "retrying to compile" in r.getMessage()]
    assert (
        len(retries) == len(markers) and "compiler disabled by the test" in retries[0].getMessage()
    )


def test_a_planted_failure_marker_expires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_build: list[Path]
) -> None:
    """A marker that is not the record of this compiler's failure is not believed."""
    monkeypatch.setenv("NTKLAB_CACHE", str(tmp_path))
    first = _fused._library_path(_fused._flag_sets()[0])
    _fused._failure_path(first).write_text("failed\n")
    assert _fused.available() is False
    assert no_build[0] == first


def test_the_wait_for_another_build_is_bounded(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    no_build: list[Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fcntl = pytest.importorskip("fcntl")
    monkeypatch.setenv("NTKLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("NTKLAB_COMPILE_TIMEOUT", "0.1")
    tmp_path.chmod(0o700)
    with open(tmp_path / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a process stuck in its build would
        start = time.monotonic()
        with caplog.at_level(logging.INFO, logger="ntklab"):
            assert _fused.available() is False
        waited = time.monotonic() - start
    assert no_build == []  # never built behind another process's lock
    assert waited >= 1.0  # 2 x 0.1 s + 1 s; an upper bound would be a wall-clock assert
    assert any(
        "not waiting longer" in r.getMessage() and r.levelno == logging.WARNING
        for r in caplog.records
    )
