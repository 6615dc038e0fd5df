"""The error family of ``sync``: one root, one meaning of ``code``, transport fields apart."""

from __future__ import annotations

import pytest

import crdt_state
import sync
from sync.wire.errors import ErrorCode


def test_every_sync_error_is_a_sync_error_with_a_string_code() -> None:
    errors = [
        sync.ProtocolError(ErrorCode.TRUNCATED, "short"),
        sync.RemoteError("document_too_large", "too big"),
        sync.AuthError(403, "wrong_room", "not this room"),
        sync.PeerRefused("read_only", "no writes", close_code=1008),
    ]
    for error in errors:
        assert isinstance(error, sync.SyncError)
        assert isinstance(error.code, str) and error.code.isidentifier() and error.code.islower()
    assert [e.code for e in errors] == [
        "truncated",
        "document_too_large",
        "wrong_room",
        "read_only",
    ]


def test_transport_details_are_named_fields() -> None:
    protocol = sync.ProtocolError(ErrorCode.UNKNOWN_STATUS, "from a newer peer")
    assert protocol.close_code == sync.CloseCode.UNSUPPORTED_DATA
    assert sync.AuthError(401, "expired_token", "expired").http_status == 401
    refused = sync.PeerRefused("read_only", "no writes", close_code=1008)
    assert refused.close_code == 1008 and refused.permission_denied


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (sync.ProtocolError(ErrorCode.TRUNCATED, "short"), ValueError),
        (sync.AuthError(401, "missing_token", "no token"), PermissionError),
        (sync.RemoteError("wrong_type", "not a map"), crdt_state.CrdtStateError),
    ],
)
def test_errors_also_subclass_what_fits(error: Exception, builtin: type[Exception]) -> None:
    assert isinstance(error, builtin)


def test_a_remote_error_keeps_the_hub_code() -> None:
    error = sync.RemoteError("broken_chain", "chain refused")
    assert error.code == "broken_chain" and error.details == {"hub_code": "broken_chain"}
    assert str(error) == "[broken_chain]: chain refused"
