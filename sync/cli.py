"""The ``crdt-state`` command: run a hub, mint access tokens.

``crdt-state hub --host 127.0.0.1 --port 8765 --db rooms --secret-file FILE``
``crdt-state hub --port 8765 --redis redis://HOST:6379/0 --postgres DSN`` (a cluster of hubs)
``crdt-state token --room 'triage/*' --role write --ttl 1h --secret-file FILE`` (``--ttl``:
seconds or ``30s``/``10m``/``2h``/``1d``; a room no hub accepts is refused, exit status 2)
``crdt-state inspect FILE show|history|blame|conflicts|at|export`` (see :mod:`sync.cli_inspect`)

The secret comes from ``--secret-file`` (the file's content, stripped), else ``--secret``
(visible to other users in ``ps``: avoid it), else the ``CRDT_STATE_SECRET`` environment
variable. An empty secret is refused. A hub without a secret needs ``--insecure`` and
listens on a loopback host only, unless ``--insecure-public`` is given too.

``--db`` names a directory (one SQLite file per room, created when missing, once the hub
listens);
without it the hub stores its rooms in ``./hub.db/`` and says so at start:
durable by default, since a hub that forgets its rooms on restart surprises
more than a directory does. ``--db ''`` keeps rooms in memory only. Every
option's help shows its default (``crdt-state hub --help``); bad values are
argparse errors (exit status 2), never tracebacks.

A hub stops on SIGINT or SIGTERM, closing its connections and (in a cluster) handing
its rooms over, within about 10 s: what is left then is abandoned, logged, and the
process exits with status 1; a second SIGINT or SIGTERM exits at once, status 1 (see
:mod:`sync.server.stop_signals`).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import gc
import logging
import os
import sys
from collections.abc import Sequence

import crdt_state
from sync import cli_inspect
from sync.cli_args import duration, number, room_glob_problem
from sync.mcp import cli as mcp_cli
from sync.server import event_loop, stop_signals
from sync.server._security import HubConfigError, check_secret, read_secret_file
from sync.server.auth import mint_token
from sync.server.hub import Hub
from sync.server.limits import Limits

__all__ = ["main"]


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose help shows every option's default."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.ArgumentDefaultsHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


_PORT = number(int, 0, 65535)
_TEN_YEARS = 10 * 365 * 86400
_POSITIVE = number(int, 1)
_SECONDS = number(float, 0)


def _log_level(text: str) -> str:
    if text.upper() not in _LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(_LOG_LEVELS)}, got {text!r}")
    return text.upper()


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="crdt-state", description="Run a crdt-state hub, mint access tokens.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {crdt_state.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    hub = sub.add_parser("hub", help="run a websocket sync hub")
    hub.add_argument("--host", default="127.0.0.1", help="address to listen on")
    hub.add_argument("--port", type=_PORT, default=8765, help="port to listen on (0: a free one)")
    hub.add_argument(
        "--db",
        default="hub.db",
        metavar="DIR",
        help="directory of the rooms' state files (one SQLite file per room, created when "
        "missing; '' keeps rooms in memory only)",
    )
    _secret_options(hub)
    hub.add_argument(
        "--insecure",
        action="store_true",
        help="run without a secret: every client may read and write every room "
        "(loopback hosts only)",
    )
    hub.add_argument(
        "--insecure-public",
        action="store_true",
        help="with --insecure, also allow a non-loopback --host (e.g. 0.0.0.0)",
    )
    hub.add_argument(
        "--max-message",
        type=_POSITIVE,
        default=Limits.max_message,
        help="largest message a client may send, in bytes",
    )
    hub.add_argument(
        "--max-document",
        type=_POSITIVE,
        default=Limits.max_document,
        help="largest encoded room document, in bytes",
    )
    hub.add_argument(
        "--max-connections",
        type=_POSITIVE,
        default=Limits.max_connections,
        help="most connections to the hub at once",
    )
    hub.add_argument(
        "--max-room-connections",
        type=_POSITIVE,
        default=Limits.max_room_connections,
        help="most connections to one room at once",
    )
    hub.add_argument("--redis", help="Redis URL: join a cluster of hubs (with --postgres)")
    hub.add_argument("--postgres", help="PostgreSQL DSN of the cluster's rooms (with --redis)")
    hub.add_argument(
        "--max-awareness",
        type=_POSITIVE,
        default=Limits.max_awareness,
        help="largest awareness message, in bytes",
    )
    hub.add_argument(
        "--max-outbox-bytes",
        type=_POSITIVE,
        default=Limits.max_outbox_bytes,
        help="bytes queued for a slow client before it is dropped with 1013",
    )
    for flag, help_text in (
        ("--max-merge-bytes", "largest merge request, in bytes (refused undecoded)"),
        ("--max-merge-changes", "most changes in one merge request"),
        ("--max-merge-items", "most list items and dict entries in one merge request"),
        ("--max-merge-depth", "deepest value nesting in one merge request"),
    ):
        attr = flag[2:].replace("-", "_")
        hub.add_argument(flag, type=_POSITIVE, default=getattr(Limits, attr), help=help_text)
    hub.add_argument(
        "--room-idle-seconds",
        type=_SECONDS,
        default=Limits.room_idle_seconds,
        help="unload a room (flush, close its file) after this long without a connection",
    )
    hub.add_argument(
        "--loop",
        choices=event_loop.LOOPS,
        default="asyncio",
        help="event loop: asyncio's, or uvloop (pip install 'crdt-state[uvloop]')",
    )
    hub.add_argument(
        "--log-level", type=_log_level, default="INFO", help=f"one of {', '.join(_LOG_LEVELS)}"
    )
    token = sub.add_parser("token", help="mint an access token")
    token.add_argument(
        "--room",
        required=True,
        help="room name (A-Z a-z 0-9 . _ ~ - /) or glob of them, e.g. 'triage/*'; "
        "'*' alone: every room, and the inspector's room list",
    )
    token.add_argument(
        "--role", choices=("read", "write"), default="write", help="what the token allows"
    )
    token.add_argument(
        "--ttl",
        type=duration(1, _TEN_YEARS),
        default=3600.0,
        help="validity: seconds, or 30s, 10m, 2h, 1d (at least 1 s, at most ten years)",
    )
    _secret_options(token)
    mcp_cli.add_parser(sub)
    cli_inspect.add_parser(sub)
    return parser


def _secret_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--secret-file",
        metavar="FILE",
        help="file holding the HMAC secret (its content, stripped of white space)",
    )
    group.add_argument(
        "--secret",
        help="the HMAC secret itself (visible in ps: prefer --secret-file or "
        "CRDT_STATE_SECRET); when neither is given: the CRDT_STATE_SECRET environment variable",
    )


def _secret(args: argparse.Namespace) -> str | None:
    """The secret the options name (``None``: none given); raises HubConfigError if empty."""
    if args.secret_file is not None:
        return read_secret_file(args.secret_file)
    secret: str | None = args.secret
    if secret is None:
        secret = os.environ.get("CRDT_STATE_SECRET")
    if secret is not None and not secret.strip():
        raise HubConfigError(
            "empty_secret", "the secret is empty (--secret or CRDT_STATE_SECRET): refused"
        )
    return secret


def _hub_secret(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """The hub's secret, or a parser error for a configuration the hub must not run with."""
    try:
        secret = _secret(args)
        if secret is None and not args.insecure:
            parser.error(
                "a secret is required: --secret-file FILE or CRDT_STATE_SECRET "
                "(or --insecure to let every client read and write every room)"
            )
        if secret is not None and args.insecure:
            parser.error("--insecure and a secret exclude each other")
        check_secret(secret, args.host, insecure=args.insecure_public)
    except HubConfigError as exc:
        parser.error(str(exc))
    return secret


async def _run_hub(args: argparse.Namespace) -> None:
    limits = Limits(
        max_message=args.max_message,
        max_document=args.max_document,
        max_connections=args.max_connections,
        max_room_connections=args.max_room_connections,
        max_awareness=args.max_awareness,
        max_outbox_bytes=args.max_outbox_bytes,
        max_merge_bytes=args.max_merge_bytes,
        max_merge_changes=args.max_merge_changes,
        max_merge_items=args.max_merge_items,
        max_merge_depth=args.max_merge_depth,
        room_idle_seconds=args.room_idle_seconds,
    )
    hub = Hub(
        args.host,
        args.port,
        db=args.db or None,
        secret=args.secret,
        limits=limits,
        insecure=args.insecure_public,
        redis=args.redis,
        postgres=args.postgres,
    )
    await hub.start()
    # The hub owns this process: keep what start-up built out of the collector's scans and
    # collect young objects less often (under merge load the collector took ~20 % of the
    # hub's CPU, ~3 % so; benchmarks/hub_throughput.py).
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)
    print(f"crdt-state hub on ws://{args.host}:{hub.port}/<room>", flush=True)
    if args.postgres is not None:
        from crdt_state.postgres import safe_dsn
        from sync.server.cluster.clients import safe_redis_url

        where = (  # every hub of one cluster must print the same two
            f"PostgreSQL {safe_dsn(args.postgres)}, with Redis {safe_redis_url(args.redis)}: "
            "shared with the cluster's other hubs (--db not used)"
        )
    elif args.db:
        where = f"directory {os.path.abspath(args.db)}"
    else:
        where = "memory only (--db '')"
    print(f"rooms stored in {where}", flush=True)
    print(f"event loop: {args.loop}", flush=True)
    if args.secret is None:
        print(
            "WARNING: --insecure: no secret, every client may read and write every room",
            file=sys.stderr,
            flush=True,
        )
    stop = stop_signals.stop_on_signals(asyncio.get_running_loop())
    await stop.wait()
    await hub.stop()
    if hub.abandoned:  # threads blocked on a server that does not answer: do not wait
        stop_signals.exit_now(1, f"stopped, abandoning {', '.join(hub.abandoned)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``crdt-state`` command."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "mcp":
        return mcp_cli.run(args)
    if args.command == "inspect":
        try:
            return cli_inspect.run(args)
        except BrokenPipeError:
            # the reader went away (``crdt-state inspect ... | head``): not an error; point
            # stdout at /dev/null so the interpreter's final flush does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    if args.command == "token":
        try:
            secret = _secret(args)
        except HubConfigError as exc:
            print(f"crdt-state token: {exc}", file=sys.stderr)
            return 2
        if secret is None:
            print(
                "crdt-state token: a secret is required "
                "(--secret-file FILE, --secret or CRDT_STATE_SECRET)",
                file=sys.stderr,
            )
            return 2
        problem = room_glob_problem(args.room)
        if problem is not None:
            print(f"crdt-state token: --room {args.room!r}: {problem}", file=sys.stderr)
            return 2
        print(mint_token(secret, args.room, args.role, args.ttl))
        return 0
    args.secret = _hub_secret(parser, args)
    # a crash of the interpreter (a segfault in an extension) leaves every thread's
    # Python stack on stderr, not a silent exit
    faulthandler.enable(all_threads=True)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    if (args.redis is None) != (args.postgres is None):
        print(
            "crdt-state hub: --redis and --postgres go together (cluster_options)", file=sys.stderr
        )
        return 2
    try:
        event_loop.run(lambda: _run_hub(args), args.loop)
    except HubConfigError as exc:  # a Redis URL or PostgreSQL DSN it cannot use
        print(f"crdt-state hub: {exc} ({exc.code})", file=sys.stderr)
        return 2
    except crdt_state.CrdtStateError as exc:  # PostgreSQL unreachable, a store unusable
        print(f"crdt-state hub: {exc.message} ({exc.code})", file=sys.stderr)
        return 1
    except OSError as exc:  # the port in use, a host that does not resolve or is not ours
        why = exc.strerror or str(exc)
        print(f"crdt-state hub: cannot listen on {args.host}:{args.port}: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
