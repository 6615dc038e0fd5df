"""The exceptions of crdt-state, one family under :class:`CrdtStateError`.

Every error carries a stable machine-readable ``code``, the ``path`` it is about
(when there is one) and a ``details`` mapping with the values involved, next to
the human message. Each also subclasses the builtin that matches its meaning,
so ``except KeyError`` or ``except TypeError`` keeps working::

    CrdtStateError(Exception)
    ├── InvalidPath(KeyError)            code "invalid_path"
    │   ├── PathNotFound                 code "path_not_found"
    │   └── DuplicatePath                code "duplicate_path"
    ├── WrongType(TypeError)             code "wrong_type"
    ├── UnsupportedValue(TypeError)      code "unsupported_value"
    ├── InvalidUpdate(ValueError)        code "invalid_update"
    ├── SchemaError(ValueError)          code "schema"
    ├── BranchClosed(RuntimeError)       code "branch_closed"
    ├── WriteFailed(RuntimeError)        code "write_failed"
    ├── WriteInListener(RuntimeError)    code "write_in_listener"
    ├── RequestReused(ValueError)        code "request_reused"
    ├── StorageError(OSError)            code "storage"
    │   ├── StateClosed                  code "state_closed"
    │   └── ReadOnlyStore                code "read_only_store"
    ├── UnknownBase(LookupError)         code "unknown_base"
    │   └── StaleBase                    code "stale_base"
    │       └── BrokenChain              code "broken_chain"
    └── ConflictError                    code "conflict"
        └── RetryExhausted               code "retry_exhausted"

``ConflictError`` and ``RetryExhausted`` carry :class:`~crdt_state.conflicts.Conflict`
objects, so they are defined next to them in :mod:`crdt_state.conflicts` (this module
imports nothing from the package: every other module may import it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = [
    "BranchClosed",
    "INTERRUPTS",
    "BrokenChain",
    "CrdtStateError",
    "DuplicatePath",
    "InvalidPath",
    "InvalidUpdate",
    "PathNotFound",
    "ReadOnlyStore",
    "RequestReused",
    "SchemaError",
    "StaleBase",
    "StateClosed",
    "StorageError",
    "UnknownBase",
    "UnsupportedValue",
    "WriteFailed",
    "WriteInListener",
    "WrongType",
    "translate_failures",
]


class CrdtStateError(Exception):
    """Root of every error raised by crdt-state.

    Attributes:
        code: stable identifier, safe to match on in programs and prompts.
        message: the human explanation.
        path: the state path concerned, as a tuple of keys, or ``None``.
        details: the values involved (JSON-friendly where possible).
    """

    code: str = "crdt_state_error"

    def __init__(
        self,
        message: str,
        *,
        path: Sequence[str] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path: tuple[str, ...] | None = tuple(path) if path is not None else None
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        where = f" at {_show_path(self.path)}" if self.path is not None else ""
        return f"[{self.code}]{where}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly description: code, message, path and details."""
        return {
            "code": self.code,
            "message": self.message,
            "path": list(self.path) if self.path is not None else None,
            "details": self.details,
        }


def _show_path(path: Sequence[str]) -> str:
    """The path as messages show it: dotted when unambiguous, cut at 200 characters.

    (``path`` on the error keeps it whole; a 10,000-key path made a 20 KB message.)
    """
    shown = (
        repr(tuple(path)) if any("." in key or not key for key in path) else repr(".".join(path))
    )
    return shown if len(shown) <= 200 else f"{shown[:150]}...{shown[-40:]} ({len(path)} keys)"


class InvalidPath(CrdtStateError, KeyError):
    """A path is malformed (empty, a non-string key) or cannot be addressed."""

    code = "invalid_path"

    def __str__(self) -> str:  # KeyError would repr() the message
        return CrdtStateError.__str__(self)


class PathNotFound(InvalidPath):
    """A path that must exist (``delete``, ``branch[key]``) does not."""

    code = "path_not_found"


class DuplicatePath(InvalidPath):
    """A change set names one path twice (each path may be written once per merge)."""

    code = "duplicate_path"


class WrongType(CrdtStateError, TypeError):
    """An operation meets a value of the wrong kind (append to a non-list...)."""

    code = "wrong_type"


class UnsupportedValue(CrdtStateError, TypeError):
    """A value cannot be stored: not JSON data, a non-str key, NaN, a huge int."""

    code = "unsupported_value"


class InvalidUpdate(CrdtStateError, ValueError):
    """Bytes given as a Yjs update (or state vector) could not be applied."""

    code = "invalid_update"

    @classmethod
    def from_failure(cls, exc: BaseException, update: bytes) -> InvalidUpdate:
        """The refusal of ``update``, which pycrdt failed on with ``exc``."""
        return cls(f"update refused: {exc}", details={"size": len(update)})


class SchemaError(CrdtStateError, ValueError):
    """A write or merge would make the state invalid for its pydantic schema.

    ``errors`` holds one entry per problem, shaped like pydantic's error
    details: ``{"type", "loc", "msg", "input"}``.
    """

    code = "schema"

    def __init__(
        self,
        message: str,
        *,
        errors: Sequence[Mapping[str, Any]] = (),
        path: Sequence[str] | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message, path=path, details=details)
        self.errors: list[dict[str, Any]] = [dict(e) for e in errors]

    def to_dict(self) -> dict[str, Any]:
        """The error's data, with its pydantic-shaped ``errors``."""
        out = super().to_dict()
        out["errors"] = self.errors
        return out


class BranchClosed(CrdtStateError, RuntimeError):
    """The branch was discarded (or merged) and takes no more writes."""

    code = "branch_closed"


class StorageError(CrdtStateError, OSError):
    """A state file cannot be used: foreign, damaged, newer, locked, or a write failed.

    The file is never modified when it is refused. ``details`` names the file
    (``"file"``) and, for SQLite failures, the underlying error (``"sqlite"``).
    """

    code = "storage"


class StateClosed(StorageError):
    """The durable state was closed: it takes no more writes (reopen the file).

    Raised before anything changes, in memory or on disk. ``details`` names the
    file (``"file"``).
    """

    code = "state_closed"


class ReadOnlyStore(StorageError):
    """The state (or store) was opened ``read_only=True``: it takes no writes.

    Raised before anything changes, in memory or on disk, by every write: merges,
    commits, ``apply_update``, branch writes, and the store's own queueing.
    ``details`` names the file (``"file"``) or database (``"database"``) and has
    ``"reason": "read_only"``.
    """

    code = "read_only_store"


class WriteFailed(CrdtStateError, RuntimeError):
    """Writing a merge into the Yjs document failed half-way, and was rolled back.

    Nothing of the merge stays: every path it had written is back to its
    value before the merge, in the document, the mirror, the log, the file and
    every replica. ``path`` is the write that failed; ``details`` holds the
    ``cause`` (the underlying exception, also chained as ``__cause__``), the
    ``agent`` and ``rolled_back`` (False only if even the rollback failed; the
    state then holds what the document holds, and still agrees everywhere).
    """

    code = "write_failed"


class WriteInListener(CrdtStateError, RuntimeError):
    """A listener of :meth:`SharedState.subscribe` tried to change the state it listens to.

    Listeners are told under the state's lock, while a change is being made: a write from
    one would land in the middle of it, out of order. Raised before anything changes (the
    change being told stands); hand the write to another thread or task instead.
    """

    code = "write_in_listener"


class RequestReused(CrdtStateError, ValueError):
    """A request key (writer, request id) already applied names a merge of other paths.

    A re-sent merge is answered with its first result; one that writes other paths under
    the same key is another merge, from a second client with the same writer id (a copy
    of a client's ``local`` file, say): refused, where it was silently taken for a
    re-send and lost. ``details``: ``writer``, ``request_id``, ``applied`` (the first
    merge's paths) and ``paths`` (this one's).
    """

    code = "request_reused"


class UnknownBase(CrdtStateError, LookupError):
    """A base token names changes this state has never seen."""

    code = "unknown_base"


class StaleBase(UnknownBase):
    """A base token is older than the retained change history."""

    code = "stale_base"


class BrokenChain(StaleBase):
    """A merge builds on earlier merges of its writer that were not applied as sent.

    See ``SharedState.commit(builds_on=...)``: every request of the chain must
    have been applied without conflict. ``details`` names the ``writer`` and the
    ``request_ids`` at fault (the lowest 100; ``unlisted``: how many more, when there
    are more). Nothing was applied; like :class:`StaleBase`, the
    agent step can be re-run on fresh state (``transact`` does).
    """

    code = "broken_chain"


INTERRUPTS: tuple[type[BaseException], ...] = (KeyboardInterrupt, SystemExit, GeneratorExit)
"""The ``BaseException``s never translated into a library error (pycrdt panics are
``BaseException`` too: code that catches those re-raises these as they are)."""


@contextmanager
def translate_failures(
    wrap: Callable[[BaseException], BaseException],
    *,
    keep: tuple[type[BaseException], ...] = (),
) -> Iterator[None]:
    """Turn any failure of the block into ``wrap(failure)``, except interrupts.

    pycrdt reports bad input as ``ValueError`` and panics of its Rust core as
    ``PanicException``, a ``BaseException``; both become the library error
    ``wrap`` builds (raised ``from`` the original). :data:`INTERRUPTS` and the
    types in ``keep`` propagate unchanged.

    Args:
        wrap: builds the error to raise from the failure caught.
        keep: exception types re-raised as they are (errors already translated).

    Raises:
        BaseException: what ``wrap`` returns, or the interrupt / kept error.
    """
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, (*INTERRUPTS, *keep)):
            raise
        raise wrap(exc) from exc
