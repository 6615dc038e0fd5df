"""What a list of change-log entries answers, read without the log (pure logic).

The :class:`~crdt_state._changelog.ChangeLog` picks the entries a question needs
(since a base, touching some paths, made by a chain); the functions here answer
over such a list: the value a path had before the entries (:func:`read_at`),
which branch paths they overlap (:func:`overlaps`), and what a merge built on
a chain of earlier merges has not seen (:func:`unseen_by_chain`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ._entry import Entry, TruncateTo, WriteKind
from .paths import Path, is_prefix
from .values import patch, tree_get

if TYPE_CHECKING:
    from .requests import ChainKey

__all__ = ["Overlap", "keys_touched", "overlaps", "read_at", "under", "unseen_by_chain"]


def unseen_by_chain(entries: Sequence[Entry], chain: Collection[ChainKey]) -> list[Entry]:
    """The entries a merge built on ``chain`` has not seen (pure; oldest first).

    ``entries`` are those after the merge's base that its token did not cover;
    ``chain`` the keys of the writer's earlier merges it was computed on top of.
    The chain's own entries are seen. So is, at any path, whatever an older
    entry wrote there before a chain entry wrote that path or an ancestor of
    it: the chain entry was applied as sent, judged against a base that held
    the older write, so the value the agent read already includes it. Such
    writes are removed from the entries returned (with their undo records, so
    :func:`read_at` gives the value the agent saw); an entry left with no
    write is dropped.
    """
    if not chain:
        return list(entries)
    covered: set[Path] = set()  # paths written by chain entries newer than the one at hand
    out: list[Entry] = []
    for entry in reversed(entries):
        if entry.request in chain:
            covered.update(entry.writes)
            continue
        if not covered:
            out.append(entry)
            continue
        writes = {p: k for p, k in entry.writes.items() if not under(p, covered)}
        if len(writes) == len(entry.writes):
            out.append(entry)
        elif writes:
            undo = [(p, v) for p, v in entry.undo if not under(p, covered)]
            out.append(replace(entry, writes=writes, undo=undo))
    out.reverse()
    return out


def keys_touched(entries: Iterable[Entry]) -> set[str]:
    """The top-level keys under which ``entries`` wrote or restored a path."""
    keys: set[str] = set()
    for entry in entries:
        keys.update(path[0] for path in entry.writes)
        keys.update(path[0] for path, _ in entry.undo)
    return keys


def under(path: Path, paths: set[Path]) -> bool:
    """True when ``path`` or one of its ancestors is in ``paths``."""
    return any(path[:i] in paths for i in range(1, len(path) + 1))


def read_at(current: Any, path: Path, entries: Iterable[Entry]) -> Any:
    """Roll the value ``current`` found at ``path`` back through ``entries``.

    ``entries`` are the entries after the wanted version, oldest first; the
    result is the value ``path`` had before all of them (``MISSING`` when
    absent). ``current`` is not modified; parts of it may be shared by the result.
    """
    value = current
    for entry in reversed(list(entries)):
        for written, before in reversed(entry.undo):
            if is_prefix(written, path):
                if isinstance(before, TruncateTo):
                    if written == path and isinstance(value, list):
                        value = value[: before.length]
                    continue
                value = tree_get(before, path[len(written) :])
            elif is_prefix(path, written):
                rest = written[len(path) :]
                if isinstance(before, TruncateTo):
                    old = tree_get(value, rest)
                    if not isinstance(old, list):
                        continue
                    before = old[: before.length]
                value = patch(value, rest, before)
    return value


@dataclass(frozen=True, slots=True)
class Overlap:
    """State writes since the base that touch one branch write."""

    kinds: frozenset[WriteKind]
    exact: bool  # every related write is at exactly the branch path
    agent: str | None


def overlaps(writes: Iterable[Path], entries: Sequence[Entry]) -> dict[Path, Overlap]:
    """For each branch path, the state writes since the base that overlap it.

    Two paths overlap when they are equal or one is an ancestor of the other.
    Paths with no overlapping write are left out of the result. ``agent`` is
    the agent of the newest entry with an overlapping write. One pass over the
    entries, a few set lookups per written path.
    """
    if not entries:
        return {}
    targets = list(writes)
    exact_targets = set(targets)
    below: dict[Path, list[Path]] = {}  # strict ancestor -> branch paths under it
    for target in targets:
        for i in range(1, len(target)):
            below.setdefault(target[:i], []).append(target)
    found: dict[Path, _Seen] = {}

    def touch(target: Path, path: Path, kind: WriteKind, agent: str | None) -> None:
        seen = found.get(target)
        if seen is None:
            seen = found[target] = _Seen()
        seen.kinds.add(kind)
        seen.exact = seen.exact and path == target
        seen.agent = agent

    for entry in entries:
        for path, kind in entry.writes.items():
            # most written paths relate to no branch path: a few set lookups, no allocation
            if path in exact_targets:
                touch(path, path, kind, entry.agent)
            if len(path) > 1:
                for i in range(1, len(path)):
                    if path[:i] in exact_targets:
                        touch(path[:i], path, kind, entry.agent)
            if path in below:
                for target in below[path]:
                    touch(target, path, kind, entry.agent)
    out: dict[Path, Overlap] = {}
    for target in targets:
        seen = found.get(target)
        if seen is not None:
            out[target] = Overlap(kinds=frozenset(seen.kinds), exact=seen.exact, agent=seen.agent)
    return out


@dataclass(slots=True)
class _Seen:
    """What :func:`overlaps` has met so far for one branch path."""

    kinds: set[WriteKind] = field(default_factory=set)
    exact: bool = True
    agent: str | None = None
