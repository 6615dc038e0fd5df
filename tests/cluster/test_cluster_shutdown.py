"""A hub's stop is bounded, and a second signal ends it at once (real hub processes).

Found trying the cluster as a user: with PostgreSQL not answering (a dead link, here a
paused :class:`~tcp_proxy.TcpProxy` in front of it: no error, no answer) SIGTERM never
ended the hub: the owner of a room waited forever for its judge's last write, and every
later SIGTERM and SIGINT was ignored; only SIGKILL ended it. Now the cluster's stop gives
up after ``STOP_TIMEOUT`` (10 s), logging what it abandoned, and the process exits with
status 1; a second SIGTERM or SIGINT exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_servers import RedisServer
from hub_procs import HubProcess
from psycopg.conninfo import make_conninfo
from tcp_proxy import TcpProxy

import sync
from sync.server.cluster.stopping import STOP_TIMEOUT, Deadline

pytestmark = pytest.mark.slow

ROOM = "owned"


@pytest.fixture
def hub(
    private_redis: RedisServer, postgres_dsn: str, pg_proxy: TcpProxy, tmp_path: Path
) -> Iterator[HubProcess]:
    """A hub process reaching PostgreSQL through ``pg_proxy``; killed at the end whatever."""
    dsn = make_conninfo(postgres_dsn, host="127.0.0.1", port=str(pg_proxy.port))
    process = HubProcess(private_redis.url, dsn, tmp_path, name="p")
    try:
        process.start()
        yield process
    finally:
        process.kill()
        print(process.tail(60))


async def own_a_room(hub: HubProcess) -> None:
    """Merge once in :data:`ROOM`: the hub owns it, its judge holds a connection."""
    async with (
        sync.connect(hub.url(ROOM), agent="a", timeout=10) as remote,
        remote.fork() as branch,
    ):
        branch["n"] = 1


def exit_status(hub: HubProcess, within: float) -> tuple[int | None, float]:
    """The hub's exit status once it ends (``None``: still running ``within`` s later)."""
    assert hub.proc is not None
    started = time.monotonic()
    try:
        status = hub.proc.wait(timeout=within)
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - started
    return status, time.monotonic() - started


async def test_a_stop_stuck_on_postgres_ends_after_the_timeout(
    hub: HubProcess, pg_proxy: TcpProxy
) -> None:
    await own_a_room(hub)
    pg_proxy.pause()
    assert hub.proc is not None
    hub.proc.send_signal(signal.SIGTERM)
    status, took = await asyncio.to_thread(exit_status, hub, STOP_TIMEOUT + 4)
    assert status == 1, f"still running {took:.1f} s after SIGTERM"
    assert STOP_TIMEOUT - 1 < took < STOP_TIMEOUT + 4
    log = hub.tail(20)
    assert f"stop abandoned after {STOP_TIMEOUT:g} s: room {ROOM!r}" in log
    assert "exiting now (status 1)" in log


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_second_signal_exits_at_once(
    hub: HubProcess, pg_proxy: TcpProxy, second: signal.Signals
) -> None:
    await own_a_room(hub)
    pg_proxy.pause()
    assert hub.proc is not None
    hub.proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(1.0)
    assert hub.alive  # stuck on the room's last write
    hub.proc.send_signal(second)
    status, took = await asyncio.to_thread(exit_status, hub, 3.0)
    assert status == 1 and took < 3.0
    assert f"{second.name} again while stopping: exiting now" in hub.tail(20)


async def test_a_stop_with_postgres_answering_is_clean(hub: HubProcess) -> None:
    await own_a_room(hub)
    assert hub.proc is not None
    hub.proc.send_signal(signal.SIGTERM)
    status, took = await asyncio.to_thread(exit_status, hub, 8.0)
    assert status == 0 and took < 5.0
    assert "abandon" not in hub.tail(20)


async def test_a_deadline_abandons_what_overruns_it(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="crdt_state.cluster")
    ended: list[str] = []

    async def quick() -> None:
        ended.append("quick")

    async def failing() -> None:
        raise RuntimeError("broken")

    async def stuck() -> None:
        await asyncio.Event().wait()

    started = time.monotonic()
    steps = Deadline(0.5)
    await steps.run({"quick": quick(), "failing": failing(), "stuck": stuck()})
    await steps.run({"late": quick()})  # after the deadline: still gets its floor
    assert 0.4 < time.monotonic() - started < 2.0
    assert ended == ["quick", "quick"] and steps.abandoned == ["stuck"]
    assert "failing failed" in caplog.text and "broken" in caplog.text
    assert steps.report("hub x", "a note") == ["stuck"]
    assert "hub x: stop abandoned after 0.5 s: stuck (a note)" in caplog.text
