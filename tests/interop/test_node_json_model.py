"""A stock Yjs client writing a Y.Text or Y.XmlFragment into the state is refused."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import hubs
import pytest
from pycrdt import Doc, Map, Text
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from yjs_node import NodeYjsClient

from sync.server.hub import Hub
from sync.wire import protocol as p

pytestmark = pytest.mark.interop


def _is_json(value: Any) -> bool:
    try:
        return bool(json.loads(json.dumps(value)) == value)
    except (TypeError, ValueError):
        return False


@pytest.mark.parametrize("kind", ["text", "xml"])
async def test_a_node_client_writing_a_non_json_type_is_refused(hub: Hub, kind: str) -> None:
    url = f"ws://{hub.host}:{hub.port}"
    node = await asyncio.to_thread(NodeYjsClient, url, "interop/types")
    try:
        await asyncio.to_thread(node.set, "plain", {"n": 1})
        await hubs.eventually(lambda: hub.rooms["interop/types"].state.get("plain") == {"n": 1})
        await asyncio.to_thread(node.command, op="settype", key="doc", type=kind, value="hello")

        async def closes() -> list[dict[str, Any]]:
            answer = await asyncio.to_thread(node.command, op="closes")
            seen: list[dict[str, Any]] = answer["closes"]
            return seen

        async with asyncio.timeout(10):
            while not (seen := await closes()):
                await asyncio.sleep(0.05)
        assert seen[0]["code"] == 1008
        assert "outside the JSON model" in seen[0]["reason"]
        snapshot = hub.rooms["interop/types"].state.snapshot()
        assert snapshot == {"plain": {"n": 1}} and _is_json(snapshot)
    finally:
        await asyncio.to_thread(node.close)


async def test_the_refused_writer_gets_a_permission_denied_message(hub: Hub) -> None:
    doc: Doc[Any] = Doc()
    doc.get("state", type=Map)["nested"] = Map({"t": Text("x")})
    async with ws_connect(hub.url("types/raw"), compression=None) as ws:
        await ws.send(p.encode_update(doc.get_update()))
        received: list[p.Message] = []
        with pytest.raises(ConnectionClosed) as info:
            async with asyncio.timeout(5):
                while True:
                    received.append(p.decode_message(await ws.recv()))  # type: ignore[arg-type]
        assert info.value.rcvd is not None and info.value.rcvd.code == 1008
        denied = [m for m in received if isinstance(m, p.PermissionDenied)]
        assert denied and "a Y.Text is outside the JSON model" in denied[0].reason
    assert hub.rooms["types/raw"].state.snapshot() == {}
