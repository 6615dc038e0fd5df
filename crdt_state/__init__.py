"""crdt-state: shared state for many concurrent agents, without lost updates.

Agents fork a :class:`Branch` from a :class:`SharedState`, edit it while they
wait on slow work, and merge it back. Disjoint writes merge without conflict;
any two writes to overlapping paths since the fork base, whatever the values,
are reported as :class:`Conflict` and settled by per-path policies
(:mod:`crdt_state.resolvers`) or a retry.
The state is a Yjs document (root ``Y.Map`` named ``state``), so any Yjs peer
can replicate it.
"""

from __future__ import annotations

from . import resolvers
from .branch import Branch, BranchHost
from .conflicts import (
    UNRESOLVED,
    Change,
    Conflict,
    ConflictError,
    MergeResult,
    RetryExhausted,
    StateUpdate,
)
from .errors import (
    BranchClosed,
    BrokenChain,
    CrdtStateError,
    DuplicatePath,
    InvalidPath,
    InvalidUpdate,
    PathNotFound,
    ReadOnlyStore,
    RequestReused,
    SchemaError,
    StaleBase,
    StateClosed,
    StorageError,
    UnknownBase,
    UnsupportedValue,
    WriteFailed,
    WriteInListener,
    WrongType,
)
from .journal import BlameEntry, ConflictRecord, HistoryEntry, StateStore
from .paths import Path, Pattern, format_path, parse_path
from .retry import Retry
from .schema import StateSchema
from .state import SharedState
from .values import MAX_DEPTH, MISSING
from .version import VersionVector

__all__ = [
    "MAX_DEPTH",
    "MISSING",
    "UNRESOLVED",
    "BlameEntry",
    "Branch",
    "BranchHost",
    "BranchClosed",
    "BrokenChain",
    "Change",
    "Conflict",
    "ConflictError",
    "ConflictRecord",
    "CrdtStateError",
    "DuplicatePath",
    "HistoryEntry",
    "InvalidPath",
    "InvalidUpdate",
    "MergeResult",
    "Path",
    "PathNotFound",
    "ReadOnlyStore",
    "RequestReused",
    "Pattern",
    "Retry",
    "RetryExhausted",
    "SchemaError",
    "SharedState",
    "StaleBase",
    "StateSchema",
    "StateStore",
    "StateClosed",
    "StateUpdate",
    "StorageError",
    "UnknownBase",
    "UnsupportedValue",
    "VersionVector",
    "WriteFailed",
    "WriteInListener",
    "WrongType",
    "format_path",
    "parse_path",
    "resolvers",
]

__version__ = "0.1.0"
