"""The mistakes a user makes when connecting get typed errors with stable codes."""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize(
    "url",
    [
        "ws://127.0.0.1:8765",
        "ws://127.0.0.1:8765/",
        "ws://127.0.0.1:8765/?token=abc",
        "ws://127.0.0.1:8765/two words",
        "ws://127.0.0.1:8765/caf%C3%A9",
    ],
)
async def test_a_url_naming_no_room_a_hub_takes_is_refused_before_connecting(url: str) -> None:
    # nothing listens there: a check that let the URL through would fail differently
    with pytest.raises(sync.InvalidHubURL) as info:
        async with sync.connect(url, agent="a", timeout=2):
            pass
    assert info.value.code == "invalid_url"
    assert "room" in str(info.value) and "abc" not in str(info.value)  # the token masked
    with pytest.raises(sync.InvalidHubURL):
        sync.connect_blocking(url, agent="a", timeout=2)


async def test_a_room_name_the_hub_refuses_fails_at_once_not_after_the_timeout(
    tmp_path: Path,
) -> None:
    # in the grammar, but too long for the durable hub's file name: a hub-side refusal
    room = "r" * 300
    async with Hub(port=0, db=tmp_path) as hub:
        with pytest.raises(sync.InvalidHubURL) as info:
            async with sync.connect(hub.url(room), agent="a", timeout=60):
                pass
    assert info.value.code == "invalid_url"
    assert "room_name_too_long" in str(info.value) and "HTTP 414" in str(info.value)
