"""Every expected failure of the ``gateway`` command, run as a subprocess: the whole stderr is one
line naming the cause, no traceback (unless ``--debug``), exit 2 for usage and configuration
mistakes, 1 at run time; a closed stdout ends quietly."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.support import REPO_ROOT, GatewayProcess, write_toml


def gateway(*args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=timeout,
    )


def one_line(res: subprocess.CompletedProcess[str], code: int) -> str:
    """The failure's message (the single stderr line without "error: ")."""
    assert res.returncode == code, (res.returncode, res.stderr)
    assert "Traceback" not in res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: "), res.stderr
    return res.stderr[len("error: ") : -1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(tmp_path: Path, name: str = "gw.toml", **sections: dict) -> str:
    data = {
        "server": {"data_dir": str(tmp_path / "data"), "log_level": "warning"},
        "admin": {"host": "127.0.0.1", "port": free_port()},
        "backends": {"default": {"type": "embedded"}},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    path = tmp_path / name
    path.write_text(write_toml(data))
    return str(path)


def test_serve_on_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = config(tmp_path, listeners={"kafka08": {"host": "127.0.0.1", "port": port}})
        message = one_line(gateway("serve", "--config", cfg), 1)
        # the key, the address, the cause and what to do
        assert message.startswith(f"listeners.kafka08: cannot bind 127.0.0.1:{port}: "), message
        assert "Address already in use" in message and "another port" in message
        # --debug shows where it came from
        res = gateway("serve", "--config", cfg, "--debug")
        assert res.returncode == 1 and "Traceback" in res.stderr


def test_serve_on_a_data_directory_another_gateway_holds(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with GatewayProcess(
        tmp_path / "first", backend="embedded", server={"data_dir": str(data)}
    ) as gw:
        assert gw.proc is not None
        cfg = config(tmp_path, listeners={"tank": {"host": "127.0.0.1", "port": 0}})
        message = one_line(gateway("serve", "--config", cfg), 1)
        assert f"data directory {data / 'default'} is locked" in message, message
        assert f"pid {gw.proc.pid}" in message


def test_a_data_directory_that_cannot_be_made(tmp_path: Path) -> None:
    # a regular file in the way stops root too (unlike a chmod)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cfg = config(tmp_path, server={"data_dir": str(blocker / "data")})
    expected = (
        f"server.data_dir: '{blocker / 'data' / 'default'}' cannot be created: "
        f"'{blocker}' is not a directory"
    )
    assert one_line(gateway("serve", "--config", cfg), 1) == expected
    assert one_line(gateway("topics", "list", "--config", cfg), 1) == expected


def test_a_data_command_with_the_gateway_stopped(tmp_path: Path) -> None:
    port = free_port()
    cfg = config(tmp_path, admin={"port": port}, backends={"default": {"type": "memory"}})
    for args in (("topics", "list"), ("consume", "t"), ("topics", "delete", "t")):
        assert one_line(gateway(*args, "--config", cfg), 1) == (
            f"no gateway answers at 127.0.0.1:{port}, and backend 'default' (memory) lives "
            f"inside the gateway process: start it (gateway serve --config {cfg})"
        )
    # a backend the CLI cannot reach by itself
    up = config(tmp_path, backends={"default": {"type": "upstream", "protocol": "tank"}})
    text = (
        Path(up)
        .read_text()
        .replace('protocol = "tank"', 'protocol = "tank"\naddress = "127.0.0.1:1"')
    )
    Path(up).write_text(text)
    assert "cannot connect" in one_line(gateway("topics", "list", "--config", up), 1)
    # following needs a gateway: nothing else can write while the CLI holds the data directory
    assert one_line(gateway("consume", "t", "--follow", "--config", config(tmp_path)), 1).endswith(
        "--follow needs a running gateway (gateway serve --config "
        + str(tmp_path / "gw.toml")
        + ")"
    )


def test_configuration_and_usage_mistakes_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[admin]\nport = "x"\n[backends.m]\ntype = "memory"\n')
    assert one_line(gateway("topics", "list", "--config", str(bad)), 2) == (
        "invalid configuration: admin.port: got 'x' (str), expected an integer"
    )
    missing = tmp_path / "missing.toml"
    assert one_line(gateway("serve", "--config", str(missing)), 2) == (
        f"invalid configuration: {missing}: file not found"
    )
    res = gateway("produce", "t", "--keyed", "--config", config(tmp_path), stdin="no tab\n")
    assert one_line(res, 2) == "stdin line 1: --keyed expects key<TAB>value, got 'no tab'"
    res = gateway("produce", "t", "--format", "json", "--config", config(tmp_path), stdin="[1]\n")
    assert one_line(res, 2) == "stdin line 1: expected a JSON object, got list"
    res = gateway("produce", "t", "--batch-bytes", "0", "--config", config(tmp_path))
    assert one_line(res, 2) == (
        "--batch-bytes: got 0, expected 1..33554432 (a request to the gateway is at most 64 MiB)"
    )
    # argparse's own: a usage line and the error, exit 2
    res = gateway("consume")
    assert res.returncode == 2 and "Traceback" not in res.stderr and "usage:" in res.stderr


def test_unknown_topic(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, backend="memory") as gw:
        gw.config["admin"]["port"] = gw.address("admin")[1]
        gw.write_config()
        res = gateway("consume", "missing", "--from-beginning", "--config", str(gw.config_path))
        assert one_line(res, 1) == "unknown topic 'missing' (see `gateway topics list`)"


def test_pipeline_failures_before_spark_starts(tmp_path: Path) -> None:
    port = free_port()
    target = tmp_path / "out"
    res = gateway("pipeline", "export", "t", str(target), "--bootstrap", f"127.0.0.1:{port}")
    assert one_line(res, 1) == (
        f"no gateway answers at 127.0.0.1:{port}: start it, or give --bootstrap host:port of a "
        "running gateway's admin endpoint"
    )
    target.mkdir()
    with GatewayProcess(tmp_path / "gw", backend="memory") as gw:
        host, admin = gw.address("admin")
        res = gateway("pipeline", "export", "t", str(target), "--bootstrap", f"{host}:{admin}")
        assert one_line(res, 1) == (
            f"{target} already exists: pass --overwrite to replace it, or choose another path"
        )
        res = gateway(
            "pipeline", "export", "nope", str(tmp_path / "new"), "--bootstrap", f"{host}:{admin}"
        )
        assert one_line(res, 1) == f"{host}:{admin}: unknown topic 'nope'"
    res = gateway("pipeline", "export", "t", str(target), "--bootstrap", "nope")
    assert one_line(res, 2) == "bootstrap must be host:port (the admin endpoint), got 'nope'"


def test_a_closed_stdout_ends_quietly(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, backend="memory") as gw:
        gw.config["admin"]["port"] = gw.address("admin")[1]
        gw.write_config()
        cfg = str(gw.config_path)
        lines = "".join(f"record number {i:06d} with some padding\n" for i in range(20_000))
        assert gateway("produce", "many", "--config", cfg, stdin=lines).returncode == 0
        # like `gateway consume many --from-beginning | head -1`: far more than a pipe holds
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "consume",
                "many",
                "--from-beginning",
                "--config",
                cfg,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"record number 000000 with some padding\n"
        proc.stdout.close()
        assert proc.wait(timeout=60) == 0
        assert proc.stderr.read() == b""
        proc.stderr.close()
        # like `gateway topics list | head -0`: a few bytes, written (at exit) to a closed pipe
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "topics", "list", "--config", cfg],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # long before the command has its answer
        _, err = proc.communicate(timeout=60)
        assert (proc.returncode, err) == (0, b"")


def test_check_config_checks_data_directories_and_ports(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = config(
            tmp_path,
            server={"data_dir": str(blocker / "data")},
            listeners={"tank": {"host": "127.0.0.1", "port": port}},
        )
        for args in (("check-config", cfg), ("check-config", "--config", cfg)):
            res = gateway(*args)
            assert res.returncode == 2 and "Traceback" not in res.stderr
            assert res.stderr.splitlines() == [
                f"{cfg}: 2 problem(s)",
                f"  - server.data_dir: '{blocker / 'data' / 'default'}' cannot be created: "
                f"'{blocker}' is not a directory",
                f"  - listeners.tank.port: cannot bind 127.0.0.1:{port}: Address already in use "
                "(is a gateway already running? expected a free port)",
            ]
    res = gateway("check-config", "--file-only", cfg)  # the file alone is fine
    assert res.returncode == 0 and res.stdout.startswith(f"{cfg}: ok"), res.stderr
    good = config(
        tmp_path, "good.toml", listeners={"tank": {"host": "127.0.0.1", "port": free_port()}}
    )
    res = gateway("check-config", "--config", good)
    assert res.returncode == 0, res.stderr
    assert "ok" in res.stdout and not (tmp_path / "data").exists()  # checked, nothing made


def test_version_and_help() -> None:
    import gateway as package

    res = gateway("--version")
    assert res.returncode == 0 and res.stdout == f"gateway {package.__version__}\n"
    res = gateway("--help")
    assert res.returncode == 0
    commands = [
        "serve",
        "check-config",
        "topics",
        "produce",
        "consume",
        "groups",
        "pipeline",
        "matrix",
        "hash-password",
        "repair",
    ]
    rows = [line.split(maxsplit=1) for line in res.stdout.splitlines() if line.startswith("    ")]
    assert [r[0] for r in rows] == commands
    assert all(len(r) == 2 for r in rows), rows  # each with its line of help
    # every command (and subcommand) takes --config
    for args in (
        ["serve"],
        ["topics", "delete"],
        ["hash-password"],
        ["pipeline", "copy"],
        ["matrix"],
    ):
        help_text = gateway(*args, "--help").stdout
        assert "--config" in help_text, args
