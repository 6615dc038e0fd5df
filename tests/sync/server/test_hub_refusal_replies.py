"""The hub answers refusals without dropping the connection, and says why it refused a handshake.

Read-only merges get an error result (the connection stays open for reads), a merge whose
judging fails unexpectedly gets ``internal_error`` (never a 1011 close), refused handshakes
carry their stable code in ``X-Crdt-State-Error``, and tokens never reach the hub's logs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import pytest
from hubs import SECRET, eventually
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidStatus

from crdt_state import (
    Change,
    DuplicatePath,
    InvalidPath,
    MergeResult,
    SharedState,
    VersionVector,
)
from sync import AuthError, RemoteError, WriteDenied
from sync.client.remote import connect
from sync.server.auth import mint_token
from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, JsonValue, WireChange


def merge_frame(request_id: int, path: str, value: JsonValue, base: bytes = b"\x00") -> bytes:
    return p.encode_merge_request(
        request_id, "raw", base, [WireChange(ChangeKind.SET, (path,), value)]
    )


async def next_of(ws: ClientConnection, kind: type[p.Message], timeout: float = 5.0) -> Any:
    """The next message of type ``kind`` the hub sends on ``ws`` (others are skipped)."""
    async with asyncio.timeout(timeout):
        while True:
            data = await ws.recv()
            assert isinstance(data, bytes)
            message = p.decode_message(data)
            if isinstance(message, kind):
                return message


# -- item 1: read-only merges --------------------------------------------------------------------
async def test_a_read_only_merge_gets_an_error_result_and_the_connection_stays_open(
    secured: Hub,
) -> None:
    url = secured.url("team/ro-merge")
    writer = mint_token(SECRET, "team/*", "write", 60)
    reader = mint_token(SECRET, "team/*", "read", 60)
    async with ws_connect(url + f"?token={reader}", compression=None) as ws:
        await ws.send(merge_frame(7, "x", 1))
        reply = await next_of(ws, p.MergeReply)
        assert reply.request_id == 7 and reply.status == p.MergeStatus.ERROR
        assert reply.error is not None and reply.error.code == "read_only"
        async with connect(url, agent="w", token=writer) as w:  # reads go on
            await w.acommit({"y": 2}, w.token)
        await next_of(ws, p.SyncUpdate)
        assert ws.close_code is None
    assert secured.rooms["team/ro-merge"].state.snapshot() == {"y": 2}


async def test_the_client_gets_write_denied_and_keeps_reading(secured: Hub) -> None:
    url = secured.url("team/ro-client")
    writer = mint_token(SECRET, "team/*", "write", 60)
    reader = mint_token(SECRET, "team/*", "read", 60)
    async with (
        connect(url, agent="w", token=writer) as w,
        connect(url, agent="r", token=reader) as r,
    ):
        branch = r.fork()
        branch.set("x", 1)
        with pytest.raises(WriteDenied) as info:
            await branch.amerge()
        assert info.value.code == "read_only"
        await w.acommit({"after": True}, w.token)
        await eventually(lambda: r.get("after") is True)
        assert r.connected and secured._connections == 2  # no reconnect happened
    assert "x" not in secured.rooms["team/ro-client"].state.snapshot()


async def test_a_read_only_plain_update_still_gets_permission_denied(secured: Hub) -> None:
    reader = mint_token(SECRET, "team/*", "read", 60)
    async with ws_connect(secured.url("team/ro-up") + f"?token={reader}") as ws:
        doc = SharedState()
        doc.commit({"a": 1}, doc.token, "me")
        await ws.send(p.encode_update(doc.get_update()))
        denied = await next_of(ws, p.PermissionDenied)
        assert "read-only" in denied.reason
        with pytest.raises(TimeoutError):  # kept open for reads (a stock client reconnected)
            async with asyncio.timeout(0.5):
                await ws.wait_closed()
        assert ws.close_code is None
    assert secured.rooms["team/ro-up"].state.snapshot() == {}


# -- item 2: refused handshakes say why ----------------------------------------------------------
def token_for(code: str) -> str | None:
    """A token the hub refuses with ``code`` (minted now: collection may be long before)."""
    return {
        "missing_token": None,
        "malformed_token": "no-dot",
        "bad_signature": mint_token("other", "team/*", "write", 60),
        "expired_token": mint_token(SECRET, "team/*", "write", 60, now=0),
        "wrong_room": mint_token(SECRET, "else/*", "write", 60),
    }[code]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("missing_token", 401),
        ("malformed_token", 401),
        ("bad_signature", 401),
        ("expired_token", 401),
        ("wrong_room", 403),
    ],
)
async def test_a_refused_handshake_names_its_code(secured: Hub, code: str, status: int) -> None:
    token = token_for(code)
    url = secured.url("team/h") + (f"?token={token}" if token else "")
    with pytest.raises(InvalidStatus) as info:
        async with ws_connect(url):
            pass
    response = info.value.response
    assert response.status_code == status
    assert response.headers["X-Crdt-State-Error"] == code
    body = bytes(response.body or b"").decode()
    assert body.strip() and len(body) < 200
    assert SECRET not in body and (token is None or token not in body)


async def test_the_client_raises_auth_error_with_the_hubs_code(secured: Hub) -> None:
    expired = mint_token(SECRET, "team/*", "write", 60, now=0)
    with pytest.raises(AuthError) as info:
        async with connect(secured.url("team/x"), agent="x", token=expired, timeout=5):
            pass
    assert info.value.code == "expired_token"
    wrong = mint_token(SECRET, "else/*", "write", 60)
    with pytest.raises(AuthError) as info:
        async with connect(secured.url("team/x"), agent="x", token=wrong, timeout=5):
            pass
    assert info.value.code == "wrong_room"


async def test_other_refusals_carry_a_code_too(hub: Hub) -> None:
    with pytest.raises(InvalidStatus) as info:
        async with ws_connect(f"ws://127.0.0.1:{hub.port}/bad%20room"):
            pass
    assert info.value.response.status_code == 400
    assert info.value.response.headers["X-Crdt-State-Error"] == "bad_room_name"


# -- item 3: tokens never in hub logs ------------------------------------------------------------
async def test_tokens_never_reach_the_hub_logs(
    secured: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    token = mint_token(SECRET, "team/*", "write", 60)
    expired = mint_token(SECRET, "team/*", "write", 60, now=0)
    secret_part = token.split(".")[1]
    with caplog.at_level(logging.DEBUG):
        async with connect(secured.url("team/logs"), agent="alice", token=token) as a:
            await a.acommit({"x": 1}, a.token)
        bearer = {"Authorization": f"Bearer {token}"}
        async with ws_connect(secured.url("team/logs"), additional_headers=bearer) as ws:
            await ws.send(p.encode_sync_step1(b"\x00"))
            await next_of(ws, p.SyncStep2)
        with pytest.raises(InvalidStatus):
            async with ws_connect(secured.url("team/logs") + f"?token={expired}"):
                pass
        await eventually(lambda: "disconnected" in caplog.text and "agent alice" in caplog.text)
    hub_records = [r for r in caplog.records if r.name in ("websockets.server", "crdt_state.hub")]
    formatter = logging.Formatter("%(name)s %(message)s")
    text = "\n".join(formatter.format(r) for r in hub_records)  # the raw test client not
    assert "GET /team/logs?token=***" in text  # the request line was logged, masked
    assert "Bearer ***" in text
    for secret in (token, secret_part, expired, expired.split(".")[1], SECRET):
        assert secret not in text
    connected = [r.getMessage() for r in hub_records if " connected from " in r.getMessage()]
    assert connected and all("room team/logs" in line for line in connected)
    assert any("room team/logs" in line and "agent alice" in line for line in text.splitlines())


# -- item 4: poison merges -----------------------------------------------------------------------
def _poisoned(changes: Mapping[Any, Any] | Iterable[Change]) -> list[Any]:
    ops = list(changes.items() if isinstance(changes, Mapping) else changes)
    if any(getattr(op, "path", ("",))[0] == "boom" for op in ops):
        raise RuntimeError("a bug inside the state")
    return ops


class PoisonState(SharedState):
    """A state with a bug: merging the path ``boom`` raises an unexpected exception.

    Both ways to merge are poisoned (the hub commits with ``wait=False``, an
    embedding program may await ``acommit``).
    """

    def commit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str,
        **options: Any,
    ) -> MergeResult:
        return super().commit(_poisoned(changes), base, agent, **options)

    async def acommit(
        self,
        changes: Mapping[Any, Any] | Iterable[Change],
        base: VersionVector,
        agent: str,
        **options: Any,
    ) -> MergeResult:
        return await super().acommit(_poisoned(changes), base, agent, **options)


async def test_a_poison_merge_gets_internal_error_not_a_1011_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Hub(port=0, state_factory=lambda _: PoisonState()) as hub:
        async with ws_connect(hub.url("poison"), compression=None) as ws:
            with caplog.at_level(logging.ERROR, logger="crdt_state.hub"):
                await ws.send(merge_frame(1, "boom", 1))
                reply = await next_of(ws, p.MergeReply)
            assert reply.status == p.MergeStatus.ERROR and reply.error is not None
            assert reply.error.code == "internal_error"
            tracebacks = [r for r in caplog.records if r.exc_info is not None]
            assert len(tracebacks) == 1 and "RuntimeError" in caplog.text
            await ws.send(merge_frame(2, "fine", 2))  # the connection goes on
            reply = await next_of(ws, p.MergeReply)
            assert reply.status == p.MergeStatus.OK and ws.close_code is None
        async with connect(hub.url("poison"), agent="c") as client:
            branch = client.fork()
            branch.set("boom", 3)
            with pytest.raises(RemoteError) as info:
                await branch.amerge()
            assert info.value.code == "internal_error"
            assert client.connected and hub._connections == 1
        assert hub.rooms["poison"].state.snapshot() == {"fine": 2}


async def test_an_invalid_merge_gets_a_final_error_result(hub: Hub) -> None:
    async with ws_connect(hub.url("invalid"), compression=None) as ws:
        await ws.send(merge_frame(1, "x", 1, base=b"\x01\x99\x01\x05"))  # unknown base
        reply = await next_of(ws, p.MergeReply)
        assert reply.status == p.MergeStatus.ERROR and reply.error is not None
        assert reply.error.code == "unknown_base"
        await ws.send(merge_frame(2, "x", 2))
        assert (await next_of(ws, p.MergeReply)).status == p.MergeStatus.OK


# -- item 5: per-merge limits, other rooms go on -------------------------------------------------
async def test_a_4_mib_merge_is_refused_while_another_room_is_served(hub: Hub) -> None:
    # just under the 4 MiB message limit
    items: list[JsonValue] = list(range(100_000, 100_000 + 560_000))
    big = p.encode_merge_request(1, "big", b"\x00", [WireChange(ChangeKind.SET, ("l",), items)])
    assert 3 * 2**20 < len(big) < hub.limits.max_message
    async with (
        ws_connect(hub.url("A"), compression=None, max_size=None) as a,
        ws_connect(hub.url("B"), compression=None) as b,
    ):

        async def small_merges() -> int:
            acknowledged = 0
            for request_id in range(1, 41):
                await b.send(merge_frame(request_id, f"k{request_id}", request_id))
                reply = await next_of(b, p.MergeReply)
                acknowledged += reply.request_id == request_id and reply.error is None
            return acknowledged

        async def big_merges() -> list[str]:
            codes = []
            for _ in range(3):
                await a.send(big)
                reply = await next_of(a, p.MergeReply, timeout=20)
                codes.append(reply.error.code if reply.error else "ok")
            return codes

        acknowledged, codes = await asyncio.gather(small_merges(), big_merges())
    assert acknowledged == 40
    assert codes == ["merge_too_large"] * 3
    assert "l" not in hub.rooms["A"].state.snapshot()
    assert len(hub.rooms["B"].state.snapshot()) == 40


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ([WireChange(ChangeKind.SET, (f"k{i}",), i) for i in range(11)], "merge_too_many_changes"),
        ([WireChange(ChangeKind.SET, ("l",), list(range(101)))], "merge_too_many_items"),
        ([WireChange(ChangeKind.SET, ("d",), [[[[[1]]]]])], "merge_too_deep"),
        ([WireChange(ChangeKind.SET, ("s",), "x" * 5000)], "merge_too_large"),
    ],
)
async def test_merges_over_the_per_merge_limits_get_typed_refusals(
    changes: list[WireChange], code: str
) -> None:
    limits = Limits(
        max_merge_changes=10, max_merge_items=100, max_merge_depth=4, max_merge_bytes=4096
    )
    async with (
        Hub(port=0, limits=limits) as hub,
        ws_connect(hub.url("limits"), compression=None) as ws,
    ):
        await ws.send(p.encode_merge_request(5, "a", b"\x00", changes))
        reply = await next_of(ws, p.MergeReply)
        assert reply.request_id == 5 and reply.error is not None
        assert reply.error.code == code
        ok = [WireChange(ChangeKind.SET, ("l",), list(range(99)))]
        await ws.send(p.encode_merge_request(6, "a", b"\x00", ok))  # within: judged
        assert (await next_of(ws, p.MergeReply)).status == p.MergeStatus.OK
        assert hub.rooms["limits"].state.snapshot() == {"l": list(range(99))}


# -- a change set naming one path twice ----------------------------------------------------------
async def test_a_merge_naming_one_path_twice_gets_duplicate_path(hub: Hub) -> None:
    url = hub.url("team/twice")
    changes = [WireChange(ChangeKind.SET, ("x",), 1), WireChange(ChangeKind.SET, ("x",), 2)]
    async with ws_connect(url, compression=None) as ws:
        await ws.send(p.encode_merge_request(9, "raw", b"\x00", changes))
        reply = await next_of(ws, p.MergeReply)
        assert reply.request_id == 9 and reply.status == p.MergeStatus.ERROR
        assert reply.error is not None and reply.error.code == "duplicate_path", reply.error
        assert "names one path twice" in reply.error.message
        await ws.send(merge_frame(10, "x", 3))  # the connection stays open, nothing was written
        assert (await next_of(ws, p.MergeReply)).status == p.MergeStatus.OK
    assert hub.rooms["team/twice"].state.get("x") == 3


def test_a_commit_naming_one_path_twice_is_refused_and_changes_nothing() -> None:
    state = SharedState()
    before = state.token
    with pytest.raises(DuplicatePath) as info:
        state.commit([Change("set", ("x",), 1), Change("set", ("x",), 2)], state.token, "ann")
    error = info.value
    assert error.code == "duplicate_path" and error.path == ("x",)
    assert isinstance(error, InvalidPath) and isinstance(error, KeyError)
    assert state.token == before and state.snapshot() == {}
