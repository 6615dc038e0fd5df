"""The mistakes a user makes when connecting get typed errors with stable codes."""

from __future__ import annotations

import pytest

import sync
from sync import Hub


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8765/room", "nonsense", "127.0.0.1:8765/room", "ws:///room", ""]
)
async def test_a_bad_hub_url_is_refused_at_once(url: str) -> None:
    with pytest.raises(sync.InvalidHubURL) as info:
        async with sync.connect(url, agent="a"):  # before any connection attempt
            pass
    assert info.value.code == "invalid_url" and isinstance(info.value, ValueError)
    assert repr(url) in str(info.value)
    with pytest.raises(sync.InvalidHubURL):
        sync.connect_blocking(url, agent="a")


async def test_a_refused_token_is_an_auth_error() -> None:
    async with Hub(port=0, secret="s3cret") as hub:
        with pytest.raises(sync.AuthError) as info:
            async with sync.connect(hub.url("room"), agent="a", token="wrong"):
                pass
    assert info.value.code == "malformed_token" and info.value.http_status == 401
    assert isinstance(info.value, sync.SyncError) and isinstance(info.value, PermissionError)
