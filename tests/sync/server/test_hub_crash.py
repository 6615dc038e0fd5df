"""The hub process is killed with SIGKILL mid-run and restarted: nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hubs import free_port

from crdt_state import Retry, SharedState
from sync.client.remote import RemoteState, connect
from sync.server._store import room_file

ROOT = Path(__file__).resolve().parents[3]


def start_hub(port: int, db: Path, disk_delay: float = 0.0) -> subprocess.Popen[bytes]:
    """The hub in its own process; ``disk_delay``: every commit of its files sleeps that long."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    launcher = ["-m", "sync.cli"]
    if disk_delay:
        launcher = [str(Path(__file__).with_name("slow_disk_hub.py")), str(disk_delay)]
    return subprocess.Popen(
        [
            sys.executable,
            *launcher,
            "hub",
            "--port",
            str(port),
            "--db",
            str(db),
            "--log-level",
            "WARNING",
            "--insecure",
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


@pytest.mark.parametrize("disk_delay", [0.0, 0.02], ids=["disk", "slow-disk"])
async def test_sigkill_restart_keeps_acknowledged_and_offline_merges(
    tmp_path: Path, disk_delay: float
) -> None:
    """Merges in flight at the kill, and made while the hub is down, all land after restarts.

    With the slow disk every kill finds changes that are in the hub's memory
    but not yet in its file. The hub sends a change to nobody before it is
    durable, so no client holds a change the restarted hub lacks: no base
    token it sends is unknown there (``unknown_base``), and no client pushes
    a lost change back (it would come back without its request id, and the
    merge re-sent by its agent would then conflict with itself).
    """
    port = free_port()
    url = f"ws://127.0.0.1:{port}/crash/room"
    db = tmp_path / "hub.db"
    hub = start_hub(port, db, disk_delay)
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
            hub = start_hub(port, db, disk_delay)
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
        assert not failed, f"merges failed: {failed[:3]}"  # every agent writes its own keys
        assert not [c for a in agents for c in a.conflicted]
        for ctx in contexts:
            await ctx.__aexit__(None, None, None)
    finally:
        hub.kill()
        hub.wait()
    # every change in the room's file is a merge the hub judged: no client had to push
    # back a change the hub lost (it would be stored as a received update, "remote")
    with SharedState.open(room_file(db, "crash/room"), compact_document=False) as state:
        received = [h for h in state.history() if h.origin != "local"]
    assert not received, f"changes pushed back by clients: {received[:3]}"


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


async def test_a_crashed_hub_leaves_every_threads_stack(tmp_path: Path) -> None:
    """A segfault (here sent; in life an extension's) leaves the Python stacks on stderr,
    not a silent exit: ``crdt-state hub`` enables ``faulthandler``. Seen once under test: a
    hub process of a cluster died of SIGSEGV inside the interpreter, its log ending
    mid-sentence with nothing to say where."""
    port = free_port()
    hub = start_hub(port, tmp_path / "db")
    try:
        await wait_listening(port)
        hub.send_signal(signal.SIGSEGV)
        out, _ = await asyncio.to_thread(hub.communicate, timeout=20)
    finally:
        if hub.poll() is None:
            hub.kill()
            hub.wait(10)
    assert hub.returncode == -signal.SIGSEGV
    text = out.decode(errors="replace")
    assert "Fatal Python error: Segmentation fault" in text, text[-2000:]
    assert "most recent call first" in text and "event_loop.py" in text, text[-2000:]
