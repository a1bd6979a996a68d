"""Does each experiment's own test file catch wrong science?

For every registered experiment (or those named), runs its test file four times:

1. as it is: it must pass;
2. with every Outcome's verdict inverted when it is built: it must fail;
3. with every metric (value and interval) multiplied by 1.5 when the Outcome is built: it must
   fail;
4. with a wrong kernel: every analytic NTK replaced by 1.5 NTK + 0.5 NNGP and every empirical
   NTK by 1.5 NTK + 0.5 f(x) f(x')^T (``tools/mutation_plugin.py``): it must fail, unless the
   claim is not about the NTK (:data:`KERNEL_EXEMPT` says why; the row shows ``exempt``).

A test file that passes under 2, 3 or 4 cannot tell a right result from a wrong one. Prints one
row per experiment and exits 1 when any row is not ``caught``. Usage::

    python tools/mutation_check.py                 # every experiment
    python tools/mutation_check.py label-alignment spectrum-s1
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests" / "experiments"
MUTATIONS = ("invert", "scale", "kernel")
#: Experiments whose claim does not depend on the NTK being the NTK, and why.
KERNEL_EXEMPT: dict[str, str] = {
    "double-descent": (
        "C1 is about min-norm linear regression and random ReLU features (Hastie et al. 2022;"
        " Mei & Montanari 2022); no NTK enters its figures"
    ),
}


def test_file_of(name: str) -> Path:
    """The test file of experiment ``name``: ``tests/experiments/test_<module>.py``, or the
    one file there that names the experiment in quotes."""
    from ntklab.experiments import get_experiment

    exp = get_experiment(name)
    module = exp.measure.__module__.rsplit(".", 1)[-1]
    direct = TESTS / f"test_{module}.py"
    if direct.is_file():
        return direct
    named = [p for p in sorted(TESTS.glob("test_*.py")) if f'"{name}"' in p.read_text()]
    if len(named) != 1:
        raise SystemExit(f"{name}: expected one test file naming it, found {named}")
    return named[0]


def run_pytest(path: Path, mutation: str | None) -> tuple[bool, float]:
    env = dict(os.environ)
    env.pop("NTKLAB_MUTATION", None)
    if mutation:
        env["NTKLAB_MUTATION"] = mutation
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tools"), env.get("PYTHONPATH")]))
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "mutation_plugin", str(path)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    return proc.returncode == 0, time.perf_counter() - start


def main(argv: list[str]) -> int:
    from ntklab.experiments import list_experiments

    names = argv or [e.name for e in list_experiments()]
    bad = 0
    head = f"{'experiment':<24} {'test file':<44} {'as is':<6} {'invert':<8} {'scale':<8}"
    print(f"{head} {'kernel':<8} s")
    exempt_notes = []
    for name in names:
        path = test_file_of(name)
        ok, seconds = run_pytest(path, None)
        row = ["pass" if ok else "FAIL"]
        caught_all = ok
        for mutation in MUTATIONS:
            if mutation == "kernel" and name in KERNEL_EXEMPT:
                row.append("exempt")
                exempt_notes.append(f"{name}: {KERNEL_EXEMPT[name]}")
                continue
            survived, t = run_pytest(path, mutation)
            seconds += t
            row.append("SURVIVED" if survived else "caught")
            caught_all &= not survived
        bad += not caught_all
        rel = path.relative_to(ROOT)
        cells = " ".join(f"{c:<8}" for c in row[1:])
        print(f"{name:<24} {rel!s:<44} {row[0]:<6} {cells} {seconds:.0f}")
    for note in exempt_notes:
        print(f"exempt from the kernel mutation: {note}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
