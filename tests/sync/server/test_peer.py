"""The hub's per-connection protocol, sans I/O: bytes in, events or refusals out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crdt_state import SharedState, VersionVector
from sync.server.peer import (
    EMPTY_UPDATE,
    AwarenessQueried,
    AwarenessReceived,
    HubPeer,
    MergeDenied,
    MergeRequested,
    PeerRefused,
    SyncRequested,
    UpdateDenied,
    UpdateReceived,
)
from sync.wire import protocol as p
from sync.wire.changes import ChangeKind, WireChange

UPDATE = SharedState().get_update()
MERGE = p.encode_merge_request(1, "a", b"\x00", [WireChange(ChangeKind.SET, ("x",), 1)])


def test_writer_events() -> None:
    peer = HubPeer(can_write=True)
    assert peer.receive(p.encode_sync_step1(b"\x01\x05\x03")) == SyncRequested(
        VersionVector({5: 3})
    )
    assert peer.receive(p.encode_sync_step2(UPDATE)) == UpdateReceived(UPDATE)
    assert peer.receive(p.encode_update(UPDATE)) == UpdateReceived(UPDATE)
    assert peer.receive(p.encode_awareness(b"\x00")) == AwarenessReceived(b"\x00")
    assert peer.receive(p.encode_query_awareness()) == AwarenessQueried()
    event = peer.receive(MERGE)
    assert isinstance(event, MergeRequested) and event.request.agent == "a"
    assert event.frame == MERGE  # as received: a cluster hub forwards it unchanged
    assert peer.receive(p.encode_permission_denied("no")) is None  # ignored from clients


def test_read_only_peers_may_sync_but_not_write() -> None:
    peer = HubPeer(can_write=False)
    assert isinstance(peer.receive(p.encode_sync_step1(b"\x00")), SyncRequested)
    assert peer.receive(p.encode_sync_step2(EMPTY_UPDATE)) is None
    for frame in (p.encode_update(b"\x01\x02"), p.encode_sync_step2(b"\x01\x02")):
        # dropped and told once by the hub; the connection stays open for reads
        assert isinstance(peer.receive(frame), UpdateDenied)
    denied = peer.receive(MERGE)  # answered with an error result, not a close
    assert isinstance(denied, MergeDenied) and denied.request.request_id == 1


def test_bad_frames_are_refused_with_their_close_code() -> None:
    peer = HubPeer(can_write=True)
    with pytest.raises(PeerRefused) as text:
        peer.receive("hello")
    assert (text.value.close_code, text.value.code) == (1003, "unsupported_frame")
    with pytest.raises(PeerRefused) as truncated:
        peer.receive(b"\x00")
    assert truncated.value.close_code == 1002 and not truncated.value.permission_denied
    assert truncated.value.code == "truncated"


def test_greeting_is_step1_then_awareness() -> None:
    frames = HubPeer.greeting(VersionVector({9: 2}), [b"\x01"])
    assert p.decode_message(frames[0]) == p.SyncStep1(VersionVector({9: 2}).to_state())
    assert p.decode_message(frames[1]) == p.Awareness(b"\x01")


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64), can_write=st.booleans())
def test_any_bytes_give_an_event_or_a_refusal(data: bytes, can_write: bool) -> None:
    try:
        HubPeer(can_write=can_write).receive(data)
    except PeerRefused as exc:
        assert exc.close_code in (1002, 1003, 1008)
