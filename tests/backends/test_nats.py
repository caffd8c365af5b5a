"""The NATS JetStream backend against a real nats-server (tests beyond the conformance suite:
the mapping, sharing between gateway instances, and the outage test)."""

from __future__ import annotations

import time
import uuid

import pytest
import trio

from gateway.backends.nats import NatsBackend, NatsConfig
from gateway.backends.nats.messages import enc
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from tests.backends.servers import NatsServer, http_json
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory):
    with NatsServer(tmp_path_factory.mktemp("nats")) as server:
        yield server


def _backend(url: str, bucket: str, **kw) -> NatsBackend:
    return NatsBackend("nats", NatsConfig(url=url, kv_bucket=bucket, **kw))


@pytest.fixture
async def backend(nats_server, nursery):
    b = _backend(nats_server.url, f"b{uuid.uuid4().hex[:8]}")
    await b.open(nursery)
    yield b
    await b.close()


def test_names_are_valid_stream_names_and_subject_tokens():
    assert enc("orders") == "orders"
    assert enc("orders.eu_1") == "orders_2Eeu_5F1"
    assert enc("a..b") == "a_2E_2Eb"
    assert enc("x-y") == "x-y"
    for name in ("a.b", "a_b", "a..b", ".x", "x.", "A-Z_09"):
        e = enc(name)
        assert "." not in e and "*" not in e and ">" not in e and e


async def test_records_round_trip_through_jetstream(backend):
    await backend.create_topic("rt.topic_1", 2)
    records = [
        Record(b"k1", b"v1", (("h", b"\x00\r\n\xff"), ("h", b"2")), 1_000_001),
        Record(None, b"no key", (), 1_000_002),
        Record(b"k3", None, (), 1_000_003),
        Record(b"", b"", (), 1_000_004),
    ]
    result = await backend.append("rt.topic_1", 1, RecordBatch(records))
    assert (result.base_offset, result.last_offset) == (0, 3)
    batches = await backend.read("rt.topic_1", 1, 0, 100, 1 << 20)
    got = [r for b in batches for r in b.records]
    assert [r._replace(offset=-1) for r in got] == records
    assert [r.offset for r in got] == [0, 1, 2, 3]
    info = await backend.partition_info("rt.topic_1", 1)
    assert (info.log_start_offset, info.high_watermark) == (0, 4)
    assert (await backend.partition_info("rt.topic_1", 0)).high_watermark == 0


async def test_large_batch_is_split_into_atomic_batches_with_dense_offsets(backend):
    await backend.create_topic("big", 1)
    first = await backend.append("big", 0, RecordBatch([Record(None, b"x", (), 1)] * 2500))
    second = await backend.append("big", 0, RecordBatch([Record(None, b"y", (), 2)] * 3))
    assert (first.base_offset, first.last_offset) == (0, 2499)
    assert (second.base_offset, second.last_offset) == (2500, 2502)
    batches = await backend.read("big", 0, 2498, 10, 1 << 20)
    assert [r.value for b in batches for r in b.records] == [b"x", b"x", b"y", b"y", b"y"]


async def test_stream_layout_is_one_stream_per_partition(backend):
    await backend.create_topic("lay.out", 3)
    await backend.append("lay.out", 2, RecordBatch([Record(None, b"z", (), 1)]))
    data = await backend._api(f"$JS.API.STREAM.INFO.{backend.stream_name('lay.out', 2)}")
    assert data["config"]["subjects"] == ["gw.lay_2Eout.2"]
    assert data["state"]["last_seq"] == 1  # offset 0 is sequence 1


async def test_two_gateway_instances_share_topics_and_offsets(nats_server, nursery):
    bucket = f"s{uuid.uuid4().hex[:8]}"
    a = _backend(nats_server.url, bucket)
    b = _backend(nats_server.url, bucket, topic_cache_ms=0)
    await a.open(nursery)
    await b.open(nursery)
    await a.create_topic("shared", 1)
    with pytest.raises(GatewayError) as exc:
        await b.create_topic("shared", 1)
    assert exc.value.code is ErrorCode.TOPIC_EXISTS
    await b.append("shared", 0, RecordBatch([Record(b"k", b"from b", (), 5)]))
    assert [r.value for x in await a.read("shared", 0, 0, 10, 1000) for r in x.records] == [
        b"from b"
    ]
    await a.kv_put("offsets", "g\x1fshared\x1f0", b'{"offset": 1}')
    assert await b.kv_get("offsets", "g\x1fshared\x1f0") == b'{"offset": 1}'
    await a.create_partitions("shared", 2)
    assert (await b.topic("shared")).partitions == 3
    await a.close()
    await b.close()


async def test_concurrent_creates_give_exactly_one_topic(nats_server, nursery):
    bucket = f"c{uuid.uuid4().hex[:8]}"
    backends = [_backend(nats_server.url, bucket) for _ in range(4)]
    for b in backends:
        await b.open(nursery)
    outcomes: list[str] = []

    async def create(b: NatsBackend) -> None:
        try:
            await b.create_topic("race", 2)
            outcomes.append("created")
        except GatewayError as exc:
            outcomes.append(exc.code.value)

    async with trio.open_nursery() as n:
        for b in backends:
            n.start_soon(create, b)
    assert sorted(outcomes) == ["created"] + ["topic_exists"] * 3
    for b in backends:
        await b.close()


async def test_unreachable_nats_is_a_retriable_error_and_unhealthy(nursery):
    from tests.backends.servers import free_port

    b = _backend(f"nats://127.0.0.1:{free_port()}", "none", connect_timeout_ms=200)
    await b.open(nursery)
    ok, reason = await b.health()
    assert not ok and reason
    with pytest.raises(GatewayError) as exc:
        await b.append("t", 0, RecordBatch([Record(None, b"x")]))
    assert exc.value.code is ErrorCode.BACKEND_UNAVAILABLE and exc.value.code.retriable
    await b.close()


async def test_kill_nats_during_produce_loop_loses_no_acknowledged_record(tmp_path, nursery):
    """Produce in a loop; SIGKILL nats-server mid-loop, restart it on the same port and store.
    Every append that was acknowledged must be readable afterwards, at the offsets it got."""
    server = NatsServer(tmp_path / "js").start()
    try:
        b = _backend(server.url, "outage")
        await b.open(nursery)
        await b.create_topic("outage", 1)
        acked: dict[int, bytes] = {}
        errors: list[ErrorCode] = []
        health_during_outage: list[bool] = []
        killed = trio.Event()
        restarted = trio.Event()

        after_restart = 0

        async def produce() -> None:
            nonlocal after_restart
            i = 0
            while after_restart < 200:
                value = b"r%d" % i
                i += 1
                try:
                    res = await b.append(
                        "outage", 0, RecordBatch([Record(None, value, (), i), Record(None, value)])
                    )
                except GatewayError as exc:
                    errors.append(exc.code)
                    await trio.sleep(0.01)
                    continue
                acked[res.base_offset] = value
                acked[res.last_offset] = value
                if restarted.is_set():
                    after_restart += 1
                if i % 50 == 0:
                    await trio.sleep(0)

        async def chaos() -> None:
            while len(acked) < 400:
                await trio.sleep(0.01)
            await trio.to_thread.run_sync(server.kill)
            killed.set()
            await trio.sleep(0.3)
            health_during_outage.append((await b.health())[0])
            await trio.to_thread.run_sync(server.start)
            restarted.set()

        with trio.fail_after(60):
            async with trio.open_nursery() as n:
                n.start_soon(produce)
                n.start_soon(chaos)

        assert errors, "the outage was not noticed"
        assert all(code.retriable for code in errors), errors
        assert health_during_outage == [False]
        assert (await b.health())[0]
        info = await b.partition_info("outage", 0)
        stored: dict[int, bytes] = {}
        offset = info.log_start_offset
        while offset < info.high_watermark:
            for batch in await b.read("outage", 0, offset, 2000, 1 << 22):
                for r in batch.records:
                    stored[r.offset] = r.value
                offset = batch.last_offset + 1
        missing = {o: v for o, v in acked.items() if stored.get(o) != v}
        assert not missing, f"{len(missing)} acknowledged records lost or changed"
        await b.close()
    finally:
        server.stop()


def test_gateway_readyz_follows_nats_and_recovers_without_restart(tmp_path):
    server = NatsServer(tmp_path / "js").start()
    try:
        gw = GatewayProcess(
            tmp_path / "gw", backends={"js": {"type": "nats", "url": server.url}}
        ).start()
        try:
            url = gw.admin_url
            assert http_json("GET", url + "/readyz")[0] == 200
            assert (
                http_json("POST", url + "/v1/topics", {"name": "ready", "partitions": 1})[0] == 201
            )
            record = {"records": [{"value": "aGVsbG8=", "partition": 0}]}
            assert http_json("POST", url + "/v1/topics/ready/records", record)[0] == 200

            server.kill()
            code, body = http_json("GET", url + "/readyz")
            assert code == 503 and "js" in body["backends"]
            code, body = http_json("POST", url + "/v1/topics/ready/records", record)
            assert (code, body["code"]) == (503, "backend_unavailable")

            server.start()
            deadline = time.monotonic() + 10  # reconnect backoff is at most 2 s
            while http_json("GET", url + "/readyz")[0] != 200:
                assert time.monotonic() < deadline, "the gateway did not reconnect"
                time.sleep(0.1)
            assert http_json("POST", url + "/v1/topics/ready/records", record)[0] == 200
            code, body = http_json("GET", url + "/v1/topics/ready/records?partition=0&offset=0")
            assert code == 200 and len(body["records"]) == 2
        finally:
            assert gw.stop() == 0
    finally:
        server.stop()
