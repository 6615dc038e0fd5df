"""Merges the hub takes straight from the read callback get what the handler's loop gave.

The hub takes a merge request in ``websockets``' read callback when its connection's
handler waits for a message with nothing queued (``Hub._take_now``, rooms in memory
and durable) and judges it in one loop callback with the other merges taken in that loop
iteration; everything else goes through the handler's loop. These tests send the same
scripts of messages (merges with old and new bases, repeated request ids, refusals over
the limits, read-only tokens, malformed frames, sync requests; pipelined, or each after
the answers before it) to a hub that never takes the short cut and to one that does, in
memory and durable, and compare what each client receives: the answers in order
(request id, status, conflicts, error code, applied paths), sync answers, the close
code.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hubs import SECRET
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from sync.server.auth import mint_token
from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange

_LAST = 2**20  # the request id of the script's closing merge


class _LoopOnlyHub(Hub):
    """The general path only: every message goes through the handler's loop."""

    def _take_now(self, *args: Any) -> bool:
        return False


class _CountingHub(Hub):
    """The hub as shipped, counting the messages it takes from the read callback."""

    taken = 0

    def _take_now(self, *args: Any) -> bool:
        took = super()._take_now(*args)
        _CountingHub.taken += took
        return took


def _merge(request_id: int, path: int, value: Any, base: bytes) -> bytes:
    change = WireChange(ChangeKind.SET, (f"k{path}",), value)
    return p.encode_merge_request(request_id, "agent", base, [change])


_step = st.one_of(
    st.tuples(st.just("merge"), st.integers(0, 3), st.integers(0, 3), st.booleans()),
    st.tuples(
        st.just("again"),
    ),  # the previous request id once more
    st.tuples(
        st.just("big"),
    ),  # over max_merge_bytes
    st.tuples(
        st.just("too many"),
    ),  # over max_changes
    st.tuples(
        st.just("sync"),
    ),
    st.tuples(
        st.just("wait"),
    ),  # until every answer so far is in
    st.tuples(
        st.just("bad base"),
    ),  # not a state vector
    st.tuples(st.just("malformed"), st.binary(max_size=6)),
)


def _answer(data: bytes) -> tuple[Any, ...] | None:
    message = p.decode_message(data)
    if isinstance(message, p.MergeReply):
        return (
            "reply",
            message.request_id,
            message.status.name,
            len(message.conflicts),
            message.error.code if message.error is not None else None,
            message.applied,
        )
    if isinstance(message, p.SyncStep2):
        return ("sync2",)
    return None  # update frames, the greeting: their number depends on timing


async def _play(hub: Hub, script: list[tuple[Any, ...]], token: str | None) -> list[Any]:
    url = hub.url("room") + (f"?token={token}" if token else "")
    got: list[Any] = []
    async with ws_connect(url, max_size=None) as ws:
        base = b"\x00"
        sent = 0

        async def read(ws: ClientConnection) -> None:
            nonlocal base
            try:
                async for data in ws:
                    assert isinstance(data, bytes)
                    answer = _answer(data)
                    if answer is None:
                        continue
                    got.append(answer)
                    if answer[0] == "reply":
                        reply = p.decode_message(data)
                        assert isinstance(reply, p.MergeReply)
                        if reply.status.name != "ERROR":
                            base = reply.token
            except ConnectionClosed:
                pass
            got.append(("closed", ws.close_code))

        async def wait() -> None:
            async with asyncio.timeout(10):
                while sum(1 for g in got if g[0] == "reply") < sent:
                    if any(g[0] == "closed" for g in got):
                        return
                    await asyncio.sleep(0.002)

        reader = asyncio.create_task(read(ws))
        request_id = 0
        try:
            for step in script:
                kind = step[0]
                if kind in ("bad base", "malformed"):
                    # the connection closes: answers still in flight are sent or dropped by
                    # timing alone (the close may overtake them), on either path
                    await wait()
                elif kind in ("again", "big", "too many") or (kind == "merge" and not step[3]):
                    await wait()  # the base is the last answer's token (not a race)
                if kind == "wait":
                    await wait()
                    continue
                if kind == "merge":
                    request_id += 1
                    old = step[3]
                    await ws.send(_merge(request_id, step[1], step[2], b"\x00" if old else base))
                elif kind == "again":
                    await ws.send(_merge(request_id, 0, "again", base))
                elif kind == "big":
                    request_id += 1
                    await ws.send(_merge(request_id, 0, "x" * 3000, base))
                elif kind == "too many":
                    request_id += 1
                    changes = [WireChange(ChangeKind.SET, (f"m{i}",), i) for i in range(9)]
                    await ws.send(p.encode_merge_request(request_id, "agent", base, changes))
                elif kind == "sync":
                    await ws.send(p.encode_sync_step1(b"\x00"))
                    continue
                elif kind == "bad base":
                    request_id += 1
                    good = _merge(request_id, 0, 1, b"\x00")
                    # the base's length byte follows the header, request id and agent
                    cut = good.index(b"agent") + len(b"agent")
                    await ws.send(good[:cut] + b"\x03\xff\xff\xff" + good[cut + 2 :])
                else:
                    await ws.send(bytes([p.MessageType.MERGE]) + step[1])
                    continue
                sent += 1
            sent += 1
            await ws.send(_merge(_LAST, 0, "last", base))
            async with asyncio.timeout(10):
                while not any(g[0] == "closed" or g[:2] == ("reply", _LAST) for g in got):
                    await asyncio.sleep(0.005)
        except ConnectionClosed:
            pass
        finally:
            await ws.close()
            await reader
    return [g for g in got if g[0] != "closed"] + [g for g in got if g[0] == "closed"][:1]


async def _compare(script: list[tuple[Any, ...]], durable: bool, read_only: bool) -> None:
    limits = Limits(max_merge_bytes=2048, max_merge_changes=8)
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for kind in (_LoopOnlyHub, _CountingHub):
            db = Path(tmp) / kind.__name__ if durable else None
            async with kind(port=0, db=db, secret=SECRET, limits=limits) as hub:
                token = mint_token(SECRET, "room", "read" if read_only else "write", 60)
                results.append(await _play(hub, script, token))
        assert results[0] == results[1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_step, min_size=1, max_size=14),
    st.booleans(),
    st.booleans(),
)
def test_the_short_cut_answers_as_the_handlers_loop(
    script: list[tuple[Any, ...]], durable: bool, read_only: bool
) -> None:
    asyncio.run(_compare(script, durable, read_only))


def test_merges_that_wait_for_their_answers_take_the_short_cut_in_memory_and_durable() -> None:
    script: list[tuple[Any, ...]] = []
    for i in range(10):
        script += [("merge", i % 3, i, False), ("wait",)]
    before = _CountingHub.taken
    asyncio.run(_compare(script, durable=False, read_only=False))
    assert _CountingHub.taken - before >= 9
    # a durable room takes them too, and answers each once it is on disk (that the
    # answer waits for the file: test_hub_inline_durable.py)
    before = _CountingHub.taken
    asyncio.run(_compare(script, durable=True, read_only=False))
    assert _CountingHub.taken - before >= 9


def test_pipelined_merges_keep_their_order() -> None:
    # each merge is sent without waiting for the answer before it: a connection's second
    # merge, arriving while its first waits to be judged, goes through the handler's loop
    script: list[tuple[Any, ...]] = [("merge", i % 4, i, i % 2 == 0) for i in range(12)]
    asyncio.run(_compare(script, durable=False, read_only=False))
    asyncio.run(_compare(script, durable=True, read_only=False))
