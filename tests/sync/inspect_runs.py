"""``crdt-state inspect`` run in this process, its output captured (the CLI tests' helpers)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sync.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``crdt-state inspect ARGV...``: its exit status, standard output and error."""
    code = main(["inspect", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """``crdt-state inspect ARGV... --json``, which must succeed: its output, parsed."""
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)
