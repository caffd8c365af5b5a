"""The Kafka 0.8 listener's acceptance checks with real third-party clients against a running
gateway: kafka-python 3.0.12 and 2.3.3 (own venvs, subprocesses), kcat (Debian),
confluent-kafka 2.16.1."""

from __future__ import annotations

import itertools

import pytest

from tests.protocols.kafka08.conftest import KCAT_08, expected_records, kcat, run_client
from tests.support import GatewayProcess

_topics = itertools.count()


def topic(prefix: str) -> str:
    return f"{prefix}-{next(_topics)}"


# ------------------------------------------------------------------ kafka-python


@pytest.mark.parametrize(
    ("venv", "api_version"),
    [
        ("kafka-python-3", [0, 8, 2]),  # 3.0.12 needs the explicit 0.8.2 setting
        ("kafka-python-2", None),  # 2.3.3 in auto mode (ApiVersions path, magic-1 messages)
        ("kafka-python-3", None),  # 3.0.12 auto: ApiVersions v4 -> 35 -> v3 -> the 0.8 table
        ("kafka-python-3", [0, 8, 1]),  # OffsetCommit/OffsetFetch v0 on the broker connection
    ],
    ids=[
        "kafka-python-3.0.12-0.8.2",
        "kafka-python-2.3.3-auto",
        "kafka-python-3.0.12-auto",
        "kafka-python-3.0.12-0.8.1",
    ],
)
def test_kafka_python_produce_consume_commit(
    gateway: GatewayProcess, venv: str, api_version: list[int] | None
) -> None:
    t = topic("kp")
    port = gateway.address("kafka08")[1]
    out = run_client(
        venv,
        "kafka_python_client.py",
        {
            "port": port,
            "api_version": api_version,
            "topic": t,
            "count": 1000,
            "group": f"g-{t}",
            "expect": 1000,
        },
    )
    assert out["produced"] == list(range(1000))
    assert out["records"] == expected_records(1000)
    assert out["committed_before"] is None
    assert out["committed"] == 1000
    # a second consumer in the same group sees the commit (OffsetFetch through a new connection)
    again = run_client(
        venv,
        "kafka_python_client.py",
        {"port": port, "api_version": api_version, "topic": t, "group": f"g-{t}", "expect": 0},
    )
    assert again["committed_before"] == 1000


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4"])
def test_kafka_python_compressed_produce(gateway: GatewayProcess, compression: str) -> None:
    """kafka-python 3.0.12 in 0.8.2 mode sends one compressed wrapper per batch: unpacked on
    produce, one offset per inner message, served back uncompressed."""
    t = topic(f"kpz-{compression}")
    out = run_client(
        "kafka-python-3",
        "kafka_python_client.py",
        {
            "port": gateway.address("kafka08")[1],
            "api_version": [0, 8, 2],
            "topic": t,
            "count": 200,
            "compression": compression,
            "expect": 200,
        },
    )
    assert out["records"] == expected_records(200)


# ------------------------------------------------------------------ kcat


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kcat_produce_consume(gateway: GatewayProcess, codec: str) -> None:
    t = topic(f"kcat-{codec}")
    bootstrap = f"127.0.0.1:{gateway.address('kafka08')[1]}"
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(100))
    kcat("-b", bootstrap, "-P", "-t", t, "-p", "0", "-K:", "-z", codec, *KCAT_08, stdin=lines)
    got = kcat("-b", bootstrap, "-C", "-t", t, "-p", "0", "-o", "beginning", "-e",
               "-f", "%o %k %s\n", *KCAT_08)  # fmt: skip
    assert got.splitlines() == [f"{i} key-{i} value-{i}" for i in range(100)]


def test_kcat_metadata_lists_topic_and_advertised_address(tmp_path) -> None:
    listener = {"advertised_host": "localhost"}
    with GatewayProcess(tmp_path, listeners={"kafka08": listener}) as gw:
        port = gw.address("kafka08")[1]
        bootstrap = f"127.0.0.1:{port}"
        kcat("-b", bootstrap, "-P", "-t", "listed", "-p", "0", *KCAT_08, stdin="x\n")
        out = kcat("-b", bootstrap, "-L", *KCAT_08)
    assert f"broker 0 at localhost:{port}" in out
    assert 'topic "listed" with 1 partitions' in out
    assert "partition 0, leader 0, replicas: 0, isrs: 0" in out


# ------------------------------------------------------------------ confluent-kafka


@pytest.mark.parametrize("mode", ["0.8", "default"])
def test_confluent_kafka_produce_consume_commit(gateway: GatewayProcess, mode: str) -> None:
    t = topic(f"ck-{mode}")
    out = run_client(
        "confluent-kafka",
        "confluent_client.py",
        {
            "port": gateway.address("kafka08")[1],
            "mode": mode,
            "topic": t,
            "count": 1000,
            "group": f"g-{t}",
        },
    )
    assert out["unflushed"] == 0
    assert out["errors"] == []
    assert out["records"] == expected_records(1000)
    assert out["committed"] == 1000


# ------------------------------------------------------------------ fetch compression


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_fetch_compression_readable_by_real_clients(tmp_path, codec: str) -> None:
    listener = {"fetch_compression": codec}
    with GatewayProcess(tmp_path, listeners={"kafka08": listener}) as gw:
        port = gw.address("kafka08")[1]
        bootstrap = f"127.0.0.1:{port}"
        lines = "".join(f"key-{i}:value-{i}\n" for i in range(300))
        kcat("-b", bootstrap, "-P", "-t", "z", "-p", "0", "-K:", *KCAT_08, stdin=lines)
        got = kcat("-b", bootstrap, "-C", "-t", "z", "-p", "0", "-o", "beginning", "-e",
                   "-f", "%o %k %s\n", *KCAT_08)  # fmt: skip
        assert got.splitlines() == [f"{i} key-{i} value-{i}" for i in range(300)]
        out = run_client(
            "kafka-python-3",
            "kafka_python_client.py",
            {"port": port, "api_version": [0, 8, 2], "topic": "z", "expect": 300},
        )
    assert out["records"] == [
        [i, (b"key-%d" % i).hex(), (b"value-%d" % i).hex()] for i in range(300)
    ]


def test_kafka_python_keyed_over_three_partitions_and_acks_0(tmp_path) -> None:
    """Topics auto-created with 3 partitions: kafka-python's own key partitioner spreads the
    messages (Metadata with several partitions), one Fetch asks for all three; acks 0 (no
    answers at all) loses nothing."""
    with GatewayProcess(
        tmp_path, listeners={"kafka08": {}}, server={"default_partitions": 3}
    ) as gw:
        port = gw.address("kafka08")[1]
        for acks in (1, 0):
            out = run_client(
                "kafka-python-3",
                "kafka_python_client.py",
                {"port": port, "api_version": [0, 8, 2], "topic": f"three-{acks}", "count": 300,
                 "acks": acks, "partitions": 3, "expect": 300},
            )  # fmt: skip
            assert out["partitions_used"] == [0, 1, 2]
            got = sorted(out["records"], key=lambda r: int(bytes.fromhex(r[2])[4:]))
            assert [(r[2], r[3]) for r in got] == [
                ((b"key-%d" % i).hex(), (b"value-%d" % i).hex()) for i in range(300)
            ]
            for p in range(3):  # dense offsets per partition, in order
                offsets = [r[1] for r in out["records"] if r[0] == p]
                assert offsets == list(range(len(offsets)))


def test_embedded_backend_keeps_records_and_group_offsets_across_restart(tmp_path) -> None:
    """The default backend: kcat produces (plain and gzip), kafka-python consumes and commits;
    after a restart the records and the committed offset are still there."""
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(200))
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}, backend="embedded") as gw:
        port = gw.address("kafka08")[1]
        bootstrap = f"127.0.0.1:{port}"
        kcat("-b", bootstrap, "-P", "-t", "durable", "-p", "0", "-K:", *KCAT_08, stdin=lines)
        kcat("-b", bootstrap, "-P", "-t", "durable", "-p", "0", "-K:", "-z", "gzip", *KCAT_08,
             stdin=lines)  # fmt: skip
        out = run_client(
            "kafka-python-3",
            "kafka_python_client.py",
            {"port": port, "api_version": [0, 8, 2], "topic": "durable", "group": "dg",
             "expect": 400},
        )  # fmt: skip
        assert out["committed"] == 400
        assert gw.stop() == 0
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}, backend="embedded") as gw:
        port = gw.address("kafka08")[1]
        again = run_client(
            "kafka-python-3",
            "kafka_python_client.py",
            {"port": port, "api_version": [0, 8, 2], "topic": "durable", "group": "dg",
             "expect": 400},
        )  # fmt: skip
    assert again["committed_before"] == 400
    assert again["records"] == out["records"]
    assert [r[0] for r in again["records"]] == list(range(400))
    assert [bytes.fromhex(r[2]).decode() for r in again["records"]] == [
        f"value-{i % 200}" for i in range(400)
    ]
