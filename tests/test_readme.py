"""The README's example runs as written, and its CI marker points at a test command."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).parent.parent / "README.md"


def test_readme_example_runs() -> None:
    text = README.read_text()
    block = re.search(r"## Ten lines\n\n```python\n(.*?)```", text, re.S)
    assert block is not None
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)
    k = namespace["k"]
    assert k.ntk.shape == (100, 20)  # type: ignore[attr-defined]
    mu = namespace["mu"]
    assert isinstance(mu, torch.Tensor) and mu.shape == (513,)


def test_readme_training_dynamics_example_runs(capsys) -> None:  # type: ignore[no-untyped-def]
    text = README.read_text()
    block = re.search(r"### Training dynamics\n.*?```python\n(.*?)```", text, re.S)
    assert block is not None
    namespace: dict[str, object] = {}
    exec(compile(block.group(1), "README.md", "exec"), namespace)
    g = namespace["g"]
    assert g.mean.shape == (9, 5, 1) and g.covariance.shape == (9, 5, 5)  # type: ignore[attr-defined]
    drift = namespace["run"].history.kernel_drift  # type: ignore[attr-defined]
    assert float(drift[0]) == 0.0 and 0 < float(drift[-1]) < 0.2
    assert "torch.Size([9, 5, 1])" in capsys.readouterr().out


def test_readme_has_exactly_two_setup_commands() -> None:
    text = README.read_text()
    setup = text.split("## Set up and run", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", setup, re.S)
    assert len(commands) == 2
    assert "ntklab reproduce" in commands[0]
    assert "pytest" in commands[1]
    assert "<!-- ci:test -->" in setup


def test_readme_claims_table_is_made_from_the_committed_results() -> None:
    from ntklab.report.claims import TABLE_BEGIN, TABLE_END, claims_table

    text = README.read_text()
    block = text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    expected = claims_table(README.parent / "results")
    assert block.strip() == expected.strip(), (
        "README's claims table differs from the committed results: run "
        "`ntklab table results --write README.md`"
    )
