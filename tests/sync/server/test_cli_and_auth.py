"""The ``crdt-state`` command and the pure token logic."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sync.server.auth import AuthError, mint_token, verify_token

ROOT = Path(__file__).resolve().parents[3]


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sync.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        check=False,
    )


def test_token_command_mints_a_verifiable_token() -> None:
    done = run_cli("token", "--room", "triage/*", "--role", "read", "--ttl", "60", "--secret", "s3")
    assert done.returncode == 0, done.stderr
    grant = verify_token("s3", done.stdout.strip(), "triage/7")
    assert grant.role == "read" and not grant.can_write


def test_token_command_takes_the_secret_from_the_environment() -> None:
    done = run_cli("token", "--room", "*", env={"CRDT_STATE_SECRET": "from-env"})
    assert done.returncode == 0
    assert verify_token("from-env", done.stdout.strip(), "any/room").can_write


def test_token_command_without_secret_fails_clearly() -> None:
    env = {k: v for k, v in os.environ.items() if k != "CRDT_STATE_SECRET"}
    done = subprocess.run(
        [sys.executable, "-m", "sync.cli", "token", "--room", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 2
    assert "secret" in done.stderr


@pytest.mark.parametrize("room", ["", "a b", "triage/é", "team/a?x=1", "%41"])
def test_token_command_refuses_a_room_no_hub_accepts(room: str) -> None:
    """Every hub refuses such a name at the handshake (400 bad_room_name): no token for it."""
    done = run_cli("token", "--room", room, "--secret", "s3")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"crdt-state token: --room {room!r}: ")
    assert "bad_room_name" in done.stderr and "A-Z a-z 0-9 . _ ~ - /" in done.stderr


@pytest.mark.parametrize(
    ("pattern", "room"),
    [("*", "*"), ("triage/*", "triage/4"), ("team/a", "team/a"), ("t?am/[ab]", "team/b"),
     ("x/[!a]", "x/b"), ("a-b_c.d~e", "a-b_c.d~e")],
)  # fmt: skip
def test_token_command_takes_room_names_and_globs(pattern: str, room: str) -> None:
    done = run_cli("token", "--room", pattern, "--secret", "s3")
    assert done.returncode == 0, done.stderr
    assert verify_token("s3", done.stdout.strip(), room).can_write  # a hub takes it


@pytest.mark.parametrize(
    ("token", "room", "status", "code"),
    [
        (None, "r", 401, "missing_token"),
        ("", "r", 401, "missing_token"),
        ("no-dot", "r", 401, "malformed_token"),
        (".sig", "r", 401, "malformed_token"),
    ],
)
def test_refusals(token: str | None, room: str, status: int, code: str) -> None:
    with pytest.raises(AuthError) as info:
        verify_token("secret", token, room)
    assert (info.value.http_status, info.value.code) == (status, code)


def test_tampered_claims_are_refused() -> None:
    token = mint_token("secret", "team/a", "read", 60)
    payload, _, signature = token.partition(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["role"] = "write"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    with pytest.raises(AuthError) as info:
        verify_token("secret", f"{forged}.{signature}", "team/a")
    assert info.value.code == "bad_signature"


def test_expiry_and_room_globs() -> None:
    token = mint_token("secret", "team/*", "write", 10, now=1_000)
    assert verify_token("secret", token, "team/x", now=1_005).can_write
    with pytest.raises(AuthError) as expired:
        verify_token("secret", token, "team/x", now=1_010)
    assert expired.value.code == "expired_token"
    with pytest.raises(AuthError) as wrong:
        verify_token("secret", token, "other/x", now=1_005)
    assert (wrong.value.http_status, wrong.value.code) == (403, "wrong_room")
    assert verify_token("secret", token, "team/a/b", now=1_005).can_write  # * crosses /


@pytest.mark.parametrize("pattern", ["?", "[*]", "[!a]", "team/*"])
def test_only_a_token_for_exactly_star_is_an_admin_token(pattern: str) -> None:
    """The inspector's room list asks for room "*": "?" and "[*]" matched that text."""
    with pytest.raises(AuthError) as refused:
        verify_token("secret", mint_token("secret", pattern, "read", 10, now=1_000), "*", now=1_005)
    assert (refused.value.http_status, refused.value.code) == (403, "wrong_room")
    admin = mint_token("secret", "*", "read", 10, now=1_000)
    assert verify_token("secret", admin, "*", now=1_005).room == "*"


def test_minting_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError):
        mint_token("", "r", "read", 60)
    with pytest.raises(ValueError):
        mint_token("s", "r", "admin", 60)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        mint_token("s", "r", "read", 0)
