"""The Kafka backend reading what other clients wrote straight into a real cluster (Tansu):
batches of every compression codec and transactions (commit markers, aborted records), as
confluent-kafka (librdkafka) writes them. Kafka 0.8 clients (kcat, kafka-python in 0.8 mode)
read them through the gateway with the offsets the cluster gave them."""

from __future__ import annotations

import json
import subprocess
import textwrap
import uuid
from collections.abc import Iterator

import pytest
import trio

from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from tests.backends.servers import REPO_ROOT, TansuServer
from tests.support import GatewayProcess

CONFLUENT = REPO_ROOT / ".test-venvs" / "confluent-kafka" / "bin" / "python"
WRITER = REPO_ROOT / "tests" / "backends" / "clients" / "confluent_writer.py"
KAFKA_PYTHON_08 = REPO_ROOT / ".test-venvs" / "kafka-python-3" / "bin" / "python"
KCAT_08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def tansu() -> Iterator[TansuServer]:
    server = TansuServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gateway(
    tansu: TansuServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    gw = GatewayProcess(
        tmp_path_factory.mktemp("gw"),
        listeners={"kafka08": {}},
        backends={"k": {"type": "kafka", "bootstrap": tansu.bootstrap}},
        server={"auto_create_topics": False},
    ).start()
    try:
        yield gw
    finally:
        gw.stop()


def confluent(tansu: TansuServer, topic: str, *args: str) -> list[dict]:
    """Run the confluent-kafka writer; its JSON lines."""
    done = subprocess.run(
        [str(CONFLUENT), str(WRITER), tansu.bootstrap, topic, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def kcat_08(gw: GatewayProcess, topic: str, offset: str = "beginning") -> list[tuple[int, str]]:
    """(offset, value) of every record kcat in Kafka 0.8 mode reads through the gateway."""
    host, port = gw.address("kafka08")
    done = subprocess.run(
        ["kcat", "-b", f"{host}:{port}", "-C", "-t", topic, "-p", "0", "-o", offset, "-e"]
        + ["-f", "%o\\t%s\\n", *KCAT_08],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "error" not in done.stderr.lower(), done.stderr[-2000:]
    out = []
    for line in done.stdout.splitlines():
        off, _, value = line.partition("\t")
        out.append((int(off), value))
    return out


KAFKA_PYTHON_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from kafka import KafkaConsumer, TopicPartition
    want = int(sys.argv[4])
    # up to 30 s for the records the test expects, then 0.5 s of quiet proves nothing follows
    c = KafkaConsumer(bootstrap_servers=sys.argv[1], api_version=(0, 8, 2),
                      enable_auto_commit=False, consumer_timeout_ms=30000 if want else 500)
    tp = TopicPartition(sys.argv[2], 0)
    c.assign([tp])
    c.seek(tp, int(sys.argv[3]))
    got = []
    for m in c:
        got.append([m.offset, m.value.decode()])
        if len(got) >= want:
            c.config["consumer_timeout_ms"] = 500
    print(json.dumps(got))
    """
)


def kafka_python_08(
    gw: GatewayProcess, topic: str, want: int, start: int = 0
) -> list[tuple[int, str]]:
    """(offset, value) of every record kafka-python in 0.8 mode reads from ``start``: it waits
    for ``want`` records (the count the test expects), then stops after 0.5 s without more."""
    host, port = gw.address("kafka08")
    args = [f"{host}:{port}", topic, str(start), str(want)]
    done = subprocess.run(
        [str(KAFKA_PYTHON_08), "-c", KAFKA_PYTHON_SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [(o, v) for o, v in json.loads(done.stdout)]


@pytest.mark.parametrize("codec", CODECS)
def test_batches_of_every_codec_written_by_confluent_kafka_are_read(tansu, gateway, codec):
    topic = f"codec-{codec}-{uuid.uuid4().hex[:6]}"
    acked = confluent(tansu, topic, "codec", codec, "60")
    want = [(r["offset"], r["value"]) for r in acked]
    assert [o for o, _ in want] == list(range(60))
    assert kcat_08(gateway, topic) == want
    assert kafka_python_08(gateway, topic, len(want)) == want


def test_committed_transactions_only_with_the_clusters_offsets(tansu, gateway):
    """commit 3 (offsets 0-2, marker 3), abort 2 (4-5, marker 6), commit 3 (7-9, marker 10):
    a Kafka 0.8 client gets exactly the committed records, each at its own offset; reading from
    a marker's offset or from inside the aborted records starts at the next committed one; a
    record appended after the last marker arrives too."""
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    written = confluent(tansu, topic, "transactions", "c3,a2,c3")
    committed = [(r["offset"], r["value"]) for r in written if r["committed"]]
    assert [o for o, _ in committed] == [0, 1, 2, 7, 8, 9]
    assert kcat_08(gateway, topic) == committed
    assert kafka_python_08(gateway, topic, len(committed)) == committed
    assert kcat_08(gateway, topic, "3") == committed[3:]
    assert kafka_python_08(gateway, topic, 3, start=5) == committed[3:]
    assert kcat_08(gateway, topic, "10") == []  # the last marker: the end, not out of range
    later = confluent(tansu, topic, "codec", "lz4", "2")
    assert [r["offset"] for r in later] == [11, 12]
    assert kcat_08(gateway, topic, "10") == [(r["offset"], r["value"]) for r in later]
    every = committed + [(r["offset"], r["value"]) for r in later]
    assert kafka_python_08(gateway, topic, len(every)) == every


async def test_backend_isolation_levels_and_the_range_it_names(tansu):
    """read_committed (the default) drops aborted records; read_uncommitted returns them; an
    offset past the end is out of range and the error names the partition's real range."""
    topic = f"iso-{uuid.uuid4().hex[:6]}"
    written = await trio.to_thread.run_sync(
        lambda: confluent(tansu, topic, "transactions", "c2,a2,c1")
    )
    assert [r["offset"] for r in written] == [0, 1, 3, 4, 6]

    async def offsets(isolation: str, start: int) -> list[list[int]]:
        b = KafkaBackend("k", KafkaConfig(bootstrap=tansu.bootstrap, isolation=isolation))
        async with trio.open_nursery() as nursery:
            await b.open(nursery)
            try:
                batches = await b.read(topic, 0, start, 100, 1 << 20)
                return [[r.offset for r in batch.records] for batch in batches]
            finally:
                await b.close()
                nursery.cancel_scope.cancel()

    assert await offsets("read_committed", 0) == [[0, 1], [6]]
    assert await offsets("read_committed", 2) == [[6]]
    assert await offsets("read_uncommitted", 0) == [[0, 1], [3, 4], [6]]

    b = KafkaBackend("k", KafkaConfig(bootstrap=tansu.bootstrap))
    async with trio.open_nursery() as nursery:
        await b.open(nursery)
        with pytest.raises(GatewayError) as info:
            await b.read(topic, 0, 50, 100, 1 << 20)
        assert info.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
        assert "[0, 8]" in info.value.message
        await b.close()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("codec", CODECS)
async def test_the_gateways_compressed_batches_are_read_by_confluent_kafka(tansu, codec):
    """``compression``: what the gateway writes, confluent-kafka reads straight from the
    cluster, keys, values and headers intact."""
    topic = f"ours-{codec}-{uuid.uuid4().hex[:6]}"
    b = KafkaBackend("k", KafkaConfig(bootstrap=tansu.bootstrap, compression=codec))
    records = [
        Record(f"k{i}".encode(), (f"value {i} " * 30).encode(), (("h", b"x"),)) for i in range(50)
    ]
    async with trio.open_nursery() as nursery:
        await b.open(nursery)
        await b.create_topic(topic, 1)
        await b.append(topic, 0, RecordBatch(records[:20]))
        await b.append(topic, 0, RecordBatch(list(records[20:])))
        await b.close()
        nursery.cancel_scope.cancel()
    got = await trio.to_thread.run_sync(lambda: confluent(tansu, topic, "read", "50"))
    assert [(r["offset"], r["key"], r["value"]) for r in got] == [
        (i, f"k{i}", (f"value {i} " * 30)) for i in range(50)
    ]
    assert all(r["headers"] == [["h", "x"]] for r in got)
