"""The ``crdt-state mcp`` server: a shared state as MCP tools and resources.

Built on the official ``mcp`` SDK (``pip install 'crdt-state[mcp]'``), its
low-level ``Server``: the tools of :mod:`sync.mcp.tools` with exact input
schemas, errors as MCP tool errors carrying the library's stable codes
(``{"error": {"code", "message", "path", "details"}}``), and the resources
``state://current`` and ``state://current/{path}``.

Change notifications: a merge that touches a subscribed resource sends
``notifications/resources/updated`` for it, to clients that subscribed with
``resources/subscribe`` (2025 protocol versions) and to ``subscriptions/listen``
streams (2026-07-28). ``state://current`` is touched by every merge;
``state://current/a.b`` by merges writing ``a``, ``a.b`` or below.

Two ways to hold the state: embedded (:func:`open_embedded`, one SQLite file,
this process its only writer) or through a hub (a remote replica, see
:func:`sync.connect`; merges by every agent of the room notify). Transports:
stdio (:func:`serve_stdio`) and streamable HTTP (:func:`serve_http`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from crdt_state import CrdtStateError, PathNotFound, StateUpdate, parse_path
from crdt_state.paths import related
from sync.mcp.tools import TOOL_DESCRIPTIONS, TOOL_MODELS, StateTools

__all__ = [
    "ROOT_URI",
    "Notifier",
    "build_server",
    "serve_http",
    "serve_stdio",
    "tools_with_notifier",
    "touched_uris",
]

log = logging.getLogger("crdt_state.mcp")

ROOT_URI = "state://current"
_PATH_TEMPLATE = ROOT_URI + "/{path}"


def _uri_path(uri: str) -> tuple[str, ...] | None:
    """The state path a resource URI names (``None`` for the whole state)."""
    if uri == ROOT_URI:
        return None
    prefix = ROOT_URI + "/"
    if not uri.startswith(prefix) or len(uri) == len(prefix):
        raise PathNotFound("not a state resource", details={"uri": uri})
    return parse_path(unquote(uri[len(prefix) :]))


RESOURCE_NOT_FOUND = -32002
"""The JSON-RPC error code MCP gives a resource that does not exist."""


@contextmanager
def _resource_errors(uri: str) -> Iterator[None]:
    """Turn a bad resource URI into an MCP error the client can read (not an internal error).

    The error's ``data`` holds the library error's ``code``, ``path``, ``details`` and the
    ``uri``.
    """
    try:
        yield
    except CrdtStateError as exc:
        data = {**exc.to_dict(), "uri": uri}
        raise MCPError(RESOURCE_NOT_FOUND, f"[{exc.code}] {exc.message}", data) from exc


def touched_uris(uris: Sequence[str], written: Sequence[Sequence[str]]) -> list[str]:
    """The subscribed ``uris`` a merge writing ``written`` paths changed (pure).

    The root resource changes with any write; a path resource when a written
    path is it, above it or below it.
    """
    out: list[str] = []
    for uri in uris:
        try:
            path = _uri_path(uri)
        except CrdtStateError:
            continue
        if path is None:
            if written:
                out.append(uri)
            continue
        if any(related(tuple(w), path) for w in written):
            out.append(uri)
    return out


class Notifier:
    """Who subscribed to which resource, and telling them when a merge touches it."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        self._legacy: dict[str, set[ServerSession]] = {}
        self._modern: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def subscribe(self, session: ServerSession, uri: str) -> None:
        """Record that ``session`` watches ``uri`` (legacy ``resources/subscribe``).

        Subscribing twice is the same as once; the session is told about every
        later merge that touches the resource until it unsubscribes.
        """
        self._legacy.setdefault(uri, set()).add(session)

    def unsubscribe(self, session: ServerSession, uri: str) -> None:
        """Stop telling ``session`` about ``uri``; a no-op if it never subscribed."""
        self._legacy.get(uri, set()).discard(session)

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve a ``subscriptions/listen`` stream, knowing which resources it watches."""
        uris = list(params.notifications.resource_subscriptions or ())
        for uri in uris:
            self._modern[uri] = self._modern.get(uri, 0) + 1
        try:
            return await self._listen(ctx, params)
        finally:
            for uri in uris:
                self._modern[uri] -= 1
                if not self._modern[uri]:
                    del self._modern[uri]

    async def changed(self, written: Sequence[Sequence[str]]) -> None:
        """Notify every subscriber of a resource the written paths touched."""
        for uri in touched_uris(sorted(self._modern), written):
            await self.bus.publish(ResourceUpdated(uri=uri))
        for uri in touched_uris(sorted(u for u, s in self._legacy.items() if s), written):
            for session in list(self._legacy.get(uri, ())):
                try:
                    await session.send_resource_updated(uri)
                except Exception:  # a closed session: forget it
                    self._legacy[uri].discard(session)

    def on_update(self, update: StateUpdate) -> None:
        """A state listener (called in the event loop's thread) scheduling :meth:`changed`."""
        if update.paths:
            task = asyncio.get_running_loop().create_task(self.changed(update.paths))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


def _text(data: Any) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=json.dumps(data, ensure_ascii=False))]


def _error(error: dict[str, Any]) -> types.CallToolResult:
    payload = {"error": error}
    return types.CallToolResult(content=_text(payload), structured_content=payload, is_error=True)


def build_server(tools: StateTools, notifier: Notifier, *, name: str = "crdt-state") -> Server[Any]:
    """The MCP server of ``tools``: tools, resources, subscriptions."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool,
                    description=TOOL_DESCRIPTIONS[tool],
                    input_schema=model.model_json_schema(),
                )
                for tool, model in TOOL_MODELS.items()
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name not in TOOL_MODELS:
            return _error({"code": "unknown_tool", "message": f"no tool {params.name!r}"})
        try:
            args, method = tools.call(params.name, params.arguments or {})
            result = method(args)
            if asyncio.iscoroutine(result):
                result = await result
        except ValidationError as exc:
            return _error(
                {
                    "code": "invalid_arguments",
                    "message": f"arguments do not match the {params.name} input schema",
                    "details": {"errors": json.loads(exc.json(include_url=False))},
                }
            )
        except CrdtStateError as exc:
            return _error(exc.to_dict())
        except Exception:  # a bug, not the caller's mistake: logged, reported without details
            log.exception("tool %s failed", params.name)
            return _error({"code": "internal_error", "message": f"{params.name} failed"})
        return types.CallToolResult(content=_text(result), structured_content=result)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    name="state",
                    uri=ROOT_URI,
                    description="the whole shared state (JSON)",
                    mime_type="application/json",
                )
            ]
        )

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    name="state-path",
                    uri_template=_PATH_TEMPLATE,
                    description="the value at a dotted path of the shared state (JSON)",
                    mime_type="application/json",
                )
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        with _resource_errors(params.uri):
            path = _uri_path(params.uri)
            value = tools.value_at(".".join(path) if path is not None else None)
        text = json.dumps(value, ensure_ascii=False)
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(uri=params.uri, mime_type="application/json", text=text)
            ]
        )

    async def subscribe(
        ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        with _resource_errors(params.uri):
            _uri_path(params.uri)  # refuse what is not a state resource
        notifier.subscribe(ctx.session, params.uri)
        return types.EmptyResult()

    async def unsubscribe(
        ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        notifier.unsubscribe(ctx.session, params.uri)
        return types.EmptyResult()

    return Server(
        name,
        version="0.1.0",
        instructions=(
            "A shared state for many agents. Read with read_state, then commit_changes with the "
            "token you read: a conflict means another agent changed the same path; read again."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_subscribe_resource=subscribe,
        on_unsubscribe_resource=unsubscribe,
        on_subscriptions_listen=notifier.listen,
    )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin/stdout until it disconnects."""
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(
    server: Server[Any],
    host: str,
    port: int,
    *,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` (port 0: a free one).

    ``ready(url)`` is called once the socket listens.
    """
    import uvicorn  # only the HTTP transport needs it

    app = server.streamable_http_app(host=host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    runner = uvicorn.Server(config)
    shown = f"[{host}]" if ":" in host else host
    if ready is not None:
        ready(f"http://{shown}:{bound}/mcp")
    await runner.serve(sockets=[sock])


def tools_with_notifier(state: Any, *, remote: bool) -> tuple[StateTools, Notifier]:
    """:class:`StateTools` for ``state`` wired to a fresh :class:`Notifier`."""
    notifier = Notifier()
    if remote:
        state.replica.subscribe(notifier.on_update)
        return StateTools(state), notifier
    return StateTools(state, on_change=notifier.changed), notifier
