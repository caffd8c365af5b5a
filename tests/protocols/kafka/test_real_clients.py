"""Today's Kafka clients through the Kafka listener (api_versions "full", the default):
confluent-kafka (librdkafka) with its defaults, idempotence and every codec, kafka-python 3 with
its own version detection, kcat with its defaults; every one produces and reads back."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.protocols.kafka.conftest import confluent, expected, kcat, metric, venv_python
from tests.protocols.kafka08.conftest import CLIENTS as KAFKA08_CLIENTS
from tests.protocols.kafka08.conftest import KCAT_08
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: Any) -> Iterator[GatewayProcess]:
    with GatewayProcess(
        tmp_path_factory.mktemp("kafka-modern"), listeners={"kafka08": {}}, backend="embedded"
    ) as gw:
        yield gw


def bootstrap(gw: GatewayProcess) -> str:
    host, port = gw.address("kafka08")
    return f"{host}:{port}"


def test_confluent_defaults_produce_and_read_back_headers_and_timestamps(
    gateway: GatewayProcess,
) -> None:
    out = confluent({"bootstrap": bootstrap(gateway), "topic": "plain", "count": 30})
    assert out["delivery_errors"] == [] and out["unflushed"] == 0
    assert sorted(out["offsets"]) == list(range(30))
    assert out["errors"] == []
    assert out["records"] == expected(30)  # headers: only record batches v2 carry them


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_idempotent_producer_with_each_codec(gateway: GatewayProcess, codec: str) -> None:
    topic = f"idem-{codec}"
    produce = {"enable.idempotence": True, "compression.type": codec}
    # 3000 records: batches of several compression blocks (lz4: linked 64 KiB blocks)
    out = confluent(
        {"bootstrap": bootstrap(gateway), "topic": topic, "count": 3000, "produce": produce}
    )
    assert out["delivery_errors"] == [] and out["unflushed"] == 0
    assert out["errors"] == []
    assert out["records"] == expected(3000)
    # a second producer (a new producer id) appends after the first one's records
    again = confluent(
        {"bootstrap": bootstrap(gateway), "topic": topic, "count": 5, "produce": produce}
    )
    assert sorted(again["offsets"]) == list(range(3000, 3005))
    assert metric(gateway, "gateway_requests_total", api="init_producer_id", outcome="ok") >= 2
    assert again["records"][3000:] == expected(5, 3000)


def test_kafka_python_3_with_version_detection(gateway: GatewayProcess) -> None:
    host, port = gateway.address("kafka08")
    args = {"port": port, "api_version": None, "topic": "kp3", "count": 25, "expect": 25}
    proc = subprocess.run(
        [
            venv_python("kafka-python-3"),
            str(KAFKA08_CLIENTS / "kafka_python_client.py"),
            json.dumps(args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["produced"] == list(range(25))
    assert out["records"] == [
        [i, (b"key-%d" % i).hex(), (b"value-%d" % i).hex()] for i in range(25)
    ]
    # it spoke today's APIs: ListOffsets v1+ exists only on the modern path
    assert metric(gateway, "gateway_requests_total", api="list_offsets", outcome="ok") > 0


def test_kcat_defaults_produce_and_consume(gateway: GatewayProcess) -> None:
    broker = ["-b", bootstrap(gateway)]
    lines = "".join(f"k{i}:v{i}\n" for i in range(12))
    kcat(*broker, "-P", "-t", "kcat", "-p", "0", "-K:", stdin=lines)
    got = kcat(*broker, "-C", "-t", "kcat", "-p", "0", "-o", "beginning", "-e", "-f", "%o %k %s\n")
    assert got.splitlines() == [f"{i} k{i} v{i}" for i in range(12)]


def test_the_08_table_is_still_one_key_away(tmp_path: Any) -> None:
    """api_versions = "0.8": librdkafka gets the 0.8.2 table and falls back to the v0 APIs
    (no headers there: the record comes back without them)."""
    with GatewayProcess(tmp_path, listeners={"kafka08": {"api_versions": "0.8"}}) as gw:
        out = confluent({"bootstrap": bootstrap(gw), "topic": "old", "count": 3})
    assert out["delivery_errors"] == [] and out["errors"] == []
    assert [r[:3] for r in out["records"]] == [r[:3] for r in expected(3)]
    assert all(r[3] == [] for r in out["records"])


def test_read_from_inside_a_batch_and_by_a_08_client(gateway: GatewayProcess) -> None:
    """A batch kept as the client sent it is read from inside (the records before the offset
    are not delivered) and by a 0.8 client (kcat in 0.8 mode: Fetch v0, message sets)."""
    args = {"bootstrap": bootstrap(gateway), "topic": "inside", "count": 30}
    out = confluent({**args, "produce": {"linger.ms": 200, "compression.type": "zstd"}})
    assert out["records"] == expected(30)
    inside = confluent({**args, "skip_produce": True, "start": 10})
    assert inside["errors"] == [] and inside["records"] == expected(30)[10:]
    got = kcat(
        "-b",
        bootstrap(gateway),
        *KCAT_08,
        "-C",
        "-t",
        "inside",
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-f",
        "%o %k %s\n",
    )
    assert got.splitlines() == [f"{r[0]} {r[1]} {r[2]}" for r in expected(30)]


def test_batches_kept_as_sent_survive_a_restart(tmp_path: Any) -> None:
    """The embedded log stores a Kafka batch natively: after a restart it reads back the same."""

    def run(**extra: Any) -> dict[str, Any]:
        with GatewayProcess(tmp_path, listeners={"kafka08": {}}, backend="embedded") as gw:
            return confluent({"bootstrap": bootstrap(gw), "topic": "kept", "count": 20, **extra})

    assert run(produce={"compression.type": "gzip"})["records"] == expected(20)
    assert run(skip_produce=True)["records"] == expected(20)
