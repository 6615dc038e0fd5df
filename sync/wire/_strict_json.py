"""Strict JSON for the wire's payloads: what survives a round trip exactly, nothing else.

Encoding (:func:`check_json`, :func:`dump`) refuses what JSON cannot carry exactly:
non-``str`` dict keys, tuples, sets, non-finite floats, lone surrogates, nesting too deep.
Decoding (:func:`load`, :data:`DECODER`) refuses invalid UTF-8, ``NaN``/``Infinity`` and
numbers that overflow to them, and duplicate object keys. Every refusal is a
:class:`~sync.wire.errors.ProtocolError` (``invalid_value``, ``invalid_utf8``,
``invalid_json``). The encoder and decoder objects are built once: ``json.dumps`` and
``json.loads`` with options build one per call.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final, TypeAlias

from sync.wire.errors import ErrorCode, ProtocolError

__all__ = ["DECODER", "ENCODER", "JsonValue", "check_json", "dump", "load"]

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
"""A value JSON carries exactly (lists, not tuples; ``str`` keys only; finite floats)."""


def check_json(value: object) -> None:
    """Raise ``invalid_value`` unless ``value`` survives a JSON round trip unchanged."""
    try:
        _check_rec(value)
    except RecursionError:
        raise ProtocolError(ErrorCode.INVALID_VALUE, "value nested too deeply") from None


def _check_rec(value: object) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProtocolError(ErrorCode.INVALID_VALUE, f"non-finite float {value!r}")
        return
    if type(value) is list:
        for item in value:
            _check_rec(item)
        return
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                raise ProtocolError(ErrorCode.INVALID_VALUE, f"non-str dict key {key!r}")
            _check_rec(item)
        return
    raise ProtocolError(ErrorCode.INVALID_VALUE, f"not a JSON value: {type(value).__name__}")


ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""``json.dumps`` with these options builds an encoder per call (~1 us); this one is reused."""


def dump(value: JsonValue) -> bytes:
    """``value`` as compact UTF-8 JSON; ``invalid_value`` for what JSON cannot carry."""
    try:
        return ENCODER.encode(value).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as exc:  # lone surrogates, bad types
        raise ProtocolError(ErrorCode.INVALID_VALUE, f"cannot encode as JSON: {exc}") from None


def load(data: bytes) -> JsonValue:
    """The JSON value of ``data``, read strictly (see the module doc).

    Raises:
        ProtocolError: ``invalid_utf8`` or ``invalid_json``.
    """
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(ErrorCode.INVALID_UTF8, f"JSON payload is not UTF-8: {exc}") from None
    try:
        value: JsonValue = DECODER.decode(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ProtocolError(ErrorCode.INVALID_JSON, f"invalid JSON: {exc}") from None
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number {text} is out of range")
    return number


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate object key")
    return obj


DECODER: Final = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
)
"""``json.loads`` with hooks builds a decoder per call (~3 us); this one is reused."""
