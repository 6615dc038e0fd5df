"""The ``crdt-state mcp`` subcommand: serve a shared state to MCP clients.

``crdt-state mcp --db triage.db`` (embedded: this process owns the file) or
``crdt-state mcp --hub ws://127.0.0.1:8765 --room triage/42`` (a replica of a
hub room; the access token comes from ``--token-file`` or the
``CRDT_STATE_TOKEN`` environment variable), with ``--transport stdio``
(default; one client, the process's stdin/stdout) or ``--transport http
--host 127.0.0.1 --port 8000`` (streamable HTTP at ``/mcp``, many clients;
the URL is printed once listening). ``--schema module:Model`` types the
state with a pydantic model (writes validated, ``state_schema`` answers).
Needs ``pip install 'crdt-state[mcp]'``; the MCP SDK is imported only when
the subcommand runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["TOKEN_ENV", "add_parser", "run"]

TOKEN_ENV = "CRDT_STATE_TOKEN"


def add_parser(sub: Any) -> None:
    """Add the ``mcp`` subcommand to the ``crdt-state`` argument parser."""
    mcp = sub.add_parser("mcp", help="serve a shared state to MCP clients (tools + resources)")
    where = mcp.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="SQLite file of the state (created when absent)")
    where.add_argument("--hub", help="hub address, e.g. ws://127.0.0.1:8765")
    mcp.add_argument("--room", help="room name on the hub (with --hub)")
    mcp.add_argument("--token-file", help=f"file holding the hub access token (or ${TOKEN_ENV})")
    mcp.add_argument("--agent", default="mcp", help="this server's agent name on the hub")
    mcp.add_argument("--schema", help="pydantic model of the state, as module:Class")
    mcp.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio: one client on stdin/stdout; http: streamable HTTP at /mcp",
    )
    mcp.add_argument("--host", default="127.0.0.1", help="HTTP address")
    mcp.add_argument("--port", type=int, default=8000, help="HTTP port (0: a free one)")
    mcp.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
        default="WARNING",
        help="logging threshold",
    )


def _schema(spec: str | None) -> Any:
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SystemExit("crdt-state mcp: --schema takes module:Class")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a model beside the user, as `python -m` finds it
    try:
        model = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"crdt-state mcp: --schema {spec}: {exc}") from None
    from pydantic import BaseModel

    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise SystemExit(f"crdt-state mcp: --schema {spec} is not a pydantic model class")
    return model


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        try:
            return Path(args.token_file).read_text(encoding="utf-8").strip() or None
        except OSError as exc:
            raise SystemExit(
                f"crdt-state mcp: --token-file {args.token_file}: {exc.strerror or exc}"
            ) from None
    return os.environ.get(TOKEN_ENV) or None


async def _serve(args: argparse.Namespace) -> None:
    from crdt_state import SharedState
    from sync.client.remote import connect
    from sync.mcp.server import build_server, serve_http, serve_stdio, tools_with_notifier

    def ready(url: str) -> None:
        print(f"crdt-state mcp on {url}", flush=True)

    async def run(state: Any, remote: bool) -> None:
        tools, notifier = tools_with_notifier(state, remote=remote)
        server = build_server(tools, notifier)
        if args.transport == "stdio":
            await serve_stdio(server)
        else:
            await serve_http(server, args.host, args.port, ready=ready)

    if args.db:
        with SharedState.open(args.db, schema=_schema(args.schema)) as state:
            await run(state, remote=False)
        return
    url = args.hub.rstrip("/") + "/" + args.room.strip("/")
    async with connect(
        url, agent=args.agent, token=_token(args), schema=_schema(args.schema)
    ) as remote:
        await run(remote, remote=True)


def run(args: argparse.Namespace) -> int:
    """Run the ``mcp`` subcommand until the client (stdio) or a signal (HTTP) ends it."""
    if args.hub and not args.room:
        print("crdt-state mcp: --hub needs --room", file=sys.stderr)
        return 2
    hub = urlsplit(args.hub or "")
    if hub.scheme in ("ws", "wss") and hub.path.strip("/"):
        print(
            f"crdt-state mcp: --hub {args.hub!r} names a room already: give the hub's address "
            "(ws://host:port) and the room with --room",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    from crdt_state import CrdtStateError
    from sync.wire.errors import SyncError

    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(args))
    except (CrdtStateError, SyncError) as exc:  # the state, the hub, the token: say which
        text, code = str(exc), getattr(exc, "code", "error")
        print(
            f"crdt-state mcp: {text}" + ("" if f"[{code}" in text else f" ({code})"),
            file=sys.stderr,
        )
        return 2 if isinstance(exc, ValueError) else 1
    except OSError as exc:  # the HTTP port in use, an address that does not resolve
        where = f" on {args.host}:{args.port}" if args.transport == "http" else ""
        print(f"crdt-state mcp: cannot serve{where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0
