"""Replication: the Yjs updates a state sends to and receives from other replicas.

:func:`apply_update` integrates an update from any Yjs peer into a state's
core, logged as a change with origin ``"remote"`` so that branches forked
earlier see its writes as concurrent.

Unless the state is a follower (whose authority checked what it sends), a peer's update
passes, before pycrdt integrates it: its clocks (:mod:`crdt_state._update_checks`; one
that starts past the clocks the document holds waits, :mod:`crdt_state._waiting`, and is
offered again after every update applied), the schema of a typed state, the depth of its
values (:mod:`crdt_state._update_depth`), and a trial on a copy of the document
(:mod:`crdt_state._trial`: pycrdt cannot take back half an update).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pycrdt import Doc, get_update

from . import _document as ydoc
from ._core import StateCore
from ._events import (
    collect_writes,
    join_updates,
    mirror_writes,
    root_most,
    writes_by_diff,
    written_depth,
)
from ._update_checks import MAX_CLOCK, Clocks, read_clocks
from ._update_depth import check_update_depth
from ._waiting import MAX_HELD_BYTES
from .conflicts import MergeResult, WriteKind
from .errors import (
    INTERRUPTS,
    CrdtStateError,
    InvalidUpdate,
    translate_failures,
)
from .paths import Path
from .version import VersionVector

__all__ = ["apply_update"]

log = logging.getLogger("crdt_state.replication")


def apply_update(
    core: StateCore, update: bytes, agent: str | None
) -> tuple[MergeResult, int | None]:
    """Integrate ``update`` into ``core``; returns the result and the store's ticket.

    An update that starts past the clocks the document holds of a client waits (the
    result is ``pending``, nothing changed) and lands after the update that brings them.

    A follower (``core.validate_updates`` off) checks neither depth nor schema: its
    authority validated what it sends; one with ``core.check_depth`` on still
    checks the depth (a hub client's replica: a faulty hub must not break it).

    Args:
        core: the state's core.
        update: a Yjs update (bytes-like).
        agent: recorded as the change's agent.

    Raises:
        InvalidUpdate: not bytes, bytes pycrdt refuses, clocks pycrdt would take
            otherwise than Yjs, or too many updates waiting (nothing changed).
        UnsupportedValue: the update would store a value too deep (nothing changed).
        SchemaError: a typed state refuses what the update writes.
        StateClosed: the state is closed.
    """
    if not isinstance(update, (bytes, bytearray, memoryview)):
        raise InvalidUpdate("an update is bytes", details={"type": type(update).__name__})
    data = bytes(update)
    with core.lock:
        core.check_writable()
        clocks = _gate(core, data)
        if clocks.problem is not None:  # it waits for earlier clocks
            if not core.waiting.hold(data, agent):
                raise InvalidUpdate(
                    "update refused: too many updates already wait for the clocks before them",
                    details={"size": len(data), "waiting": len(core.waiting)},
                )
            return MergeResult(token=core.log.head_token, agent=agent, pending=True), None
        result, ticket = _integrate(core, data, agent, clocks.resends)
        if core.waiting:
            ticket = _release_waiting(core, ticket)
    return result, ticket


def _integrate(
    core: StateCore, data: bytes, agent: str | None, resent: bool
) -> tuple[MergeResult, int | None]:
    """Check and apply an update whose clocks pass (under the lock).

    ``resent``: it re-sends clocks the document holds (:class:`Clocks`).
    """
    core.shared = True
    before = core.log.head_token
    changed: dict[Path, WriteKind] = {}
    # structs Yjs keeps pending land with this update: they are checked with it (merged
    # with it for the depth scan; when pycrdt cannot merge them, the checks take them apart)
    parts = [data]
    if core.held is not None:
        try:
            parts = [join_updates([core.held, data])]
        except Exception:  # pycrdt: "Cannot merge updates" (garbage held since)
            parts = [core.held, data]
    joined = parts[0] if len(parts) == 1 else None
    if core.validate_updates and core.schema is not None:  # a follower's authority
        core.schema.check_update(core.doc, data, pending=core.held)  # validated it
    if core.check_depth:
        check_update_depth(core, data, joined)
    if core.trial is not None:  # the update whole on a copy first: pycrdt cannot
        core.trial.attempt(core.doc, core.held, data)  # take back half an update
        _refuse_holding_too_much(core, parts, data)
    core.updates.clear()
    unreported: list[BaseException] = []
    with (
        translate_failures(
            lambda exc: InvalidUpdate.from_failure(exc, data), keep=(CrdtStateError,)
        ),
        core.deep.routed(core.root, _reporting(changed, core.mirror, unreported)),
    ):
        core.doc.apply_update(data)
    if unreported:  # integrated whole, but pycrdt panicked reporting the events
        log.warning("pycrdt could not report an update's changes (%s); read from the "
                    "document instead", unreported[0])  # fmt: skip
        changed = writes_by_diff(core.root, core.mirror)
    state = core.doc.get_state()
    _hold_pending(core, parts, state)
    after = VersionVector.from_state(state)
    writes = root_most(changed)
    if resent and writes and _recopied_if_read_otherwise(core):
        writes = root_most(writes_by_diff(core.root, core.mirror))
    if after == before and not writes:
        return MergeResult(token=before, agent=agent), None
    undo = mirror_writes(core.root, core.mirror, writes)
    core.depth_mark = max(core.depth_mark, written_depth(core.mirror, writes))
    core.updates.clear()
    tick_update = b""
    if after == before and core.tick_remote:
        with core.doc.transaction(origin="crdt-state"):
            core.tick()
        tick_update = b"".join(core.updates)
    outgoing = join_updates([data, tick_update]) if tick_update else data
    if tick_update:
        state = core.doc.get_state()
    entry, change = core.record(agent, writes, undo, "remote", update=outgoing, state=state)
    ticket = core.store_change(change)
    result = MergeResult(token=entry.token, applied=tuple(writes), fast_forward=True, agent=agent)
    return result, ticket


def _reporting(
    changed: dict[Path, WriteKind], mirror: dict[str, Any], failures: list[BaseException]
) -> Callable[[list[Any]], None]:
    """:func:`collect_writes`, keeping a failure to read the events in ``failures``.

    pycrdt has then integrated the update whole (the events are read after it), and
    panicked reading an event of it: the caller reads the writes from the document.
    """
    collect = collect_writes(changed, mirror)

    def on_events(events: list[Any]) -> None:
        try:
            collect(events)
        except BaseException as exc:
            if isinstance(exc, INTERRUPTS):
                raise
            failures.append(exc)

    return on_events


def _recopied_if_read_otherwise(core: StateCore) -> bool:
    """Make a copy of the document from its encoding the document if it reads otherwise.

    The same client id, structs and pending structs: peers see no change; the state then
    reads what every peer that loads the document reads. True when it did.
    """
    copy: Doc[Any] = Doc(client_id=core.doc.client_id)
    copy.apply_update(core.doc.get_update())
    if ydoc.doc_snapshot(copy) == ydoc.doc_snapshot(core.doc):
        return False
    log.warning("a peer's update re-sent clocks held here with other content: the "
                "document is rebuilt from its own encoding")  # fmt: skip
    if core.held is not None:
        copy.apply_update(core.held)
    core.replace_document(copy)
    return True


def _gate(core: StateCore, data: bytes) -> Clocks:
    """The clocks of a peer's update, read when the state checks them (under the lock).

    A follower trusts its authority: nothing is read. A problem returned waits for
    earlier clocks. Raises :class:`InvalidUpdate` for an update pycrdt would take otherwise than Yjs
    (:mod:`crdt_state._update_checks`).
    """
    if not (core.validate_updates or core.check_depth):
        return _UNCHECKED
    vector: list[VersionVector] = []

    def held(client: int) -> int:
        if not vector:
            vector.append(VersionVector.from_state(core.doc.get_state()))
        return vector[0].get_clock(client)

    try:
        clocks = read_clocks(data, held)
    except (ValueError, IndexError) as exc:
        raise InvalidUpdate(
            f"update refused: not a Yjs update ({exc})", details={"size": len(data)}
        ) from exc
    problem = clocks.problem
    if problem is not None and not problem.waits:
        raise InvalidUpdate(
            f"update refused: {problem.reason}", details={"size": len(data), "limit": MAX_CLOCK}
        )
    if problem is not None:
        with translate_failures(lambda exc: InvalidUpdate.from_failure(exc, data)):
            get_update(data, b"\x00")  # kept only if pycrdt can read it
    return clocks


_UNCHECKED = Clocks()


def _release_waiting(core: StateCore, ticket: int | None) -> int | None:
    """Apply the waiting updates whose clocks are now held; the store's last ticket.

    Offered again while one of them lands (each may bring the clocks another waits
    for). One refused now is dropped with a warning: its peer was told nothing
    when it came (it waited), and its sender learns nothing now either.
    """
    landed = True
    while landed and core.waiting:
        landed = False
        for data, agent in core.waiting.take_all():
            try:
                clocks = _gate(core, data)
                if clocks.problem is not None:
                    core.waiting.hold(data, agent)
                    continue
                _, late = _integrate(core, data, agent, clocks.resends)
            except CrdtStateError as exc:
                log.warning("an update that waited for earlier clocks is refused: %s", exc)
                continue
            landed = True
            ticket = late if late is not None else ticket
    return ticket


def _refuse_holding_too_much(core: StateCore, parts: list[bytes], data: bytes) -> None:
    """Refuse ``data`` when it would leave more than :data:`MAX_HELD_BYTES` pending.

    Read on the trial, which has taken the update: the document has not, so a refusal
    changes nothing. Cheap unless what is held and the update could pass the bound.
    """
    held = len(core.held) if core.held is not None else 0
    trial = core.trial
    if held + len(data) <= MAX_HELD_BYTES or trial is None:
        return
    state = trial.state()
    if state is None:
        return
    try:
        pending = sum(len(_left_pending(part, state) or b"") for part in parts)
    except Exception:  # read back when the document has it (_hold_pending), or not
        return
    if pending > MAX_HELD_BYTES:
        trial.drop()  # it holds the update now
        raise InvalidUpdate(
            "update refused: too many bytes of updates already wait for what they build on",
            details={"size": len(data), "held": held, "limit": MAX_HELD_BYTES},
        )


def _left_pending(part: bytes, state: bytes) -> bytes | None:
    """The structs of ``part`` a document at ``state`` keeps pending (``None``: none).

    Raises what pycrdt raises when it cannot read them back.
    """
    rest = bytes(get_update(part, state))
    return rest if rest[:1] != b"\x00" else None


def _hold_pending(core: StateCore, parts: list[bytes], state: bytes) -> None:
    """Keep what the document left pending of ``parts`` (this update, the earlier held).

    Called once the update is applied, so it never raises: the change must still be
    recorded. Should pycrdt fail to read a part's pending structs back, that part is
    left out; should it fail to merge or read back what is left, nothing is held. Either
    way a warning is logged, and what is left out stays pending in the document (as in
    every peer's), no longer checked when it lands.
    """
    rests: list[bytes] = []
    for part in parts:
        try:
            rest = _left_pending(part, state)
        except BaseException as exc:
            if isinstance(exc, INTERRUPTS):
                raise
            log.warning("pending structs dropped: pycrdt could not read them back (%s)", exc)
            continue
        if rest is not None:
            rests.append(rest)
    held = rests[-1] if rests else None
    try:
        if len(rests) > 1:
            held = join_updates(rests)
        if held is not None:
            get_update(held, b"\x00")  # pycrdt has written bytes it could not read back
    except Exception as exc:
        log.warning("pending structs dropped: pycrdt cannot merge or read them (%s)", exc)
        held = None
    core.held = held
