"""gufo-liftbridge 0.2.0, the real Python Liftbridge client, against a running gateway."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import GatewayProcess

DRIVER = Path(__file__).parent / "gufo_driver.py"


@pytest.fixture(params=["memory", "embedded"])
def gateway(request: pytest.FixtureRequest, tmp_path: Path):
    with GatewayProcess(tmp_path, listeners={"liftbridge": {}}, backend=request.param) as gw:
        yield gw


def test_gufo_exercises_every_rpc_it_has(gateway: GatewayProcess) -> None:
    host, port = gateway.address("liftbridge")
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(port)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + gateway.log_text()[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    broker = f"{host}:{port}"

    assert out["exists"] == "ErrorAlreadyExists"
    assert out["bulk_acks"] == [[i, f"c{i}", f"c{i}", "orders", "orders.subj.1"] for i in range(5)]
    md = out["metadata"]
    assert md["brokers"] == [[broker, host, port]]
    assert md["streams"]["orders"] == {
        "subject": "orders.subj",
        "partitions": {"0": [broker, 2, 2], "1": [broker, 4, 4], "2": [broker, -1, -1]},
    }
    assert "__cursors" in md["streams"]
    assert out["partition_metadata"] == [1, 4]

    earliest = out["earliest"]
    assert [(m["offset"], m["value"]) for m in earliest] == [
        (0, "first"),
        (1, "second"),
        (2, "third"),
    ]
    first = earliest[0]
    assert first["key"] == "k1"
    assert first["headers"] == {"h": "v", "subject": "orders.subj", "reply": ""}
    assert first["subject"] == "orders.subj" and first["partition"] == 0
    assert first["ts"] > 1_600_000_000 * 10**9  # Unix nanoseconds
    assert [(m["offset"], m["value"]) for m in out["offset"]] == [(3, "bulk-3"), (4, "bulk-4")]
    assert out["offset"][0]["subject"] == "orders.subj.1"
    assert [(m["offset"], m["value"]) for m in out["latest"]] == [(2, "third")]
    assert [(m["offset"], m["value"]) for m in out["timestamp"]] == [(1, "second"), (2, "third")]
    assert [(m["offset"], m["value"]) for m in out["new_only"]] == [(0, "fresh")]
    assert out["cursor"] == 3  # gufo stores offset + 1
    assert out["cursor_unset"] == -1
    assert [(m["offset"], m["value"]) for m in out["resume"]] == [(3, "bulk-3"), (4, "bulk-4")]
    assert out["publish_missing"] == "ErrorNotFound"
    assert out["delete_again"] == "ErrorNotFound"
    assert out["after_delete"] == ["__cursors"]
