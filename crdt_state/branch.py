"""Branch: an agent's private edit of a shared state, merged back as a unit.

A branch is created in O(1): it records the fork base (a position in the
state's change log and its token) and copies nothing. The first read or write
of a top-level key copies that key's value *as it was at the base* into the
branch; the rest of the state is read at the base on demand. Writes are kept
as the set of root-most changed paths, so a merge sends only the branch's own
changes and conflicts are judged against the fork base. The contracts a branch
relies on (:class:`BranchHost`, :class:`MergeOnExit`) are defined in
:mod:`crdt_state._branch_host` and exported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal

from ._branch_host import BranchHost, MergeOnExit
from .conflicts import Change, MergeResult, WriteKind
from .errors import BranchClosed, PathNotFound, WrongType
from .model_type import ModelT
from .paths import Path, parse_path
from .values import MISSING, copy_value, same, tree_delete, tree_get, tree_set
from .version import VersionVector

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["Branch", "BranchHost", "MergeOnExit"]

Status = Literal["open", "merged", "discarded"]


class Branch(MergeOnExit, Generic[ModelT]):
    """A local, mergeable edit of a :class:`SharedState`, owned by one agent.

    Not thread-safe by itself: one agent (one thread or task) uses a branch.
    Use as a context manager (``with`` or ``async with``): merged on a clean
    exit, discarded when the block raises.
    """

    def __init__(
        self, state: BranchHost[ModelT], agent: str, base_seq: int, base: VersionVector
    ) -> None:
        self._state = state
        self._agent = agent
        self._base_seq = base_seq
        self._base = base
        self._local: dict[str, Any] = {}
        self._loaded: set[str] = set()
        self._writes: dict[Path, WriteKind] = {}
        # each proper prefix of a written path -> the written paths below it, so a
        # write finds the writes it covers without scanning them all
        self._below: dict[Path, set[Path]] = {}
        self._appends: dict[Path, list[Any]] = {}
        self._status: Status = "open"
        self._result: MergeResult | None = None
        self._ticket: int | None = None  # the store's, once merged (None in memory)

    # -- identity ----------------------------------------------------------------
    @property
    def agent(self) -> str:
        """The agent that owns this branch."""
        return self._agent

    @property
    def base(self) -> VersionVector:
        """The state's token at the fork (the branch's revision token)."""
        return self._base

    @property
    def state(self) -> BranchHost[ModelT]:
        """The state this branch was forked from."""
        return self._state

    @property
    def status(self) -> Status:
        """``"open"``, ``"merged"`` or ``"discarded"``."""
        return self._status

    @property
    def result(self) -> MergeResult | None:
        """The result of the merge once merged."""
        return self._result

    # -- reading -----------------------------------------------------------------
    def _load(self, key: str) -> None:
        if key not in self._loaded:
            value = self._state.read_at((key,), self._base_seq)
            if value is not MISSING:
                self._local[key] = value
            self._loaded.add(key)

    def _view(self, path: Path) -> Any:
        if path[0] in self._loaded:
            return tree_get(self._local, path)
        return self._state.read_at(path, self._base_seq)

    def get(self, path: Any, default: Any = None) -> Any:
        """The branch's value at ``path`` (a copy), or ``default`` when absent."""
        key = parse_path(path)
        value = self._view(key)
        if value is MISSING:
            return default
        return copy_value(value) if key[0] in self._loaded else value

    def snapshot(self) -> dict[str, Any]:
        """The whole state as this branch sees it (base plus own edits)."""
        with self._state.lock:
            for key in self._state.keys_at(self._base_seq):
                self._load(key)
        snapshot: dict[str, Any] = copy_value(self._local)
        return snapshot

    def __getitem__(self, key: str) -> Any:
        value = self._view(parse_path((key,)))
        if value is MISSING:
            raise PathNotFound("no such key", path=(key,))
        return copy_value(value)

    def __setitem__(self, key: str, value: Any) -> None:
        self.set((key,), value)

    def __delitem__(self, key: str) -> None:
        self.delete((key,))

    def __contains__(self, path: object) -> bool:
        return self._view(parse_path(path)) is not MISSING

    # -- writing -----------------------------------------------------------------
    def _writable(self) -> None:
        if self._status != "open":
            raise BranchClosed(
                f"branch of {self._agent!r} is {self._status}",
                details={"agent": self._agent, "status": self._status},
            )
        self._state.ensure_open()  # StateClosed: the state takes no more writes

    def _record(self, path: Path, kind: WriteKind) -> None:
        for i in range(1, len(path)):
            if path[:i] in self._writes:
                # an ancestor's change already covers this path: it now carries a value
                self._writes[path[:i]] = "set"
                self._appends.pop(path[:i], None)
                return
        for other in self._below.pop(path, ()):  # this change covers theirs now
            del self._writes[other]
            self._appends.pop(other, None)
            for i in range(1, len(other)):
                below = self._below.get(other[:i])
                if below is not None and other[:i] != path:
                    below.discard(other)
        if path not in self._writes:
            for i in range(1, len(path)):
                self._below.setdefault(path[:i], set()).add(path)
        self._writes[path] = kind

    def set(self, path: Any, value: Any) -> None:
        """Write ``value`` at ``path``, creating parent maps as needed.

        The value is validated first (:class:`UnsupportedValue`, or
        ``SchemaError`` on a typed state); on error the branch is unchanged.
        Writing below a non-map value raises :class:`WrongType`.
        """
        self._writable()
        key = parse_path(path)
        clean = self._state.prepare_value(key, value)
        self._load(key[0])
        tree_set(self._local, key, clean)
        self._appends.pop(key, None)
        self._record(key, "set")

    def delete(self, path: Any) -> None:
        """Remove ``path``; :class:`PathNotFound` when the branch has no value there."""
        self._writable()
        key = parse_path(path)
        self._load(key[0])
        tree_delete(self._local, key)
        self._appends.pop(key, None)
        self._record(key, "delete")

    def append(self, path: Any, *items: Any) -> None:
        """Add ``items`` at the end of the list at ``path`` (created when absent).

        Appends merge with concurrent appends to the same list: both are kept.
        """
        self.extend(path, items)

    def extend(self, path: Any, items: Iterable[Any]) -> None:
        """Like :meth:`append`, with the items given as one iterable."""
        self._writable()
        key = parse_path(path)
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise WrongType(
                f"extend takes an iterable of items (a list), not {type(items).__name__}: "
                "use append for one item",
                path=key,
                details={"items": repr(items)[:80]},
            )
        clean = self._state.prepare_items(key, list(items))
        self._load(key[0])
        current = tree_get(self._local, key)
        if current is MISSING:
            tree_set(self._local, key, copy_value(clean))
        elif isinstance(current, list):
            current.extend(copy_value(clean))
        else:
            raise WrongType(
                f"cannot append to a {type(current).__name__} value",
                path=key,
                details={"value": current},
            )
        kind = self._writes.get(key)
        if kind == "append":
            self._appends[key].extend(clean)
        elif kind is None and not any(key[:i] in self._writes for i in range(1, len(key))):
            self._record(key, "append")
            self._appends[key] = list(clean)
        else:
            self._record(key, "set")

    # -- typed access (states with a schema) -------------------------------------
    def model(self) -> ModelT:
        """The branch's view as a validated schema instance (``TypeError`` without one)."""
        return self._state.to_model(self.snapshot())

    def update(self, values: BaseModel | Mapping[str, Any]) -> None:
        """Write every field given (a model, or a partial dict of fields), validated first.

        A dict may hold dotted paths as keys. A model writes the fields set on
        it (``model_fields_set``) whose value differs from the branch's, so
        ``branch.update(m)`` after editing ``m = branch.model()`` writes only
        the edits. Every value is checked before the branch changes; on error
        nothing is written.
        """
        self._writable()
        prepared = self._state.prepare_fields(values)
        if not isinstance(values, Mapping):  # a model: only fields that differ from this view
            prepared = [(path, v) for path, v in prepared if not same(self._view(path), v)]
        for path, value in prepared:
            self._load(path[0])
            tree_set(self._local, path, value)
            self._appends.pop(path, None)
            self._record(path, "set")

    # -- changes -----------------------------------------------------------------
    def changed_paths(self) -> tuple[Path, ...]:
        """The paths this branch changed (root-most; a changed map covers its keys)."""
        return tuple(self._writes)

    def changes(self) -> tuple[Path, ...]:
        """Deprecated name of :meth:`changed_paths`."""
        return self.changed_paths()

    def ops(self) -> list[Change]:
        """Deprecated name of :meth:`as_changes`."""
        return self.as_changes()

    def as_changes(self) -> list[Change]:
        """The branch's changes as :class:`Change` objects (what a merge sends)."""
        out: list[Change] = []
        for path, kind in self._writes.items():
            if kind == "set":
                out.append(Change("set", path, copy_value(tree_get(self._local, path))))
            elif kind == "delete":
                out.append(Change("delete", path))
            else:
                out.append(Change("append", path, copy_value(self._appends[path])))
        return out

    @property
    def dirty(self) -> bool:
        """True when the branch has changes to merge."""
        return bool(self._writes)

    # -- merging -----------------------------------------------------------------
    def merge(
        self, *, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> MergeResult:
        """Merge the branch's changes into its state; returns a :class:`MergeResult`.

        Changes to paths nobody else touched since the fork are applied as
        they are. A path the state also wrote since the fork base (the same
        path, an ancestor or a descendant), whatever the values, is a
        conflict (``same_value`` when both wrote the same value), settled by
        the policy for that path (``resolvers`` given here first, then the
        state's, then ``default``); concurrent appends to one list are both
        kept, no conflict.
        If any conflict stays unresolved, :class:`ConflictError` is raised,
        nothing is applied, and the branch stays open and intact: resolve with
        ``merge(resolvers={path: value})``, merge with a policy, or
        :meth:`rebase`. Merging a merged branch again returns the same result
        and changes nothing.
        """
        result = self._apply(resolvers, default)
        self._state.wait_durable(self._ticket)
        return result

    async def amerge(
        self, *, resolvers: Mapping[Any, object] | None = None, default: object | None = None
    ) -> MergeResult:
        """The asyncio form of :meth:`merge` (durable states wait off the event loop)."""
        result = self._apply(resolvers, default)
        await self._state.await_durable(self._ticket)
        return result

    def _apply(self, resolvers: Mapping[Any, object] | None, default: object | None) -> MergeResult:
        """Merge once: the branch is ``merged`` as soon as its changes are in the state.

        So a merge whose wait for the disk was interrupted (a cancelled ``amerge``, a
        timeout) is not applied again when called once more: that call waits for the
        same change and returns the same result.
        """
        if self._status == "merged" and self._result is not None:
            return self._result
        self._writable()
        result, self._ticket = self._state.apply_merge(
            self.as_changes(), self._base_seq, self._agent, resolvers, default
        )
        self._status = "merged"
        self._result = result
        return result

    def rebase(self) -> None:
        """Move the fork base to the state's current version, replaying own changes.

        After a rebase the branch's values win over everything merged before
        it (no agent re-run). Raises :class:`WrongType` if a change no longer
        applies (an append to what is now a scalar); the branch is then unchanged.
        """
        self._writable()
        ops = self.as_changes()
        with self._state.lock:
            seq, token = self._state.position, self._state.token
            replay = Branch(self._state, self._agent, seq, token)
            for op in ops:
                if op.kind == "set":
                    replay.set(op.path, op.value)
                elif op.kind == "append":
                    replay.extend(op.path, op.value)
                elif op.path in replay:
                    replay.delete(op.path)
                else:
                    replay._load(op.path[0])
        self._base_seq, self._base = seq, token
        self._local, self._loaded = replay._local, replay._loaded
        self._writes, self._appends = replay._writes, replay._appends
        self._below = replay._below

    def discard(self) -> None:
        """Drop the branch's changes; later writes raise :class:`BranchClosed`."""
        if self._status == "open":
            self._status = "discarded"
            self._local.clear()
            self._writes.clear()
            self._below.clear()
            self._appends.clear()

    def __repr__(self) -> str:
        return (
            f"<Branch agent={self._agent!r} base={self._base} {self._status}"
            f" changes={len(self._writes)}>"
        )
