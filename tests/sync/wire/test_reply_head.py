"""``reply_head``: a merge result's request id and status from its header alone."""

from __future__ import annotations

import pytest

from sync.wire import protocol as p
from sync.wire.changes import ErrorRecord

SV = bytes([1, 200, 1, 5])  # one client (id 200) at clock 5


@pytest.mark.parametrize("request_id", [0, 1, 127, 128, 300, 2**40])
@pytest.mark.parametrize(
    "status,extra",
    [
        (p.MergeStatus.OK, {"applied": [("a",)]}),
        (p.MergeStatus.ERROR, {"error": ErrorRecord("stale_base", "too old")}),
    ],
)
def test_reads_what_decode_message_reads(
    request_id: int, status: p.MergeStatus, extra: dict[str, object]
) -> None:
    frame = p.encode_merge_result(request_id, status, SV, **extra)  # type: ignore[arg-type]
    full = p.decode_message(frame)
    assert isinstance(full, p.MergeReply)
    assert p.reply_head(frame) == (full.request_id, full.status) == (request_id, status)


def test_not_a_result_is_none() -> None:
    request = p.encode_merge_request(7, "agent", SV, [])
    assert p.reply_head(request) is None
    assert p.reply_head(p.encode_update(b"\x00\x00")) is None
    assert p.reply_head(b"") is None


def test_truncated_or_unknown_status_is_none() -> None:
    frame = p.encode_merge_result(300, p.MergeStatus.OK, SV)
    assert p.reply_head(frame[:3]) is None  # inside the request id's varuint
    broken = bytearray(frame)
    broken[4] = 99  # status byte: no such status
    assert p.reply_head(bytes(broken)) is None
