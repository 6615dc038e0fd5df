"""Tests for the wire codec: lib0 primitives, state vectors, JSON payloads and messages."""

from __future__ import annotations

import json
from typing import Any

import pycrdt
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sync.wire.changes import (
    MISSING,
    ChangeKind,
    ErrorRecord,
    JsonValue,
    Missing,
    WireChange,
    WireConflict,
    WirePath,
    decode_change_set,
    decode_result_body,
    encode_change_set,
)
from sync.wire.errors import CloseCode, ErrorCode, ProtocolError
from sync.wire.lib0 import (
    MAX_VAR_UINT,
    Reader,
    encode_var_bytes,
    encode_var_string,
    encode_var_uint,
)
from sync.wire.protocol import (
    Awareness,
    MergeReply,
    MergeRequest,
    MergeStatus,
    Message,
    MessageType,
    PermissionDenied,
    QueryAwareness,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    UnknownMessage,
    decode_message,
    encode_awareness,
    encode_merge_request,
    encode_merge_result,
    encode_message,
    encode_query_awareness,
    encode_sync_step1,
    encode_sync_step2,
    encode_update,
)
from sync.wire.state_vector import decode_state_vector, encode_state_vector

# ------------------------------------------------------------------------- strategies

var_uints = st.integers(min_value=0, max_value=MAX_VAR_UINT)
small_uints = st.one_of(st.integers(0, 300), var_uints)

json_scalars: st.SearchStrategy[JsonValue] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values: st.SearchStrategy[JsonValue] = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=12,
).filter(lambda v: v != {"$missing": True})
paths: st.SearchStrategy[WirePath] = st.lists(st.text(max_size=8), min_size=1, max_size=4).map(
    tuple
)
slot_values: st.SearchStrategy[JsonValue | Missing] = st.one_of(st.just(MISSING), json_values)
state_vectors = st.dictionaries(var_uints, var_uints, max_size=4).map(encode_state_vector)
payloads = st.binary(max_size=64)


@st.composite
def changes(draw: st.DrawFn) -> WireChange:
    kind = draw(st.sampled_from(ChangeKind))
    path = draw(paths)
    if kind is ChangeKind.DELETE:
        return WireChange(kind, path)
    return WireChange(kind, path, draw(json_values))


conflict_records = st.builds(
    WireConflict,
    path=paths,
    base=slot_values,
    current=slot_values,
    incoming=slot_values,
    current_agent=st.none() | st.text(max_size=8),
    incoming_agent=st.none() | st.text(max_size=8),
    resolution=st.text(max_size=12),
    value=slot_values,
    same_value=st.booleans(),
)
error_records = st.builds(ErrorRecord, code=st.text(max_size=12), message=st.text(max_size=30))


@st.composite
def merge_results(draw: st.DrawFn) -> MergeReply:
    status = draw(st.sampled_from(MergeStatus))
    request_id, token = draw(var_uints), draw(state_vectors)
    if status is MergeStatus.OK:
        return MergeReply(request_id, status, token, tuple(draw(st.lists(paths, max_size=3))))
    if status is MergeStatus.CONFLICT:
        return MergeReply(
            request_id,
            status,
            token,
            tuple(draw(st.lists(paths, max_size=3))),
            tuple(draw(st.lists(conflict_records, min_size=1, max_size=3))),
        )
    return MergeReply(
        request_id,
        status,
        token,
        (),
        tuple(draw(st.lists(conflict_records, max_size=2))),
        draw(error_records),
    )


@st.composite
def merge_requests(draw: st.DrawFn) -> MergeRequest:
    ops = tuple(draw(st.lists(changes(), max_size=4)))
    indexes = sorted(draw(st.sets(st.integers(0, max(len(ops) - 1, 0)), max_size=len(ops))))
    names = st.text(max_size=8) | st.sampled_from(["counter", "maximum", "retry"])
    return MergeRequest(
        request_id=draw(var_uints),
        agent=draw(st.text(max_size=12)),
        base=draw(state_vectors),
        changes=ops,
        writer=draw(
            st.text(max_size=12).filter(lambda w: len(w.encode("utf-8", "surrogatepass")) <= 64)
        ),
        chain=tuple(sorted(draw(st.lists(var_uints, max_size=4, unique=True)))),
        policies=tuple((i, draw(names)) for i in indexes),
    )


known_messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(SyncStep1, state_vectors),
    st.builds(SyncStep2, payloads),
    st.builds(SyncUpdate, payloads),
    st.builds(Awareness, payloads),
    st.just(QueryAwareness()),
    st.builds(PermissionDenied, st.text(max_size=30)),
    merge_requests(),
    merge_results(),
)
_known = {int(t) for t in MessageType}
unknown_messages = st.builds(
    UnknownMessage,
    message_type=small_uints.filter(lambda t: t not in _known),
    payload=payloads,
)
messages = st.one_of(known_messages, unknown_messages)


def _decode_or_protocol_error(data: bytes) -> Message | None:
    """Decode ``data``; return None on ProtocolError, let anything else fail the test."""
    try:
        return decode_message(data)
    except ProtocolError:
        return None


# ------------------------------------------------------------------------- lib0


@given(var_uints)
def test_var_uint_round_trip_and_matches_pycrdt(value: int) -> None:
    encoded = encode_var_uint(value)
    assert encoded == pycrdt.write_var_uint(value)
    reader = Reader(encoded)
    assert reader.read_var_uint() == value
    reader.expect_end()


@pytest.mark.parametrize(("value", "encoded"), [(0, b"\x00"), (127, b"\x7f"), (300, b"\xac\x02")])
def test_var_uint_known_bytes(value: int, encoded: bytes) -> None:
    assert encode_var_uint(value) == encoded


@pytest.mark.parametrize("value", [-1, MAX_VAR_UINT + 1, True, 1.0, "1"])
def test_var_uint_refuses_unencodable(value: object) -> None:
    with pytest.raises(ProtocolError) as info:
        encode_var_uint(value)  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_VALUE


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", ErrorCode.TRUNCATED),
        (b"\x80", ErrorCode.TRUNCATED),
        (b"\xff\xff", ErrorCode.TRUNCATED),
        (b"\x80\x00", ErrorCode.NON_CANONICAL_VARUINT),
        (b"\xff\x80\x00", ErrorCode.NON_CANONICAL_VARUINT),
        (b"\xff" * 7 + b"\x10", ErrorCode.VARUINT_OVERFLOW),  # 2**53
        (b"\xff" * 8 + b"\x01", ErrorCode.VARUINT_OVERFLOW),
    ],
)
def test_var_uint_strict_decoding(data: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as info:
        Reader(data).read_var_uint()
    assert info.value.code is code
    assert info.value.close_code == CloseCode.PROTOCOL_ERROR


def test_var_uint_max_decodes() -> None:
    assert Reader(b"\xff" * 7 + b"\x0f").read_var_uint() == MAX_VAR_UINT


@given(st.binary(max_size=40), st.text(max_size=20))
def test_var_bytes_and_string_round_trip(data: bytes, text: str) -> None:
    reader = Reader(encode_var_bytes(data) + encode_var_string(text))
    assert reader.read_var_bytes() == data
    assert reader.read_var_string() == text
    reader.expect_end()


def test_var_string_counts_utf8_bytes_unlike_pycrdt_encoder() -> None:
    assert encode_var_string("é") == b"\x02\xc3\xa9"
    encoder = pycrdt.Encoder()
    encoder.write_var_string("é")
    assert encoder.to_bytes() == b"\x01\xc3\xa9"  # pycrdt counts characters: not lib0


def test_var_string_refuses_invalid_utf8_and_surrogates() -> None:
    with pytest.raises(ProtocolError) as info:
        Reader(b"\x01\xff").read_var_string()
    assert info.value.code is ErrorCode.INVALID_UTF8
    with pytest.raises(ProtocolError) as info:
        encode_var_string("\ud800")
    assert info.value.code is ErrorCode.INVALID_VALUE


@given(st.binary(max_size=30))
def test_reader_never_raises_anything_else(data: bytes) -> None:
    reader = Reader(data)
    try:
        while reader.remaining:
            reader.read_var_string()
    except ProtocolError:
        pass


# ------------------------------------------------------------------------- state vectors


@given(st.dictionaries(var_uints, var_uints, max_size=6))
def test_state_vector_round_trip(clocks: dict[int, int]) -> None:
    assert decode_state_vector(encode_state_vector(clocks)) == clocks


def test_state_vector_matches_pycrdt() -> None:
    doc = pycrdt.Doc[Any]()
    assert decode_state_vector(doc.get_state()) == {}
    doc.get("state", type=pycrdt.Map)["a"] = 1
    assert decode_state_vector(doc.get_state()) == {doc.client_id: 1}


@pytest.mark.parametrize("data", [b"", b"\x01", b"\x01\x05", b"\x00\x00", b"\x02\x01\x01\x01\x02"])
def test_state_vector_malformed(data: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_state_vector(data)
    assert info.value.code is ErrorCode.INVALID_STATE_VECTOR


# ------------------------------------------------------------------------- JSON payloads


@given(st.lists(changes(), max_size=5))
def test_change_set_round_trip(items: list[WireChange]) -> None:
    assert decode_change_set(encode_change_set(items)) == tuple(items)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"\xff", ErrorCode.INVALID_UTF8),
        (b"[", ErrorCode.INVALID_JSON),
        (b'[{"kind":"set","path":["a"],"value":NaN}]', ErrorCode.INVALID_JSON),
        (b'[{"kind":"set","path":["a"],"value":1e400}]', ErrorCode.INVALID_JSON),
        (b'[{"kind":"set","kind":"set","path":["a"],"value":1}]', ErrorCode.INVALID_JSON),
        (b"[" * 100_000, ErrorCode.INVALID_JSON),
        (b"{}", ErrorCode.INVALID_CHANGE_SET),
        (b'[{"kind":"set","path":[]}]', ErrorCode.INVALID_CHANGE_SET),
        (b'[{"kind":"set","path":["a"]}]', ErrorCode.INVALID_CHANGE_SET),
        (b'[{"kind":"set","path":[1],"value":1}]', ErrorCode.INVALID_CHANGE_SET),
        (b'[{"kind":"delete","path":["a"],"value":1}]', ErrorCode.INVALID_CHANGE_SET),
        (b'[{"kind":"set","path":["a"],"value":1,"x":2}]', ErrorCode.INVALID_CHANGE_SET),
        (b'[{"kind":"set","path":["a"],"value":{"$missing":true}}]', ErrorCode.INVALID_CHANGE_SET),
        (b'[{"kind":"move","path":["a"]}]', ErrorCode.UNKNOWN_CHANGE_KIND),
    ],
)
def test_change_set_strict(raw: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_change_set(raw)
    assert info.value.code is code


def test_unknown_change_kind_closes_with_unsupported_data() -> None:
    with pytest.raises(ProtocolError) as info:
        decode_change_set(b'[{"kind":"move","path":["a"]}]')
    assert info.value.close_code == CloseCode.UNSUPPORTED_DATA == ProtocolError.UNSUPPORTED_DATA


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), (1, 2), {1: "a"}, {"a": {2}}, {"$missing": True}, MISSING],
)
def test_change_value_must_round_trip_exactly(value: object) -> None:
    with pytest.raises(ProtocolError) as info:
        encode_change_set([WireChange(ChangeKind.SET, ("a",), value)])  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_VALUE


def test_change_shape_checked_on_construction() -> None:
    with pytest.raises(ProtocolError):
        WireChange(ChangeKind.DELETE, ("a",), 1)
    with pytest.raises(ProtocolError):
        WireChange(ChangeKind.SET, ("a",))
    with pytest.raises(ProtocolError):
        WireChange(ChangeKind.SET, (), 1)


def test_missing_sentinel_layout() -> None:
    conflict = WireConflict(("a",), MISSING, 1, {"$missing": False}, "x", None, "lww", 1)
    reader = Reader(encode_merge_result(1, MergeStatus.CONFLICT, b"\x00", (), [conflict]))
    header = [reader.read_var_uint() for _ in range(4)]  # type, step, request id, status
    assert header == [100, 1, 1, 1]
    assert reader.read_var_bytes() == b"\x00"
    body = json.loads(reader.read_var_bytes())
    assert body["conflicts"][0]["base"] == {"$missing": True}
    assert body["conflicts"][0]["incoming"] == {"$missing": False}  # not the sentinel
    assert body["error"] is None


def test_result_body_strict() -> None:
    good: dict[str, Any] = {"applied": [], "conflicts": [], "error": None}
    assert decode_result_body(json.dumps(good).encode()) == ((), (), None)
    bad: dict[str, Any]
    for bad in (
        {"applied": []},
        {**good, "extra": 1},
        {**good, "applied": [[]]},
        {**good, "error": {"code": 1, "message": "m"}},
        {**good, "conflicts": [{"path": ["a"]}]},
    ):
        with pytest.raises(ProtocolError) as info:
            decode_result_body(json.dumps(bad).encode())
        assert info.value.code is ErrorCode.INVALID_RESULT_BODY


# ------------------------------------------------------------------------- messages


@given(messages)
def test_message_round_trip(message: Message) -> None:
    data = encode_message(message)
    assert decode_message(data) == message
    assert encode_message(decode_message(data)) == data


@given(known_messages, st.data())
def test_truncated_known_message_raises(message: Message, data: st.DataObject) -> None:
    encoded = encode_message(message)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(ProtocolError):
        decode_message(encoded[:cut])


@given(known_messages, st.binary(min_size=1, max_size=4))
def test_trailing_bytes_raise(message: Message, extra: bytes) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_message(encode_message(message) + extra)
    assert info.value.code is ErrorCode.TRAILING_BYTES


@given(messages, st.data())
@example(SyncUpdate(b"x"), None)
def test_mutated_message_decodes_or_raises_protocol_error(
    message: Message, data: st.DataObject | None
) -> None:
    encoded = bytearray(encode_message(message))
    if data is not None:
        for _ in range(data.draw(st.integers(1, 3))):
            op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
            pos = data.draw(st.integers(0, max(len(encoded) - 1, 0)))
            if op == "insert" or not encoded:
                encoded.insert(pos, data.draw(st.integers(0, 255)))
            elif op == "flip":
                encoded[pos] ^= data.draw(st.integers(1, 255))
            else:
                del encoded[pos]
    decoded = _decode_or_protocol_error(bytes(encoded))
    if decoded is not None:  # whatever decodes must re-encode to the same message
        assert decode_message(encode_message(decoded)) == decoded


@given(st.binary(max_size=80))
def test_arbitrary_bytes_decode_or_raise_protocol_error(data: bytes) -> None:
    _decode_or_protocol_error(data)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", ErrorCode.EMPTY_MESSAGE),
        (b"\x00\x03\x00", ErrorCode.UNKNOWN_SYNC_STEP),
        (b"\x00\x00\x01\x05", ErrorCode.INVALID_STATE_VECTOR),
        (b"\x02\x01\x00", ErrorCode.UNKNOWN_AUTH_STEP),
        (b"\x03\x00", ErrorCode.TRAILING_BYTES),
        (b"\x64\x04", ErrorCode.UNKNOWN_MERGE_STEP),
        (b"\x64\x01\x01\x07\x01\x00\x00", ErrorCode.UNKNOWN_STATUS),
    ],
)
def test_decode_error_codes(data: bytes, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_message(data)
    assert info.value.code is code


def test_text_frame_is_unsupported_data() -> None:
    with pytest.raises(ProtocolError) as info:
        decode_message("hello")  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.UNSUPPORTED_FRAME
    assert info.value.close_code == CloseCode.UNSUPPORTED_DATA


def test_unknown_type_is_returned_not_raised() -> None:
    assert decode_message(b"\x07abc") == UnknownMessage(7, b"abc")
    with pytest.raises(ProtocolError):
        encode_message(UnknownMessage(0, b""))


def test_merge_result_status_rules() -> None:
    conflict = WireConflict(("a",), 1, 2, 3, None, None, "lww", 3)
    error = ErrorRecord("bad_token", "token is not a state vector")
    with pytest.raises(ProtocolError):
        MergeReply(1, MergeStatus.OK, b"\x00", conflicts=(conflict,))
    with pytest.raises(ProtocolError):
        MergeReply(1, MergeStatus.CONFLICT, b"\x00")
    with pytest.raises(ProtocolError):
        MergeReply(1, MergeStatus.ERROR, b"\x00")
    with pytest.raises(ProtocolError):
        MergeReply(1, MergeStatus.ERROR, b"\x00", applied=(("a",),), error=error)
    MergeReply(1, MergeStatus.ERROR, b"\x00", conflicts=(conflict,), error=error)


def test_merge_request_refuses_bad_token() -> None:
    with pytest.raises(ProtocolError) as info:
        encode_merge_request(1, "a", b"\x05", [])
    assert info.value.code is ErrorCode.INVALID_STATE_VECTOR


def test_merge_type_is_one_byte_and_unused_by_y_websocket() -> None:
    frame = encode_merge_request(1, "agent", b"\x00", [])
    assert frame[:2] == b"\x64\x00"
    assert int(MessageType.MERGE) == 100


def test_a_merge_request_with_writer_and_chain_is_step_2() -> None:
    frame = encode_merge_request(1, "a", b"\x00", [], writer="w", chain=[7, 8, 9, 300])
    # 64 02, id 1, agent "a", base 00, change set "[]", writer "w", then the chain as
    # 2 runs: 7 after 0, 3 long (7, 8, 9); 290 after 10, 1 long (300)
    assert frame == b"\x64\x02\x01\x01a\x01\x00\x02[]\x01w\x02\x07\x03\xa2\x02\x01"
    assert decode_message(frame) == MergeRequest(1, "a", b"\x00", (), "w", (7, 8, 9, 300))
    # a connection-scoped request may still build on earlier ones
    chained = decode_message(encode_merge_request(1, "a", b"\x00", [], chain=[2]))
    assert chained == MergeRequest(1, "a", b"\x00", (), "", (2,))


@pytest.mark.parametrize(
    "kwargs",
    [{"writer": "x" * 65}, {"chain": [1, 1]}, {"chain": [2, 1]}, {"chain": [-1]}],
)
def test_bad_writer_or_chain_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError) as info:
        encode_merge_request(1, "a", b"\x00", [], **kwargs)
    assert info.value.code is ErrorCode.INVALID_MERGE_REQUEST
    head = b"\x64\x02\x01\x01a\x01\x00\x02[]\x01w"
    for runs in (b"\x01\x05\x00", b"\x02\x05\x01\x00\x01", b"\x01\x00\xff\xff\x07"):
        # an empty run; two runs that touch; 100,000+ ids
        with pytest.raises(ProtocolError) as info:
            decode_message(head + runs)
        assert info.value.code is ErrorCode.INVALID_MERGE_REQUEST


def test_a_merge_request_with_policies_is_step_3() -> None:
    ops = [WireChange(ChangeKind.SET, ("n",), 1), WireChange(ChangeKind.SET, ("m",), 2)]
    frame = encode_merge_request(1, "a", b"\x00", ops, writer="w", policies=[(1, "counter")])
    assert frame[:2] == b"\x64\x03"
    assert frame.endswith(b"\x01w\x00\x01\x01\x07counter")  # no chain; 1 policy: change 1
    assert decode_message(frame) == MergeRequest(
        1, "a", b"\x00", tuple(ops), "w", (), ((1, "counter"),)
    )


@pytest.mark.parametrize(
    "policies",
    [[(1, "counter")], [(0, "counter"), (0, "maximum")], [(-1, "counter")], [(0, "x" * 33)]],
)
def test_bad_policies_are_refused(policies: list[tuple[int, str]]) -> None:
    one = [WireChange(ChangeKind.SET, ("n",), 1)]
    with pytest.raises(ProtocolError) as info:
        encode_merge_request(1, "a", b"\x00", one, policies=policies)
    assert info.value.code is ErrorCode.INVALID_MERGE_REQUEST
    head = b"\x64\x03\x01\x01a\x01\x00" + encode_var_bytes(encode_change_set(one)) + b"\x01w\x00"
    for tail in (b"\x02\x00\x01c\x00\x01c", b"\x01\x05\x01c"):  # more than changes; bad index
        with pytest.raises(ProtocolError) as info:
            decode_message(head + tail)
        assert info.value.code is ErrorCode.INVALID_MERGE_REQUEST


def test_frames_of_the_previous_version_still_decode() -> None:
    # a change set with the retired "combine" flag, as older clients and local files have it
    old = b"\x64\x00\x01\x01a\x01\x00" + encode_var_bytes(
        b'[{"kind":"set","path":["n"],"value":1,"combine":true}]'
    )
    assert decode_message(old) == MergeRequest(
        1, "a", b"\x00", (WireChange(ChangeKind.SET, ("n",), 1),)
    )
    # a conflict record from a hub that does not send same_value
    body = (
        b'{"applied":[],"conflicts":[{"path":["n"],"base":0,"current":1,"incoming":1,'
        b'"current_agent":null,"incoming_agent":"a","resolution":"counter","value":2}],'
        b'"error":null}'
    )
    result = decode_message(b"\x64\x01\x01\x01\x01\x00" + encode_var_bytes(body))
    assert isinstance(result, MergeReply) and result.conflicts[0].same_value is False


def test_same_value_travels_in_conflict_records() -> None:
    record = WireConflict(("n",), 0, 1, 1, "b", "a", "counter", 2, same_value=True)
    frame = encode_merge_result(1, MergeStatus.CONFLICT, b"\x00", (("n",),), (record,))
    decoded = decode_message(frame)
    assert isinstance(decoded, MergeReply) and decoded.conflicts == (record,)
    assert b'"same_value":true' in frame


def test_close_reason_fits_a_close_frame() -> None:
    error = ProtocolError(ErrorCode.TRUNCATED, "é" * 200)
    assert len(error.close_reason.encode()) <= 123
    assert error.close_reason.startswith("truncated: é")


# ------------------------------------------------------------------------- pycrdt interop


def _doc_with(**values: str | int) -> pycrdt.Doc[Any]:
    doc: pycrdt.Doc[Any] = pycrdt.Doc[Any]()
    state = doc.get("state", type=pycrdt.Map)
    for key, value in values.items():
        state[key] = value
    return doc


def test_pycrdt_frames_decode() -> None:
    doc = _doc_with(a="x", b=2)
    step1 = decode_message(pycrdt.create_sync_message(doc))
    assert step1 == SyncStep1(doc.get_state())
    update = doc.get_update()
    assert decode_message(pycrdt.create_update_message(update)) == SyncUpdate(update)
    reply = pycrdt.handle_sync_message(pycrdt.create_sync_message(pycrdt.Doc[Any]())[1:], doc)
    assert reply is not None
    assert decode_message(reply) == SyncStep2(doc.get_update(b"\x00"))
    awareness = pycrdt.Awareness(doc)
    awareness.set_local_state({"user": "agent-1"})
    payload = awareness.encode_awareness_update([doc.client_id])
    assert decode_message(pycrdt.create_awareness_message(payload)) == Awareness(payload)


def test_our_frames_equal_pycrdt_frames() -> None:
    doc = _doc_with(a="x")
    update = doc.get_update()
    assert encode_sync_step1(doc.get_state()) == pycrdt.create_sync_message(doc)
    assert encode_update(update) == pycrdt.create_update_message(update)
    assert encode_awareness(b"\x01\x02") == pycrdt.create_awareness_message(b"\x01\x02")
    reply = pycrdt.handle_sync_message(pycrdt.create_sync_message(pycrdt.Doc[Any]())[1:], doc)
    assert reply is not None
    assert encode_sync_step2(update) == reply  # the reply already starts with the sync type 0
    assert encode_query_awareness() == b"\x03"


def test_two_docs_sync_through_our_codec_only() -> None:
    left, right = _doc_with(a="from-left"), _doc_with(b="from-right")
    for src, dst in ((left, right), (right, left)):
        step1 = decode_message(encode_sync_step1(dst.get_state()))
        assert isinstance(step1, SyncStep1)
        step2 = decode_message(encode_sync_step2(src.get_update(step1.state_vector)))
        assert isinstance(step2, SyncStep2)
        dst.apply_update(step2.update)
    for doc in (left, right):
        assert doc.get("state", type=pycrdt.Map).to_py() == {"a": "from-left", "b": "from-right"}
    # pycrdt's own handler accepts our frames (it expects the frame without the outer type).
    third = pycrdt.Doc[Any]()
    assert pycrdt.handle_sync_message(encode_sync_step2(left.get_update())[1:], third) is None
    assert third.get("state", type=pycrdt.Map).to_py() == {"a": "from-left", "b": "from-right"}
