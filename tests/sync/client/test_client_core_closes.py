"""How the sans-I/O client core reads the hub's close codes (no sockets needed).

A 1008 close is not a refusal of the client's writes: the hub also closes with it when a
token expires, when it refuses a plain update, or when its shutdown cuts a handshake short
(seen as a flaky ``WriteDenied ... handshake not authorised`` during hub restarts). The
merges in flight must be sent again on the next connection, not failed.
"""

from __future__ import annotations

from crdt_state import Change, SharedState
from crdt_state.resolvers import PolicyTable
from sync.client.core import ClientCore
from sync.wire import ErrorRecord
from sync.wire import protocol as p


def _core() -> ClientCore:
    replica = SharedState(follower=True, initialize=False)
    return ClientCore(replica, writer="w1", store=None)


def _merge_frames(frames: list[bytes]) -> list[p.MergeRequest]:
    decoded = [p.decode_message(f) for f in frames]
    return [m for m in decoded if isinstance(m, p.MergeRequest)]


def test_a_1008_close_resends_the_merge_instead_of_denying_writes() -> None:
    core = _core()
    core.connected()
    merge = core.submit([Change("set", ("a",), 1)], core.replica.token, "agent", PolicyTable({}))
    frame = core.frame_for(merge)
    assert frame is not None

    ended = core.disconnected(1008, "handshake not authorised")

    assert ended == [] and not core.read_only
    again = _merge_frames(core.connected())
    assert [m.request_id for m in again] == [merge.request_id]


def test_a_read_only_answer_still_denies_writes() -> None:
    core = _core()
    core.connected()
    merge = core.submit([Change("set", ("a",), 1)], core.replica.token, "agent", PolicyTable({}))
    assert core.frame_for(merge) is not None
    reply = p.encode_merge_result(
        merge.request_id,
        p.MergeStatus.ERROR,
        core.replica.token.to_state(),
        error=ErrorRecord("read_only", "this token may only read"),
    )

    core.receive(reply)

    assert core.read_only
