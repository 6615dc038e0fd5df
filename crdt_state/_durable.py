"""Durability on the state's side: reopening from a store, new epochs, the first snapshot.

The store (:class:`~crdt_state.journal.StateStore`) never sees the state: the
state reads what the store holds and replays it here (:func:`restore`),
describes a new state for the store to create (:func:`initial`), and rebuilds
its document when the store asks for a new epoch (:func:`start_epoch`).

Replaying logs ``replay_start``, ``replay_progress`` and ``replay_done`` (``done`` of
``total`` stored changes, ``store``: the store's name) on ``crdt_state.storage``; at DEBUG
unless it takes half a second or more (:mod:`crdt_state.progress`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from . import _document as ydoc
from ._changelog import ChangeLog
from ._core import StateCore
from ._events import collect_writes, mirror_writes, root_most
from ._state_reads import StateReads
from .conflicts import WriteKind
from .errors import StorageError, translate_failures
from .journal import (
    BlameEntry,
    EpochStart,
    StateStore,
    StoredChange,
    StoredRequest,
    StoredState,
)
from .paths import Path
from .progress import ProgressLog
from .requests import RequestKey
from .values import nesting
from .version import VersionVector

__all__ = ["client_id_for", "extend", "initial", "open_store", "restore", "start_epoch"]

S = TypeVar("S", bound=StateReads)
log = logging.getLogger("crdt_state.storage")


def open_store(make: Callable[..., S], store: StateStore, options: dict[str, Any]) -> S:
    """Create or reopen the state ``store`` keeps (see ``SharedState.open_store``).

    Args:
        make: the state's class, called with the constructor's ``options``.
        store: the storage, freshly opened; closed here if opening fails. The
            caller then hands the store its epoch handler (``on_epoch_due``).
        options: the constructor's keyword arguments.

    Raises:
        StorageError: the stored data is damaged, ``client_id`` is unsafe, or a
            ``read_only`` store holds nothing yet (``details["reason"]`` ``"missing"``).
    """
    read_only = bool(getattr(store, "read_only", False))
    try:
        stored = store.load()
        if stored is None and read_only:
            raise StorageError(
                "nothing is stored here yet (a read-only store cannot create the state)",
                details={"store": store.name, "reason": "missing"},
            )
        if stored is None:
            state = make(**options)
            store.create(*initial(state._core))
        else:
            client_id = client_id_for(stored, options.get("client_id"), store.name)
            state = make(**{**options, "client_id": client_id, "initialize": False})
            restore(state._core, stored, store.name)
    except BaseException:
        store.close()
        raise
    core = state._core
    with core.lock:
        core.read_only = read_only
        core.observe_updates()  # the store needs each change's update bytes
        core.store = store
    return state


def initial(core: StateCore) -> tuple[StoredState, list[BlameEntry]]:
    """What a new store holds for ``core``.

    Its document as the snapshot, and the blame of the changes already made
    (schema defaults).
    """
    with core.lock:
        blame = [
            BlameEntry(path=p, agent=e.agent, time=e.time, token=e.token, seq=e.seq)
            for e in core.log.entries()
            for p in e.writes
        ]
        snapshot = bytes(core.doc.get_update())  # the document is not shared by this
        stored = StoredState(core.log.head_seq, core.log.head_token, snapshot)
    return stored, blame


def client_id_for(stored: StoredState, client_id: int | None, where: str) -> int:
    """The Yjs client id a reopened state writes with: fresh, unless one is given.

    A reopened state never reuses a client id that has changes in the store:
    some of its updates may live on other replicas and not in the store
    (see docs/architecture.md, "Client ids").

    Raises:
        StorageError: ``client_id`` already wrote to the store.
    """
    head = stored.head
    if client_id is not None:
        if head.get_clock(int(client_id)) > 0:
            raise StorageError(
                "this client id already wrote to the file; reusing it is unsafe "
                "(some of its updates may exist elsewhere but not here): omit client_id",
                details={"file": where, "client_id": client_id},
            )
        return int(client_id)
    while True:
        candidate = random.getrandbits(32)
        if candidate and candidate not in head:
            return candidate


def restore(core: StateCore, stored: StoredState, where: str) -> None:
    """Load stored content into a fresh core without logging it as new changes.

    The stored changes are replayed into the change log with their own seqs,
    so fork bases among them are judged exactly and older bases are stale;
    the stored requests are remembered again, and the entries they made are
    marked, so chains of them judge like before. Listeners and store are not told.

    Raises:
        StorageError: the stored updates do not decode or do not give the
            recorded versions (the store is damaged).
    """
    stage = ["the snapshot"]  # what _replay is applying

    def damaged(exc: BaseException) -> StorageError:
        return StorageError(
            f"the state file is damaged: {stage[0]} does not decode as a Yjs update "
            f"({type(exc).__name__}: {exc})",
            details={"file": where, "update": stage[0]},
        )

    progress = ProgressLog(log, "replay", f"replaying {where}", len(stored.changes),
                           unit="changes", quiet=True, store=where)  # fmt: skip
    progress.start()
    try:
        with translate_failures(damaged):
            tokens = _replay(core, stored, stage, progress.advance)
    finally:
        progress.finish()
    expected = [change.token for change in stored.changes]
    if tokens != expected or core.log.head_token != stored.head:
        raise StorageError(
            "the state file is damaged: replaying its snapshot and changes does not give"
            " the versions recorded with them (the token column or an update is wrong)",
            details={"file": where, "head": str(stored.head), "restored": str(core.log.head_token)},
        )
    _remember(core, stored.requests)


def _remember(core: StateCore, requests: Sequence[StoredRequest]) -> None:
    """Remember the stored ``requests`` again and mark the log entries they made."""
    made_by: dict[int, RequestKey] = {}
    for request in requests:
        core.requests.remember(request.key, request.token, request.paths, request.clean)
        if request.paths:  # a request that wrote nothing made no change
            made_by[request.seq] = request.key
    for entry in core.log.entries():  # chains of these requests judge like before the restart
        entry.request = made_by.get(entry.seq, entry.request)


def extend(core: StateCore, changes: Sequence[StoredChange],
           requests: Sequence[StoredRequest], where: str) -> None:  # fmt: skip
    """Replay ``changes`` stored after what ``core`` was restored from, and ``requests``.

    For a state loaded while another writer still committed (a judge loaded before its
    claim): the changes continue its log with their own seqs (the first is the seq after
    its head), exactly as :func:`restore` would have replayed them, and ``requests``
    (the store's newest remembered requests, oldest first) are remembered again.
    Listeners and store are not told.

    Raises:
        StorageError: the changes do not continue the log, do not decode or do not give
            the recorded versions (nothing is undone: close the state).
    """
    stage = ["the first change"]

    def damaged(exc: BaseException) -> StorageError:
        return StorageError(
            f"the stored state is damaged: {stage[0]} does not decode as a Yjs update "
            f"({type(exc).__name__}: {exc})",
            details={"file": where, "update": stage[0]},
        )

    with core.lock:
        if changes and changes[0].seq != core.log.head_seq + 1:
            raise StorageError(
                f"the stored changes start at seq {changes[0].seq}, not after the state's"
                f" head {core.log.head_seq}",
                details={"file": where, "reason": "gap"},
            )
        with translate_failures(damaged):
            tokens = _apply_stored(core, changes, stage, lambda: None)
        core.updates.clear()  # the document's observer saw them: they are not new changes
        core.depth_mark = max(core.depth_mark, nesting(core.mirror))
        if tokens != [change.token for change in changes]:
            raise StorageError(
                "the stored state is damaged: replaying its new changes does not give"
                " the versions recorded with them",
                details={"file": where, "head": str(core.log.head_token)},
            )
        _remember(core, requests)


def _replay(
    core: StateCore, stored: StoredState, stage: list[str], advance: Callable[[], None]
) -> list[VersionVector]:
    """Apply the snapshot and every stored change; the token after each change.

    ``stage[0]`` names the update being applied (for the error if one fails);
    ``advance()`` runs after each change.
    """
    with core.lock:
        if core.log.head_seq != 0 or core.store is not None:
            raise RuntimeError("only a fresh state without a store can be restored")
        if stored.snapshot:
            core.doc.apply_update(stored.snapshot)
        core.mirror = ydoc.doc_snapshot(core.doc)
        token = VersionVector.from_state(core.doc.get_state())
        core.log = ChangeLog(
            token,
            limit=core.log.limit,
            limit_bytes=core.log.limit_bytes,
            start_seq=stored.snapshot_seq,
        )
        tokens = _apply_stored(core, stored.changes, stage, advance)
        core.depth_mark = nesting(core.mirror)
        return tokens


def _apply_stored(
    core: StateCore,
    changes: Sequence[StoredChange],
    stage: list[str],
    advance: Callable[[], None],
) -> list[VersionVector]:
    """Apply stored changes after the log's head (``core.lock`` held); the token after each."""
    tokens: list[VersionVector] = []
    changed: dict[Path, WriteKind] = {}
    on_events = collect_writes(changed, core.mirror)
    for change in changes:
        stage[0] = f"the change at seq {change.seq}"
        changed.clear()
        with core.deep.routed(core.root, on_events):
            core.doc.apply_update(change.update)
        writes = as_recorded(root_most(changed), change.paths)
        with core.doc.transaction():  # one read transaction for the reads, not one each
            undo = mirror_writes(core.root, core.mirror, writes)
            state = core.doc.get_state()
        token = VersionVector.from_state(state)
        entry = core.log.append(change.agent, token, writes, undo, origin=change.origin)
        entry.time = change.time
        tokens.append(token)
        advance()
    # a state that only merges locally from now on pays no deep callback per commit
    # (about 5 us); one that integrates updates subscribes again on its first
    core.deep.detach()
    return tokens


def as_recorded(writes: dict[Path, WriteKind], recorded: tuple[Path, ...]) -> dict[Path, WriteKind]:
    """The writes of a replayed change, as fine as its merge recorded them (pure).

    A merge that created a map (``own.w0`` where ``own`` was absent) shows in its Yjs
    update as a write of the whole map (``own``), while the merge recorded the key it
    wrote. Judged against the coarse path, a later merge on an older base writing
    ``own.w2`` was a false conflict after a reopen (not before it). A write with
    recorded paths strictly below it, and none at or above it, is replaced by those
    (as ``"set"``: the update does not tell an append apart); any other write is kept.
    """
    if not recorded:
        return writes
    out: dict[Path, WriteKind] = {}
    for path, kind in writes.items():
        size = len(path)
        finer = [p for p in recorded if len(p) > size and p[:size] == path]
        if finer and not any(path[: len(p)] == p for p in recorded if len(p) <= size):
            for p in finer:
                out[p] = "set"
        else:
            out[path] = kind
    return out


def start_epoch(core: StateCore) -> bool:
    """Rebuild the Yjs document from the content alone: a new epoch, no tombstones.

    A Yjs document keeps a small record of every overwritten map entry, so
    it grows with the number of merges. A durable state that never shared
    its document (no ``get_update``/``apply_update``/``subscribe``) can drop
    them: the content is written into a fresh document with a new client id.
    Tokens and fork bases of earlier epochs become stale (``StaleBase``;
    ``transact`` re-runs, ``branch.rebase()`` moves a branch over). The store
    records the new document as its whole history
    (:meth:`~crdt_state.journal.StateStore.record_epoch`).

    Returns:
        False (and nothing done) for a shared document or a closed state.
    """
    with core.lock:
        if core.shared or core.closed:
            return False
        doc = ydoc.doc_from_content(core.mirror, meta={"epoch": core.epoch + 1})
        retired = set(core.log.retired) | set(core.log.head_token)
        core.replace_document(doc)
        token = VersionVector.from_state(doc.get_state())
        seq = core.log.head_seq + 1
        core.log = ChangeLog(
            token,
            limit=core.log.limit,
            limit_bytes=core.log.limit_bytes,
            start_seq=seq,
            retired=retired,
        )
        core.epoch += 1
        if core.store is not None:
            core.store.record_epoch(EpochStart(seq, token, bytes(doc.get_update()), time.time()))
        return True
