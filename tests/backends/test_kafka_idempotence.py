"""The Kafka backend as an idempotent producer, against real brokers: a second gateway serving
the modern Kafka listener (which checks producer id, epoch and sequence per partition) and
Tansu. A relay between the backend and the broker closes the connection in place of the first
Produce answer (the batch is stored, the backend never hears so): the backend sends it again with
the same sequence, and the partition holds every record once, as confluent-kafka reads it back.
A cluster that gives no producer id turns idempotence off with one log line."""

from __future__ import annotations

import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from structlog.testing import capture_logs

from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from gateway.observability import REGISTRY
from tests.backends.kafka_relay import KafkaRelay
from tests.backends.servers import TansuServer, http_json
from tests.backends.test_kafka_real_cluster import KCAT_08, kcat_08
from tests.protocols.kafka.conftest import confluent
from tests.support import GatewayProcess

TS_US = 1_700_000_000_000_000  # whole milliseconds: no sub-millisecond header on the records


def records(count: int, first: int = 0) -> list[Record]:
    return [Record(b"k", b"v%d" % i, (), TS_US + i * 1000) for i in range(first, first + count)]


@contextmanager
def kafka_gateway_behind(relay: KafkaRelay, tmp_path: Path) -> Iterator[GatewayProcess]:
    """A gateway serving the modern Kafka listener (memory backend) as the cluster, reached
    through ``relay`` (its Metadata names the relay's port)."""
    listener = {"advertised_port": relay.port}
    with GatewayProcess(tmp_path / "cluster", listeners={"kafka08": listener}) as gw:
        relay.start(gw.address("kafka08"))
        yield gw


def read_back(gw: GatewayProcess, topic: str) -> list[tuple[int, str]]:
    """(offset, value) of every record of partition 0, read by confluent-kafka straight from
    the gateway serving as the cluster."""
    host, port = gw.address("kafka08")
    out = confluent({"bootstrap": f"{host}:{port}", "topic": topic, "count": 0, "skip_produce": 1})
    assert out["errors"] == [], out
    return [(r[0], r[2]) for r in out["records"]]


async def opened(nursery: trio.Nursery, bootstrap: str, **options: Any) -> KafkaBackend:
    backend = KafkaBackend("k", KafkaConfig(bootstrap=bootstrap, **options))
    await backend.open(nursery)
    return backend


async def test_a_produce_whose_answer_is_lost_is_stored_once(nursery, tmp_path):
    relay = KafkaRelay(drop_first_produce_answer=True)
    try:
        with kafka_gateway_behind(relay, tmp_path) as gw:
            backend = await opened(nursery, relay.bootstrap)
            await backend.create_topic("once", 1)
            first = await backend.append("once", 0, RecordBatch(records(5)))
            assert relay.dropped.is_set() and relay.produces == 2  # sent, then sent again
            assert (first.base_offset, first.last_offset) == (0, 4)  # the first write's
            second = await backend.append("once", 0, RecordBatch(records(3, 5)))
            assert (second.base_offset, second.last_offset) == (5, 7)
            assert backend.describe()["idempotence"] == "on"
            got = await trio.to_thread.run_sync(read_back, gw, "once")
            assert got == [(i, f"v{i}") for i in range(8)]
            await backend.close()
    finally:
        relay.close()


def test_kafka08_produces_through_a_gateway_whose_backend_loses_an_answer(tmp_path):
    """End to end: kcat in Kafka 0.8 mode produces through a gateway whose Kafka backend writes
    through the relay to the second gateway; the lost answer is retried inside the backend, kcat
    sees success, and each record is stored once."""
    relay = KafkaRelay(drop_first_produce_answer=True)
    try:
        with kafka_gateway_behind(relay, tmp_path) as cluster:
            # the listener refuses to create a compacted topic (INVALID_CONFIG: it does not
            # compact), so the backend's key-value topic is made here, as a plain one
            kv = {"name": "__gateway_kv", "partitions": 1}
            status, body = http_json("POST", cluster.admin_url + "/v1/topics", kv)
            assert status < 300, body
            backends = {"k": {"type": "kafka", "bootstrap": relay.bootstrap}}
            with GatewayProcess(
                tmp_path / "front", listeners={"kafka08": {}}, backends=backends
            ) as gw:
                host, port = gw.address("kafka08")
                lines = [f"r{i}" for i in range(50)]
                done = subprocess.run(
                    ["kcat", "-b", f"{host}:{port}", "-P", "-t", "e2e", "-p", "0", *KCAT_08],
                    input="\n".join(lines) + "\n",
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert done.returncode == 0, done.stderr[-2000:]
                assert "error" not in done.stderr.lower(), done.stderr[-2000:]
                assert relay.dropped.is_set()
                assert kcat_08(gw, "e2e") == list(enumerate(lines))
            assert read_back(cluster, "e2e") == list(enumerate(lines))
    finally:
        relay.close()


async def test_concurrent_produces_through_a_lost_connection_are_each_stored_once(
    nursery, tmp_path
):
    """Thirty appends to one partition at once: the connection drops with several of them in
    flight; they are sent again (in sequence order, or after OUT_OF_ORDER_SEQUENCE_NUMBER
    until the earlier ones are in) and each record is in the partition once."""
    relay = KafkaRelay(drop_first_produce_answer=True)
    try:
        with kafka_gateway_behind(relay, tmp_path) as gw:
            backend = await opened(nursery, relay.bootstrap)
            await backend.create_topic("many", 1)
            async with trio.open_nursery() as appends:
                for i in range(30):
                    appends.start_soon(backend.append, "many", 0, RecordBatch(records(1, i)))
            assert relay.dropped.is_set()
            got = await trio.to_thread.run_sync(read_back, gw, "many")
            assert [o for o, _ in got] == list(range(30))
            assert sorted(v for _, v in got) == sorted(f"v{i}" for i in range(30))
            await backend.close()
    finally:
        relay.close()


async def test_retries_stop_at_the_delivery_timeout_and_the_batch_is_stored_once(nursery, tmp_path):
    """Every Produce answer lost: the batch is sent again and again (stored once: each retry
    is recognised) until ``delivery_timeout_ms``, then the client gets the retriable error and
    the budget hit is counted."""
    relay = KafkaRelay(drop_every_produce_answer=True)
    labels = {"limit": "delivery_timeout_ms", "protocol": "server"}
    before = REGISTRY.get_sample_value("gateway_limit_hits_total", labels) or 0
    try:
        with kafka_gateway_behind(relay, tmp_path) as gw:
            backend = await opened(nursery, relay.bootstrap, delivery_timeout_ms=1500)
            await backend.create_topic("lost", 1)
            with trio.fail_after(15), pytest.raises(GatewayError) as info:
                await backend.append("lost", 0, RecordBatch(records(3)))
            assert info.value.code is ErrorCode.BACKEND_UNAVAILABLE
            assert relay.produces >= 3
            assert REGISTRY.get_sample_value("gateway_limit_hits_total", labels) == before + 1
            got = await trio.to_thread.run_sync(read_back, gw, "lost")
            assert got == [(0, "v0"), (1, "v1"), (2, "v2")]
            await backend.close()
    finally:
        relay.close()


async def test_without_idempotence_a_lost_answer_is_the_clients_error(nursery, tmp_path):
    """The same loss with ``idempotence = false``: not retried (a retry could store the batch
    twice), the error goes back; the batch was stored nonetheless."""
    relay = KafkaRelay(drop_first_produce_answer=True)
    try:
        with kafka_gateway_behind(relay, tmp_path) as gw:
            backend = await opened(nursery, relay.bootstrap, idempotence=False)
            await backend.create_topic("plain", 1)
            with pytest.raises(GatewayError) as info:
                await backend.append("plain", 0, RecordBatch(records(2)))
            assert info.value.code is ErrorCode.BACKEND_UNAVAILABLE
            assert relay.produces == 1
            assert backend.describe()["idempotence"] == "off (idempotence = false)"
            got = await trio.to_thread.run_sync(read_back, gw, "plain")
            assert got == [(0, "v0"), (1, "v1")]
            await backend.close()
    finally:
        relay.close()


async def test_a_lost_batch_resets_the_producer_with_one_log_line(nursery, tmp_path):
    """A batch the broker never got (its sequences skipped, as after a produce abandoned
    mid-way): the next one gets OUT_OF_ORDER_SEQUENCE_NUMBER, the backend bumps the epoch,
    starts the sequences again and the batch is stored."""
    relay = KafkaRelay()
    try:
        with kafka_gateway_behind(relay, tmp_path) as gw:
            backend = await opened(nursery, relay.bootstrap)
            await backend.create_topic("reset", 1)
            await backend.append("reset", 0, RecordBatch(records(2)))
            idem = backend.records.producer.idempotence
            pid, epoch = idem.producer_id, idem.epoch
            idem.partition("reset", 0).next_seq += 3  # three records lost on the way
            labels = {"backend": "k", "error": "out_of_order_sequence_number"}
            before = REGISTRY.get_sample_value("gateway_kafka_producer_resets_total", labels) or 0
            with capture_logs() as logs:
                result = await backend.append("reset", 0, RecordBatch(records(2, 2)))
            assert (result.base_offset, result.last_offset) == (2, 3)
            assert (idem.producer_id, idem.epoch) == (pid, epoch + 1)  # KIP-360 bump
            assert idem.partition("reset", 0).next_seq == 2
            resets = [e for e in logs if "producer reset" in e["event"]]
            assert len(resets) == 1 and resets[0]["error"] == "out_of_order_sequence_number"
            after = REGISTRY.get_sample_value("gateway_kafka_producer_resets_total", labels)
            assert after == before + 1
            got = await trio.to_thread.run_sync(read_back, gw, "reset")
            assert got == [(i, f"v{i}") for i in range(4)]
            await backend.close()
    finally:
        relay.close()


@pytest.fixture
def tansu_behind_relay(request: pytest.FixtureRequest) -> Iterator[tuple[TansuServer, KafkaRelay]]:
    relay = KafkaRelay(**request.param)
    tansu = TansuServer(advertised_port=relay.port).start()
    relay.start(("127.0.0.1", tansu.port))
    try:
        yield tansu, relay
    finally:
        relay.close()
        tansu.stop()


@pytest.mark.parametrize("tansu_behind_relay", [{"drop_first_produce_answer": True}], indirect=True)
async def test_tansu_answers_the_retry_as_a_duplicate_and_stores_it_once(
    nursery, tansu_behind_relay
):
    """Tansu keeps the producer's sequences too, and answers the retry with
    DUPLICATE_SEQUENCE_NUMBER: a success whose offsets are not known (-1)."""
    _, relay = tansu_behind_relay
    backend = await opened(nursery, relay.bootstrap)
    topic = f"dup-{uuid.uuid4().hex[:6]}"
    await backend.create_topic(topic, 1)
    result = await backend.append(topic, 0, RecordBatch(records(4)))
    assert relay.dropped.is_set() and relay.produces == 2
    assert result.base_offset == -1
    await backend.append(topic, 0, RecordBatch(records(1, 4)))
    batches = await backend.read(topic, 0, 0, 100, 1 << 20)
    got = [(r.offset, r.value) for b in batches for r in b.records]
    assert got == [(i, b"v%d" % i) for i in range(5)]
    await backend.close()


@pytest.mark.parametrize("tansu_behind_relay", [{"init_producer_id_max": 2}], indirect=True)
def test_a_cluster_without_producer_ids_gets_plain_produces_and_one_log_line(
    tansu_behind_relay, tmp_path
):
    """Tansu answers InitProducerId v0-v2 without a transactional id with UNKNOWN_SERVER_ERROR;
    the relay makes it advertise no later version (as a broker older than Kafka 2.5): the
    gateway produces without idempotence, says so once, and keeps working."""
    _, relay = tansu_behind_relay
    gw = GatewayProcess(
        tmp_path,
        listeners={"kafka08": {}},
        backends={"k": {"type": "kafka", "bootstrap": relay.bootstrap}},
    ).start()
    try:
        host, port = gw.address("kafka08")
        for batch in (["one", "two"], ["three"]):
            done = subprocess.run(
                ["kcat", "-b", f"{host}:{port}", "-P", "-t", "fallback", "-p", "0", *KCAT_08],
                input="\n".join(batch) + "\n",
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr[-2000:]
        assert kcat_08(gw, "fallback") == [(0, "one"), (1, "two"), (2, "three")]
        _, status = http_json("GET", gw.admin_url + "/v1/status")
        (k,) = [b for b in status["backends"] if b["name"] == "k"]
        assert k["idempotence"] == (
            "off (the cluster answered InitProducerId with UNKNOWN_SERVER_ERROR)"
        )
        with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10) as resp:
            assert 'gateway_kafka_idempotent{backend="k"} 0.0' in resp.read().decode()
    finally:
        assert gw.stop() == 0
    lines = [line for line in gw.log_text().splitlines() if "idempotent produce is off" in line]
    assert len(lines) == 1, lines
    assert "UNKNOWN_SERVER_ERROR" in lines[0] and "Traceback" not in gw.log_text()
