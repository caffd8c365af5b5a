"""The Kafka backend against a real Kafka-compatible broker (Tansu), beyond the conformance suite:
record batch encoding, the outage test, and the end-to-end path kcat (Kafka 0.8) -> gateway ->
Tansu -> kafka-python 3.0.12 (modern)."""

from __future__ import annotations

import json
import subprocess
import textwrap
import uuid

import pytest
import trio

from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.backends.kafka.records import (
    KafkaRecordError,
    decode_batches,
    encode_batch,
    varint,
)
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from tests.backends.servers import REPO_ROOT, TansuServer, http_json, shared_tansu
from tests.support import GatewayProcess

KAFKA_PYTHON = REPO_ROOT / ".test-venvs" / "realbackends" / "bin" / "python"
KCAT_08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]


# ----------------------------------------------------------------------------- record batches


def test_varints_are_zigzag():
    assert varint(0) == b"\x00"
    assert varint(-1) == b"\x01"
    assert varint(1) == b"\x02"
    assert varint(63) == b"\x7e"
    assert varint(64) == b"\x80\x01"
    assert varint(-65) == b"\x81\x01"


def test_batch_round_trip_keeps_microseconds_and_headers():
    records = [
        Record(b"k", b"v", (("a", b"1"),), 1_700_000_000_000_123),
        Record(None, None, (), 1_700_000_000_001_000),
        Record(b"", b"x" * 300, (("dup", b""), ("dup", b"\xff")), 1_700_000_000_002_999),
    ]
    data = encode_batch(records, now_ms=0, base_offset=40)
    got = decode_batches(data)
    assert [r._replace(offset=-1) for r in got] == records
    assert [r.offset for r in got] == [40, 41, 42]
    assert decode_batches(data, min_offset=42)[0].value == b"x" * 300
    assert len(decode_batches(data, max_records=2)) == 2
    # the sub-millisecond header exists only where needed
    assert data.count(b"_gw.us") == 2
    # a trailing partial batch (a broker cutting at max bytes) is ignored
    assert len(decode_batches(data + data[:30])) == 3


def test_batch_crc_is_checked():
    data = bytearray(encode_batch([Record(b"k", b"value", (), 5_000)], now_ms=0))
    data[-1] ^= 0xFF
    with pytest.raises(KafkaRecordError):
        decode_batches(bytes(data))


# ----------------------------------------------------------------------------- against Tansu


def _backend(bootstrap: str, **kw) -> KafkaBackend:
    return KafkaBackend("kafka", KafkaConfig(bootstrap=bootstrap, **kw))


async def test_api_versions_negotiated_and_capabilities_follow_the_broker(nursery):
    b = _backend(shared_tansu().bootstrap, kv_topic=f"__kv_{uuid.uuid4().hex[:6]}")
    await b.open(nursery)
    api_ok = b.cluster.api_ok
    assert api_ok is not None and all(api_ok[k] for k in (0, 1, 2, 3, 8, 9, 10, 19))
    # Tansu 0.6 has no CreatePartitions: topic administration is off as a whole
    assert api_ok[37] is False and b.capabilities.topic_admin is False
    with pytest.raises(GatewayError) as exc:
        await b.create_partitions("whatever", 1)
    assert exc.value.code is ErrorCode.UNSUPPORTED
    assert await b.health() == (True, "ok")
    await b.close()


async def test_tansu_down_gives_retriable_errors_and_back_works_without_restart(nursery):
    server = TansuServer().start()
    try:
        b = _backend(server.bootstrap, connect_timeout_ms=500)
        await b.open(nursery)
        await b.create_topic("out", 1)
        await b.append("out", 0, RecordBatch([Record(b"k", b"before")]))
        await b.kv_put("ns", "k", b"v")

        await trio.to_thread.run_sync(server.kill)
        for call in (
            lambda: b.append("out", 0, RecordBatch([Record(b"k", b"during")])),
            lambda: b.read("out", 0, 0, 10, 1000),
            lambda: b.partition_info("out", 0),
            lambda: b.kv_get("ns", "k"),
        ):
            with pytest.raises(GatewayError) as exc:
                await call()
            assert exc.value.code.retriable, exc.value
        ok, reason = await b.health()
        assert not ok and reason

        await trio.to_thread.run_sync(server.start)  # same port, empty (in-memory) broker
        assert (await b.health())[0]
        await b.create_topic("out", 1)
        result = await b.append("out", 0, RecordBatch([Record(b"k", b"after")]))
        assert result.base_offset == 0
        got = [r.value for x in await b.read("out", 0, 0, 10, 1 << 20) for r in x.records]
        assert got == [b"after"]
        await b.kv_put("ns", "k", b"again")
        assert await b.kv_get("ns", "k") == b"again"
        await b.close()
    finally:
        server.stop()


def test_gateway_on_tansu_survives_a_broker_outage(tmp_path):
    """Through a running gateway: /readyz and produce report the outage (503, retriable
    backend_unavailable) and work again once Tansu is back, the gateway never restarted."""
    server = TansuServer().start()
    try:
        gw = GatewayProcess(
            tmp_path,
            backends={
                "k": {"type": "kafka", "bootstrap": server.bootstrap, "connect_timeout_ms": 500}
            },
        ).start()
        try:
            url = gw.admin_url
            assert http_json("GET", url + "/readyz")[0] == 200
            assert (
                http_json("POST", url + "/v1/topics", {"name": "gwout", "partitions": 1})[0] == 201
            )
            record = {"records": [{"value": "aGVsbG8=", "partition": 0}]}
            assert http_json("POST", url + "/v1/topics/gwout/records", record)[0] == 200

            server.kill()
            code, body = http_json("POST", url + "/v1/topics/gwout/records", record)
            assert (code, body["code"]) == (503, "backend_unavailable")
            code, body = http_json("GET", url + "/readyz")
            assert code == 503 and "k" in body["backends"]

            server.start()
            assert http_json("GET", url + "/readyz")[0] == 200
            assert (
                http_json("POST", url + "/v1/topics", {"name": "gwout", "partitions": 1})[0] == 201
            )
            code, body = http_json("POST", url + "/v1/topics/gwout/records", record)
            assert code == 200, body
        finally:
            assert gw.stop() == 0
    finally:
        server.stop()


def test_kcat_in_08_mode_through_the_gateway_into_tansu_read_by_kafka_python(tmp_path):
    """kcat speaks Kafka 0.8 to the gateway's kafka08 listener; the records land in Tansu, where
    kafka-python 3.0.12 in normal (modern) mode reads them directly; an offset committed through
    the gateway is the group's offset in Kafka too."""
    server = TansuServer().start()
    topic = f"e2e-{uuid.uuid4().hex[:6]}"
    try:
        gw = GatewayProcess(
            tmp_path,
            listeners={"kafka08": {}},
            backends={"k": {"type": "kafka", "bootstrap": server.bootstrap}},
        ).start()
        try:
            host, port = gw.address("kafka08")
            lines = "".join(f"key{i}:value {i}\n" for i in range(20))
            subprocess.run(
                ["kcat", "-b", f"{host}:{port}", "-P", "-t", topic, "-p", "0", "-K:", *KCAT_08],
                input=lines.encode(),
                check=True,
                timeout=60,
            )
            read_back = subprocess.run(
                [
                    "kcat",
                    "-b",
                    f"{host}:{port}",
                    "-C",
                    "-t",
                    topic,
                    "-p",
                    "0",
                    "-o",
                    "beginning",
                    "-e",
                    "-K:",
                    *KCAT_08,
                ],
                capture_output=True,
                check=True,
                timeout=60,
            )
            assert read_back.stdout.decode().splitlines() == lines.splitlines()
        finally:
            assert gw.stop() == 0

        script = textwrap.dedent(
            """
            import json, sys
            from kafka import KafkaConsumer, TopicPartition
            c = KafkaConsumer(bootstrap_servers=sys.argv[1], enable_auto_commit=False,
                              consumer_timeout_ms=5000, auto_offset_reset="earliest")
            tp = TopicPartition(sys.argv[2], 0)
            c.assign([tp])
            c.seek_to_beginning(tp)
            out = []
            for m in c:
                out.append([m.offset, m.key.decode(), m.value.decode()])
                if len(out) == 20:
                    break
            print(json.dumps(out))
            """
        )
        done = subprocess.run(
            [str(KAFKA_PYTHON), "-c", script, server.bootstrap, topic],
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        got = json.loads(done.stdout)
        assert got == [[i, f"key{i}", f"value {i}"] for i in range(20)]
    finally:
        server.stop()


def test_pipelined_08_produces_reach_tansu_in_order(tmp_path):
    """kcat sends many small produce requests back to back; the gateway pipelines them and sends
    each to Tansu once the previous one is written there (APPEND_SENT): every record comes back
    once, in the order it was produced."""
    server = TansuServer().start()
    topic = f"order-{uuid.uuid4().hex[:6]}"
    n = 30_000
    try:
        with GatewayProcess(
            tmp_path,
            listeners={"kafka08": {}},
            backends={"k": {"type": "kafka", "bootstrap": server.bootstrap}},
        ) as gw:
            host, port = gw.address("kafka08")
            small = ["-X", "batch.num.messages=50", "-X", "queue.buffering.max.ms=1"]
            lines = "".join(f"{i}\n" for i in range(n))
            subprocess.run(
                ["kcat", "-b", f"{host}:{port}", "-P", "-t", topic, "-p", "0", *small, *KCAT_08],
                input=lines.encode(),
                check=True,
                timeout=120,
            )
            read_back = subprocess.run(
                ["kcat", "-b", f"{host}:{port}", "-C", "-t", topic, "-p", "0"]
                + ["-o", "beginning", "-e", *KCAT_08],
                capture_output=True,
                check=True,
                timeout=120,
            )
            assert read_back.stdout.decode().splitlines() == [str(i) for i in range(n)]
    finally:
        server.stop()


async def test_committed_offsets_are_kafka_group_offsets(nursery):
    """An offset the gateway commits is the Kafka group's committed offset (kafka-python sees
    it), and one a Kafka consumer commits is what the gateway reads."""
    tansu = shared_tansu()
    b = _backend(tansu.bootstrap, kv_topic=f"__kv_{uuid.uuid4().hex[:6]}")
    await b.open(nursery)
    topic, group = f"co-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    await b.create_topic(topic, 1)
    await b.append(topic, 0, RecordBatch([Record(None, b"x")] * 10))
    key = f"{group}\x1f{topic}\x1f0"
    await b.kv_put("offsets", key, json.dumps({"offset": 7, "metadata": "m"}).encode())
    script = textwrap.dedent(
        """
        import sys
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata
        c = KafkaConsumer(bootstrap_servers=sys.argv[1], group_id=sys.argv[3],
                          enable_auto_commit=False)
        tp = TopicPartition(sys.argv[2], 0)
        print(c.committed(tp))
        c.commit({tp: OffsetAndMetadata(9, "", -1)})
        c.close()
        """
    )
    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [str(KAFKA_PYTHON), "-c", script, tansu.bootstrap, topic, group],
            capture_output=True,
            timeout=120,
        )
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().strip() == "7"
    assert json.loads(await b.kv_get("offsets", key))["offset"] == 9
    await b.close()


async def test_read_ahead_serves_exactly_what_a_fetch_would(nursery):
    """A consumer that takes part of each answer (a Kafka 0.8 client cuts at its max bytes) gets
    the rest of the answer and the read-ahead one, in order, from any offset; a read elsewhere
    (another consumer) still gets its own records."""
    from gateway.canonical import CANONICAL

    tansu = shared_tansu()
    b = _backend(tansu.bootstrap, read_ahead=True)
    await b.open(nursery)
    topic = f"ra-{uuid.uuid4().hex[:6]}"
    await b.create_topic(topic, 1)
    values = [b"%05d" % i + b"v" * 95 for i in range(3000)]
    for start in range(0, 3000, 600):
        block = CANONICAL.encode(
            [Record(None, v, (), 1_700_000_000_000_123) for v in values[start : start + 600]]
        )
        await b.append(topic, 0, RecordBatch(encoded=block, codec=CANONICAL, count=600))
    offset, cuts = 0, [123, 700, 35, 1, 900, 480]
    two_part_answers = 0
    while offset < 3000:
        batches = await b.read(topic, 0, offset, 1_000_000, 40_000)
        got = [r for batch in batches for r in batch.records]
        assert got and got[0].offset == offset
        assert [r.offset for r in got] == list(range(offset, offset + len(got)))
        assert [r.value for r in got] == values[offset : offset + len(got)]
        two_part_answers += len(batches) > 1  # the rest of one answer + the read-ahead one
        offset += min(len(got), cuts[offset % len(cuts)])
        if offset > 1500 and offset % 2:  # another consumer in between
            [other] = await b.read(topic, 0, 17, 5, 40_000)
            assert [r.value for r in other.records] == values[17:22]
    assert two_part_answers
    await b.close()


def test_batch_round_trip_random_sizes():
    import random

    rnd = random.Random(7)
    records = [
        Record(
            bytes(rnd.randrange(0, 300)) if i % 3 else None,
            bytes(rnd.randrange(0, 20000)) if i % 5 else None,
            (("h", b"x" * rnd.randrange(0, 200)),) * (i % 3),
            1_700_000_000_000_000 + i * 777,
        )
        for i in range(2000)
    ]
    got = decode_batches(encode_batch(records, now_ms=0, base_offset=5))
    assert [r._replace(offset=-1) for r in got] == records
    assert [r.offset for r in got] == list(range(5, 2005))


def test_canonical_blocks_transcode_both_ways_without_records():
    import random

    from gateway.backends.kafka.records import canonical_to_batch
    from gateway.backends.kafka.to_canonical import batches_to_canonical
    from gateway.canonical import CANONICAL

    rnd = random.Random(3)
    records = [
        Record(
            bytes(rnd.randrange(0, 300)) if i % 3 else None,
            bytes(rnd.randrange(0, 20000)) if i % 5 else None,
            (("h", b"x" * rnd.randrange(0, 200)),) * (i % 3),
            1_700_000_000_000_000 + i * 777,
        )
        for i in range(1500)
    ]
    v2, count = canonical_to_batch(CANONICAL.encode(records), now_ms=0)
    assert count == 1500
    assert [r._replace(offset=-1) for r in decode_batches(v2)] == records
    block, n, max_ts = batches_to_canonical(v2 + v2[:50], 10, 10_000)
    assert n == 1490 and max_ts == records[-1].timestamp_us
    assert CANONICAL.decode(block, 10) == [
        r._replace(offset=10 + i) for i, r in enumerate(records[10:])
    ]
    assert batches_to_canonical(v2, 10, 5)[1] == 5


async def test_conditional_append_meeting_an_outside_producer_is_not_answered_ok(nursery):
    """The documented limit of conditional appends on Kafka: a producer outside this gateway
    (here a second backend instance, as another gateway or a Kafka client would be) that
    appends between the watermark check and the produce is not held off. The records then
    land one offset later, and the append must fail (INTERNAL, naming where they went), not
    answer as if they were where asked."""
    topic = f"outside-{uuid.uuid4().hex[:8]}"
    ours = _backend(shared_tansu().bootstrap, kv_topic=f"__kv_{topic}")
    theirs = _backend(shared_tansu().bootstrap, kv_topic=f"__kv_{topic}")
    await ours.open(nursery)
    await theirs.open(nursery)
    await ours.create_topic(topic, 1)
    await ours.append(topic, 0, RecordBatch([Record(None, b"a")]))
    checked = ours.records.partition_info

    async def check_then_someone_appends(t: str, p: int):
        info = await checked(t, p)
        await theirs.append(t, p, RecordBatch([Record(None, b"outside")]))
        return info

    ours.records.partition_info = check_then_someone_appends  # type: ignore[method-assign]
    with pytest.raises(GatewayError) as exc:
        await ours.append(topic, 0, RecordBatch([Record(None, b"mirrored")]), 1)
    assert exc.value.code is ErrorCode.INTERNAL
    assert "expected offset 1 but was stored at 2" in exc.value.message
    del ours.records.partition_info
    got = [r.value for x in await ours.read(topic, 0, 0, 10, 1 << 20) for r in x.records]
    assert got == [b"a", b"outside", b"mirrored"]
    await ours.close()
    await theirs.close()
