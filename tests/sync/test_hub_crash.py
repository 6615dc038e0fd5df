"""The hub process is killed with SIGKILL mid-run and restarted: nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from crdt_state import Retry
from sync.client import RemoteState, connect

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_hub(port: int, db: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sync.cli",
            "hub",
            "--port",
            str(port),
            "--db",
            str(db),
            "--log-level",
            "WARNING",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


async def wait_listening(port: int, timeout: float = 15.0) -> None:
    async with asyncio.timeout(timeout):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            except OSError:
                await asyncio.sleep(0.05)


@pytest.mark.xfail(
    strict=False,
    reason=(
        "known, under load only (1 of 2 full runs, 0 of 3 alone): merges in flight when the "
        "hub is SIGKILLed can come back unknown_base after the restart (the client saw hub "
        "updates the hub had not yet made durable); they are reported in `failed`, not "
        "applied. Issue 8 stays open for it."
    ),
)
async def test_sigkill_restart_keeps_acknowledged_and_offline_merges(tmp_path: Path) -> None:
    port = free_port()
    url = f"ws://127.0.0.1:{port}/crash/room"
    db = tmp_path / "hub.db"
    hub = start_hub(port, db)
    fast = Retry(attempts=1, base_delay=0.02, max_delay=0.2)
    acknowledged: dict[str, int] = {}
    offline: dict[str, int] = {}
    try:
        await wait_listening(port)
        agents: list[RemoteState] = []
        contexts = [
            connect(url, agent=f"a{i}", local=tmp_path / f"agent{i}.sqlite", reconnect=fast)
            for i in range(4)
        ]
        for ctx in contexts:
            agents.append(await ctx.__aenter__())

        async def work(agent: RemoteState, i: int, rounds: range) -> None:
            for n in rounds:
                key = f"a{i}-k{n}"
                result = await agent.acommit({("done", key): n}, agent.token)
                (offline if result.pending else acknowledged)[key] = n

        for cycle in range(3):
            tasks = [
                asyncio.create_task(work(a, i, range(cycle * 100, cycle * 100 + 60)))
                for i, a in enumerate(agents)
            ]
            await asyncio.sleep(0.15)
            hub.send_signal(signal.SIGKILL)  # mid-run: merges are in flight
            hub.wait()
            await asyncio.gather(*tasks)
            # the hub is down: agents keep working offline
            await asyncio.gather(
                *(
                    work(a, i, range(cycle * 100 + 60, cycle * 100 + 70))
                    for i, a in enumerate(agents)
                )
            )
            assert offline, "merges made while the hub is down are queued"
            hub = start_hub(port, db)
            await wait_listening(port)
            for agent in agents:
                await agent.wait_idle(timeout=20)

        async with connect(url, agent="checker") as checker:
            done = checker.get("done")
        assert acknowledged
        missing = {k: v for k, v in acknowledged.items() if done.get(k) != v}
        assert not missing, f"acknowledged merges lost: {sorted(missing)[:5]}"
        missing_offline = {k: v for k, v in offline.items() if done.get(k) != v}
        failed = [str(e) for a in agents for e in a.failed]
        assert not missing_offline, (
            f"offline merges lost: {sorted(missing_offline)[:5]}; failed: {failed[:3]}"
        )
        for ctx in contexts:
            await ctx.__aexit__(None, None, None)
    finally:
        hub.kill()
        hub.wait()


async def test_pending_merges_survive_a_client_restart(tmp_path: Path) -> None:
    port = free_port()
    url = f"ws://127.0.0.1:{port}/restart"
    local = tmp_path / "agent.sqlite"
    fast = Retry(attempts=1, base_delay=0.02, max_delay=0.2)
    # no hub yet: the agent works offline and its merges stay in its file
    async with connect(url, agent="a", local=local, reconnect=fast, timeout=0.3) as remote:
        assert not remote.connected
        branch = remote.fork()
        branch.set("offline", "yes")
        branch.append("log", 1)
        result = await branch.amerge()
        assert result.pending
        assert remote.pending == 1
    hub = start_hub(port, tmp_path / "hub.db")
    try:
        await wait_listening(port)
        async with connect(url, agent="a", local=local, reconnect=fast) as remote:
            await remote.wait_idle(timeout=20)
            async with asyncio.timeout(10):
                while remote.get("offline") != "yes":
                    await asyncio.sleep(0.01)
            assert remote.get("log") == [1]
            assert remote.pending == 0
    finally:
        hub.kill()
        hub.wait()
