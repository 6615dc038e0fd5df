"""Which change-log entries touched which paths: the index behind cheap merges (pure logic).

A merge only has to look at the entries since its fork base that wrote a
path overlapping one of its own (the same path, an ancestor or a
descendant). :class:`PathIndex` lists, for every path an entry touched, the
sequence numbers of those entries in increasing order, so the entries after
a base that touch a path are found with a binary search per list instead of
a scan of everything merged since the base.
:class:`~crdt_state._changelog.ChangeLog` feeds it as it appends and trims.

"Touched" means written (``Entry.writes``) or restored by an undo record
(``Entry.undo``, which may name an ancestor of a written path): conflict
detection reads the first, rolling a value back reads the second.

Even the entries that touched a path can be many (a thousand agents forked
from one base all incrementing one counter). :func:`choose_for_merge` and
:func:`reading_entries` pick among them the few that decide the outcome,
walking the lists from their ends: the newest write (whose agent a conflict
names), a write that is not a concurrent append (which makes appends
conflict), and the entries back to the one that restores the path whole
(all that rolling the value back to the base needs).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from heapq import merge

from ._entry import Entry, TruncateTo
from .paths import Path, is_prefix
from .version import VersionVector

__all__ = ["PathIndex", "choose_for_merge", "reading_entries"]

Indexed = tuple[Mapping[Path, str], Iterable[tuple[Path, object]]]
"""What an entry is indexed under: its ``writes`` (path -> kind) and its ``undo`` records."""
Seqs = int | list[int]
"""The seqs indexed under one path: one seq alone, or an increasing list."""
Lists = list[tuple[list[int], int, int]]
"""Index lists as :meth:`PathIndex.related` gives them: ``(seqs, start, relation)``."""


class PathIndex:
    """Sequence numbers of log entries by the paths they touched.

    ``at[p]``: entries that touched exactly ``p``; ``replaced[p]``: entries that
    wrote exactly ``p`` other than by an append (a set or a delete);
    ``below[p]``: entries that touched a path strictly below ``p``. Each is an
    increasing list holding a seq once, or the seq alone when there is one
    (most paths are touched by one retained entry: a big commit then costs one
    dictionary slot per path and table). Entries are added in seq order and
    dropped oldest first (:meth:`drop`), so memory follows what the log retains.
    """

    __slots__ = ("_at", "_below", "_replaced")

    def __init__(self) -> None:
        self._at: dict[Path, Seqs] = {}
        self._replaced: dict[Path, Seqs] = {}
        self._below: dict[Path, Seqs] = {}

    def __len__(self) -> int:
        """How many distinct paths the retained entries touched."""
        return len(self._at)

    def add(
        self, seq: int, writes: Mapping[Path, str], undo: Iterable[tuple[Path, object]]
    ) -> None:
        """Index entry ``seq`` under the paths it wrote and restores.

        ``seq`` is newer than every seq indexed so far; ``writes`` maps path ->
        kind, ``undo`` holds the entry's undo records.
        """
        at, below, replacing = self._at, self._below, self._replaced
        for path, kind in writes.items():
            if path in at:
                _push(at, path, seq)
            else:  # the common case, inlined: a big commit touches many new paths
                at[path] = seq
            if len(path) > 1:
                for i in range(1, len(path)):
                    _push(below, path[:i], seq)
            if kind != "append":
                if path in replacing:
                    _push(replacing, path, seq)
                else:
                    replacing[path] = seq
        for path, _ in undo:
            if path not in writes:  # (an undo record usually names a written path)
                _push(at, path, seq)
                for i in range(1, len(path)):
                    _push(below, path[:i], seq)

    def drop(self, first_seq: int, dropped: Iterable[Indexed]) -> None:
        """Forget every seq below ``first_seq``.

        ``dropped`` are the ``(writes, undo)`` of the entries dropped (as given
        to :meth:`add`).
        """
        exact: set[Path] = set()
        for writes, undo in dropped:
            exact.update(writes)
            exact.update(path for path, _ in undo)
        prefixes = {path[:i] for path in exact for i in range(1, len(path))}
        _cut(self._at, exact, first_seq)
        _cut(self._below, prefixes, first_seq)
        _cut(self._replaced, exact, first_seq)

    # -- queries ---------------------------------------------------------------------
    def related(self, path: Path, after: int) -> Lists:
        """The lists of entries touching a path that overlaps ``path``.

        Each as ``(seqs, start, relation)``; ``seqs[start:]`` are those above ``after``.

        ``relation`` is how the indexed path relates to ``path``: ``0`` the path
        itself, ``-1`` strictly below it, or ``i`` (``1 <= i < len(path)``) the
        ancestor ``path[:i]``. Lists with nothing above ``after`` are left out.
        """
        out: Lists = []
        _after(self._at.get(path), after, 0, out)
        _after(self._below.get(path), after, -1, out)
        for i in range(1, len(path)):
            _after(self._at.get(path[:i]), after, i, out)
        return out

    def replacing(self, path: Path, after: int) -> Lists:
        """The entries that set or deleted exactly ``path`` after ``after``.

        As :meth:`related` gives lists (relation ``0``; empty when there are none).
        """
        out: Lists = []
        _after(self._replaced.get(path), after, 0, out)
        return out

    def roots_after(self, after: int) -> set[str]:
        """The top-level keys under which some entry newer than ``after`` touched a path.

        A pass over every indexed path.
        """
        return {
            path[0]
            for path, seqs in self._at.items()
            if (seqs if isinstance(seqs, int) else seqs[-1]) > after
        }


def ascending(lists: Lists) -> Iterator[int]:
    """The seqs of ``lists`` (as given by :meth:`PathIndex.related`), merged.

    Increasing, each once. Lazy: taking the first few costs a few steps, whatever
    the lengths.
    """
    if len(lists) == 1:
        seqs, start, _ = lists[0]
        return _tail(seqs, start)
    return _unique(merge(*[_tail(seqs, start) for seqs, start, _ in lists]))


def _tail(seqs: list[int], start: int) -> Iterator[int]:
    """``seqs[start:]`` without copying (``islice`` would step over the first ``start``)."""
    for i in range(start, len(seqs)):
        yield seqs[i]


def _unique(stream: Iterable[int]) -> Iterator[int]:
    last = -1
    for seq in stream:
        if seq != last:
            last = seq
            yield seq


def _push(table: dict[Path, Seqs], path: Path, seq: int) -> None:
    seqs = table.get(path)
    if seqs is None:
        table[path] = seq
    elif isinstance(seqs, int):
        if seqs != seq:
            table[path] = [seqs, seq]
    elif seqs[-1] != seq:
        seqs.append(seq)


def _after(seqs: Seqs | None, after: int, relation: int, out: Lists) -> None:
    """Append ``seqs`` to ``out`` (as a list, with its start) if some are above ``after``."""
    if seqs is None:
        return
    if isinstance(seqs, int):
        if seqs > after:
            out.append(([seqs], 0, relation))
    elif seqs[-1] > after:
        out.append((seqs, bisect_right(seqs, after), relation))


def _cut(table: dict[Path, Seqs], paths: set[Path], first_seq: int) -> None:
    for path in paths:
        seqs = table.get(path)
        if seqs is None:
            continue
        if isinstance(seqs, int):
            if seqs < first_seq:
                del table[path]
            continue
        keep = bisect_left(seqs, first_seq)
        if keep == len(seqs):
            del table[path]
        elif keep:
            del seqs[:keep]


# -- what a read and a merge need -------------------------------------------------------
EntryAt = Callable[[int], Entry]


def reading_entries(index: PathIndex, base_seq: int, path: Path, entry_at: EntryAt) -> list[Entry]:
    """The entries after ``base_seq`` that rolling ``path`` back needs, oldest first.

    Those that touched the path, up to the first that restores it whole (see
    :func:`restores`): processed newest first, :func:`~crdt_state._entry_reads.read_at`
    lets that one overwrite whatever the newer ones did.
    """
    out: list[Entry] = []
    lists = index.related(path, base_seq)
    if lists:
        for seq in ascending(lists):
            entry = entry_at(seq)
            out.append(entry)
            if restores(entry, path):
                break
    return out


def choose_for_merge(
    index: PathIndex,
    base_seq: int,
    targets: Mapping[Path, bool],
    entry_at: EntryAt,
    token: VersionVector | None,
) -> set[int]:
    """The seqs of the entries after ``base_seq`` a merge writing ``targets`` is judged on.

    See :meth:`~crdt_state._changelog.ChangeLog.for_merge` for the contract;
    ``targets`` maps each written path to whether the merge appends there,
    and entries ``token`` covers count as seen (left out).
    """
    chosen: set[int] = set()
    for path, appends in targets.items():
        lists = index.related(path, base_seq)
        if lists:
            _choose(index, path, appends, lists, base_seq, entry_at, token, chosen)
    return chosen


def _choose(
    index: PathIndex,
    path: Path,
    appends: bool,
    lists: Lists,
    base_seq: int,
    entry_at: EntryAt,
    token: VersionVector | None,
    chosen: set[int],
) -> None:
    """Add to ``chosen`` what one target needs (see :func:`choose_for_merge`)."""
    newest = _newest(path, lists, entry_at, token)
    if newest is None:
        return  # nothing unseen wrote an overlapping path: no conflict, no read
    chosen.add(newest)
    if appends:  # appends alone on both sides are no conflict: find a write that is not one
        others = index.replacing(path, base_seq) + [item for item in lists if item[2] != 0]
        witness = _newest(path, others, entry_at, token)
        if witness is None:
            return
        chosen.add(witness)
    for seq in ascending(lists):  # what read_at needs for the value at the base
        entry = entry_at(seq)
        if token is not None and entry.covered_by(token):
            continue
        chosen.add(seq)
        if restores(entry, path):
            break


def _newest(path: Path, lists: Lists, entry_at: EntryAt, token: VersionVector | None) -> int | None:
    """The newest entry of ``lists`` that ``token`` does not cover and that wrote there.

    There: a path related to ``path`` as its list says (each list is walked from
    its newest end).
    """
    newest = 0
    for seqs, start, relation in lists:
        for i in range(len(seqs) - 1, start - 1, -1):
            seq = seqs[i]
            if seq <= newest:
                break
            entry = entry_at(seq)
            if wrote(entry.writes, path, relation) and (
                token is None or not entry.covered_by(token)
            ):
                newest = seq
                break
    return newest or None


def wrote(writes: Mapping[Path, str], path: Path, relation: int) -> bool:
    """True when ``writes`` has a path related to ``path`` as ``relation`` says.

    ``0`` the path itself, ``-1`` strictly below it, ``i`` its ancestor ``path[:i]``.
    """
    if relation == 0:
        return path in writes
    if relation > 0:
        return path[:relation] in writes
    n = len(path)
    return any(len(p) > n and p[:n] == path for p in writes)


def restores(entry: Entry, path: Path) -> bool:
    """True when ``entry`` has an undo record giving ``path`` its whole old value.

    At the path or an ancestor; a :class:`TruncateTo` only shortens a list.
    """
    return any(
        is_prefix(written, path) and not isinstance(before, TruncateTo)
        for written, before in entry.undo
    )
