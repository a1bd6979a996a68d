"""The documentation site, built once per test session (``built_site``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m sphinx -W -b html docs OUT`` from scratch, the gallery at tiny scale.

    Every example runs again (``NTKLAB_GALLERY_RERUN=1``), whatever an earlier build of the
    checkout left in ``docs/auto_*``. The build's output is in the failure message.
    """
    for module in ("sphinx", "numpydoc", "furo", "sphinx_gallery"):
        pytest.importorskip(module)
    base = tmp_path_factory.mktemp("docs")
    out, doctrees = base / "html", base / "doctrees"
    env = {
        **os.environ,
        "NTKLAB_GALLERY_SCALE": "tiny",
        "NTKLAB_GALLERY_RERUN": "1",
        "MPLBACKEND": "Agg",
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-b",
            "html",
            "-d",
            str(doctrees),
            str(DOCS),
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, (
        f"the docs build failed after {elapsed:.0f} s:\n"
        f"{done.stderr[-6000:]}\n{done.stdout[-2000:]}"
    )
    (base / "build_seconds.txt").write_text(f"{elapsed:.1f}\n")
    return out
