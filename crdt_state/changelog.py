"""The log of changes a state has integrated, and what it answers (pure logic).

Each merge, and each update received from another replica, becomes one
:class:`Entry`: the clock ranges it added, the paths it wrote (for conflict
detection) and how to undo it (to read the state as it was at an older
version). Conflicts are judged against the fork base: only entries *after*
the base are consulted, so the cost follows the size of the changes, not the
size of the state.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from .errors import StaleBase, UnknownBase
from .paths import Path, is_prefix
from .values import patch, tree_get
from .version import VersionVector

if TYPE_CHECKING:
    from .requests import RequestKey

__all__ = ["ChangeLog", "Entry", "TruncateTo", "WriteKind", "read_at", "unseen_by_chain"]

WriteKind = Literal["set", "delete", "append"]


@dataclass(frozen=True, slots=True)
class TruncateTo:
    """Undo record of an append: the list had ``length`` items before."""

    length: int


@dataclass(slots=True)
class Entry:
    """One integrated change set.

    ``writes`` maps each written path to how it was written; ``undo`` lists
    ``(path, value before)`` in application order (``MISSING`` = was absent,
    :class:`TruncateTo` = list was shorter); ``delta`` maps each client to
    the clock range ``[start, end)`` this entry added. ``request`` is the
    :class:`~crdt_state.requests.RequestKey` of the merge that made the entry
    (``None`` for merges without a request id and for received updates): a
    later merge of the same writer that builds on it does not conflict with it.
    """

    seq: int
    agent: str | None
    token: VersionVector
    delta: dict[int, tuple[int, int]]
    writes: dict[Path, WriteKind]
    undo: list[tuple[Path, Any]]
    time: float = field(default_factory=time.time)
    origin: str = "local"
    request: RequestKey | None = None

    def covered_by(self, token: VersionVector) -> bool:
        """True when ``token`` has seen every operation of this entry."""
        return all(token.get_clock(c) >= end for c, (_, end) in self.delta.items())


def clock_delta(before: VersionVector, after: VersionVector) -> dict[int, tuple[int, int]]:
    """The clock ranges ``after`` has beyond ``before``."""
    start_of = before.get_clock
    delta: dict[int, tuple[int, int]] = {}
    for client, clock in after.items():
        start = start_of(client)
        if clock > start:
            delta[client] = (start, clock)
    return delta


class ChangeLog:
    """The retained history of one state, oldest first, bounded in length.

    Sequence numbers start at 1; seq 0 is the initial (empty) state. Entries
    older than ``limit`` are dropped; a base older than what is retained
    raises :class:`StaleBase`. A log restored from storage starts at
    ``start_seq`` (the seq of ``initial``): bases older than it are stale.
    ``retired`` are the client ids of earlier epochs of the document (see
    ``SharedState._reset_document``): tokens naming them are stale too.
    """

    def __init__(
        self,
        initial: VersionVector,
        limit: int = 10_000,
        *,
        start_seq: int = 0,
        retired: Iterable[int] = (),
    ) -> None:
        if limit < 1:
            raise ValueError("history limit must be at least 1")
        self.limit = limit
        self._entries: list[Entry] = []
        self._first_seq = start_seq + 1  # seq of _entries[0]
        self._head_seq = start_seq
        self._head_token = initial
        self._token_seq: dict[VersionVector, int] = {initial: start_seq}
        self._initial = (initial, start_seq)
        self.retired = frozenset(retired)

    @property
    def head_seq(self) -> int:
        return self._head_seq

    @property
    def head_token(self) -> VersionVector:
        return self._head_token

    @property
    def oldest_base(self) -> int:
        """The oldest base seq that can still be judged."""
        return self._first_seq - 1

    def append(
        self,
        agent: str | None,
        token: VersionVector,
        writes: Mapping[Path, WriteKind],
        undo: list[tuple[Path, Any]],
        origin: str = "local",
        request: RequestKey | None = None,
    ) -> Entry:
        """Record a new entry that moved the state from the head token to ``token``."""
        self._head_seq += 1
        entry = Entry(
            seq=self._head_seq,
            agent=agent,
            token=token,
            delta=clock_delta(self._head_token, token),
            writes=dict(writes),
            undo=undo,
            origin=origin,
            request=request,
        )
        self._entries.append(entry)
        self._head_token = token
        self._token_seq[token] = entry.seq
        if len(self._entries) > self.limit + self.limit // 4:
            self._trim()
        return entry

    def _trim(self) -> None:
        drop = len(self._entries) - self.limit
        for entry in self._entries[:drop]:
            if self._token_seq.get(entry.token) == entry.seq:
                del self._token_seq[entry.token]
        del self._entries[:drop]
        self._first_seq += drop
        # Every token maps to the seq of the entry that holds it (removed above when
        # dropped), except the initial one: no need to scan the whole map.
        initial, start = self._initial
        if start < self._first_seq - 1 and self._token_seq.get(initial) == start:
            del self._token_seq[initial]

    def token_at(self, seq: int) -> VersionVector:
        """The token the state had at log position ``seq`` (a retained position)."""
        if seq == self._head_seq:
            return self._head_token
        entries = self.since(seq)
        if not entries:
            return self._head_token
        first = entries[0]
        clocks = dict(first.token)
        for client, (start, _) in first.delta.items():
            clocks[client] = start
        return VersionVector(clocks)

    def since(self, base_seq: int) -> list[Entry]:
        """Entries after ``base_seq``; :class:`StaleBase` if some were dropped."""
        if base_seq < self._first_seq - 1:
            raise StaleBase(
                "the fork base is older than the retained history; rebase the branch",
                details={"base_seq": base_seq, "oldest_base": self._first_seq - 1},
            )
        if base_seq > self._head_seq:
            raise UnknownBase("base is ahead of this state", details={"base_seq": base_seq})
        return self._entries[base_seq - self._first_seq + 1 :]

    def seq_of(self, token: VersionVector) -> int:
        """The seq at which the state had exactly ``token``.

        A token the log never had (one from another replica) maps to the
        newest entry such that every entry up to it is covered by the token;
        entries after it that the token covers are then judged as concurrent
        only if they were not covered, see :meth:`since_token`.
        """
        seq = self._token_seq.get(token)
        if seq is not None:
            return seq
        if self.retired and not self.retired.isdisjoint(token):
            raise StaleBase(
                "the base token is from an earlier epoch of the document",
                details={"base": str(token)},
            )
        if not token <= self._head_token:
            raise UnknownBase(
                "the base token has changes this state has not seen",
                details={"base": str(token), "head": str(self._head_token)},
            )
        seq = self._first_seq - 1
        for entry in self._entries:
            if not entry.covered_by(token):
                break
            seq = entry.seq
        if seq == self._first_seq - 1 and self._first_seq > 1:
            raise StaleBase(
                "the base token is older than the retained history",
                details={"base": str(token)},
            )
        return seq

    def since_token(self, token: VersionVector) -> tuple[int, list[Entry]]:
        """The base seq of ``token`` and the entries it has not seen (exact for tokens
        of other replicas)."""
        seq = self.seq_of(token)
        return seq, [e for e in self.since(seq) if not e.covered_by(token)]

    def entries(self) -> Iterator[Entry]:
        """The retained entries, oldest first."""
        return iter(list(self._entries))


def unseen_by_chain(entries: Sequence[Entry], chain: Collection[RequestKey]) -> list[Entry]:
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
        writes = {p: k for p, k in entry.writes.items() if not _under(p, covered)}
        if len(writes) == len(entry.writes):
            out.append(entry)
        elif writes:
            undo = [(p, v) for p, v in entry.undo if not _under(p, covered)]
            out.append(replace(entry, writes=writes, undo=undo))
    out.reverse()
    return out


def _under(path: Path, paths: set[Path]) -> bool:
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
