"""Conversions between the core's objects and the wire records (pure logic).

The core speaks :class:`crdt_state.Change` and :class:`crdt_state.Conflict`;
the codec speaks :class:`~sync.wire.changes.WireChange` and :class:`WireConflict`
(both use the core's :data:`crdt_state.MISSING` for absent values).
A conflict the policies did not settle travels with ``resolution`` set to
:data:`UNRESOLVED_NAME`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import crdt_state
from crdt_state import MISSING, UNRESOLVED, Conflict
from sync.wire import changes as wire

__all__ = [
    "UNRESOLVED_NAME",
    "conflict_from_record",
    "conflict_to_record",
    "core_changes",
    "wire_changes",
]

UNRESOLVED_NAME: Final = "unresolved"


def wire_changes(ops: Iterable[crdt_state.Change]) -> list[wire.WireChange]:
    """The core's changes as wire records."""
    return [wire.WireChange(wire.ChangeKind(op.kind), tuple(op.path), op.value) for op in ops]


def core_changes(records: Sequence[wire.WireChange]) -> list[crdt_state.Change]:
    """Wire records as the core's changes (validation happens in ``SharedState.commit``)."""
    return [
        crdt_state.Change(record.kind.value, tuple(record.path), record.value) for record in records
    ]


def conflict_to_record(conflict: Conflict) -> wire.WireConflict:
    """A core conflict as a wire record."""
    resolved = conflict.resolution is not UNRESOLVED
    return wire.WireConflict(
        path=tuple(conflict.path),
        base=conflict.base,
        current=conflict.current,
        incoming=conflict.incoming,
        current_agent=conflict.current_agent,
        incoming_agent=conflict.incoming_agent,
        resolution=(conflict.policy or "policy") if resolved else UNRESOLVED_NAME,
        value=conflict.resolution if resolved else MISSING,
        same_value=conflict.same_value,
    )


def conflict_from_record(record: wire.WireConflict) -> Conflict:
    """A wire record as a core conflict (``resolution`` is UNRESOLVED when unsettled)."""
    resolved = record.resolution != UNRESOLVED_NAME
    return Conflict(
        path=tuple(record.path),
        base=record.base,
        current=record.current,
        incoming=record.incoming,
        current_agent=record.current_agent,
        incoming_agent=record.incoming_agent or "",
        resolution=record.value if resolved else UNRESOLVED,
        policy=record.resolution if resolved else None,
    )
