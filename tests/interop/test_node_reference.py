"""Interop against real Yjs: stock y-websocket 1.5.4 clients and its reference server.

These tests pin down that (a) the Node harness works, (b) our codec + pycrdt speak the
same protocol as stock Yjs peers, and (c) the reference server ignores our merge extension.
They need ``npm ci --prefix tests/interop``; without it they skip (or fail when
``CRDT_STATE_REQUIRE_INTEROP=1``).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import pycrdt
import pytest
from pycrdt_client import PycrdtClient
from yjs_node import NodeYjsClient, ReferenceServer, interop_required, node_missing_reason

from sync.wire.changes import ChangeKind, WireChange
from sync.wire.protocol import Awareness, MergeReply, encode_merge_request

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def server() -> Iterator[ReferenceServer]:
    reason = node_missing_reason()
    if reason is not None:
        if interop_required():
            pytest.fail(reason)
        pytest.skip(reason)
    with ReferenceServer() as running:
        yield running


@pytest.fixture
def room(request: pytest.FixtureRequest) -> str:
    """A room name of its own for each test (the server is shared by the module)."""
    return f"room-{request.node.name}"


def test_two_node_clients_exchange_values(server: ReferenceServer, room: str) -> None:
    with NodeYjsClient(server.url, room) as alice, NodeYjsClient(server.url, room) as bob:
        alice.set("greeting", "hello")
        assert bob.wait("greeting", "hello")
        bob.set("answer", {"n": 42, "tags": ["a", "b"]})
        assert alice.wait("answer", {"n": 42, "tags": ["a", "b"]})
        assert (
            alice.get()
            == bob.get()
            == {
                "greeting": "hello",
                "answer": {"n": 42, "tags": ["a", "b"]},
            }
        )
        assert not alice.wait("never-set", 1, timeout=0.2)


def test_token_travels_as_query_parameter(server: ReferenceServer, room: str) -> None:
    token = "s3cret tok/é+&="
    with NodeYjsClient(server.url, room, token=token) as client:
        # encodeURIComponent keeps A-Z a-z 0-9 - _ . ! ~ * ' ( ) and escapes the rest.
        escaped = quote(token, safe="-_.!~*'()")
        expected = f"{server.url}/{room}?token={escaped}"
        assert client.provider_url == expected
        client.set("k", "v")
        assert client.get() == {"k": "v"}


def test_python_client_joins_a_room_of_node_clients(server: ReferenceServer, room: str) -> None:
    with NodeYjsClient(server.url, room) as alice:
        alice.set("from_node", {"x": [1, 2]})
        with PycrdtClient(server.url, room) as py:
            assert py.wait_synced()
            assert py.wait("from_node", {"x": [1, 2]})  # content from sync step 2
            py.set("from_python", "hi")
            py.set("count", 3)
            assert alice.wait("from_python", "hi")
            assert alice.wait("count", 3)
            alice.set("reply", "hello python")
            assert py.wait("reply", "hello python")  # a live update after the sync
            with NodeYjsClient(server.url, room) as bob:  # joins last, gets everything
                assert bob.get() == {
                    "from_node": {"x": [1, 2]},
                    "from_python": "hi",
                    "count": 3,
                    "reply": "hello python",
                }
            assert py.get() == alice.get()


def test_python_client_content_reaches_late_node_client(server: ReferenceServer, room: str) -> None:
    with PycrdtClient(server.url, room) as py:
        assert py.wait_synced()
        py.set("seed", "from python first")
        with NodeYjsClient(server.url, room) as alice:
            assert alice.wait("seed", "from python first")


def test_awareness_from_node_peers_decodes(server: ReferenceServer, room: str) -> None:
    with PycrdtClient(server.url, room) as py, NodeYjsClient(server.url, room) as alice:
        assert py.wait_synced()
        alice.set_awareness({"user": "alice"})
        awareness = pycrdt.Awareness(py.doc)

        def alice_seen() -> bool:
            for message in py.received:
                if isinstance(message, Awareness):
                    awareness.apply_awareness_update(message.payload, "remote")
            py.received.clear()
            return awareness.states.get(alice.client_id) == {"user": "alice"}

        assert py.pump_until(alice_seen)


def test_reference_server_ignores_merge_extension(server: ReferenceServer, room: str) -> None:
    with PycrdtClient(server.url, room) as py, NodeYjsClient(server.url, room) as alice:
        assert py.wait_synced()
        change = WireChange(ChangeKind.SET, ("k",), "via merge")
        py.send_raw(encode_merge_request(1, "agent-1", py.doc.get_state(), [change]))
        py.set("after", "still connected")  # the connection survived the unknown type
        assert alice.wait("after", "still connected")
        assert alice.get() == {"after": "still connected"}  # the merge was not applied
        assert py.wait("after", "still connected")
        assert not any(isinstance(m, MergeReply) for m in py.received)
