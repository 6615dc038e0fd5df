"""Folding log rows into a new snapshot: the pycrdt half of compaction (no SQL).

Compaction replays the snapshot and the oldest log rows into a fresh document and
stores its encoding as the new snapshot. Reading a whole log row (its token decoded,
its paths parsed) and checking each row's token cost ~12 µs a row, more than the
replay itself (~2.6 µs): the rows folded away need neither. A fold reads only the
updates and the last row's token (:class:`FoldRows`); the document the updates give
must have that token, which an update that is damaged, missing or out of order
cannot give (its state vector would differ, or the update would stay pending). A
token of a row in the middle does not matter any more once folded; when the last
one does not match, the store re-reads the rows with every token (:func:`replay`,
which reopening a state uses too) to name the damaged row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pycrdt import Doc

from ._document import doc_snapshot
from .errors import StorageError, translate_failures
from .journal import StoredState
from .version import VersionVector

__all__ = ["FoldRows", "Folded", "fold", "fold_rows", "replay"]


def _damaged(exc: BaseException) -> StorageError:
    return StorageError(f"the state file is damaged: {exc}")


def _version(doc: Doc[Any]) -> VersionVector:
    return VersionVector.from_state(doc.get_state())


def _snapshot_doc(snapshot: bytes, token: VersionVector) -> Doc[Any]:
    """A fresh document holding ``snapshot``, which must give ``token``.

    Raises:
        StorageError: the snapshot does not decode or does not give its token.
    """
    doc: Doc[Any] = Doc()
    with translate_failures(_damaged, keep=(StorageError,)):
        doc.apply_update(snapshot)
    if _version(doc) != token:
        raise StorageError("the state file is damaged: the snapshot does not match its token")
    return doc


def replay(stored: StoredState, on_change: Callable[[], None] | None = None) -> Doc[Any]:
    """A fresh document holding the snapshot plus the changes, each change's token checked.

    ``on_change()`` runs after each change applied (progress).

    Raises:
        StorageError: an update does not decode or does not give its token.
    """
    doc = _snapshot_doc(stored.snapshot, stored.snapshot_token)
    with translate_failures(_damaged, keep=(StorageError,)):
        for change in stored.changes:
            doc.apply_update(change.update)
            if _version(doc) != change.token:
                raise StorageError(
                    "the state file is damaged: a change does not match its token",
                    details={"seq": change.seq},
                )
            if on_change is not None:
                on_change()
    return doc


@dataclass(frozen=True, slots=True)
class FoldRows:
    """What a fold reads: the snapshot, then the updates of the rows up to ``seq``.

    Attributes:
        snapshot_seq: the seq of the snapshot.
        snapshot_token: the snapshot's token.
        snapshot: the snapshot's document update (decompressed).
        updates: the updates of log rows ``snapshot_seq + 1 .. seq``, in order.
        seq: the seq of the last row folded.
        token: the token of row ``seq``.
    """

    snapshot_seq: int
    snapshot_token: VersionVector
    snapshot: bytes
    updates: list[bytes]
    seq: int
    token: VersionVector


def fold_rows(
    snapshot: tuple[int, VersionVector, bytes],
    rows: Sequence[tuple[int, bytes]],
    token: VersionVector,
    noun: str,
) -> FoldRows:
    """The rows of a fold from ``(seq, update)`` rows read in seq order (seqs are unique).

    Args:
        snapshot: ``(seq, token, update)`` of the snapshot.
        rows: at least one ``(seq, update)`` row, the seqs unique and ascending.
        token: the token of the last row.
        noun: the store's name for itself in errors ("state file", ...).

    Raises:
        StorageError: the seqs do not follow the snapshot without a gap.
    """
    snap_seq = snapshot[0]
    last = rows[-1][0]
    if rows[0][0] != snap_seq + 1 or last != snap_seq + len(rows):  # unique, ascending
        expected, found = next(
            (want, seq) for want, (seq, _) in enumerate(rows, start=snap_seq + 1) if seq != want
        )
        raise StorageError(
            f"the {noun} is damaged: the change log has a gap",
            details={"expected_seq": expected, "found_seq": found},
        )
    return FoldRows(snap_seq, snapshot[1], snapshot[2], [r[1] for r in rows], last, token)


@dataclass(frozen=True, slots=True)
class Folded:
    """A fold's result: the document, its content and its encoding (the new snapshot)."""

    doc: Doc[Any]
    content: dict[str, Any]
    encoded: bytes


def fold(
    rows: FoldRows,
    on_change: Callable[[], None] | None = None,
    *,
    precise: Callable[[], object],
) -> Folded:
    """Replay ``rows`` into a fresh document and encode it, checked twice.

    The snapshot must give its token, the last update the last row's token, and the
    encoding must decode to the same content. ``on_change()`` runs after each update
    applied (progress).

    Args:
        rows: what to fold.
        on_change: progress, once per update.
        precise: called when the last token does not match; it re-reads the rows with
            every row's token checked and raises the error that names the row (this
            function raises a general one if it returns).

    Raises:
        StorageError: an update does not decode, a token does not match, or the
            encoding does not decode to the same content (nothing changed).
    """
    doc = _snapshot_doc(rows.snapshot, rows.snapshot_token)
    # one transaction for all of them: its clean-up runs once (~2 µs a row instead of ~3)
    with translate_failures(_damaged, keep=(StorageError,)), doc.transaction():
        for update in rows.updates:
            doc.apply_update(update)
            if on_change is not None:
                on_change()
    if _version(doc) != rows.token:
        precise()
        raise StorageError(
            "the state file is damaged: the changes do not give their token",
            details={"seq": rows.seq},
        )
    content = doc_snapshot(doc)
    encoded = bytes(doc.get_update())
    if doc_snapshot(_snapshot_doc(encoded, rows.token)) != content:
        raise StorageError("a compacted snapshot does not decode to the same content")
    return Folded(doc, content, encoded)
