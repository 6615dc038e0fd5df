"""Client hardening (issue 9, client part): each case fails fast with a typed error.

Real hubs on loopback; where a hub misbehaves on purpose (dropping the connection on a
merge, answering it with an error), a small websocket server in this module plays it,
speaking the real wire protocol.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from http import HTTPStatus
from pathlib import Path

import pytest
from hubs import FAST, SECRET, RestartableHub, eventually, free_port
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

import sync
from crdt_state import Branch, ConflictError, Retry, StateUpdate
from sync.client.core import MAX_STRIKES
from sync.client.remote import CONNECT_TIMEOUT, RemoteState
from sync.wire import protocol as p
from sync.wire.changes import ErrorRecord

HUB_LOGGERS = ("websockets.server", "crdt_state.hub")
"""Loggers of the hub side, which runs in this process too (not the client's concern)."""


def _others() -> set[asyncio.Task[object]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


# -- read-only token ------------------------------------------------------------------------
async def test_a_write_with_a_read_only_token_fails_at_once_and_reads_go_on(
    secured: sync.Hub,
) -> None:
    url = secured.url("room")
    reader = sync.mint_token(SECRET, "room", "read", 60)
    writer = sync.mint_token(SECRET, "room", "write", 60)
    async with (
        sync.connect(url, agent="r", token=reader, reconnect=FAST) as remote,
        sync.connect(url, agent="w", token=writer) as other,
    ):
        branch = remote.fork()
        branch["x"] = 1
        with pytest.raises(sync.WriteDenied) as info:
            await branch.amerge()
        error = info.value
        assert error.code == "read_only" and isinstance(error, sync.SyncError)
        assert isinstance(error, PermissionError) and error.details["paths"] == [("x",)]
        assert remote.read_only and remote.pending == 0 and remote.get("x") is None
        connections = remote._core.connection
        # a later write fails at once, without a connection to the hub being spent on it
        with pytest.raises(sync.WriteDenied):
            async with remote.fork() as again:
                again["y"] = 2
        await remote.wait_idle(1)
        # reads go on: the client reconnected once and follows the room
        async with other.fork() as branch_w:
            branch_w["z"] = "from w"
        await eventually(lambda: remote.get("z") == "from w")
        await asyncio.sleep(0.3)
        assert remote._core.connection - connections <= 1, "a reconnect storm"
        assert (await secured.room("room")).state.snapshot() == {"z": "from w"}


async def test_a_queued_write_refused_for_a_read_only_token_is_reported(tmp_path: Path) -> None:
    hub = RestartableHub(tmp_path / "hub.db", secret=SECRET)
    token = sync.mint_token(SECRET, "room", "read", 60)
    remote = RemoteState(
        hub.url("room"), agent="r", token=token, local=tmp_path / "r.db", reconnect=FAST
    )
    await remote.start()  # offline at once: the hub is down
    try:
        async with remote.fork() as branch:
            branch["x"] = 1
        assert branch.result is not None and branch.result.pending
        await hub.start()
        await remote.wait_idle()
        assert [e.code for e in remote.failed] == ["read_only"]
        assert remote.failed[0].details["paths"] == [("x",)]
        await eventually(lambda: remote.connected)
        assert remote.snapshot() == {}
    finally:
        await remote.close()
        await hub.stop()


# -- hub down at connect -------------------------------------------------------------------
async def test_no_hub_and_no_local_file_is_a_typed_error_after_the_timeout() -> None:
    url = f"ws://127.0.0.1:{free_port()}/room"
    with pytest.raises(sync.HubUnreachable) as info:
        async with sync.connect(url, agent="a", token="s3cr3t-t0ken", timeout=0.3):
            pass
    error = info.value
    assert error.code == "hub_unreachable" and isinstance(error, sync.SyncError)
    assert isinstance(error, ConnectionError) and error.timeout == 0.3
    assert error.urls == (url,) and "s3cr3t-t0ken" not in str(error)
    with pytest.raises(sync.HubUnreachable):
        sync.connect_blocking(url, agent="a", timeout=0.3)


async def test_with_a_local_file_a_dead_hub_means_offline_at_once(tmp_path: Path) -> None:
    hub = RestartableHub(tmp_path / "hub.db")
    slow = Retry(attempts=1, base_delay=0.2, max_delay=0.2)
    async with asyncio.timeout(5):  # it would wait 60 s for the hub otherwise
        async with sync.connect(
            hub.url("room"), agent="a", local=tmp_path / "a.db", timeout=60, reconnect=slow
        ) as remote:
            assert not remote.connected
            async with remote.fork() as branch:
                branch["x"] = 1
            assert branch.result is not None and branch.result.pending
            assert remote.get("x") == 1
            await hub.start()
            await remote.wait_idle()
            assert (await hub.state("room")) == {"x": 1}
    await hub.stop()


def test_connect_and_connect_blocking_share_their_arguments_and_timeout() -> None:
    one = inspect.signature(sync.connect).parameters
    two = inspect.signature(sync.connect_blocking).parameters
    assert list(one) == list(two)
    assert all(one[name].default == two[name].default for name in one)
    assert one["timeout"].default == CONNECT_TIMEOUT


# -- a hub that misbehaves on a merge ----------------------------------------------------
class _Hub:
    """A websocket server speaking the wire protocol that mistreats every merge."""

    def __init__(self, on_merge: str) -> None:
        self.on_merge = on_merge  # "close1011", "error" or "read_only"
        self.connections: list[float] = []
        self.merges = 0

    async def handle(self, ws: ServerConnection) -> None:
        self.connections.append(time.monotonic())
        await ws.send(p.encode_sync_step1(b"\x00"))
        async for data in ws:
            assert isinstance(data, bytes)
            message = p.decode_message(data)
            if isinstance(message, p.SyncStep1):
                await ws.send(p.encode_sync_step2(b"\x00\x00"))
            elif isinstance(message, p.MergeRequest):
                self.merges += 1
                if self.on_merge == "close1011":
                    await ws.close(1011, "internal error")
                    return
                error = ErrorRecord("invalid_value", "this value is not accepted")
                if self.on_merge == "read_only":
                    error = ErrorRecord("read_only", "read-only token: merges are refused")
                reply = p.MergeReply(message.request_id, p.MergeStatus.ERROR, b"\x00", error=error)
                await ws.send(p.encode_message(reply))


@asynccontextmanager
async def _misbehaving(on_merge: str) -> AsyncIterator[tuple[_Hub, str]]:
    fake = _Hub(on_merge)
    async with serve(fake.handle, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield fake, f"ws://127.0.0.1:{port}/room"


class _NoJitter(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


async def test_a_merge_the_hub_drops_the_connection_on_fails_without_a_storm() -> None:
    backoff = Retry(attempts=1, base_delay=0.05, max_delay=1.0, rng=_NoJitter())
    async with (
        _misbehaving("close1011") as (fake, url),
        sync.connect(url, agent="a", reconnect=backoff) as remote,
    ):
        async with remote.fork() as branch:
            branch["x"] = 1
        assert branch.result is not None and branch.result.pending  # the connection dropped
        await remote.wait_idle()
        assert [e.code for e in remote.failed] == ["hub_internal_error"]
        assert fake.merges == MAX_STRIKES  # sent again until it failed, then never again
        await eventually(lambda: remote.connected)
        await asyncio.sleep(0.2)
        assert fake.merges == MAX_STRIKES and len(fake.connections) == MAX_STRIKES + 1
        # the backoff grew between drops: the handshakes that succeeded did not reset it
        gaps = [b - a for a, b in zip(fake.connections, fake.connections[1:], strict=False)]
        assert all(gap >= backoff.cap(i + 1) for i, gap in enumerate(gaps))


async def test_a_merge_the_hub_answers_with_an_error_is_final() -> None:
    async with (
        _misbehaving("error") as (fake, url),
        sync.connect(url, agent="a", reconnect=FAST) as remote,
    ):
        branch = remote.fork()
        branch["x"] = 1
        with pytest.raises(sync.RemoteError) as info:
            await branch.amerge()
        assert info.value.code == "invalid_value"
        await asyncio.sleep(0.2)
        assert fake.merges == 1 and len(fake.connections) == 1 and remote.pending == 0


async def test_a_merge_answered_read_only_denies_writes_without_a_drop() -> None:
    async with (
        _misbehaving("read_only") as (fake, url),
        sync.connect(url, agent="a", reconnect=FAST) as remote,
    ):
        branch = remote.fork()
        branch["x"] = 1
        with pytest.raises(sync.WriteDenied):
            await branch.amerge()
        with pytest.raises(sync.WriteDenied):
            await remote.acommit({"y": 1}, remote.token)
        assert remote.read_only and remote.connected and len(fake.connections) == 1
        assert fake.merges == 1


async def test_a_refused_handshake_carries_the_hubs_code() -> None:
    def refuse(connection: ServerConnection, request: Request) -> Response:
        response = connection.respond(HTTPStatus.UNAUTHORIZED, "token expired\n")
        response.headers["X-Crdt-State-Error"] = "expired_token"
        return response

    async def never(ws: ServerConnection) -> None:
        raise AssertionError("no connection gets through")

    async with serve(never, "127.0.0.1", 0, process_request=refuse) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        with pytest.raises(sync.AuthError) as info:
            async with sync.connect(f"ws://127.0.0.1:{port}/room", agent="a", token="t0k"):
                pass
    assert info.value.code == "expired_token" and info.value.http_status == 401
    assert "token expired" in str(info.value) and "t0k" not in str(info.value)


# -- tokens and tasks ----------------------------------------------------------------------
async def test_tokens_never_show_in_logs_reprs_or_errors(
    caplog: pytest.LogCaptureFixture, secured: sync.Hub
) -> None:
    secret = "s3cr3t-t0ken-value"
    caplog.set_level(logging.DEBUG)
    dead = f"ws://127.0.0.1:{free_port()}/room"
    with pytest.raises(sync.HubUnreachable) as info:
        async with sync.connect([dead, dead], agent="a", token=secret, timeout=0.3):
            pass
    assert secret not in str(info.value)
    with pytest.raises(sync.InvalidHubURL) as bad:
        async with sync.connect(f"http://h/room?token={secret}", agent="a"):
            pass
    assert secret not in str(bad.value)
    with pytest.raises(sync.AuthError) as refused:
        async with sync.connect(secured.url("room"), agent="a", token=secret):
            pass
    assert secret not in str(refused.value)
    token = sync.mint_token(SECRET, "room", "write", 60)
    async with sync.connect(secured.url("room"), agent="a", token=token) as remote:
        assert token not in repr(remote) and "agent='a'" in repr(remote)
    client_side = [r for r in caplog.records if not r.name.startswith(HUB_LOGGERS)]
    assert client_side and any(r.name == "crdt_state.client.websocket" for r in client_side)
    for record in client_side:
        assert secret not in record.getMessage() and token not in record.getMessage()


async def test_no_background_task_outlives_a_failed_cancelled_or_closed_connect(
    tmp_path: Path,
) -> None:
    before = _others()
    dead = f"ws://127.0.0.1:{free_port()}/room"
    with pytest.raises(sync.HubUnreachable):
        async with sync.connect(dead, agent="a", timeout=0.2):
            pass
    assert _others() == before

    async def join() -> None:
        async with sync.connect(dead, agent="a", timeout=30):
            pass

    task = asyncio.create_task(join())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _others() == before
    async with sync.connect(dead, agent="a", local=tmp_path / "a.db", reconnect=FAST):
        pass
    assert _others() == before


def test_auth_failure_leaves_no_task_in_blocking_mode(secured_hub_url: str) -> None:
    with pytest.raises(sync.AuthError) as info:
        sync.connect_blocking(secured_hub_url + "/room", agent="a", token="nope")
    assert info.value.code == "malformed_token" and "nope" not in str(info.value)


# -- surface --------------------------------------------------------------------------------
def test_blocking_remote_has_the_surface_of_remote_state(hub_url: str) -> None:
    names = ["agent", "writer", "url", "urls", "connected", "read_only", "pending", "failed"]
    names += ["conflicted", "replica", "token", "snapshot", "read", "get", "get_update"]
    names += ["model", "subscribe", "fork", "wait_idle"]
    with sync.connect_blocking(hub_url + "/room", agent="a") as remote:
        for name in names:
            assert hasattr(remote.remote, name), name
            assert hasattr(remote, name), name
        assert remote.connected and remote.pending == 0 and remote.failed == []
        assert remote.url == hub_url + "/room" and not remote.read_only
        with remote.fork() as branch:
            branch["k"] = 1
            assert repr(branch).startswith("<BlockingRemoteBranch agent='a'")
        assert remote.get("k") == 1
        assert repr(remote).startswith("<BlockingRemoteState agent='a'")


async def test_subscribe_sees_the_hub_changes_until_unsubscribed(hub: sync.Hub) -> None:
    url = hub.url("room")
    seen: list[StateUpdate] = []
    async with sync.connect(url, agent="a") as a, sync.connect(url, agent="b") as b:
        stop: Callable[[], None] = a.subscribe(seen.append)
        async with b.fork() as branch:
            branch["x"] = 1
        await eventually(lambda: a.get("x") == 1)
        await eventually(lambda: len(seen) >= 1)
        assert all(isinstance(u, StateUpdate) for u in seen)
        stop()
        count = len(seen)
        async with b.fork() as branch:
            branch["x"] = 2
        await eventually(lambda: a.get("x") == 2)
        assert len(seen) == count


async def test_a_conflict_from_the_hub_names_the_path(hub: sync.Hub) -> None:
    url = hub.url("room")
    async with sync.connect(url, agent="a") as a, sync.connect(url, agent="b") as b:
        first, second = a.fork(), b.fork()
        first.set("plan.owner", "a")
        second.set("plan.owner", "b")
        await first.amerge()
        with pytest.raises(ConflictError) as info:
            await second.amerge()
        assert "plan" in str(info.value) and "owner" in str(info.value)


def test_branch_surfaces_match_without_getattr() -> None:
    def public(cls: type) -> set[str]:
        return {name for name in dir(cls) if not name.startswith("_")}

    assert public(Branch) <= public(sync.RemoteBranch)
    assert public(sync.RemoteBranch) - public(sync.BlockingBranch) == {"amerge"}
    for cls in (sync.RemoteBranch, sync.BlockingBranch, sync.BlockingRemote):
        assert "__getattr__" not in vars(cls)
