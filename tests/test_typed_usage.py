"""The documented call shapes type-check under ``mypy --strict`` (``tests/typed/usage.py``).

A user's type checker sees our signatures, not our tests: ``atransact`` once refused an
``async def`` step returning ``None`` (``Awaitable[T] | T`` solved to ``Never``) while
every runtime test passed.
"""

from __future__ import annotations

from pathlib import Path

from mypy import api

USAGE = Path(__file__).parent / "typed" / "usage.py"


def test_documented_calls_type_check_strictly(tmp_path: Path) -> None:
    out, err, status = api.run(
        ["--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"), str(USAGE)]
    )
    assert status == 0, out + err
    assert out == ""
