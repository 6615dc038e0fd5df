"""The ``crdt-state`` command: run a hub, mint access tokens.

``crdt-state hub --host 127.0.0.1 --port 8765 --db hub.db [--secret S]``
``crdt-state hub --port 8765 --redis redis://HOST:6379/0 --postgres DSN`` (a cluster of hubs)
``crdt-state token --room 'triage/*' --role write --ttl 3600 [--secret S]``

The secret may also come from the ``CRDT_STATE_SECRET`` environment variable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from sync.mcp import cli as mcp_cli
from sync.server.auth import mint_token
from sync.server.hub import Hub
from sync.server.limits import Limits

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crdt-state", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    hub = sub.add_parser("hub", help="run a websocket sync hub")
    hub.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    hub.add_argument("--port", type=int, default=8765)
    hub.add_argument("--db", default="hub.db", help="SQLite file for room state ('' = memory)")
    hub.add_argument("--secret", default=os.environ.get("CRDT_STATE_SECRET"))
    hub.add_argument("--max-message", type=int, default=Limits.max_message)
    hub.add_argument("--max-document", type=int, default=Limits.max_document)
    hub.add_argument("--max-connections", type=int, default=Limits.max_connections)
    hub.add_argument("--max-room-connections", type=int, default=Limits.max_room_connections)
    hub.add_argument("--redis", help="Redis URL: join a cluster of hubs (with --postgres)")
    hub.add_argument("--postgres", help="PostgreSQL DSN of the cluster's rooms (with --redis)")
    hub.add_argument("--log-level", default="INFO")
    token = sub.add_parser("token", help="mint an access token")
    token.add_argument("--room", required=True, help="room name or glob, e.g. 'triage/*'")
    token.add_argument("--role", choices=("read", "write"), default="write")
    token.add_argument("--ttl", type=float, default=3600.0, help="seconds of validity")
    token.add_argument("--secret", default=os.environ.get("CRDT_STATE_SECRET"))
    mcp_cli.add_parser(sub)
    return parser


async def _run_hub(args: argparse.Namespace) -> None:
    limits = Limits(
        max_message=args.max_message,
        max_document=args.max_document,
        max_connections=args.max_connections,
        max_room_connections=args.max_room_connections,
    )
    hub = Hub(
        args.host,
        args.port,
        db=args.db or None,
        secret=args.secret,
        limits=limits,
        redis=args.redis,
        postgres=args.postgres,
    )
    await hub.start()
    print(f"crdt-state hub on ws://{args.host}:{hub.port}/<room>", flush=True)
    if args.secret is None:
        print("no secret: every client may read and write every room", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await hub.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``crdt-state`` command."""
    args = _parser().parse_args(argv)
    if args.command == "mcp":
        return mcp_cli.run(args)
    if args.command == "token":
        if not args.secret:
            print("crdt-state token: --secret (or CRDT_STATE_SECRET) is required", file=sys.stderr)
            return 2
        print(mint_token(args.secret, args.room, args.role, args.ttl))
        return 0
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    if (args.redis is None) != (args.postgres is None):
        print("crdt-state hub: --redis and --postgres go together", file=sys.stderr)
        return 2
    asyncio.run(_run_hub(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
