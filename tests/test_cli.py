"""The admin CLI against a running gateway (through its admin endpoint)."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO_ROOT, GatewayProcess


def gateway(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )


def fixed_admin_port(gw: GatewayProcess) -> None:
    """The CLI finds a running gateway by the admin port in the config: pin the announced one."""
    gw.config["admin"]["port"] = gw.address("admin")[1]
    gw.write_config()


def test_topics_produce_consume_through_a_running_gateway(tmp_path) -> None:
    with GatewayProcess(tmp_path, backend="memory") as gw:
        fixed_admin_port(gw)
        cfg = str(gw.config_path)
        res = gateway("topics", "create", "orders", "--partitions", "3", "--config", cfg)
        assert res.returncode == 0, res.stderr
        assert "created orders with 3 partition(s)" in res.stdout
        assert gateway("topics", "list", "--config", cfg).stdout == "orders\t3\n"

        res = gateway(
            "produce", "orders", "--keyed", "--config", cfg, stdin="a\tone\nb\ttwo\na\tthree\n"
        )
        assert res.returncode == 0, res.stderr
        res = gateway("consume", "orders", "--from-beginning", "--keyed", "--config", cfg)
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert sorted(lines) == ["a\tone", "a\tthree", "b\ttwo"]
        # per key, order is kept (same key, same partition)
        assert [v for v in lines if v.startswith("a\t")] == ["a\tone", "a\tthree"]

        res = gateway("consume", "orders", "--from-beginning", "--max", "1", "--config", cfg)
        assert len(res.stdout.splitlines()) == 1


def test_keyed_produce_rejects_lines_without_a_tab(tmp_path) -> None:
    with GatewayProcess(tmp_path, backend="memory") as gw:
        fixed_admin_port(gw)
        res = gateway("produce", "t", "--keyed", "--config", str(gw.config_path), stdin="novalue\n")
        assert res.returncode == 2
        assert res.stderr == "error: stdin line 1: --keyed expects key<TAB>value, got 'novalue'\n"


def test_consume_unknown_topic_is_a_clear_error(tmp_path) -> None:
    with GatewayProcess(tmp_path, backend="memory") as gw:
        fixed_admin_port(gw)
        res = gateway("consume", "missing", "--from-beginning", "--config", str(gw.config_path))
        assert res.returncode == 1
        assert "missing" in res.stderr


def embedded_config(tmp_path) -> str:
    path = tmp_path / "direct.toml"
    path.write_text(
        f'[server]\ndata_dir = "{tmp_path / "data"}"\n'
        "[admin]\nport = 1\n"  # nothing answers there: the CLI opens the backend itself
        '[backends.default]\ntype = "embedded"\n'
    )
    return str(path)


def test_commands_open_the_embedded_log_directly_without_a_gateway(tmp_path) -> None:
    cfg = embedded_config(tmp_path)
    res = gateway("topics", "create", "direct", "--partitions", "2", "--config", cfg)
    assert res.returncode == 0, res.stderr
    assert gateway("topics", "list", "--config", cfg).stdout == "direct\t2\n"
    res = gateway("produce", "direct", "--partition", "1", "--config", cfg, stdin="x\ny\n")
    assert res.returncode == 0, res.stderr
    res = gateway("consume", "direct", "--from-beginning", "--config", cfg)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "x\ny\n"  # only data on stdout, notices go to stderr


def test_a_second_writer_gets_a_clear_lock_error(tmp_path) -> None:
    cfg = embedded_config(tmp_path)
    with GatewayProcess(
        tmp_path / "gw", backend="embedded", server={"data_dir": str(tmp_path / "data")}
    ):
        res = gateway("topics", "list", "--config", cfg)  # admin port 1: not the running one
        assert res.returncode == 1
        assert "lock" in res.stderr.lower() and str(tmp_path / "data") in res.stderr
