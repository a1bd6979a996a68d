"""What ``docs/conf.py`` enforces, checked without building the whole site.

- a public name without a docstring stops the build before anything is written;
- the example gallery's settings: an example that raises fails the build, a working one is
  executed and its matplotlib figure captured (a two-page project with the real settings).
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("sphinx_gallery")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))
import _public_api  # noqa: E402


@pytest.fixture(scope="module")
def gallery_conf() -> dict[str, object]:
    return dict(runpy.run_path(str(DOCS / "conf.py"))["sphinx_gallery_conf"])


def test_an_undocumented_public_name_stops_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    from sphinx.errors import ConfigError

    monkeypatch.setattr(_public_api, "undocumented", lambda: ["ntklab.kernels.Nameless"])
    with pytest.raises(ConfigError, match=r"without a docstring.*ntklab\.kernels\.Nameless"):
        runpy.run_path(str(DOCS / "conf.py"))


def test_the_gallery_runs_the_plot_scripts_of_both_folders(gallery_conf: dict) -> None:
    assert gallery_conf["filename_pattern"] == r"plot_"
    assert gallery_conf["abort_on_example_error"] is True
    assert gallery_conf["image_scrapers"] == ("matplotlib",)
    expected = [("../examples/tutorials", "auto_tutorials"), ("../examples/claims", "auto_claims")]
    present = [(s, d) for s, d in expected if (DOCS / s).is_dir()]
    assert list(zip(gallery_conf["examples_dirs"], gallery_conf["gallery_dirs"], strict=True)) == (
        present
    )


def _build_gallery(tmp_path: Path, conf: dict, script: str) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "src"
    (src / "examples").mkdir(parents=True)
    (src / "examples" / "README.rst").write_text("Examples\n========\n")
    (src / "examples" / "plot_one.py").write_text(script)
    settings = {**conf, "examples_dirs": ["examples"], "gallery_dirs": ["auto"]}
    (src / "conf.py").write_text(
        f"extensions = ['sphinx_gallery.gen_gallery']\nsphinx_gallery_conf = {settings!r}\n"
        "exclude_patterns = ['examples']\n"
    )
    (src / "index.rst").write_text("Test\n====\n\n.. toctree::\n\n   auto/index\n")
    env = {**os.environ, "MPLBACKEND": "Agg", "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


_GOOD = '''"""
A working example
=================
"""
import matplotlib.pyplot as plt

fig, ax = plt.subplots()
ax.plot([0, 1], [1, 0])
print("drawn")
'''


def test_a_working_example_is_run_and_its_figure_kept(tmp_path: Path, gallery_conf: dict) -> None:
    done = _build_gallery(tmp_path, gallery_conf, _GOOD)
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "out" / "auto" / "plot_one.html").read_text()
    assert "drawn" in page
    assert list((tmp_path / "out" / "_images").glob("sphx_glr_plot_one_001*.png"))


def test_a_broken_example_fails_the_build(tmp_path: Path, gallery_conf: dict) -> None:
    broken = _GOOD.replace('print("drawn")', 'raise RuntimeError("example is broken")')
    done = _build_gallery(tmp_path, gallery_conf, broken)
    assert done.returncode != 0
    assert "example is broken" in done.stdout + done.stderr
