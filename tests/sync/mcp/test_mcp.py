"""The MCP server driven by the ``mcp`` SDK's own client, over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPDeprecationWarning, StdioServerParameters
from mcp.shared.exceptions import MCPError

from sync import mint_token
from sync.mcp.server import RESOURCE_NOT_FOUND, touched_uris

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}


def stdio(*args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """Parameters spawning ``python -m sync.cli mcp ARGS`` as a stdio server."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "sync.cli", "mcp", *args], env=env or ENV
    )


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A successful tool call's structured result."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def error(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """A failed tool call's error (code, message, path, details)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert isinstance(result.structured_content, dict)
    err: dict[str, Any] = result.structured_content["error"]
    return err


def test_touched_uris() -> None:
    uris = ["state://current", "state://current/a.b", "state://current/c"]
    assert touched_uris(uris, [("a",)]) == uris[:2]
    assert touched_uris(uris, [("a", "b", "c")]) == uris[:2]
    assert touched_uris(uris, [("a", "x")]) == uris[:1]
    assert touched_uris(uris, []) == []


# -- stdio --------------------------------------------------------------------------------
async def test_stdio_embedded_tools_errors_history_and_legacy_notifications(
    tmp_path: Path,
) -> None:
    notes: list[types.ResourceUpdatedNotification] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            notes.append(message)
            arrived.set()

    db = str(tmp_path / "state.db")
    async with Client(stdio("--db", db), mode="legacy", message_handler=on_message) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {
            "read_state",
            "commit_changes",
            "history",
            "blame",
            "conflicts",
            "state_schema",
        }
        schema = listed["commit_changes"].input_schema
        assert set(schema["required"]) == {"changes", "base", "agent"}
        assert schema["additionalProperties"] is False

        empty = await call(client, "read_state")
        assert empty["values"] == {} and empty["token"].isprintable()
        with pytest.warns(MCPDeprecationWarning):  # the 2025 way, still served
            await client.session.subscribe_resource("state://current/ticket")
        done = await call(
            client,
            "commit_changes",
            changes={"ticket.status": "open", "ticket.tags": ["a"]},
            base=empty["token"],
            agent="alice",
        )
        assert done["status"] == "merged" and sorted(done["applied"]) == [
            "ticket.status",
            "ticket.tags",
        ]
        with anyio.fail_after(5):
            await arrived.wait()
        assert [n.params.uri for n in notes] == ["state://current/ticket"]
        before = await call(client, "read_state")

        bad = [
            ({"changes": {"ticket..status": "x"}, "base": before["token"]}, "invalid_path"),
            ({"changes": {"ticket.n": 2**64}, "base": before["token"]}, "unsupported_value"),
            ({"changes": {"ticket.status": "x"}, "base": "garbage!"}, "invalid_update"),
            ({"changes": {"ticket.status": "x"}, "base": "AA=="}, "invalid_update"),
            ({"changes": {"ticket.status": "x"}, "base": "AQEB"}, "unknown_base"),
            ({"changes": {"ticket.status.deep": "x"}, "base": before["token"]}, "wrong_type"),
        ]
        for arguments, code in bad:
            err = await error(client, "commit_changes", agent="mallory", **arguments)
            assert err["code"] == code, (arguments, err)
        err = await error(client, "commit_changes", changes={}, base=before["token"])
        assert err["code"] == "invalid_arguments"  # no agent
        err = await error(client, "read_state", paths=["a..b"])
        assert err["code"] == "invalid_path"
        after = await call(client, "read_state")
        assert after == before  # nothing changed

        history = await call(client, "history")
        assert [(c["agent"], sorted(c["paths"])) for c in history["changes"]] == [
            ("alice", ["ticket.status", "ticket.tags"])
        ]
        blame = await call(client, "blame", path="ticket.status")
        assert blame["blame"]["agent"] == "alice" and blame["blame"]["token"] == after["token"]
        assert (await call(client, "state_schema")) == {"schema": None}
        stale = await call(
            client,
            "commit_changes",
            changes={"ticket.status": "x"},
            base=empty["token"],
            agent="bob",
        )
        assert stale["status"] == "conflict" and stale["applied"] == []
        recorded = await call(client, "conflicts", path="ticket")
        assert [(c["path"], c["incoming_agent"], c["applied"]) for c in recorded["conflicts"]] == [
            ("ticket.status", "bob", False)
        ]
        resource = await client.read_resource("state://current/ticket.status")
        assert resource.contents[0].text == '"open"'  # type: ignore[union-attr]
        for uri, code in [
            ("state://other", "path_not_found"),
            ("state://current/", "path_not_found"),
            ("state://current/a..b", "invalid_path"),
        ]:
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            assert refused.value.code == RESOURCE_NOT_FOUND, (uri, refused.value)
            assert refused.value.data["code"] == code and refused.value.data["uri"] == uri


async def test_stdio_two_agents_through_a_hub_get_exactly_one_conflict(
    secured_hub_url: str, tmp_path: Path
) -> None:
    token = mint_token("test-secret", "triage/*", "write", 600)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n", encoding="utf-8")
    hub = ["--hub", secured_hub_url, "--room", "triage/1"]
    one = stdio(*hub, "--agent", "mcp-1", "--token-file", str(token_file))
    two = stdio(*hub, "--agent", "mcp-2", env={**ENV, "CRDT_STATE_TOKEN": token})
    async with Client(one) as a, Client(two) as b:
        seed = await call(a, "read_state")
        await call(
            a, "commit_changes", changes={"intent": "unknown"}, base=seed["token"], agent="s"
        )
        with anyio.fail_after(5):
            while (await call(b, "read_state"))["values"] != {"intent": "unknown"}:
                await anyio.sleep(0.01)
        read_a, read_b = await call(a, "read_state"), await call(b, "read_state")
        assert read_a["token"] == read_b["token"]
        async with a.listen(resource_subscriptions=["state://current/intent"]) as events:
            results = await asyncio.gather(
                call(
                    a,
                    "commit_changes",
                    changes={"intent": "refund"},
                    base=read_a["token"],
                    agent="alice",
                ),
                call(
                    b,
                    "commit_changes",
                    changes={"intent": "replace"},
                    base=read_b["token"],
                    agent="bob",
                ),
            )
            with anyio.fail_after(5):
                event = await anext(aiter(events))
            assert getattr(event, "uri", None) == "state://current/intent"
        statuses = sorted(r["status"] for r in results)
        assert statuses == ["conflict", "merged"]
        lost = next(r for r in results if r["status"] == "conflict")
        [conflict] = lost["conflicts"]
        won = next(r for r in results if r["status"] == "merged")
        winner = "alice" if won is results[0] else "bob"
        assert conflict["base"] == "unknown" and conflict["current_agent"] == winner
        assert {conflict["current"], conflict["incoming"]} == {"refund", "replace"}
        final = await call(a, "read_state", paths=["intent", "nothing"])
        assert final["values"] == {"intent": conflict["current"]}
        assert final["missing"] == ["nothing"]
        err = await error(a, "history")
        assert err["code"] == "not_available"


# -- streamable HTTP -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One HTTP server process (embedded, typed state) for the HTTP tests."""
    db = tmp_path_factory.mktemp("mcp") / "http.db"
    args = ["--db", str(db), "--schema", "triage_model:Ticket", "--transport", "http"]
    process = subprocess.Popen(
        [sys.executable, "-m", "sync.cli", "mcp", *args, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("crdt-state mcp on http://127.0.0.1:"), process.stderr.read()  # type: ignore[union-attr]
        yield line.split(" on ", 1)[1].strip()
    finally:
        process.terminate()
        process.wait(10)


async def test_http_two_clients_same_token_one_path(http_url: str) -> None:
    async with Client(http_url) as a, Client(http_url) as b:
        read = await call(a, "read_state")
        assert read["values"] == {"priority": 0, "notes": {}}  # the schema's defaults
        results = await asyncio.gather(
            call(a, "commit_changes", changes={"priority": 2}, base=read["token"], agent="a"),
            call(b, "commit_changes", changes={"priority": 3}, base=read["token"], agent="b"),
        )
        assert sorted(r["status"] for r in results) == ["conflict", "merged"]
        [conflict] = next(r for r in results if r["status"] == "conflict")["conflicts"]
        assert conflict["path"] == "priority" and conflict["base"] == 0
        schema = (await call(a, "state_schema"))["schema"]
        assert schema["properties"]["priority"]["type"] == "integer"
        err = await error(
            a, "commit_changes", changes={"priority": "high"}, base=read["token"], agent="a"
        )
        assert err["code"] == "schema"


async def test_http_25_clients_on_disjoint_paths_lose_nothing(http_url: str) -> None:
    async def agent(i: int) -> dict[str, Any]:
        async with Client(http_url) as client:
            read = await call(client, "read_state")
            await anyio.sleep(0.001 * (i % 5))  # a simulated LLM call
            return await call(
                client,
                "commit_changes",
                changes={f"notes.agent{i}": f"done {i}"},
                base=read["token"],
                agent=f"agent{i}",
            )

    results = await asyncio.gather(*(agent(i) for i in range(25)))
    assert [r["status"] for r in results] == ["merged"] * 25
    async with Client(http_url) as reader:
        notes = (await call(reader, "read_state", paths=["notes"]))["values"]["notes"]
    assert {k: v for k, v in notes.items() if k.startswith("agent")} == {
        f"agent{i}": f"done {i}" for i in range(25)
    }


async def test_http_listeners_hear_about_merges(http_url: str) -> None:
    async with Client(http_url) as watcher, Client(http_url) as writer:
        async with watcher.listen(
            resource_subscriptions=["state://current", "state://current/notes.w"]
        ) as events:
            read = await call(writer, "read_state")
            await call(
                writer, "commit_changes", changes={"notes.w": "x"}, base=read["token"], agent="w"
            )
            got: set[str] = set()
            with anyio.fail_after(5):
                async for event in events:
                    got.add(getattr(event, "uri", ""))
                    if len(got) == 2:
                        break
        assert got == {"state://current", "state://current/notes.w"}
