"""The Spark pipeline's acceptance check: 100,000 records produced over two real protocols (Kafka
0.8 with kafka-python, Cursus with cursus-client) into a 4-partition topic of the embedded backend,
exported to Parquet with Spark and compared record by record; imported into another topic and
compared; copied to a second gateway on NATS JetStream and compared. The jobs run through the
``gateway pipeline`` CLI (in this process, on the session's Spark)."""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gateway.cli import main as gateway_cli
from gateway.pipeline.client import FetchedRecord, GatewayClient
from tests.backends.servers import NatsServer
from tests.support import REPO_ROOT, GatewayProcess

PER_PROTOCOL = 50_000
TOPIC = "events"


def read_all(bootstrap: str, topic: str) -> dict[tuple[int, int], tuple]:
    """Every record of the topic through the plain client: (partition, offset) -> fields."""
    out: dict[tuple[int, int], tuple] = {}
    with GatewayClient(bootstrap) as c:
        for po in c.offsets(topic):
            offset = po.log_start_offset
            while offset < po.high_watermark:
                recs: list[FetchedRecord] = c.fetch(topic, po.partition, offset, 20_000).records
                for r in recs:
                    out[(po.partition, r.offset)] = (r.timestamp_us, r.key, r.value, r.headers)
                offset = recs[-1].offset + 1
    return out


def parquet_records(path: Path) -> dict[tuple[int, int], tuple]:
    table = pq.read_table(path)
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    table = table.set_column(
        table.schema.get_field_index("timestamp"),
        "timestamp",
        table.column("timestamp").cast(pa.int64()),
    )
    out = {}
    for r in table.to_pylist():
        headers = tuple((h["key"], h["value"]) for h in r["headers"])
        out[(r["partition"], r["offset"])] = (r["timestamp"], r["key"], r["value"], headers)
    assert len(out) == table.num_rows  # no (partition, offset) twice
    assert set(table.column("topic").to_pylist()) == {TOPIC}
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """Gateway A: embedded log, Kafka 0.8 and Cursus listeners, with the 100,000 records."""
    tmp = tmp_path_factory.mktemp("source")
    with GatewayProcess(tmp, listeners={"kafka08": {}, "cursus": {}}, backend="embedded") as gw:
        admin = addr(gw, "admin")
        with GatewayClient(admin) as c:
            c.create_topic(TOPIC, 4)
        kafka = subprocess.run(
            [
                str(REPO_ROOT / ".test-venvs/kafka-python-3/bin/python"),
                str(Path(__file__).parent / "clients/kafka08_produce.py"),
                json.dumps(
                    {
                        "port": gw.address("kafka08")[1],
                        "topic": TOPIC,
                        "count": PER_PROTOCOL,
                        "partitions": 4,
                        "prefix": "kafka",
                    }
                ),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert kafka.returncode == 0, kafka.stderr[-3000:]
        assert json.loads(kafka.stdout)["produced"] == PER_PROTOCOL

        from cursus import Acks, Producer, ProducerConfig

        config = ProducerConfig(
            brokers=[addr(gw, "cursus")],
            topic=TOPIC,
            partitions=4,
            acks=Acks.ONE,
            batch_size=500,
            linger_ms=5,
        )
        with Producer(config) as producer:
            for i in range(PER_PROTOCOL):
                while True:  # the client's buffer is bounded: wait for acks, as an app would
                    try:
                        producer.send(f"cursus-v{i}", key=f"cursus-k{i}")
                        break
                    except BufferError:
                        time.sleep(0.01)
            producer.flush()
        yield gw


@pytest.fixture(scope="module")
def truth(source: GatewayProcess) -> dict[tuple[int, int], tuple]:
    records = read_all(addr(source, "admin"), TOPIC)
    # exactly what the two clients sent, nothing lost or doubled
    sent = Counter((r[1], r[2]) for r in records.values())
    expect = Counter(
        (f"{p}-k{i}".encode(), f"{p}-v{i}".encode())
        for p in ("kafka", "cursus")
        for i in range(PER_PROTOCOL)
    )
    assert sent == expect
    assert {p for p, _ in records} == {0, 1, 2, 3}
    # Cursus records carry their producer fields as reserved headers; Kafka 0.8 has none
    assert any(r[3] for r in records.values()) and any(not r[3] for r in records.values())
    return records


def addr(gw: GatewayProcess, name: str) -> str:
    host, port = gw.address(name)
    return f"{host}:{port}"


def cli(*args: str) -> None:
    assert gateway_cli(["pipeline", *args]) == 0


def test_export_to_parquet_and_import(
    spark: Any, source: GatewayProcess, truth: dict, tmp_path: Path, capsys: Any
) -> None:
    admin = addr(source, "admin")
    out = tmp_path / "events.parquet"
    cli("export", TOPIC, "--to", "parquet", str(out), "--bootstrap", admin)
    assert f"exported {2 * PER_PROTOCOL} record(s)" in capsys.readouterr().err
    assert parquet_records(out) == truth

    cli("import", str(out), "--topic", "events-imported", "--bootstrap", admin)
    assert f"imported {2 * PER_PROTOCOL} record(s)" in capsys.readouterr().err
    # same partitions, same order within each, every field
    assert read_all(admin, "events-imported") == truth


def test_copy_from_embedded_to_nats_through_two_gateways(
    spark: Any, source: GatewayProcess, truth: dict, tmp_path: Path, capsys: Any
) -> None:
    with NatsServer(tmp_path / "nats") as nats:
        target = GatewayProcess(
            tmp_path / "target", backends={"default": {"type": "nats", "url": nats.url}}
        )
        with target:
            src = addr(source, "admin")
            dst = addr(target, "admin")
            cli("copy", TOPIC, "--from", src, "--to", dst)
            assert f"copied {2 * PER_PROTOCOL} record(s)" in capsys.readouterr().err
            with GatewayClient(dst) as c:
                assert c.topics()[TOPIC] == 4
            assert read_all(dst, TOPIC) == truth
