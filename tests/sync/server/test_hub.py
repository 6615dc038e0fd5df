"""The hub on real loopback websockets: sync, merges, tokens, limits, bad clients."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from fuzz_frames import seed_frames, send_mutated
from hubs import SECRET, eventually
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from crdt_state import ConflictError, resolvers
from sync.client.remote import RemoteError, connect
from sync.server.auth import mint_token
from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.wire import protocol as p


async def raw_client(url: str) -> tuple[object, list[p.Message]]:
    ws = await ws_connect(url, compression=None)
    return ws, []


# -- sync and merges ----------------------------------------------------------------------
async def test_two_remote_agents_see_each_others_merges(hub: Hub) -> None:
    url = hub.url("room/one")
    async with connect(url, agent="a") as a, connect(url, agent="b") as b:
        async with a.fork() as branch:
            branch.set("x", 1)
            branch.append("log", "a")
        await eventually(lambda: b.get("x") == 1)
        async with b.fork() as branch:
            branch.append("log", "b")
        await eventually(lambda: a.get("log") == ["a", "b"])
        assert hub.rooms["room/one"].state.snapshot() == {"x": 1, "log": ["a", "b"]}
        assert a.token == b.token == hub.rooms["room/one"].state.token


async def test_remote_conflict_goes_back_to_client_policies(hub: Hub) -> None:
    url = hub.url("room/c")
    async with (
        connect(url, agent="a") as a,
        connect(url, agent="b", resolvers={"n": resolvers.counter}) as b,
    ):
        await a.acommit({"n": 1, "s": "x"}, a.token)
        await eventually(lambda: b.get("n") == 1)
        one, two = a.fork(), b.fork()
        one.set("n", 2)
        one.set("s", "one")
        two.set("n", 5)
        two.set("s", "two")
        await one.amerge()
        with pytest.raises(ConflictError) as info:
            await two.amerge()  # "s" has no client policy: refused, nothing applied
        assert {c.path for c in info.value.conflicts} == {("n",), ("s",)}
        assert hub.rooms["room/c"].state.snapshot() == {"n": 2, "s": "one"}
        assert two.status == "open"
        result = await two.amerge(resolvers={"s": resolvers.last_writer_wins})
        assert {c.path: c.resolution for c in result.conflicts} == {("n",): 6, ("s",): "two"}
        assert hub.rooms["room/c"].state.snapshot() == {"n": 6, "s": "two"}


async def test_server_side_policies_per_room_pattern() -> None:
    async with Hub(port=0, resolvers={"counters/*": {"n": resolvers.counter}}) as hub:
        url = hub.url("counters/1")
        async with connect(url, agent="a") as a:
            await a.acommit({"n": 0}, a.token)
            base = a.token
            await a.acommit({"n": 1}, base)
            result = await a.acommit({"n": 2}, base)
            assert result.conflicts[0].policy == "counter"
            assert hub.rooms["counters/1"].state.get("n") == 3


async def test_hundred_remote_agents_merge_concurrently() -> None:
    """The counter policy lives on the hub."""
    async with Hub(port=0, resolvers={"*": {"calls": resolvers.counter}}) as hub:
        await _hundred_agents(hub)


async def test_hundred_remote_agents_with_client_side_counter(hub: Hub) -> None:
    """The counter policy lives only in the clients: equal writes still come back to them."""
    await _hundred_agents(hub)


async def _hundred_agents(hub: Hub) -> None:
    url = hub.url("swarm")
    async with connect(url, agent="setup", resolvers={"calls": resolvers.counter}) as setup:
        await setup.acommit({"calls": 0}, setup.token)

    async def agent(i: int) -> int:
        async with connect(
            url, agent=f"agent-{i}", resolvers={"calls": resolvers.counter}
        ) as remote:
            branch = remote.fork()
            await asyncio.sleep(random.random() * 0.05)
            branch.set(("results", f"r{i}"), i)
            branch.set("calls", (branch.get("calls") or 0) + 1)
            if i % 10 == 0:
                branch.set("winner", i)
            result = await branch.amerge(resolvers={"winner": resolvers.maximum})
            return len(result.conflicts)

    counts = await asyncio.gather(*(agent(i) for i in range(100)))
    state = hub.rooms["swarm"].state.snapshot()
    assert state["results"] == {f"r{i}": i for i in range(100)}
    assert state["calls"] == 100
    assert state["winner"] == 90
    assert sum(counts) > 0


async def test_stock_sync_protocol_client_joins(hub: Hub) -> None:
    """A raw y-websocket peer (pycrdt doc + the codec) reads and writes the room."""
    from pycrdt import Doc, Map

    url = hub.url("raw")
    async with connect(url, agent="a") as a:
        await a.acommit({"greeting": "hi"}, a.token)
        doc: Doc[Any] = Doc()
        async with ws_connect(url, compression=None) as ws:
            await ws.send(p.encode_sync_step1(doc.get_state()))
            async with asyncio.timeout(5):
                while doc.get("state", type=Map).to_py() != {"greeting": "hi"}:
                    message = p.decode_message(await ws.recv())  # type: ignore[arg-type]
                    if isinstance(message, (p.SyncStep2, p.SyncUpdate)):
                        doc.apply_update(message.update)
            updates: list[bytes] = []
            doc.observe(lambda event: updates.append(event.update))
            doc.get("state", type=Map)["from_yjs"] = "hello"
            await ws.send(p.encode_update(updates[-1]))
            await eventually(lambda: a.get("from_yjs") == "hello")
            # a Python branch forked before that write still gets its conflict
            branch = a.fork()
            doc.get("state", type=Map)["greeting"] = "changed by yjs"
            await ws.send(p.encode_update(updates[-1]))
            await eventually(lambda: a.get("greeting") == "changed by yjs")
        branch.set("greeting", "changed by python")
        with pytest.raises(ConflictError):
            await branch.amerge()


# -- tokens --------------------------------------------------------------------------------
async def _handshake_status(url: str, **kwargs: object) -> int:
    try:
        async with ws_connect(url, **kwargs):  # type: ignore[arg-type]
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


async def test_tokens_are_checked_at_the_handshake(secured: Hub) -> None:
    url = secured.url("team/a")
    good = mint_token(SECRET, "team/*", "write", 60)
    assert await _handshake_status(url) == 401
    assert await _handshake_status(url + "?token=garbage") == 401
    forged = mint_token("other-secret", "team/*", "write", 60)
    assert await _handshake_status(url + f"?token={forged}") == 401
    expired = mint_token(SECRET, "team/*", "write", 60, now=0)
    assert await _handshake_status(url + f"?token={expired}") == 401
    other_room = mint_token(SECRET, "elsewhere/*", "write", 60)
    assert await _handshake_status(url + f"?token={other_room}") == 403
    assert await _handshake_status(url + f"?token={good}") == 101
    assert (
        await _handshake_status(url, additional_headers={"Authorization": f"Bearer {good}"}) == 101
    )


async def test_a_read_only_writers_updates_are_dropped_and_it_stays_connected(
    secured: Hub,
) -> None:
    """Told once (permission-denied), nothing applied, the connection kept for reads: a
    stock client that was closed (1008) reconnected at once and wrote again, endlessly."""
    url = secured.url("team/ro")
    writer = mint_token(SECRET, "team/*", "write", 60)
    reader = mint_token(SECRET, "team/*", "read", 60)
    async with connect(url, agent="w", token=writer) as w:
        await w.acommit({"a": 1}, w.token)
        async with ws_connect(url + f"?token={reader}", compression=None) as ws:
            from pycrdt import Doc, Map

            received: list[p.Message] = []

            async def read_for(seconds: float) -> None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(seconds):
                        while True:
                            received.append(p.decode_message(await ws.recv()))  # type: ignore[arg-type]

            doc: Doc[Any] = Doc()
            for value in (99, 100):
                doc.get("state", type=Map)["a"] = value
                await ws.send(p.encode_update(doc.get_update()))
            await read_for(0.5)
            denied = [m for m in received if isinstance(m, p.PermissionDenied)]
            assert [m.reason for m in denied] == ["read-only token: writes are refused"]
            await w.acommit({"b": 2}, w.token)  # still connected: it reads what writers do
            await read_for(0.5)
            assert any(isinstance(m, p.SyncUpdate) for m in received)
            assert ws.close_code is None
    assert secured.rooms["team/ro"].state.snapshot() == {"a": 1, "b": 2}


async def test_read_only_remote_state_can_sync(secured: Hub) -> None:
    url = secured.url("team/ro2")
    writer = mint_token(SECRET, "team/*", "write", 60)
    reader = mint_token(SECRET, "team/*", "read", 60)
    async with connect(url, agent="w", token=writer) as w:
        await w.acommit({"a": 1}, w.token)
        async with connect(url, agent="r", token=reader) as r:
            await eventually(lambda: r.get("a") == 1)


async def test_bad_token_on_connect_raises_permission_error(secured: Hub) -> None:
    with pytest.raises(PermissionError):
        async with connect(secured.url("team/x"), agent="x", token="bad.token", timeout=5):
            pass


# -- limits and bad input ----------------------------------------------------------------------
async def test_oversized_message_closes_with_1009() -> None:
    async with (
        Hub(port=0, limits=Limits(max_message=1024)) as hub,
        ws_connect(hub.url("big"), compression=None) as ws,
    ):
        await ws.send(p.encode_update(b"\x00" * 4096))
        with pytest.raises(ConnectionClosed) as info:
            async with asyncio.timeout(5):
                while True:
                    await ws.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009


async def test_document_size_limit_refuses_merges() -> None:
    async with (
        Hub(port=0, limits=Limits(max_document=2000)) as hub,
        connect(hub.url("small"), agent="a") as a,
    ):
        await a.acommit({"a": "x" * 100}, a.token)
        with pytest.raises(RemoteError) as info:
            await a.acommit({"b": "y" * 5000}, a.token)
        assert info.value.code == "document_too_large"
        assert hub.rooms["small"].state.snapshot() == {"a": "x" * 100}


async def test_connection_limits() -> None:
    async with Hub(port=0, limits=Limits(max_room_connections=2)) as hub:
        url = hub.url("full")
        async with ws_connect(url), ws_connect(url):
            await eventually(lambda: len(hub.rooms["full"].sessions) == 2)
            assert await _handshake_status(url) == 503
        assert await _handshake_status(hub.url("a%20b")) == 400


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        (b"", 1002),
        (b"\x00", 1002),
        (b"\x00\x07\x00", 1002),
        (b"\x00\x01\x05ab", 1002),
        (b"\x64\x00\x01", 1002),
        (b"\x00\x02\x03\xff\xff\xff", 1003),
    ],
)
async def test_malformed_frames_close_only_that_connection(
    hub: Hub, frame: bytes, code: int
) -> None:
    url = hub.url("fuzz")
    async with connect(url, agent="good") as good:
        async with ws_connect(url, compression=None) as ws:
            await ws.send(frame)
            with pytest.raises(ConnectionClosed) as info:
                async with asyncio.timeout(5):
                    while True:
                        await ws.recv()
            assert info.value.rcvd is not None and info.value.rcvd.code == code
        result = await good.acommit({"still": "works"}, good.token)
        assert result.applied == (("still",),)


async def test_fuzzed_frames_never_take_the_hub_down(hub: Hub) -> None:
    """Thousands of mutated frames; each is processed (the hub answers a probe or closes)."""
    url = hub.url("fuzz2")
    async with connect(url, agent="good") as good:

        async def merge_now_and_then(n: int) -> None:
            if n % 200 == 0:
                result = await good.acommit({f"k{n}": n}, good.token)
                assert result.applied == ((f"k{n}",),)

        run = await send_mutated(
            url, random.Random(1234), seed_frames(), 2_000, timeout=5, between=merge_now_and_then
        )
        processed, closed = run.processed, len(run.closes)
        assert processed == 2_000
        assert closed > 100  # most mutations are refused, each closing only its connection
        assert good.connected
        result = await good.acommit({"after": True}, good.token)
        assert result.applied == (("after",),)
    assert hub.rooms["fuzz2"].state.get("after") is True


async def test_a_client_hanging_mid_merge_does_not_block_others(hub: Hub) -> None:
    url = hub.url("hang")
    async with ws_connect(url, compression=None) as stuck:
        await stuck.send(b"\x64")  # a truncated merge: the hub closes it
        async with connect(url, agent="ok") as ok:
            await ok.acommit({"fine": True}, ok.token)
        assert hub.rooms["hang"].state.get("fine") is True


Run = Callable[[], Awaitable[None]]


async def test_remote_state_with_a_schema_validates_branch_writes(hub: Hub) -> None:
    from typing import Annotated

    from pydantic import BaseModel

    from crdt_state import SchemaError

    class Ticket(BaseModel):
        title: str = ""
        calls: Annotated[int, resolvers.counter] = 0

    url = hub.url("typed")
    async with (
        connect(url, agent="a", schema=Ticket) as a,
        connect(url, agent="b", schema=Ticket) as b,
    ):
        one, two = a.fork(), b.fork()
        with pytest.raises(SchemaError) as info:
            one.set("calls", "many")
        assert tuple(info.value.errors[0]["loc"]) == ("calls",)
        one.update({"title": "printer on fire", "calls": 1})
        two.set("calls", 1)
        await one.amerge()
        await two.amerge()  # the schema's counter policy settles the equal writes
        await eventually(lambda: a.get("calls") == 2)
        model = a.model()
        assert isinstance(model, Ticket)
        assert (model.title, model.calls) == ("printer on fire", 2)


async def test_awareness_is_relayed_and_retired_when_a_peer_leaves(hub: Hub) -> None:
    from sync.wire.lib0 import Reader, encode_var_string, encode_var_uint

    url = hub.url("aware")
    announce = b"".join(
        [encode_var_uint(1), encode_var_uint(77), encode_var_uint(5), encode_var_string('{"u":1}')]
    )

    async def next_awareness(ws: object) -> list[tuple[int, int, str]]:
        async with asyncio.timeout(5):
            while True:
                message = p.decode_message(await ws.recv())  # type: ignore[attr-defined]
                if isinstance(message, p.Awareness):
                    reader = Reader(message.payload)
                    return [
                        (reader.read_var_uint(), reader.read_var_uint(), reader.read_var_string())
                        for _ in range(reader.read_var_uint())
                    ]

    async with ws_connect(url, compression=None) as watcher:
        async with ws_connect(url, compression=None) as peer:
            await eventually(lambda: len(hub.rooms["aware"].sessions) == 2)
            await peer.send(p.encode_awareness(announce))
            assert await next_awareness(watcher) == [(77, 5, '{"u":1}')]
        # at the clock it announced, as the reference server does: a peer holding that
        # state removes it (y-protocols' equal-clock rule), and the client's next state
        # (clock 6, e.g. an agent reconnecting) is newer than what every peer holds
        assert await next_awareness(watcher) == [(77, 5, "null")]


async def test_a_resent_merge_request_is_applied_once(tmp_path: Path) -> None:
    from sync.wire.changes import ChangeKind, WireChange

    db = tmp_path / "hub.db"
    frame = p.encode_merge_request(  # the writer id scopes the request id
        424242,
        "resender",
        b"\x00",
        [WireChange(ChangeKind.APPEND, ("log",), ["once"])],
        writer="writer-of-the-resender",
    )

    async def send_and_wait(url: str) -> p.MergeReply:
        async with ws_connect(url, compression=None) as ws:
            await ws.send(frame)
            async with asyncio.timeout(5):
                while True:
                    message = p.decode_message(await ws.recv())  # type: ignore[arg-type]
                    if isinstance(message, p.MergeReply):
                        return message

    async with Hub(port=0, db=db) as hub:
        url = hub.url("dedup")
        first = await send_and_wait(url)
        second = await send_and_wait(url)
        assert first.status is p.MergeStatus.OK and second.status is p.MergeStatus.OK
        assert second.token == first.token
        assert hub.rooms["dedup"].state.get("log") == ["once"]
    async with Hub(port=0, db=db) as restarted:  # the ids live in the room's file
        third = await send_and_wait(restarted.url("dedup"))
        assert third.status is p.MergeStatus.OK
        assert restarted.rooms["dedup"].state.get("log") == ["once"]


async def test_document_limit_counts_the_document_not_its_history() -> None:
    """Many overwrites of one small key must not exhaust the document size limit."""
    async with (
        Hub(port=0, limits=Limits(max_document=6_000)) as hub,
        connect(hub.url("churn"), agent="a") as a,
    ):
        for n in range(300):  # ~30 KB of updates in all, a document well under 6 KB
            result = await a.acommit({"n": n}, a.token)
            assert result.applied == (("n",),)
        assert hub.rooms["churn"].state.get("n") == 299
