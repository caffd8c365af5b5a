"""Running is easy and says what is wrong: `gateway serve` without a config file names the file
it looked for and exits 2; GATEWAY_PORT_OFFSET (what `make run PORT_OFFSET=N` sets) moves every
port at once; a port that is taken names the listener and how to move it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config
from tests.support import REPO_ROOT


def gateway(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_without_a_config_file_names_the_file_and_exits_2(tmp_path: Path) -> None:
    res = gateway("serve", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert res.stderr == (
        f"error: no config file: looked for config/gateway.toml in {tmp_path}; pass --config "
        "FILE (the repository's config/gateway.toml serves every protocol on loopback)\n"
    )
    assert not (tmp_path / "data").exists()  # nothing made where it stands
    missing = tmp_path / "nope.toml"
    res = gateway("serve", "--config", str(missing), cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr == f"error: invalid configuration: {missing}: file not found\n"
    assert not (tmp_path / "data").exists()


def test_the_port_offset_moves_every_port_but_port_0() -> None:
    config = REPO_ROOT / "config" / "gateway.toml"
    base = load_config(config, environ={})
    moved = load_config(config, environ={"GATEWAY_PORT_OFFSET": "10000"})
    assert moved.admin.port == base.admin.port + 10000 == 19644
    assert {n: c.port for n, c in moved.listeners.items()} == {
        n: c.port + 10000 for n, c in base.listeners.items()
    }
    assert moved.listeners["kafka08"].port == 19092
    # port 0 (pick a free one) and advertised ports stay as they are
    picked = load_config(
        config,
        environ={
            "GATEWAY_PORT_OFFSET": "5",
            "GATEWAY_LISTENERS__TANK__PORT": "0",
            "GATEWAY_LISTENERS__CURSUS__ADVERTISED_PORT": "7000",
        },
    )
    assert picked.listeners["tank"].port == 0
    assert picked.listeners["cursus"].advertised_port == 7000
    assert load_config(config, environ={"GATEWAY_PORT_OFFSET": " "}) == base


@pytest.mark.parametrize(
    ("offset", "problem"),
    [
        ("x", "GATEWAY_PORT_OFFSET: got 'x', expected an integer added to every port"),
        (
            "60000",
            "admin.port: got 9644 + GATEWAY_PORT_OFFSET 60000 = 69644, "
            "expected a port number 1..65535",
        ),
    ],
)
def test_a_bad_port_offset_names_the_key(offset: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(REPO_ROOT / "config" / "gateway.toml", environ={"GATEWAY_PORT_OFFSET": offset})
    assert problem in info.value.problems


def test_check_config_shows_the_moved_ports(tmp_path: Path) -> None:
    res = gateway(
        "check-config",
        "--file-only",
        str(REPO_ROOT / "config" / "gateway.toml"),
        cwd=tmp_path,
        env={"GATEWAY_PORT_OFFSET": "10000"},
    )
    assert res.returncode == 0, res.stderr
    assert "kafka08=127.0.0.1:19092" in res.stdout and "liftbridge=127.0.0.1:19292" in res.stdout


def test_a_taken_port_names_the_listener_and_how_to_move_every_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "gw.toml"
        config.write_text(
            f'[server]\nlog_level = "warning"\ndata_dir = "{tmp_path / "data"}"\n'
            f"[admin]\nport = 0\n[listeners.tank]\nport = {port}\n"
        )
        res = gateway("serve", "--config", str(config), cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.startswith(f"error: listeners.tank: cannot bind 127.0.0.1:{port}: ")
    assert "GATEWAY_PORT_OFFSET=N, e.g. make run PORT_OFFSET=10000" in res.stderr
    assert res.stderr.count("\n") == 1
