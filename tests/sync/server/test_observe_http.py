"""The hub's HTTP side: health, readiness, metrics, and who may see the inspector.

Real hubs on loopback, real HTTP requests (urllib, in a worker thread so the hub's
event loop keeps serving) and real websocket handshakes for the feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hubs import SECRET, eventually
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from crdt_state import ConflictError, resolvers
from sync.client.remote import connect
from sync.server.auth import mint_token
from sync.server.hub import Hub
from sync.server.limits import Limits
from sync.server.observe import routes
from sync.server.observe.feed import ROOM_UNLOADED
from sync.server.observe.inspector import NO_SUCH_ROOM
from sync.server.observe.metrics import MAX_ERROR_CODES, HubMetrics
from sync.wire.errors import RemoteError, WriteDenied


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


async def get(hub: Hub, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    return await asyncio.to_thread(_get, f"http://127.0.0.1:{hub.port}{path}", headers)


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text ``text`` (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if wanted else "") + r" (\S+)"
    found = re.search("^" + pattern + "$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_healthz_and_readyz_answer(tmp_path: Path) -> None:
    async with Hub(port=0, db=tmp_path / "rooms") as hub:
        status, _, body = await get(hub, "/healthz")
        assert (status, body) == (200, b"ok\n")
        async with connect(hub.url("r"), agent="a") as a:
            await a.acommit({"x": 1}, a.token)
        status, _, body = await get(hub, "/readyz")
        assert status == 200 and json.loads(body) == {"ready": True, "problems": {}}


async def test_readyz_fails_when_storage_is_not_writable(tmp_path: Path) -> None:
    rooms = tmp_path / "rooms"
    async with Hub(port=0, db=rooms) as hub:  # a hub refuses to start on such a --db
        rooms.rmdir()
        rooms.write_text("a file where the rooms' directory should be")
        status, _, body = await get(hub, "/readyz")
        answer = json.loads(body)
        assert status == 503 and answer["ready"] is False
        assert "storage not writable" in answer["problems"]["storage"]


async def test_metrics_move_as_merges_happen() -> None:
    policies = {"*": {"n": resolvers.counter}}
    async with Hub(port=0, secret=SECRET, resolvers=policies) as hub:
        _, headers, before = await get(hub, "/metrics")
        assert headers["Content-Type"].startswith("text/plain")
        assert metric(before.decode(), "crdt_state_merges_total", status="ok") == 0
        token = mint_token(SECRET, "m", "write", 60)
        async with connect(hub.url("m"), agent="a", token=token) as a:
            await a.acommit({"n": 1}, a.token)
            base = a.token
            await a.acommit({"n": 2}, base)
            await a.acommit({"n": 5}, base)  # a conflict the counter settles
            text = (await get(hub, "/metrics"))[2].decode()
            assert metric(text, "crdt_state_connections", kind="room") == 1
        assert metric(text, "crdt_state_merges_total", status="ok") == 2
        assert metric(text, "crdt_state_merges_total", status="conflict") == 1
        assert metric(text, "crdt_state_conflicts_total", policy="counter") == 1
        assert metric(text, "crdt_state_merge_seconds_count") == 3
        assert metric(text, "crdt_state_rooms_loaded") == 1
        assert metric(text, "crdt_state_received_bytes_total") > 0
        assert metric(text, "crdt_state_sent_bytes_total") > 0
        with pytest.raises(InvalidStatus):
            async with ws_connect(hub.url("m")):
                pass
        text = (await get(hub, "/metrics"))[2].decode()
        assert metric(text, "crdt_state_refused_connections_total",
                      reason="missing_token") == 1  # fmt: skip


async def test_durable_commit_latency_is_recorded(tmp_path: Path) -> None:
    async with Hub(port=0, db=tmp_path / "rooms") as hub:
        async with connect(hub.url("d"), agent="a") as a:
            for i in range(3):
                await a.acommit({"x": i}, a.token)
        text = (await get(hub, "/metrics"))[2].decode()
        assert metric(text, "crdt_state_durable_commit_seconds_count") == 3


async def test_the_page_needs_a_token_for_its_room() -> None:
    async with Hub(port=0, secret=SECRET) as hub:
        assert (await get(hub, "/inspect/team/a"))[0] == 401
        wrong = mint_token(SECRET, "other", "read", 60)
        assert (await get(hub, f"/inspect/team/a?token={wrong}"))[0] == 403
        expired = mint_token(SECRET, "team/a", "read", 60, now=0)
        assert (await get(hub, f"/inspect/team/a?token={expired}"))[0] == 401
        forged = mint_token("another secret", "team/a", "read", 60)
        assert (await get(hub, f"/inspect/team/a?token={forged}"))[0] == 401
        good = mint_token(SECRET, "team/*", "read", 60)
        status, headers, _ = await get(hub, f"/inspect/team/a?token={good}&x=1")
        assert status == 303 and headers["Location"] == "/inspect/team/a?x=1"
        cookie = headers["Set-Cookie"]
        assert cookie.startswith(f"{routes.COOKIE}={good};") and "HttpOnly" in cookie
        status, headers, body = await get(hub, "/inspect/team/a", Cookie=f"{routes.COOKIE}={good}")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert b"crdt-state inspector" in body and b"<script" in body
        assert b"http://" not in body.replace(b"http://www.w3.org", b"")  # nothing fetched
        status, _, _ = await get(hub, "/inspect/team/a", Authorization=f"Bearer {good}")
        assert status == 200


async def test_the_feed_needs_a_token_for_its_room() -> None:
    async with Hub(port=0, secret=SECRET) as hub:
        base = f"ws://127.0.0.1:{hub.port}/inspect/team/a/feed"
        for token, status, code in [
            (None, 401, "missing_token"),
            (mint_token(SECRET, "other", "read", 60), 403, "wrong_room"),
            (mint_token(SECRET, "team/a", "read", 60, now=0), 401, "expired_token"),
        ]:
            url = base if token is None else f"{base}?token={token}"
            with pytest.raises(InvalidStatus) as refused:
                async with ws_connect(url):
                    pass
            assert refused.value.response.status_code == status
            # the stable code, as a room's handshake refusal gives it
            assert refused.value.response.headers["X-Crdt-State-Error"] == code
        good = mint_token(SECRET, "team/a", "read", 60)
        cookie = {"Cookie": f"{routes.COOKIE}={good}"}
        async with ws_connect(base, additional_headers=cookie) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()  # watching a room creates nothing
        assert closed.value.rcvd is not None and closed.value.rcvd.code == NO_SUCH_ROOM
        assert "team/a" not in hub.rooms
        await hub.room("team/a")
        async with ws_connect(base, additional_headers=cookie) as ws:
            hello = json.loads(await ws.recv())
            state = json.loads(await ws.recv())
        assert hello == {"type": "hello", "room": "team/a", "role": "read"}
        assert state["type"] == "state" and state["state"] == {}


async def test_the_room_list_needs_an_admin_token(tmp_path: Path) -> None:
    async with Hub(port=0, secret=SECRET, db=tmp_path / "rooms") as hub:
        writer = mint_token(SECRET, "*", "write", 60)
        async with connect(hub.url("team/a"), agent="a", token=writer) as a:
            await a.acommit({"x": 1}, a.token)
            assert (await get(hub, "/inspect"))[0] == 401
            room_token = mint_token(SECRET, "team/a", "read", 60)
            assert (await get(hub, "/inspect", Authorization=f"Bearer {room_token}"))[0] == 403
            expired = mint_token(SECRET, "*", "read", 60, now=0)
            assert (await get(hub, "/inspect", Authorization=f"Bearer {expired}"))[0] == 401
            admin = mint_token(SECRET, "*", "read", 60)
            status, _, body = await get(hub, "/inspect", Authorization=f"Bearer {admin}")
            assert status == 200
            (room,) = json.loads(body)["rooms"]
            assert room["name"] == "team/a" and room["connections"] == 1 and room["size"] > 0
            assert room["last_activity"] is not None
            assert room["held_bytes"] == 0  # nothing waits for what it builds on
            status, _, page = await get(
                hub, "/inspect", Authorization=f"Bearer {admin}", Accept="text/html"
            )
            assert status == 200 and b'href="/inspect/team/a"' in page
            assert b"<th>held bytes</th>" in page and b"<td>0</td>" in page


async def test_rooms_named_like_routes_still_work_over_websockets() -> None:
    async with Hub(port=0) as hub:
        for name in ("metrics", "healthz", "inspect/x"):
            async with connect(hub.url(name), agent="a") as a:
                await a.acommit({"x": name}, a.token)
            assert hub.rooms[name].state.get("x") == name


async def test_tokens_never_reach_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # websockets logs headers (Cookie, Set-Cookie) there
    async with Hub(port=0, secret=SECRET) as hub:
        good = mint_token(SECRET, "r", "read", 60)
        wrong = mint_token(SECRET, "other", "read", 60)
        for token in (good, wrong):
            await get(hub, f"/inspect/r?token={token}")
            with contextlib.suppress(InvalidStatus):
                async with ws_connect(f"ws://127.0.0.1:{hub.port}/inspect/r/feed?token={token}"):
                    pass
        assert caplog.records  # the hub did log (refusals, connections)
        hubs = [r for r in caplog.records if not r.name.startswith("websockets.client")]
        text = "\n".join(record.getMessage() for record in hubs)
        assert "Set-Cookie: crdt_inspect=***" in text  # the cookie's header, masked
        assert good not in text and wrong not in text
        assert good.split(".")[1] not in text and wrong.split(".")[1] not in text


async def test_a_room_reload_reports_progress(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="crdt_state.hub")
    db = tmp_path / "rooms"
    async with Hub(port=0, db=db) as hub, connect(hub.url("big"), agent="a") as a:
        await a.acommit({f"k{i}": i for i in range(50)}, a.token)
    caplog.clear()
    async with Hub(port=0, db=db) as hub:
        await hub.room("big")
    events = {getattr(r, "event", None): r for r in caplog.records}
    loading, loaded = events["room_loading"], events["room_loaded"]
    assert loading.room == "big" and loading.bytes > 0  # type: ignore[attr-defined]
    assert loaded.seq >= 1 and loaded.seconds >= 0  # type: ignore[attr-defined]
    assert caplog.records.index(loading) < caplog.records.index(loaded)


async def test_a_feed_follows_its_room_through_an_unload(tmp_path: Path) -> None:
    async with Hub(port=0, db=tmp_path / "rooms", limits=Limits(room_idle_seconds=0.3)) as hub:
        async with connect(hub.url("quiet"), agent="a") as a:
            await a.acommit({"x": 1}, a.token)
        feed_url = f"ws://127.0.0.1:{hub.port}/inspect/quiet/feed"
        async with ws_connect(feed_url) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                async with asyncio.timeout(10):
                    while True:
                        await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == ROOM_UNLOADED
        async with ws_connect(feed_url) as ws:  # the page comes back: the room loads again
            async with asyncio.timeout(5):
                while (event := json.loads(await ws.recv()))["type"] != "state":
                    pass
        assert event["state"] == {"x": 1}


async def test_inspector_feeds_are_limited(hub: Hub) -> None:
    hub.inspector.max_feeds = 1
    await hub.room("r")
    url = f"ws://127.0.0.1:{hub.port}/inspect/r/feed"
    async with ws_connect(url) as first:
        assert json.loads(await first.recv())["type"] == "hello"
        with pytest.raises(InvalidStatus) as refused:
            async with ws_connect(url):
                pass
        assert refused.value.response.status_code == 503
    await eventually(lambda: hub.inspector.feeds == 0)
    async with ws_connect(url) as again:
        assert json.loads(await again.recv())["type"] == "hello"


async def test_refusal_labels_are_stable_codes_whatever_the_room_name() -> None:
    """Room names a client picks never become metric labels (the label set stays small)."""
    async with Hub(port=0, secret=SECRET) as hub:
        token = mint_token(SECRET, room="only-this-one", role="write", ttl=60)
        for i in range(20):
            room = f"room-{i}" if i % 2 else f"bad-{i}%27%22"
            with pytest.raises(InvalidStatus):
                async with ws_connect(hub.url(room) + f"?token={token}"):
                    pass
        text = (await get(hub, "/metrics"))[2].decode()
    refused = [
        line
        for line in text.splitlines()
        if line.startswith("crdt_state_refused_connections_total{")
    ]
    assert sorted(refused) == [
        'crdt_state_refused_connections_total{reason="bad_room_name"} 10.0',
        'crdt_state_refused_connections_total{reason="wrong_room"} 10.0',
    ]


async def test_merges_refused_by_a_limit_are_counted_as_errors() -> None:
    """Refused before judging (too large, too many items), they left no trace in the
    metrics or the inspector feed."""
    async with Hub(port=0, limits=Limits(max_merge_bytes=300)) as hub:
        async with connect(hub.url("m"), agent="a") as a:
            await a.acommit({"n": 1}, a.token)
            with pytest.raises(RemoteError) as info:
                await a.acommit({"big": "x" * 1000}, a.token)
            assert info.value.code == "merge_too_large"
        text = (await get(hub, "/metrics"))[2].decode()
        assert metric(text, "crdt_state_merges_total", status="ok") == 1
        assert metric(text, "crdt_state_merges_total", status="error") == 1
        assert metric(text, "crdt_state_merge_errors_total", code="merge_too_large") == 1


async def test_merge_errors_tell_unresolved_conflicts_from_other_errors() -> None:
    """An alert on merge errors can leave ordinary conflicts out: each error is counted
    under its stable code."""
    async with Hub(port=0, limits=Limits(max_merge_changes=2)) as hub:
        async with connect(hub.url("m"), agent="a") as a:
            await a.acommit({"n": 1}, a.token)
            base = a.token
            await a.acommit({"n": 2}, base)
            with pytest.raises(ConflictError):  # no policy for "n": nothing written
                await a.acommit({"n": 3}, base)
            with pytest.raises(RemoteError) as info:
                await a.acommit({"x": 1, "y": 2, "z": 3}, a.token)
            assert info.value.code == "merge_too_many_changes"
        text = (await get(hub, "/metrics"))[2].decode()
    assert metric(text, "crdt_state_merges_total", status="error") == 2
    assert metric(text, "crdt_state_merge_errors_total", code="conflict") == 1
    assert metric(text, "crdt_state_merge_errors_total", code="merge_too_many_changes") == 1
    errors = [x for x in text.splitlines() if x.startswith("crdt_state_merge_errors_total")]
    assert len(errors) == 2


def test_merge_error_codes_stay_few_whatever_the_codes() -> None:
    """Codes of an odd shape, and kinds past the first ``MAX_ERROR_CODES - 1``, count as
    ``other``: the label's values stay bounded."""
    metrics = HubMetrics()
    for i in range(MAX_ERROR_CODES + 10):
        metrics.merge_judged("error", [], None, f"code_{i}")
    for odd in ("Bad Code", "x" * 49, "", None, 'a"b', "\u00e9t\u00e9"):
        metrics.merge_judged("error", [], None, odd)
    metrics.merge_judged("error", [], None, "code_3")  # a code already counted stays itself
    metrics.merge_judged("ok", [], None, "ignored")
    text = metrics.render().decode()
    lines = [x for x in text.splitlines() if x.startswith("crdt_state_merge_errors_total")]
    assert len(lines) == MAX_ERROR_CODES
    assert metric(text, "crdt_state_merge_errors_total", code="code_3") == 2
    assert metric(text, "crdt_state_merge_errors_total", code="code_62") == 1
    assert metric(text, "crdt_state_merge_errors_total", code="code_63") == 0
    assert metric(text, "crdt_state_merge_errors_total", code="other") == 11 + 6
    assert metric(text, "crdt_state_merges_total", status="error") == MAX_ERROR_CODES + 17


async def test_merges_of_a_read_only_token_are_counted_as_errors() -> None:
    """Found as a user: the merge desk's path answered ``read_only`` without counting it."""
    async with Hub(port=0, secret=SECRET) as hub:
        token = mint_token(SECRET, "r", "read", 60)
        async with connect(hub.url("r"), agent="ro", token=token) as ro:
            with pytest.raises(WriteDenied):
                async with ro.fork() as branch:
                    branch.set("x", 1)
        text = (await get(hub, "/metrics"))[2].decode()
    assert metric(text, "crdt_state_merges_total", status="error") == 1
    assert metric(text, "crdt_state_merge_errors_total", code="read_only") == 1


async def test_a_feed_lives_no_longer_than_its_token() -> None:
    """Found as a user: a feed opened with a 4 s token streamed for as long as it stayed
    open, and answered queries after the token expired."""
    async with Hub(port=0, secret=SECRET) as hub:
        await hub.room("r")
        token = mint_token(SECRET, "r", "read", 2)
        expires = int(time.time() + 2)
        url = f"ws://127.0.0.1:{hub.port}/inspect/r/feed?token={token}"
        async with ws_connect(url) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                async with asyncio.timeout(6):
                    while True:
                        await ws.recv()
        closed_at = time.time()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert closed.value.rcvd.reason == "access token expired"
        assert expires <= closed_at < expires + 1.0
