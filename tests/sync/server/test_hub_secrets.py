"""The hub's secret: empty secrets refused, secret files, explicit insecure mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hubs import free_port

from sync.server import Hub, HubConfigError
from sync.server.auth import verify_token

ROOT = Path(__file__).resolve().parents[3]


def cli(*args: str, secret_env: str | None = None, timeout: float = 30) -> tuple[int, str]:
    """Run ``crdt-state`` (no CRDT_STATE_SECRET unless ``secret_env``); (exit code, output)."""
    env = {k: v for k, v in os.environ.items() if k != "CRDT_STATE_SECRET"}
    if secret_env is not None:
        env["CRDT_STATE_SECRET"] = secret_env
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "sync.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("secret", ["", "   "])
def test_an_empty_secret_is_refused_by_the_hub(secret: str) -> None:
    with pytest.raises(HubConfigError) as info:
        Hub(port=0, secret=secret)
    assert info.value.code == "empty_secret"


def test_no_secret_is_refused_on_a_public_host_unless_insecure() -> None:
    with pytest.raises(HubConfigError) as info:
        Hub("0.0.0.0", port=0)
    assert info.value.code == "insecure_host"
    assert Hub("0.0.0.0", port=0, insecure=True).secret is None
    assert Hub("127.0.0.1", port=0).secret is None
    assert Hub("::1", port=0).secret is None
    assert Hub("0.0.0.0", port=0, secret="s").secret == "s"


def test_cli_refuses_empty_secrets(tmp_path: Path) -> None:
    code, out = cli("hub", "--port", "0", "--secret", "")
    assert code == 2 and "empty" in out
    code, out = cli("hub", "--port", "0", secret_env="")
    assert code == 2 and "empty" in out
    empty = tmp_path / "empty"
    empty.write_text("\n")
    code, out = cli("hub", "--port", "0", "--secret-file", str(empty))
    assert code == 2 and "empty" in out
    code, out = cli("token", "--room", "*", secret_env="")
    assert code == 2 and "empty" in out
    code, out = cli("hub", "--port", "0", "--secret-file", str(tmp_path / "missing"))
    assert code == 2 and "cannot read" in out


def test_cli_needs_a_secret_or_an_explicit_insecure() -> None:
    code, out = cli("hub", "--port", "0")
    assert code == 2 and "--insecure" in out and "secret" in out
    code, out = cli("hub", "--port", "0", "--host", "0.0.0.0", "--insecure")
    assert code == 2 and "0.0.0.0" in out


def test_cli_secret_file_is_used_stripped(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("  from-a-file\n")
    code, out = cli("token", "--room", "r/*", "--secret-file", str(secret_file))
    assert code == 0, out
    assert verify_token("from-a-file", out.strip(), "r/1").can_write


def _start(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "CRDT_STATE_SECRET"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "sync.cli", "hub", "--db", "", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _output_until(process: subprocess.Popen[str], last: str) -> str:
    """What the hub prints up to the first line holding ``last``; then the hub is stopped."""
    assert process.stdout is not None
    lines: list[str] = []
    try:
        while not lines or last not in lines[-1]:
            line = process.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
    finally:
        process.terminate()
        process.wait(10)
    return "".join(lines)


def test_cli_insecure_hub_starts_on_loopback_with_a_warning() -> None:
    out = _output_until(_start("--port", str(free_port()), "--insecure"), "WARNING: --insecure")
    assert "crdt-state hub on ws://127.0.0.1" in out
    assert "WARNING" in out and "insecure" in out.lower()


def test_cli_insecure_public_hub_needs_the_force_flag() -> None:
    process = _start(
        "--port", str(free_port()), "--host", "0.0.0.0", "--insecure", "--insecure-public"
    )
    out = _output_until(process, "WARNING: --insecure")
    assert "crdt-state hub on ws://0.0.0.0" in out and "WARNING" in out


def test_cli_hub_with_a_secret_file_starts(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("s3cret\n")
    process = _start("--port", str(free_port()), "--secret-file", str(secret_file))
    out = _output_until(process, "crdt-state hub on")
    assert "crdt-state hub on ws://127.0.0.1" in out
    assert "s3cret" not in out
