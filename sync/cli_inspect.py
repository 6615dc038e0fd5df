"""The ``crdt-state inspect`` subcommand: look into a durable state file or a stored room.

``crdt-state inspect FILE ACTION`` (a file made by ``SharedState.open``),
``crdt-state inspect --db DIR ROOM ACTION`` (a room of a hub's ``--db`` directory) or
``crdt-state inspect --postgres DSN ROOM ACTION`` (a room of a hub cluster, or a state of
``open_postgres``, stored in PostgreSQL), with ACTION one of::

    show [PATH]                                   the content (or one path), as JSON
    history [--path P] [--agent A] [--since S]    the recorded changes, oldest first
    blame PATH                                    who last wrote PATH, when
    conflicts [--path P] [--since S]              recorded conflicts and their resolutions
    at TOKEN                                      the content at a token (or a history seq)
    export [-o FILE]                              content, history and conflicts as JSON

A PATH is dotted (``plan.owner``), or a JSON array of keys when a key holds a dot
(``'["urls","example.com"]'``, :mod:`sync.cli_paths`); paths are printed so that they read
back. Every action takes ``--json`` (machine-readable output); tables otherwise, with times in
local time: ``rich`` tables when stdout is a terminal, plain aligned text when it is not
(:mod:`sync.cli_views`). A long ``export`` shows a progress bar on stderr when stderr is a
terminal. ``--since`` takes ``30s``/``10m``/``2h``/``1d`` ago, a unix time, or an ISO
date-time (local when it has no zone). The file is opened with
``SharedState.open(..., read_only=True)`` (a PostgreSQL room with
``open_postgres(..., read_only=True)``): no lock, never written to, and readable while a
running hub holds it (it shows what the hub has committed). Exit status: 0, or 2 with the
reason and the error's code on stderr (missing file or room, not a state file, a server
that does not answer, bad path or token, an ``-o`` file that cannot be written).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from crdt_state import MISSING, UNRESOLVED, CrdtStateError, SharedState, VersionVector
from crdt_state.errors import InvalidUpdate, WrongType
from crdt_state.times import as_time
from sync.cli_paths import PATH_HELP, cli_path, path_text
from sync.cli_views import TableView, plain_table, rich_table
from sync.server._store import room_file
from sync.server.observe.events import blame_event, conflict_event, history_event, jsonable

__all__ = ["add_parser", "format_table", "parse_since", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``inspect`` subcommand to the ``crdt-state`` argument parser."""
    inspect = sub.add_parser("inspect", help="look into a durable state file or a hub room")
    inspect.add_argument(
        "target", help="the state file (or, with --db or --postgres, the room name)"
    )
    where = inspect.add_mutually_exclusive_group()
    where.add_argument("--db", help="a hub's --db directory: TARGET is then a room name")
    where.add_argument(
        "--postgres",
        metavar="DSN",
        help="a cluster's PostgreSQL (as the hubs' --postgres): TARGET is then a room name",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    actions = inspect.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", parents=[common], help="the content, or one path")
    show.add_argument("path", nargs="?", help=f"only the value at this path: {PATH_HELP}")
    history = actions.add_parser("history", parents=[common], help="recorded changes")
    history.add_argument("--path", help=f"only changes at, inside or above it: {PATH_HELP}")
    history.add_argument("--agent", help="only changes this agent wrote")
    history.add_argument("--since", type=parse_since, help=f"only changes since then: {_SINCE}")
    history.add_argument("--limit", type=int, help="only the newest N changes")
    blame = actions.add_parser("blame", parents=[common], help="who last wrote a path")
    blame.add_argument("path", help=PATH_HELP)
    conflicts = actions.add_parser("conflicts", parents=[common], help="recorded conflicts")
    conflicts.add_argument("--path", help=f"only conflicts at or inside it: {PATH_HELP}")
    conflicts.add_argument("--since", type=parse_since, help=f"only conflicts since then: {_SINCE}")
    at = actions.add_parser("at", parents=[common], help="the content at a token or seq")
    at.add_argument("token", help="a token (as history prints it) or a history seq number")
    export = actions.add_parser("export", parents=[common], help="everything, as JSON")
    export.add_argument("-o", "--output", help="write to this file (default stdout)")


_SINCE: Final = "30s, 10m, 2h or 1d ago, a unix time, or an ISO date-time (local if no zone)"


def parse_since(text: str, *, now: float | None = None) -> float:
    """A ``--since`` value as a unix time: ``10m`` (ago), ``1733220000``, ``2026-12-03T08:00``."""
    try:
        stamp = as_time(text, "--since", now=now)
    except WrongType:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (use 10m, 2h, a unix time or an ISO date-time)"
        ) from None
    assert stamp is not None  # text is never None
    return stamp


def local_time(stamp: float | None) -> str:
    """``stamp`` in local time, to the second, with the zone."""
    if stamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(stamp))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Rows under headers, columns aligned; long cells are cut with ``…``."""
    return plain_table(headers, rows)


def _value(value: Any) -> str:
    if value is MISSING:
        return "(absent)"
    if value is UNRESOLVED:
        return "(unresolved)"
    return json.dumps(jsonable(value), ensure_ascii=False)


def _dotted(path: Sequence[Any]) -> str:
    """``path`` as the CLI takes it back (:func:`sync.cli_paths.path_text`)."""
    return path_text(tuple(path)) if path else "(root)"


def _open(args: argparse.Namespace) -> SharedState:
    if args.postgres:
        return _open_postgres(args.postgres, args.target)
    file = room_file(Path(args.db), args.target) if args.db else Path(args.target)
    if not args.db and file.is_dir():
        raise _Fail(
            f"{file} is a directory, not a state file: for a room of a hub's directory, "
            f"give --db {file} ROOM"
        )
    if not file.is_file():
        raise _Fail(f"no state file at {file}")
    try:  # no lock, no write: a running hub may hold the file
        return SharedState.open(file, compact_document=False, read_only=True)
    except CrdtStateError as exc:
        raise _cannot_read(str(file), exc) from exc


def _open_postgres(dsn: str, room: str) -> SharedState:
    try:
        from crdt_state.postgres import open_postgres
    except ImportError as exc:
        raise _Fail(str(exc)) from exc
    try:  # no lock, no write: the room's owner hub keeps judging meanwhile
        return open_postgres(dsn, room, compact_document=False, read_only=True)
    except CrdtStateError as exc:
        raise _cannot_read(f"room {room!r}", exc) from exc


def _cannot_read(what: str, exc: CrdtStateError) -> _Fail:
    """``cannot read WHAT: message [code: reason]``."""
    reason = exc.details.get("reason")
    code = f"{exc.code}: {reason}" if reason else exc.code
    return _Fail(f"cannot read {what}: {exc.message} [{code}]")


class _Fail(Exception):
    """A reason to stop with exit status 2."""


def _terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def run(
    args: argparse.Namespace,
    out: TextIO | None = None,
    *,
    console: Console | None = None,
    progress_console: Console | None = None,
) -> int:
    """Run ``crdt-state inspect`` with parsed ``args``; returns the exit status.

    Args:
        args: the parsed command line.
        out: where the output goes (default stdout).
        console: a ``rich`` console for tables, used when it is a terminal (default:
            one on ``out`` when ``out`` is a terminal; else plain text to ``out``).
        progress_console: where a long export's progress bar goes (default: stderr
            when it is a terminal; else no bar).
    """
    out = sys.stdout if out is None else out
    if console is None and _terminal(out):
        console = Console(file=out)
    if progress_console is None and _terminal(sys.stderr):
        progress_console = Console(file=sys.stderr)
    try:
        state = _open(args)
    except _Fail as exc:
        print(f"crdt-state inspect: {exc}", file=sys.stderr)
        return 2
    bar = (
        progress_console if progress_console is not None and progress_console.is_terminal else None
    )
    try:
        with state:
            data, view = _ACTIONS[args.action](state, args, bar)
    except (_Fail, CrdtStateError, ValueError) as exc:
        print(f"crdt-state inspect: {exc}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(data, out, ensure_ascii=False, indent=2)
        out.write("\n")
    elif console is not None and console.is_terminal:
        if view is not None:
            console.print(rich_table(view) if isinstance(view, TableView) else Text(view))
    elif isinstance(view, TableView):
        out.write(plain_table(view.headers, view.rows) + "\n")
    elif view is not None:
        out.write(view + "\n")
    return 0


Result = tuple[Any, str | TableView | None]


def _show(state: SharedState, args: argparse.Namespace, bar: Console | None) -> Result:
    content, token = state.read()
    found = content if args.path is None else state.get(cli_path(args.path), _ABSENT)
    if found is _ABSENT:
        dots = "." in args.path and not args.path.startswith("[")
        hint = "; a key holding a dot is named as a JSON array of keys" if dots else ""
        raise _Fail(f"nothing at path {args.path!r}{hint}")
    value = jsonable(found)
    data = {"path": args.path, "value": value, "token": token.to_text(), "seq": state.position}
    return data, json.dumps(value, ensure_ascii=False, indent=2)


_ABSENT = object()


def _history(state: SharedState, args: argparse.Namespace, bar: Console | None) -> Result:
    path = None if args.path is None else cli_path(args.path)
    entries = state.history(agent=args.agent, path=path, since=args.since, limit=args.limit)
    data = [dict(history_event(e), local_time=local_time(e.time)) for e in entries]
    rows = [
        (str(e.seq), local_time(e.time), e.agent or "-", e.origin,
         ", ".join(_dotted(p) for p in e.paths), e.token.to_text())
        for e in entries
    ]  # fmt: skip
    return data, TableView(("seq", "time", "agent", "origin", "paths", "token"), tuple(rows))


def _blame(state: SharedState, args: argparse.Namespace, bar: Console | None) -> Result:
    where = cli_path(args.path)
    path, entry = _dotted(where), state.blame(where)
    data = blame_event(entry)
    if entry is None:
        return data, f"{path}: never written (or written before the retained history)"
    text = (
        f"{path}: last written by {entry.agent or '?'} at {local_time(entry.time)}\n"
        f"  wrote {_dotted(entry.path)} (seq {entry.seq}, token {entry.token.to_text()})"
    )
    return dict(data or {}, local_time=local_time(entry.time)), text


def _conflicts(state: SharedState, args: argparse.Namespace, bar: Console | None) -> Result:
    records = state.conflicts(None if args.path is None else cli_path(args.path), args.since)
    data = [dict(conflict_event(r), local_time=local_time(r.time)) for r in records]
    rows = [
        (local_time(r.time), _dotted(r.path), _value(r.base), _value(r.current),
         _value(r.incoming), f"{r.current_agent or '?'} <- {r.incoming_agent or '?'}",
         r.policy or "-", _value(r.resolution), "yes" if r.applied else "refused")
        for r in records
    ]  # fmt: skip
    headers = ("time", "path", "base", "current", "incoming", "agents", "policy", "resolution",
               "applied")  # fmt: skip
    return data, TableView(headers, tuple(rows))


def _at(state: SharedState, args: argparse.Namespace, bar: Console | None) -> Result:
    wanted = args.token.strip()
    if wanted.isdigit():
        entries = state.history()
        found = [e for e in entries if e.seq == int(wanted)]
        if not found:
            kept = f" (seq {entries[0].seq} to {entries[-1].seq})" if entries else " (none kept)"
            raise _Fail(f"no change with seq {wanted} in the retained history{kept}")
        token = found[0].token
    else:
        token = _token(state, wanted)
    content = jsonable(state.at(token))
    data = {"token": token.to_text(), "state": content}
    return data, json.dumps(content, ensure_ascii=False, indent=2)


def _token(state: SharedState, text: str) -> VersionVector:
    """The token ``text`` is (as ``to_text`` wrote it); a :class:`_Fail` naming that form."""
    if _SHORT_TOKEN.match(text):
        why = f"{text!r} is a token's short display form (str(token)): it cannot be read back"
    else:
        try:
            return VersionVector.from_text(text)
        except InvalidUpdate as exc:
            why = f"not a token: {text!r:.60} ({exc.message})"
    example = state.token.to_text() or "AQEB"
    raise _Fail(
        f"{why}; give a token as history prints it (VersionVector.to_text(), e.g. {example}) "
        "or a history seq number [bad_token]"
    )


_SHORT_TOKEN: Final = re.compile(r"^\d+@[0-9a-f]{8}$")
"""``str(VersionVector)``: a count and a digest, not the token."""


def _export(state: SharedState, args: argparse.Namespace, bar: Console | None) -> Result:
    if args.output:
        _check_output(args.output)
    content, token = state.read()
    entries = state.history()
    records = state.conflicts()
    history: list[dict[str, Any]] = []
    conflicts: list[dict[str, Any]] = []
    with _progress(bar, "exporting", len(entries) + len(records)) as advance:
        for entry in entries:
            history.append(history_event(entry))
            advance()
        for record in records:
            conflicts.append(conflict_event(record))
            advance()
    data = {
        "token": token.to_text(),
        "seq": state.position,
        "exported_at": time.time(),
        "state": jsonable(content),
        "history": history,
        "conflicts": conflicts,
    }
    if args.output:
        _write(args.output, json.dumps(data, ensure_ascii=False, indent=2) + "\n")
        return {"written": args.output}, f"exported to {args.output}"
    return data, json.dumps(data, ensure_ascii=False, indent=2)


def _check_output(name: str) -> None:
    """A :class:`_Fail` when ``-o NAME`` is a place no file can be written (before the work)."""
    where = Path(name)
    if where.is_dir():
        raise _Fail(f"cannot write {name}: it is a directory (give a file name)")
    if not where.absolute().parent.is_dir():
        raise _Fail(f"cannot write {name}: no directory {where.absolute().parent}")


def _write(name: str, text: str) -> None:
    try:
        Path(name).write_text(text, encoding="utf-8")
    except OSError as exc:  # permissions, a full disk
        raise _Fail(f"cannot write {name}: {exc.strerror or exc}") from exc


@contextmanager
def _progress(console: Console | None, what: str, total: int) -> Iterator[Callable[[], None]]:
    """A progress bar on ``console`` (a terminal) for ``total`` steps; yields ``advance``.

    Without a console it yields a function that does nothing.
    """
    if console is None or total == 0:
        yield lambda: None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(what, total=total)
        yield lambda: progress.advance(task)


_ACTIONS: dict[str, Callable[[SharedState, argparse.Namespace, Console | None], Result]] = {
    "show": _show,
    "history": _history,
    "blame": _blame,
    "conflicts": _conflicts,
    "at": _at,
    "export": _export,
}
