"""``import ntklab`` is cheap: it loads the kernels and nothing heavy; scipy's statistics and
optimizers, scikit-learn, matplotlib, dask, zarr, the experiments and the report are imported
by the code that uses them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parent.parent / "src")
HEAVY = (
    "matplotlib",
    "sklearn",
    "dask",
    "distributed",
    "zarr",
    "scipy.optimize",
    "scipy.stats",
    "scipy.integrate",
    "ntklab.experiments",
    "ntklab.report",
)


def _python(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return out.stdout


def test_import_ntklab_leaves_heavy_modules_unloaded() -> None:
    code = (
        f"import json, sys, ntklab\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    assert json.loads(_python(code)) == []


def test_import_ntklab_adds_under_a_second_to_import_torch() -> None:
    # The time ntklab adds to ``import torch``, measured inside one interpreter (process
    # start-up and torch's own import, several seconds on a loaded machine, are not ntklab's);
    # the best of three runs. Measured here: 0.1 s (3.9 s with every subpackage and scipy
    # imported eagerly).
    code = (
        "import time, torch\n"
        "start = time.perf_counter()\n"
        "import ntklab\n"
        "print(time.perf_counter() - start)"
    )
    added = min(float(_python(code)) for _ in range(3))
    assert added < 1.0, added


def test_subpackages_load_on_first_access() -> None:
    code = (
        "import sys, ntklab as nl\n"
        "before = 'ntklab.dynamics' in sys.modules\n"
        "fn = nl.dynamics.linearized_dynamics\n"
        "from ntklab import nets\n"
        "print(before, 'ntklab.dynamics' in sys.modules, callable(fn), nets.train.__name__)"
    )
    assert _python(code).split() == ["False", "True", "True", "train"]
