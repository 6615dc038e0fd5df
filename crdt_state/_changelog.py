"""The log of changes a state has integrated, and what it answers (pure logic).

Each merge, and each update received from another replica, becomes one
:class:`Entry`: the clock ranges it added, the paths it wrote (for conflict
detection) and how to undo it (to read the state as it was at an older
version). Conflicts are judged against the fork base: only entries *after*
the base are consulted, so the cost follows the size of the changes, not the
size of the state. The log picks the entries a question needs; what a list of
entries answers (the value at an older version, overlaps with a branch, what a
chain has not seen) is in :mod:`crdt_state._entry_reads`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._entry import Entry, TruncateTo, WriteKind, advance, covered_prefix, covers
from ._entry_reads import keys_touched, read_at, under, unseen_by_chain
from ._pathindex import PathIndex, choose_for_merge, reading_entries
from ._sizes import HISTORY_BYTES, oldest_to_drop, undo_bytes
from .errors import StaleBase, UnknownBase
from .paths import Path
from .version import VersionVector

if TYPE_CHECKING:
    from .requests import ChainKey, RequestKey

__all__ = ["ChangeLog", "Entry", "TruncateTo", "WriteKind", "read_at", "unseen_by_chain"]


class ChangeLog:
    """The retained history of one state, oldest first, bounded in length and bytes.

    Sequence numbers start at 1; seq 0 is the initial (empty) state. Entries older than ``limit``
    are dropped, and so are the oldest entries while the values the retained ones keep for undoing
    (:func:`~crdt_state._sizes.undo_bytes`) come to more than ``limit_bytes`` (the newest entry is
    always kept); a base older than what is retained raises :class:`StaleBase`. A log restored from
    storage starts at ``start_seq`` (the seq of ``initial``): bases older than it are stale.
    ``retired`` are the client ids of earlier epochs of the document (see
    ``SharedState._reset_document``): tokens naming them are stale too.

    The retained entries are indexed by the paths they touched
    (:class:`~crdt_state._pathindex.PathIndex`), so judging a merge costs about
    ``O(its paths x log(entries))`` plus the entries that touched its paths,
    whatever else was merged since its base: see :meth:`for_merge`,
    :meth:`related` and :meth:`for_reading`.
    """

    def __init__(
        self,
        initial: VersionVector,
        limit: int = 10_000,
        *,
        limit_bytes: int = HISTORY_BYTES,
        start_seq: int = 0,
        retired: Iterable[int] = (),
    ) -> None:
        for name, value in (("history", limit), ("history_bytes", limit_bytes)):
            if type(value) is not int:
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self.limit = limit
        self.limit_bytes = limit_bytes
        self._entries: list[Entry] = []
        self._sizes: list[int] = []  # undo_bytes of each entry, in step with _entries
        self._bytes = 0
        self._first_seq = start_seq + 1  # seq of _entries[0]
        self._head_seq = start_seq
        self._head_token = initial
        self._token_seq: dict[VersionVector, int] = {initial: start_seq}
        self._initial = (initial, start_seq)
        self._index = PathIndex()
        # every token >= the one before it (Yjs state vectors only grow): seq_of may bisect
        self._monotone = True
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
        """Record a new entry that moved the state from the head token to ``token``.

        The entry's ``writes`` and ``undo`` must not change afterwards (they are indexed).
        """
        self._head_seq += 1
        delta, monotone = advance(self._head_token, token)
        if not monotone:
            self._monotone = False
        entry = Entry(
            seq=self._head_seq,
            agent=agent,
            token=token,
            delta=delta,
            writes=dict(writes),
            undo=undo,
            origin=origin,
            request=request,
        )
        self._entries.append(entry)
        self._sizes.append(undo_bytes(undo))
        self._bytes += self._sizes[-1]
        self._index.add(entry.seq, entry.writes, undo)
        self._head_token = token
        self._token_seq[token] = entry.seq
        if len(self._entries) > self.limit + self.limit // 4 or self._bytes > self.limit_bytes:
            self._trim()
        return entry

    @property
    def retained_bytes(self) -> int:
        """About how many bytes the retained entries' undo values hold."""
        return self._bytes

    def _trim(self) -> None:
        """Drop the oldest entries: down to ``limit``, and to 3/4 of ``limit_bytes``."""
        over = len(self._sizes) - self.limit
        drop = oldest_to_drop(self._sizes, over, self.limit_bytes, self._bytes)
        if drop == 0:
            return
        self._bytes -= sum(self._sizes[:drop])
        del self._sizes[:drop]
        dropped = self._entries[:drop]
        for entry in dropped:
            if self._token_seq.get(entry.token) == entry.seq:
                del self._token_seq[entry.token]
        del self._entries[:drop]
        self._first_seq += drop
        self._index.drop(self._first_seq, [(entry.writes, entry.undo) for entry in dropped])
        # Every token maps to the seq of the entry that holds it (removed above when
        # dropped), except the initial one: no need to scan the whole map.
        initial, start = self._initial
        if start < self._first_seq - 1 and self._token_seq.get(initial) == start:
            del self._token_seq[initial]

    def _check_base(self, base_seq: int) -> None:
        """Raise :class:`StaleBase` / :class:`UnknownBase` unless ``base_seq`` can be judged."""
        if base_seq < self._first_seq - 1:
            raise StaleBase(
                "the fork base is older than the retained history; rebase the branch",
                details={"base_seq": base_seq, "oldest_base": self._first_seq - 1},
            )
        if base_seq > self._head_seq:
            raise UnknownBase("base is ahead of this state", details={"base_seq": base_seq})

    def token_at(self, seq: int) -> VersionVector:
        """The token the state had at log position ``seq`` (a retained position)."""
        if seq == self._head_seq:
            return self._head_token
        self._check_base(seq)
        first = self._entries[seq - self._first_seq + 1]
        clocks = dict(first.token)
        for client, (start, _) in first.delta.items():
            clocks[client] = start
        return VersionVector(clocks)

    def since(self, base_seq: int) -> list[Entry]:
        """Entries after ``base_seq``; :class:`StaleBase` if some were dropped."""
        self._check_base(base_seq)
        return self._entries[base_seq - self._first_seq + 1 :]

    def seq_of(self, token: VersionVector) -> int:
        """The seq at which the state had exactly ``token``.

        A token the log never had (one from another replica) maps to the
        newest entry such that every entry up to it is covered by the token;
        entries after it that the token covers are then judged as concurrent
        only if they were not covered, see :meth:`since_token`. A token the
        log had is found in constant time, any other in ``O(log(entries))``
        comparisons of tokens.
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
        seq = self._first_seq - 1 + self._covered_prefix(token)
        if seq == self._first_seq - 1 and self._first_seq > 1:
            raise StaleBase(
                "the base token is older than the retained history",
                details={"base": str(token)},
            )
        return seq

    def _covered_prefix(self, token: VersionVector) -> int:
        """How many retained entries, oldest first, ``token`` covers before one it does not."""
        if not self._entries:
            return 0
        before = self.token_at(self._first_seq - 1)
        return covered_prefix(self._entries, before, token, monotone=self._monotone)

    def since_token(self, token: VersionVector) -> tuple[int, list[Entry]]:
        """The base seq of ``token`` and every entry since it that ``token`` has not seen."""
        seq = self.seq_of(token)
        return seq, [e for e in self.since(seq) if not e.covered_by(token)]

    def _entry(self, seq: int) -> Entry:
        return self._entries[seq - self._first_seq]

    def related(
        self,
        base_seq: int,
        paths: Iterable[Path],
        token: VersionVector | None = None,
        also: Iterable[Entry] = (),
    ) -> list[Entry]:
        """Every entry after ``base_seq`` that wrote or restored a path overlapping ``paths``.

        Overlapping: equal, ancestor or descendant of one of ``paths``. With those
        of ``also`` after ``base_seq``; those ``token`` covers are left out. Oldest first.

        For ``paths``, :func:`overlaps`, :func:`read_at` and :func:`unseen_by_chain`
        (given ``also`` = the chain's entries, see :meth:`made_by`) answer over this
        list exactly as over every entry since the base. Raises like :meth:`since`.
        """
        self._check_base(base_seq)
        if base_seq == self._head_seq:
            return []
        seqs: set[int] = {entry.seq for entry in also if entry.seq > base_seq}
        for path in paths:
            for listed, start, _ in self._index.related(path, base_seq):
                seqs.update(listed[start:])
        entries = [self._entry(seq) for seq in sorted(seqs)]
        if token is not None:
            return [entry for entry in entries if not entry.covered_by(token)]
        return entries

    def for_reading(self, base_seq: int, path: Path) -> list[Entry]:
        """The entries :func:`read_at` needs to roll ``path`` back to ``base_seq``.

        ``read_at(value, path, log.for_reading(seq, path))`` equals
        ``read_at(value, path, log.since(seq))``: the entries that touched the
        path, oldest first, up to the first that restores it whole (an undo
        record at the path or an ancestor: what newer entries did is then
        overwritten). Raises like :meth:`since`.
        """
        self._check_base(base_seq)
        if base_seq == self._head_seq:
            return []
        return reading_entries(self._index, base_seq, path, self._entry)

    def for_merge(
        self,
        base_seq: int,
        targets: Mapping[Path, bool],
        token: VersionVector | None = None,
    ) -> list[Entry]:
        """The entries after ``base_seq`` that a merge writing ``targets`` must be judged on.

        ``targets`` maps each path the merge writes to whether it appends there.
        Entries ``token`` covers are left out (as in :meth:`since_token`). The
        result, oldest first, is a sub-list of those entries on which
        :func:`~crdt_state.planner.plan_merge` decides exactly as on all of them
        (given ``fast_forward`` apart, see :meth:`moved`): for each target,
        the newest entry that wrote an overlapping path (the conflict's agent);
        for an append, the newest overlapping write that is not an append at
        exactly that path (the one that makes it a conflict), if any; and when
        the target conflicts, the entries that touched it from the oldest up to
        the first that restores it whole (what :func:`read_at` needs for the
        value at the base). A target nothing touched costs a few dictionary
        lookups; one with many overlapping entries costs ``O(log(entries))``
        plus the few entries walked. Raises like :meth:`since`.
        """
        self._check_base(base_seq)
        if base_seq == self._head_seq:
            return []
        chosen = choose_for_merge(self._index, base_seq, targets, self._entry, token)
        return [self._entry(seq) for seq in sorted(chosen)] if chosen else []

    def made_by(
        self,
        base_seq: int,
        chain: Collection[ChainKey],
        tokens_of: Callable[[Collection[ChainKey]], Mapping[ChainKey, VersionVector]],
    ) -> list[Entry]:
        """The retained entries after ``base_seq`` made by the requests of ``chain``.

        With fewer entries since the base than requests, those entries are
        looked at; otherwise each request's entry is found by the token its
        merge gave (``tokens_of(chain)``, from the request memory; a request
        that wrote nothing has no entry). Raises like :meth:`since`.
        """
        self._check_base(base_seq)
        if self._head_seq - base_seq <= len(chain):
            since = self._entries[base_seq - self._first_seq + 1 :]
            return [entry for entry in since if entry.request in chain]
        out: list[Entry] = []
        for key, token in tokens_of(chain).items():
            seq = self._token_seq.get(token)
            while seq is not None and seq > base_seq:
                entry = self._entry(seq)
                if entry.token != token:
                    break
                if entry.request == key:
                    out.append(entry)
                    break
                seq -= 1  # entries that added no clock share their predecessor's token
        return out

    def for_chain(
        self,
        base_seq: int,
        paths: Iterable[Path],
        token: VersionVector | None,
        chain: Collection[ChainKey],
        tokens_of: Callable[[Collection[ChainKey]], Mapping[ChainKey, VersionVector]],
    ) -> tuple[list[Entry], bool]:
        """What a merge built on ``chain`` is judged on, and whether it is no fast-forward.

        The entries :func:`unseen_by_chain` leaves of those after
        ``base_seq`` that ``token`` does not cover, narrowed to those that
        touched ``paths`` (for ``paths``, the same answers as all of them),
        and :meth:`moved`. ``tokens_of`` is as for :meth:`made_by`. Costs
        about the length of the chain plus the entries that touched ``paths``.
        Raises like :meth:`since`.
        """
        links = self.made_by(base_seq, chain, tokens_of)
        if len(links) == self._head_seq - base_seq:
            return [], False  # everything since the base is the chain's own
        entries = unseen_by_chain(self.related(base_seq, paths, token, links), chain)
        return entries, self.moved(base_seq, token, chain, links)

    def moved(
        self,
        base_seq: int,
        token: VersionVector | None = None,
        chain: Collection[ChainKey] = frozenset(),
        links: Sequence[Entry] = (),
    ) -> bool:
        """True when an entry after ``base_seq`` is unseen, so a merge there is no fast-forward.

        Unseen: not covered by ``token``, and, for a merge built on ``chain`` (whose
        retained entries are ``links``, see :meth:`made_by`), neither a link nor an entry
        whose every write a later link overwrote (as :func:`unseen_by_chain` judges).
        Usually answered by the first entry after the base. Raises like :meth:`since`.
        """
        self._check_base(base_seq)
        count = self._head_seq - base_seq
        if not count or (token is None and not chain):
            return count > 0
        entries, first = self._entries, base_seq - self._first_seq + 1
        if token is not None and not chain and not links:  # the common case: any unseen entry
            return not covers(token, entries, first)
        later = [e for e in links if e.seq > base_seq]
        if chain and len({e.seq for e in later}) == count:
            return False  # everything since the base is the chain's own
        if token is not None:
            later = [e for e in later if not e.covered_by(token)]
        for entry in entries[first:]:
            if token is not None and entry.covered_by(token):
                continue
            if chain and entry.request in chain:
                continue
            if not entry.writes:
                return True
            covered = {path for link in later if link.seq > entry.seq for path in link.writes}
            if not covered or not all(under(path, covered) for path in entry.writes):
                return True
        return False

    def keys_since(self, base_seq: int) -> set[str]:
        """The top-level keys under which an entry after ``base_seq`` wrote or restored a path.

        Raises like :meth:`since`.
        """
        self._check_base(base_seq)
        if self._head_seq - base_seq <= len(self._index):
            return keys_touched(self._entries[base_seq - self._first_seq + 1 :])
        return self._index.roots_after(base_seq)

    def entries(self) -> Iterator[Entry]:
        """The retained entries, oldest first."""
        return iter(list(self._entries))
