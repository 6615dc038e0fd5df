"""The hub command's event loop (``--loop``): asyncio's by default, uvloop on request.

Real hub processes on loopback serve merges on either loop; ``--loop uvloop`` without
uvloop installed is a clear refusal before anything starts.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvloop

from sync import connect
from sync.server import event_loop
from sync.server._security import HubConfigError

ROOT = Path(__file__).resolve().parents[3]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def no_uvloop(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """uvloop as if it were not installed (its import fails)."""
    monkeypatch.setitem(sys.modules, "uvloop", None)
    yield


def start(*args: str) -> tuple[subprocess.Popen[str], str, list[str]]:
    """A hub process (memory rooms, free port); its URL and its start-up lines."""
    hub = subprocess.Popen(
        [sys.executable, "-m", "sync.cli", "hub", "--insecure", "--port", "0", "--db", "", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert hub.stdout is not None
    lines: list[str] = []
    while not any(line.startswith("event loop:") for line in lines):
        line = hub.stdout.readline()
        if not line:
            hub.kill()
            raise AssertionError(
                f"the hub ended: {lines} {hub.stderr.read() if hub.stderr else ''}"
            )
        lines.append(line.strip())
    found = re.search(r"ws://127\.0\.0\.1:(\d+)/", "\n".join(lines))
    assert found is not None, lines
    return hub, f"ws://127.0.0.1:{found.group(1)}", lines


@pytest.mark.parametrize(
    ("args", "name"),
    [(["--loop", "uvloop"], "uvloop"), (["--loop", "asyncio"], "asyncio"), ([], "asyncio")],
    ids=["uvloop", "asyncio", "default"],
)
async def test_a_hub_serves_merges_on_either_loop(args: list[str], name: str) -> None:
    hub, url, lines = start(*args)
    try:
        assert f"event loop: {name}" in lines
        async with connect(f"{url}/loops", agent="a") as remote:
            for i in range(20):
                branch = remote.fork()
                branch.set("n", i)
                branch.set(f"k{i}", True)
                await branch.amerge()
        async with connect(f"{url}/loops", agent="reader") as reader:
            snapshot = reader.snapshot()
        assert snapshot["n"] == 19 and all(snapshot[f"k{i}"] for i in range(20))
    finally:
        hub.terminate()
        assert hub.wait(30) == 0


def test_the_chosen_loop_runs_the_coroutine() -> None:
    async def which() -> type[asyncio.AbstractEventLoop]:
        return type(asyncio.get_running_loop())

    assert event_loop.run(which, "uvloop") is uvloop.Loop
    assert not issubclass(event_loop.run(which, "asyncio"), uvloop.Loop)
    assert not issubclass(event_loop.run(which), uvloop.Loop)  # the default


def test_without_uvloop_it_is_refused_before_main_runs(no_uvloop: None) -> None:
    called = []

    async def main() -> str:
        called.append(True)
        return type(asyncio.get_running_loop()).__module__

    with pytest.raises(HubConfigError) as caught:
        event_loop.run(main, "uvloop")
    assert caught.value.code == "event_loop"
    assert "uvloop is not installed" in str(caught.value)
    assert "crdt-state[uvloop]" in str(caught.value)
    assert called == []  # refused before main() was called: no coroutine left unawaited
    assert event_loop.run(main, "asyncio").startswith("asyncio")
    with pytest.raises(HubConfigError, match="unknown event loop 'tokio'"):
        event_loop.run(main, "tokio")  # type: ignore[arg-type]
    assert called == [True]


def test_the_command_without_uvloop() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["uvloop"] = None  # as if it were not installed
        from sync.cli import main
        raise SystemExit(main(sys.argv[1:]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "hub", "--insecure", "--port", "0", "--loop", "uvloop"],
        capture_output=True, text=True, timeout=60, env=ENV, check=False,
    )  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "crdt-state hub: --loop uvloop: uvloop is not installed" in done.stderr
    assert "(event_loop)" in done.stderr and "Traceback" not in done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "sync.cli", "hub", "--insecure", "--loop", "tokio"],
        capture_output=True, text=True, timeout=60, env=ENV, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "--loop: invalid choice: 'tokio'" in bad.stderr
