"""The examples run as a user would run them, and say what they promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

EXPECTED = {
    "swarm.py": "nothing lost",
    "typed_state.py": "refused",
    "remote_agents.py": "every agent's work is in the room",
    "langgraph_triage.py": "nothing lost",
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_example_runs(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert EXPECTED[name] in done.stdout


def test_every_example_is_covered() -> None:
    assert {p.name for p in (ROOT / "examples").glob("*.py")} == set(EXPECTED)


def test_examples_use_public_names_only() -> None:
    for path in (ROOT / "examples").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "from crdt_state." not in text and "import crdt_state." not in text, path.name
        assert "from sync." not in text, path.name
