"""The hub's fast encoder of an ok merge result gives the general encoder's bytes and errors."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sync.wire import _ok_result
from sync.wire.changes import WirePath, encode_applied_body, encode_result_body
from sync.wire.errors import ProtocolError
from sync.wire.lib0 import MAX_VAR_UINT, encode_var_uint
from sync.wire.protocol import (
    MergeReply,
    MergeStatus,
    decode_message,
    encode_merge_result,
    encode_ok_result,
)


def _state_vector(clocks: dict[int, int]) -> bytes:
    parts = [encode_var_uint(len(clocks))]
    for client, clock in clocks.items():
        parts += [encode_var_uint(client), encode_var_uint(clock)]
    return b"".join(parts)


request_ids = st.one_of(st.integers(0, 300), st.integers(0, MAX_VAR_UINT))
tokens = st.one_of(
    st.dictionaries(st.integers(0, MAX_VAR_UINT), st.integers(0, MAX_VAR_UINT), max_size=4).map(
        _state_vector
    ),
    st.binary(max_size=12),  # mostly not a state vector
)
applied_paths = st.lists(
    st.lists(st.text(max_size=8), min_size=1, max_size=4).map(tuple), max_size=4
)


def _outcome(fn: object, *args: object) -> bytes | tuple[type[BaseException], str]:
    try:
        return fn(*args)  # type: ignore[operator,no-any-return]
    except ProtocolError as exc:
        return type(exc), exc.code.value
    except (ValueError, TypeError, OverflowError) as exc:
        return type(exc), ""


@given(request_ids, tokens, applied_paths)
def test_fast_ok_result_equals_the_general_encoder(
    request_id: int, token: bytes, applied: list[WirePath]
) -> None:
    general = _outcome(
        lambda: encode_merge_result(request_id, MergeStatus.OK, token, applied=applied)
    )
    fast = _outcome(lambda: encode_ok_result(request_id, token, applied))
    assert fast == general
    if isinstance(fast, bytes):
        reply = decode_message(fast)
        assert reply == MergeReply(request_id, MergeStatus.OK, token, tuple(applied))


@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_VAR_UINT + 1)))
def test_a_request_id_out_of_range_fails_alike(request_id: int) -> None:
    token = _state_vector({1: 2})
    general = _outcome(lambda: encode_merge_result(request_id, MergeStatus.OK, token))
    assert not isinstance(general, bytes)
    assert _outcome(lambda: encode_ok_result(request_id, token, ())) == general


@given(applied_paths)
def test_an_ok_body_equals_the_general_body(applied: list[WirePath]) -> None:
    assert encode_applied_body(applied) == encode_result_body(applied, (), None)


@given(request_ids, tokens, applied_paths, st.lists(st.integers(0, 3), max_size=6))
def test_remembered_ok_bodies_give_the_general_encoders_bytes(
    request_id: int, token: bytes, applied: list[WirePath], order: list[int]
) -> None:
    # the hub passes a tuple of paths: those are remembered by their paths; repeat them
    # (and a few others) so that some encodings come from the table
    others: list[tuple[WirePath, ...]] = [(("a",),), (("a", "b"),), ((), ("\ud800",)), ()]
    for paths in [tuple(applied), tuple(applied)] + [others[i] for i in order]:
        general = _outcome(encode_merge_result, request_id, MergeStatus.OK, token, paths)
        assert _outcome(encode_ok_result, request_id, token, paths) == general


def test_the_table_of_ok_bodies_is_dropped_when_full_and_keeps_answering_alike() -> None:
    token = _state_vector({7: 3})
    for round_ in range(2):
        for i in range(_ok_result._APPLIED_FIELDS_SIZE + 10):
            paths = ((f"k{i}",), ("x", str(round_)))
            expected = encode_merge_result(i, MergeStatus.OK, token, applied=paths)
            assert encode_ok_result(i, token, paths) == expected
            assert len(_ok_result._APPLIED_FIELDS) <= _ok_result._APPLIED_FIELDS_SIZE
