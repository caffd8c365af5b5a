"""A message produced with Kafka 0.8 (kcat) is readable through `gateway consume`, and one
produced with `gateway produce` is readable with Kafka 0.8 (kcat, kafka-python)."""

from __future__ import annotations

import subprocess
import sys

from tests.protocols.kafka08.conftest import KCAT_08, kcat, run_client
from tests.support import GatewayProcess, write_toml


def cli(gw: GatewayProcess, *args: str, stdin: str | None = None) -> str:
    """``gateway ARGS --config F`` where F points at the running gateway's admin endpoint."""
    config = dict(gw.config)
    config["admin"] = {**config["admin"], "port": gw.address("admin")[1]}
    path = gw.tmp_path / "cli.toml"
    path.write_text(write_toml(config))
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", *args, "--config", str(path)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=gw.tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_kafka08_to_cli_and_back(gateway: GatewayProcess) -> None:
    bootstrap = f"127.0.0.1:{gateway.address('kafka08')[1]}"
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(20))
    kcat("-b", bootstrap, "-P", "-t", "interop", "-p", "0", "-K:", "-z", "gzip", *KCAT_08,
         stdin=lines)  # fmt: skip
    out = cli(gateway, "consume", "interop", "--from-beginning", "--max", "20", "--keyed")
    assert out.splitlines() == [f"key-{i}\tvalue-{i}" for i in range(20)]

    cli(gateway, "produce", "from-cli", "--keyed", "--partition", "0",
        stdin="".join(f"ck-{i}\tcv-{i}\n" for i in range(5)))  # fmt: skip
    got = kcat("-b", bootstrap, "-C", "-t", "from-cli", "-p", "0", "-o", "beginning", "-e",
               "-f", "%o %k %s\n", *KCAT_08)  # fmt: skip
    assert got.splitlines() == [f"{i} ck-{i} cv-{i}" for i in range(5)]
    out = run_client(
        "kafka-python-3",
        "kafka_python_client.py",
        {"port": gateway.address("kafka08")[1], "api_version": [0, 8, 2], "topic": "from-cli",
         "expect": 5},
    )  # fmt: skip
    assert out["records"] == [[i, f"ck-{i}".encode().hex(), f"cv-{i}".encode().hex()]
                              for i in range(5)]  # fmt: skip
