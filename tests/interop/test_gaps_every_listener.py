"""Offsets with gaps on every listener: a Kafka cluster (Tansu) holds transactions written by
confluent-kafka (commit 3, abort 2, commit 3: committed records at offsets 0-2 and 7-9, markers at
3, 6 and 10). Every listener serves exactly the committed records, each at the offset (TANK: the
sequence number offset + 1) the cluster gave it, a read from inside a gap starts at the next
record, and a reader reaches the end."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
import trio

from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.iggy import codec as iggy_codec
from gateway.protocols.iggy.client import IggyClient
from gateway.protocols.liftbridge.client import LiftbridgeClient
from gateway.protocols.tank.client import TankClient
from tests.backends.servers import TansuServer
from tests.backends.test_kafka_real_cluster import confluent, kafka_python_08, kcat_08
from tests.support import GatewayProcess

LISTENERS = ("kafka08", "iggy", "tank", "liftbridge", "cursus")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, str, list]]:
    """(gateway, topic, [(offset, value)] of the committed records)."""
    tansu = TansuServer().start()
    gw = GatewayProcess(
        tmp_path_factory.mktemp("gaps"),
        listeners={name: {} for name in LISTENERS},
        backends={"k": {"type": "kafka", "bootstrap": tansu.bootstrap}},
        server={"auto_create_topics": False},
    ).start()
    topic = f"gaps{uuid.uuid4().hex[:6]}"
    try:
        written = confluent(tansu, topic, "transactions", "c3,a2,c3")
        committed = [(r["offset"], r["value"]) for r in written if r["committed"]]
        assert [o for o, _ in committed] == [0, 1, 2, 7, 8, 9]
        yield gw, topic, committed
    finally:
        gw.stop()
        tansu.stop()


def test_kafka08_clients(cluster):
    gw, topic, committed = cluster
    assert kcat_08(gw, topic) == committed
    assert kcat_08(gw, topic, "4") == committed[3:]
    assert kafka_python_08(gw, topic, len(committed)) == committed


async def test_iggy_poll_by_offset(cluster):
    gw, topic, committed = cluster
    client = await IggyClient.connect(*gw.address("iggy"))
    try:

        async def poll(offset: int, count: int = 100) -> list[tuple[int, str]]:
            polled = await client.poll(
                "default", topic, 1, iggy_codec.PollingKind.OFFSET, offset, count
            )
            return [(m.offset, m.payload.decode()) for m in polled.messages]

        got: list[tuple[int, str]] = []
        offset = 0
        with trio.fail_after(20):
            while True:
                page = await poll(offset, 2)
                if not page:
                    break
                got += page
                offset = page[-1][0] + 1
        assert got == committed
        assert await poll(3) == committed[3:]  # from a marker: the next committed record
    finally:
        await client.aclose()


async def test_tank_consume_by_sequence_number(cluster):
    gw, topic, committed = cluster
    client = await TankClient.connect(*gw.address("tank"))
    try:
        got: list[tuple[int, str]] = []
        seq = 1  # TANK sequence numbers are offset + 1
        with trio.fail_after(20):
            while True:
                msgs, _ = await client.consume(topic, 0, seq, max_wait_ms=100)
                if not msgs:
                    break
                got += [(m.seq - 1, m.content.decode()) for m in msgs]
                seq = msgs[-1].seq + 1
        assert got == committed
        msgs, _ = await client.consume(topic, 0, 5, max_wait_ms=100)  # offset 4: aborted
        assert [(m.seq - 1, m.content.decode()) for m in msgs] == committed[3:]
    finally:
        await client.aclose()


async def test_liftbridge_subscribe(cluster):
    gw, topic, committed = cluster
    client = await LiftbridgeClient.connect(*gw.address("liftbridge"))
    try:
        with trio.fail_after(20):
            got = [(m.offset, m.value.decode()) for m in await client.fetch(topic, 0, 0, 9)]
            assert got == committed
            got = [(m.offset, m.value.decode()) for m in await client.fetch(topic, 0, 3, 9)]
            assert got == committed[3:]
    finally:
        await client.aclose()


async def test_cursus_consume(cluster):
    gw, topic, committed = cluster
    client = await CursusClient.connect(*gw.address("cursus"))
    try:
        reply = await client.text(f"JOIN_GROUP topic={topic} group=g-{topic} member=m")
        member = re.search(r"member=(\S+)", reply).group(1)
        got: list[tuple[int, str]] = []
        offset = 0
        with trio.fail_after(20):
            while True:
                batch = await client.consume(
                    topic, 0, offset, member, group=f"g-{topic}", wait_ms=100
                )
                assert not isinstance(batch, str), batch
                page = [(m.offset, m.payload.decode()) for m in batch.messages()]
                if not page:
                    break
                got += page
                offset = page[-1][0] + 1
        assert got == committed
    finally:
        await client.aclose()


def test_grpcio_subscribe_to_a_stop_offset(cluster):
    """grpcio (Google's gRPC) subscribing through the Liftbridge listener: the committed
    records at their offsets, then the server's end at the stop offset."""
    import grpc

    from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
    from tests.protocols.liftbridge.grpc_stub import grpc_module

    gw, topic, committed = cluster
    host, port = gw.address("liftbridge")
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        api = grpc_module().APIStub(channel)
        request = pb.SubscribeRequest(
            stream=topic, startPosition=pb.OFFSET, startOffset=0,
            stopPosition=pb.STOP_OFFSET, stopOffset=9,
        )  # fmt: skip
        got = []
        with pytest.raises(grpc.RpcError) as end:
            for m in api.Subscribe(request, timeout=20):
                if m.value:  # the first message is the subscription's handshake
                    got.append((m.offset, m.value.decode()))
        assert end.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "Stop offset reached" in end.value.details()
    assert got == committed


def test_cursus_client_consumer(cluster):
    """cursus-client 0.1.1 (the real Cursus client) in a consumer group."""
    import threading

    from cursus import Consumer, ConsumerConfig
    from cursus.types import ConsumerMode

    gw, topic, committed = cluster
    host, port = gw.address("cursus")
    config = ConsumerConfig(
        brokers=[f"{host}:{port}"], topic=topic, group_id=f"real-{topic}",
        mode=ConsumerMode.POLLING, heartbeat_interval_ms=500,
    )  # fmt: skip
    consumer = Consumer(config)
    got = []
    timer = threading.Timer(20, consumer.close)
    timer.start()
    try:
        for m in consumer:
            payload = m.payload if isinstance(m.payload, str) else m.payload.decode()
            got.append((m.offset, payload))
            if len(got) >= len(committed):
                break
    finally:
        timer.cancel()
        consumer.close()
    assert got == committed
