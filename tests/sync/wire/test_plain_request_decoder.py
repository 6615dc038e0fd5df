"""The one-pass decoder of common merge requests answers exactly as the general decoder.

For any input (well-formed requests of every step, their near misses, hand-made change
sets with duplicate keys, non-finite numbers, the missing sentinel, unknown fields, and
plain garbage), :func:`decode_message` returns an equal message or raises a
:class:`ProtocolError` with the same code and text as the general decoder alone; and
whenever the fast decoder answers at all, its answer equals the general one.
"""

from __future__ import annotations

import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sync.wire._plain_request import decode_plain_request
from sync.wire.changes import ChangeKind, JsonValue, WireChange, _is_missing_json
from sync.wire.errors import ProtocolError
from sync.wire.lib0 import MAX_VAR_UINT, encode_var_bytes, encode_var_string, encode_var_uint
from sync.wire.messages import MergeRequest
from sync.wire.protocol import _decode_general, decode_message, encode_merge_request

ids = st.one_of(st.integers(0, 300), st.integers(0, MAX_VAR_UINT))
texts = st.text(max_size=6)


def _json(numbers: st.SearchStrategy[float]) -> st.SearchStrategy[JsonValue]:
    return st.recursive(
        st.none() | st.booleans() | st.integers(-(2**60), 2**60) | numbers | texts,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
        max_leaves=6,
    )


json_values = _json(st.floats())  # NaN and infinities too (the decoders refuse them)
finite_values = _json(st.floats(allow_nan=False, allow_infinity=False))
paths = st.lists(texts, min_size=1, max_size=3).map(tuple)


def _state_vector(clocks: dict[int, int]) -> bytes:
    parts = [encode_var_uint(len(clocks))]
    for client, clock in clocks.items():
        parts += [encode_var_uint(client), encode_var_uint(clock)]
    return b"".join(parts)


state_vectors = st.one_of(
    st.dictionaries(st.integers(0, MAX_VAR_UINT), st.integers(0, MAX_VAR_UINT), max_size=3).map(
        _state_vector
    ),
    st.binary(max_size=10),
)


@st.composite
def wire_changes(draw: st.DrawFn) -> WireChange:
    kind = draw(st.sampled_from(list(ChangeKind)))
    if kind is ChangeKind.DELETE:
        return WireChange(kind, draw(paths))
    return WireChange(kind, draw(paths), draw(finite_values))


def _json_item(draw: st.DrawFn) -> object:
    """A change-set item close to the plain shape, often just off it."""
    item: dict[str, object] = {}
    if draw(st.booleans()):
        item["kind"] = draw(st.sampled_from(["set", "append", "delete", "merge", 1, None]))
    if draw(st.integers(0, 5)):
        item["path"] = draw(
            st.one_of(st.lists(texts, max_size=3), st.lists(st.integers(), max_size=2), texts)
        )
    if draw(st.booleans()):
        item["value"] = draw(st.one_of(json_values, st.just({"$missing": True})))
    if not draw(st.integers(0, 6)):
        item["combine"] = draw(st.sampled_from([True, False, 1]))
    if not draw(st.integers(0, 8)):
        item[draw(texts)] = 1
    return item if draw(st.integers(0, 10)) else draw(json_values)


@st.composite
def change_set_bodies(draw: st.DrawFn) -> bytes:
    """JSON text of a change set, with the near misses a general decoder refuses."""
    items = [_json_item(draw) for _ in range(draw(st.integers(0, 3)))]
    text = json.dumps(items, allow_nan=True) if draw(st.integers(0, 8)) else json.dumps(items[:1])
    mutation = draw(st.integers(0, 9))
    if mutation == 0:  # a key named twice
        text = text.replace('"kind": ', '"kind": "set", "kind": ', 1)
    elif mutation == 1:
        text = text.replace("1", "1e999", 1)
    elif mutation == 2:
        text = text.replace("[", "", 1)
    raw = text.encode("utf-8", "surrogatepass")
    return raw + b"\xff" if mutation == 3 else raw


def _runs(chain: list[int]) -> bytes:
    out, end = [encode_var_uint(len(chain))], 0
    for start in chain:
        out += [encode_var_uint(start - end), encode_var_uint(1)]
        end = start + 1
    return b"".join(out)


@st.composite
def raw_requests(draw: st.DrawFn) -> bytes:
    """Requests assembled field by field, so any field may be malformed."""
    step = draw(st.sampled_from([0, 2, 2, 3, 1, 4]))
    parts = [b"d", encode_var_uint(step), encode_var_uint(draw(ids))]
    parts.append(encode_var_string(draw(texts)))
    parts.append(encode_var_bytes(draw(state_vectors)))
    parts.append(encode_var_bytes(draw(change_set_bodies())))
    if step != 0:
        parts.append(encode_var_string(draw(st.text(max_size=70))))
        chain = sorted(set(draw(st.lists(st.integers(0, 50), max_size=3))))
        parts.append(_runs(chain))
    if step == 3:
        parts.append(b"\x00")
    return b"".join(parts)


@st.composite
def encoded_requests(draw: st.DrawFn) -> bytes:
    """Requests the encoder writes (valid), of every step."""
    writer = draw(st.one_of(st.just(""), st.text(max_size=10)))
    chain = draw(st.one_of(st.just([]), st.lists(st.integers(0, 99), max_size=3, unique=True)))
    return encode_merge_request(
        draw(ids),
        draw(texts),
        draw(
            st.dictionaries(st.integers(0, 2**40), st.integers(0, 2**40), max_size=3).map(
                _state_vector
            )
        ),
        draw(st.lists(wire_changes(), max_size=3, unique_by=lambda c: c.path)),
        writer,
        sorted(chain),
    )


@st.composite
def mutated(draw: st.DrawFn, frames: st.SearchStrategy[bytes]) -> bytes:
    frame = bytearray(draw(frames))
    for _ in range(draw(st.integers(0, 2))):
        action = draw(st.integers(0, 3))
        at = draw(st.integers(0, len(frame)))
        if action == 0:
            del frame[at:]
        elif action == 1 and at < len(frame):
            frame[at] = draw(st.integers(0, 255))
        elif action == 2:
            frame[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif at < len(frame):
            del frame[at]
    return bytes(frame)


inputs = st.one_of(
    encoded_requests(),
    raw_requests(),
    mutated(encoded_requests()),
    mutated(raw_requests()),
    st.binary(max_size=40).map(lambda b: b"d" + b),
    st.binary(max_size=40),
)


def _outcome(decode: object, data: object) -> tuple[str, object]:
    try:
        return "ok", decode(data)  # type: ignore[operator]
    except ProtocolError as exc:
        return "error", (exc.code, str(exc), exc.close_code)


@settings(max_examples=1000)  # ~7 s; 3,000 took ~21 s of the suite
@given(inputs)
@example(b"d\x00\x01\x02a1\x01\x00\x00")  # no change-set bytes at all
@example(b"d\x00\x01\x00\x01\x00\x02[]")
@example(b"d\x02\x01\x00\x01\x00\x02[]\x00\x00")
@example(b"d\x02\x01\x00\x01\x00\x02[]\x00\x01\x00\x01")  # a chain: the general path
@example(b"d\x00\x80\x00\x00\x01\x00\x02[]")  # non-canonical request id
@example(b"d\x00\x01\x00\x01\x00\x02[]\x00")  # trailing byte
def test_decode_message_answers_as_the_general_decoder(data: bytes) -> None:
    fast = decode_plain_request(data)
    general = _outcome(_decode_general, data)
    if fast is not None:
        assert general == ("ok", fast)
    assert _outcome(decode_message, data) == general


@given(encoded_requests())
def test_common_requests_take_the_fast_path(frame: bytes) -> None:
    """Encoded requests without a chain, whose values hold no missing sentinel, are read by it."""
    request = _decode_general(frame)
    assert hasattr(request, "chain")
    assert isinstance(request, MergeRequest)  # for mypy: only a merge request has a chain
    plain = not request.chain and not any(_is_missing_json(c.value) for c in request.changes)
    if plain:
        assert decode_plain_request(frame) == request
