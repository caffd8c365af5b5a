"""``gateway matrix`` against a running gateway: the table, Markdown output, the exit status,
and listeners (and an upstream chain) read from a config file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gateway.interop.cli import addresses_from_config
from tests.protocols.kafka08.conftest import venv_python
from tests.support import GatewayProcess, write_toml


def matrix(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "matrix", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_matrix_prints_a_table_and_writes_markdown(tmp_path: Path) -> None:
    listeners = {"tank": {}, "cursus": {}, "kafka08": {}}
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        given = [f"--listener={n}={h}:{p}" for n in listeners for h, p in [gw.address(n)]]
        out = tmp_path / "matrix.md"
        proc = matrix(*given, "--records", "20", "--output", str(out))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].split() == ["producer", "\\", "consumer", "kafka08", "tank", "cursus"]
        assert all(line.count("ok ") == 3 for line in lines[1:4]), proc.stdout
        assert "9/9 pairs passed, 20 records each" in proc.stdout
        assert "key, value, timestamp: kafka08->tank tank->tank" in proc.stdout
        md = out.read_text().splitlines()
        assert md[0] == "| producer \\ consumer | kafka08 | tank | cursus |"
        assert md[2].startswith("| kafka08 | ok ")

        # a listener that is not what it claims to be: those pairs fail, and so does the run
        h, p = gw.address("tank")
        proc = matrix(
            f"--listener=tank={h}:{p}",
            f"--listener=cursus={h}:{p}",
            f"--create-at=tank={h}:{p}",
            "--records=5",
        )
        assert proc.returncode == 1
        assert "FAIL" in proc.stdout and "1/4 pairs passed" in proc.stdout


def test_listeners_and_the_upstream_come_from_the_config(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(
        write_toml(
            {
                "listeners": {
                    "tank": {"host": "0.0.0.0", "port": 11011},
                    "iggy": {"port": 8090, "advertised_host": "gw.example", "enabled": True},
                    "cursus": {"port": 9000, "enabled": False},
                },
                "backends": {
                    "up": {"type": "upstream", "protocol": "liftbridge", "address": "b:9292"}
                },
            }
        )
    )
    found, through = addresses_from_config(str(path))
    assert found == {"tank": ("127.0.0.1", 11011), "iggy": ("gw.example", 8090)}
    assert through == "liftbridge"


def test_matrix_deletes_the_topics_and_groups_it_made(tmp_path: Path) -> None:
    listeners = {"tank": {}, "cursus": {}}
    with GatewayProcess(tmp_path, listeners=listeners, backend="embedded") as gw:
        # the listeners and the admin endpoint as they were bound, in the config
        for name in listeners:
            gw.config["listeners"][name]["port"] = gw.address(name)[1]
        gw.config["admin"]["port"] = gw.address("admin")[1]
        gw.write_config()
        cfg = str(gw.config_path)
        before = ["created-by-hand"]
        gateway_cli = [sys.executable, "-m", "gateway"]
        subprocess.run([*gateway_cli, "topics", "create", before[0], "--config", cfg], check=True)

        proc = matrix("--config", cfg, "--records", "5")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "matrix: deleted 4 topic(s) and 2 group(s) it made" in proc.stderr
        listed = subprocess.run(
            [*gateway_cli, "topics", "list", "--config", cfg], capture_output=True, text=True
        )
        assert listed.stdout == f"{before[0]}\t1\n"  # only what was there before
        groups = subprocess.run(
            [*gateway_cli, "groups", "list", "--config", cfg], capture_output=True, text=True
        )
        assert groups.returncode == 0 and groups.stdout == ""

        proc = matrix("--config", cfg, "--records", "5", "--keep")
        assert proc.returncode == 0 and "kept the topics" in proc.stderr
        listed = subprocess.run(
            [*gateway_cli, "topics", "list", "--config", cfg], capture_output=True, text=True
        )
        assert len(listed.stdout.splitlines()) == 5


def test_a_kafka_listener_gives_todays_kafka_client_too(tmp_path: Path) -> None:
    listeners = {"kafka08": {}, "tank": {}}
    with GatewayProcess(tmp_path, listeners=listeners, backend="embedded") as gw:
        for name in listeners:
            gw.config["listeners"][name]["port"] = gw.address(name)[1]
        gw.config["admin"]["port"] = gw.address("admin")[1]
        gw.write_config()
        cfg = str(gw.config_path)
        kafka_python = venv_python("confluent-kafka")
        proc = matrix("--config", cfg, "--records", "5", "--kafka-python", kafka_python)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = proc.stdout.splitlines()
        assert lines[0].split() == ["producer", "\\", "consumer", "kafka08", "tank", "kafka"]
        assert "9/9 pairs passed" in proc.stdout
        assert "key, value, headers, timestamp: kafka->kafka" in proc.stdout
        # the matrix's topics, and no group left behind by the Kafka client
        assert "matrix: deleted 9 topic(s) and 0 group(s) it made" in proc.stderr
        groups = subprocess.run(
            [sys.executable, "-m", "gateway", "groups", "list", "--config", cfg],
            capture_output=True,
            text=True,
        )
        assert groups.returncode == 0 and groups.stdout == ""

        # this Python has no confluent-kafka: the run says it left the client out
        proc = matrix("--config", cfg, "--records", "5")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "left out kafka (today's Kafka client)" in proc.stderr
        assert "4/4 pairs passed" in proc.stdout

        # named by hand, its pairs fail with a clear reason
        (h, p), (th, tp) = gw.address("kafka08"), gw.address("tank")
        proc = matrix(f"--listener=kafka={h}:{p}", f"--listener=tank={th}:{tp}", "--records=5")
        assert proc.returncode == 1 and "1/4 pairs passed" in proc.stdout
        assert "confluent-kafka is not installed here: pip install confluent-kafka" in proc.stdout
