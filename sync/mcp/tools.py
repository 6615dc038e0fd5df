"""What the MCP server's tools do, over a local or a remote state (no MCP code here).

:class:`StateTools` implements ``read_state``, ``commit_changes``,
``history``, ``blame``, ``conflicts`` and ``state_schema`` on a
:class:`~crdt_state.SharedState` (``crdt-state mcp --db FILE``) or on a
remote state of a hub room (``--hub``). Inputs are the tools' arguments,
already checked against their pydantic models (:data:`TOOL_MODELS`, which
also give the tools' exact input schemas); outputs are JSON data. Errors are
:class:`~crdt_state.CrdtStateError` with their stable codes.

Tokens are the printable form of the state's version vector
(:meth:`VersionVector.to_text`), accepted only in that canonical form.
Paths are dotted strings (``"customer.tier"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from crdt_state import (
    MISSING,
    ConflictError,
    CrdtStateError,
    DuplicatePath,
    MergeResult,
    SharedState,
    format_path,
    parse_path,
)
from crdt_state.values import tree_get
from sync.mcp._answers import blame_json, conflict_json, history_json, parse_token, record_json

__all__ = [
    "TOOL_DESCRIPTIONS",
    "TOOL_MODELS",
    "BlameArgs",
    "CommitArgs",
    "ConflictsArgs",
    "HistoryArgs",
    "NotAvailable",
    "ReadArgs",
    "SchemaArgs",
    "StateTools",
    "parse_token",
]

T = TypeVar("T")

_Path = Annotated[str, Field(description="a dotted path, e.g. 'customer.tier'")]
_Token = Annotated[str, Field(description="a token returned by read_state or commit_changes")]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReadArgs(_Args):
    """Arguments of ``read_state``."""

    paths: list[_Path] | None = Field(
        default=None, description="paths to read; omit to read the whole state"
    )


class CommitArgs(_Args):
    """Arguments of ``commit_changes``."""

    changes: dict[_Path, JsonValue] = Field(description="new values by dotted path")
    base: _Token = Field(description="the token of the read these changes were computed from")
    agent: str = Field(min_length=1, description="who makes the change (shown to other agents)")
    delete: list[_Path] = Field(default_factory=list, description="paths to remove")


class HistoryArgs(_Args):
    """Arguments of ``history``."""

    path: _Path | None = Field(default=None, description="only changes touching this path")
    limit: int = Field(default=20, ge=1, le=1000, description="the newest this many changes")


class BlameArgs(_Args):
    """Arguments of ``blame``."""

    path: _Path


class ConflictsArgs(_Args):
    """Arguments of ``conflicts``."""

    path: _Path | None = Field(default=None, description="only conflicts at or below this path")


class SchemaArgs(_Args):
    """``state_schema`` takes no arguments."""


TOOL_MODELS: dict[str, type[_Args]] = {
    "read_state": ReadArgs,
    "commit_changes": CommitArgs,
    "history": HistoryArgs,
    "blame": BlameArgs,
    "conflicts": ConflictsArgs,
    "state_schema": SchemaArgs,
}

TOOL_DESCRIPTIONS: dict[str, str] = {
    "read_state": (
        "Read the shared state (or some paths of it). Returns {values, token, missing}: "
        "keep the token and pass it as 'base' to commit_changes."
    ),
    "commit_changes": (
        "Write values computed from a read (optimistic concurrency). Returns {status, "
        "applied, conflicts, token}. status 'merged': written (conflicts settled by policy "
        "are listed). status 'conflict': another agent wrote an overlapping path since your "
        "read; nothing was written; each conflict gives base/current/incoming values and the "
        "other agent: read again and redo. status 'retry': a policy asks you to read again "
        "and redo. status 'pending' (over a hub): the connection dropped before the hub "
        "answered; the server sends it again (it lands at most once), but it may yet be "
        "refused: read again later to see whether it landed."
    ),
    "history": "Recent changes, oldest first: token, agent, paths, time.",
    "blame": "Who last changed a path (or a path above or below it), and when.",
    "conflicts": "Recorded conflicts and how each was settled.",
    "state_schema": "The JSON schema of the state, when it is typed (else null).",
}


class NotAvailable(CrdtStateError):
    """A tool needs something this server does not have (history over a hub)."""

    code = "not_available"


class StateTools:
    """The MCP tools over one state.

    Args:
        state: a ``SharedState`` (embedded; history, blame and conflicts need
            one opened on a file) or a remote state from ``sync.connect``.
        on_change: called with the paths of every merge made through
            :meth:`commit_changes` on an embedded state (a remote state
            reports changes through its replica instead).
    """

    def __init__(
        self,
        state: Any,
        *,
        on_change: Callable[[Sequence[tuple[str, ...]]], Any] | None = None,
    ) -> None:
        self.state = state
        self.local = isinstance(state, SharedState)
        self._on_change = on_change

    # -- reading --------------------------------------------------------------------------
    def read_state(self, args: ReadArgs) -> dict[str, Any]:
        """Read the whole state, or the given paths, from one consistent snapshot.

        Args:
            args: the paths to read (``None`` reads the whole state).

        Returns:
            ``values`` (the snapshot, or path text to value), ``token`` (the
            version the values were read at, to pass back as a commit's base)
            and ``missing`` (the requested paths that hold no value).

        Raises:
            InvalidPath: a requested path is malformed.
        """
        snapshot, token = self._confirmed().read()
        if args.paths is None:
            return {"values": snapshot, "token": token.to_text(), "missing": []}
        values: dict[str, Any] = {}
        missing: list[str] = []
        for text in args.paths:
            node = tree_get(snapshot, parse_path(text))
            if node is MISSING:
                missing.append(text)
            else:
                values[text] = node
        return {"values": values, "token": token.to_text(), "missing": missing}

    def value_at(self, path: str | None) -> Any:
        """The value a ``state://current[/path]`` resource shows (``PathNotFound``-free: null)."""
        if path is None:
            return self._confirmed().snapshot()
        return self._confirmed().get(parse_path(path))

    def _confirmed(self) -> SharedState:
        """What reads show: the state, or over a hub the room as the hub confirmed it.

        Not a remote state's own view, which also shows its merges still queued or in
        flight: the server's clients share it, and a client's token travels as text (no
        chain), so values from another client's unconfirmed merge, read with the
        confirmed token, would let a commit build on a write that may yet be refused.
        """
        return cast(SharedState, self.state if self.local else self.state.replica)

    # -- writing --------------------------------------------------------------------------
    async def commit_changes(self, args: CommitArgs) -> dict[str, Any]:
        """Commit writes and deletes made against the version ``args.base``.

        A conflict is not an error: it comes back as a result the agent can act
        on. ``on_change`` is called (and awaited) after a merge on an embedded
        state that applied at least one path.

        Args:
            args: the base token, the agent, the path-to-value writes and the
                paths to delete.

        Returns:
            ``status`` (``merged``, ``conflict``, ``retry`` when the commit may
            succeed unchanged later, or ``pending`` over a hub whose connection
            dropped before it answered), ``applied`` and ``conflicts`` (path
            texts and conflict reports), and ``token`` (the version after the
            merge, or the current one when nothing merged).

        Raises:
            CrdtStateError: a path is both written and deleted, or a path or
                the base token is malformed.
            NotAvailable: over a hub that cannot be reached now (nothing queued).
        """
        base = parse_token(args.base)
        changes: dict[tuple[str, ...], Any] = {parse_path(p): v for p, v in args.changes.items()}
        for text in args.delete:
            path = parse_path(text)
            if path in changes:
                raise DuplicatePath("a path is both written and deleted", path=path)
            changes[path] = MISSING
        if not self.local and not self.state.connected:
            raise NotAvailable(
                "the hub is not reachable: nothing was written (read again and redo later)",
                details={"hub": self.state.url},
            )
        try:
            result: MergeResult = await self.state.acommit(changes, base, args.agent)
        except ConflictError as exc:
            return {
                "status": "retry" if exc.retry else "conflict",
                "applied": [],
                "conflicts": [conflict_json(c) for c in exc.conflicts],
                "token": self.state.token.to_text(),
            }
        if self.local and result.applied and self._on_change is not None:
            await _maybe_await(self._on_change(result.applied))
        if result.pending:  # sent, then the connection dropped before the hub answered
            return {
                "status": "pending",
                "applied": [],
                "conflicts": [],
                "token": self._confirmed().token.to_text(),
            }
        return {
            "status": "merged",
            "applied": [format_path(p) for p in result.applied],
            "conflicts": [conflict_json(c) for c in result.conflicts],
            "token": result.token.to_text(),
        }

    # -- history ----------------------------------------------------------------------------
    def _durable(self, tool: str, read: Callable[[SharedState], T]) -> T:
        """Run ``read`` on a state stored in a file; :class:`NotAvailable` otherwise."""
        if self.local:
            try:
                return read(self.state)
            except TypeError as exc:  # an in-memory state has no history
                if isinstance(exc, CrdtStateError):
                    raise
        raise NotAvailable(
            f"{tool} needs a state file: run 'crdt-state mcp --db FILE' (over a hub, "
            "the hub keeps the history)",
            details={"tool": tool},
        )

    def history(self, args: HistoryArgs) -> dict[str, Any]:
        """List the recorded changes, oldest first, optionally touching one path.

        Returns:
            ``changes``: at most ``args.limit`` history entries.

        Raises:
            NotAvailable: the state is not stored in a file.
        """
        path = parse_path(args.path) if args.path is not None else None
        entries = self._durable("history", lambda s: s.history(path=path, limit=args.limit))
        return {"changes": [history_json(e) for e in entries]}

    def blame(self, args: BlameArgs) -> dict[str, Any]:
        """Tell which change last wrote ``args.path``, an ancestor or a descendant.

        Returns:
            ``blame``: that change (agent, time, token), or ``None`` if none is
            recorded.

        Raises:
            NotAvailable: the state is not stored in a file.
        """
        path = parse_path(args.path)
        found = self._durable("blame", lambda s: s.blame(path))
        return {"blame": blame_json(found) if found is not None else None}

    def conflicts(self, args: ConflictsArgs) -> dict[str, Any]:
        """List the recorded merge conflicts, oldest first, optionally at or below one path.

        Returns:
            ``conflicts``: each conflict with the merge's applied paths, token and time.

        Raises:
            NotAvailable: the state is not stored in a file.
        """
        path = parse_path(args.path) if args.path is not None else None
        records = self._durable("conflicts", lambda s: s.conflicts(path))
        return {"conflicts": [record_json(r) for r in records]}

    def state_schema(self, args: SchemaArgs) -> dict[str, Any]:
        """Return the JSON Schema the state validates commits against.

        Works on an embedded state and on a remote one (through its replica).

        Returns:
            ``schema``: the JSON Schema, or ``None`` when the state has no schema.
        """
        state = self.state if self.local else self.state.replica
        if state.schema is None:
            return {"schema": None}
        schema: dict[str, Any] = state.json_schema()
        return {"schema": schema}

    def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[_Args, Any]:
        """Validate ``arguments`` for tool ``name``; returns the model and the bound method."""
        model = TOOL_MODELS[name].model_validate(dict(arguments))
        return model, getattr(self, name)


async def _maybe_await(value: Any) -> None:
    if hasattr(value, "__await__"):
        await value
