"""Cursus <-> Kafka 0.8, Iggy and TANK through one gateway. The Cursus side is cursus-client
0.1.1 (PyPI), Kafka 0.8 is kcat (librdkafka), Iggy is iggy-py 0.4.0; TANK has no installable
client, so its side is the in-repo TANK client (see tests/protocols/tank/test_interop.py)."""

from __future__ import annotations

import threading

import pytest
from cursus import Acks, Consumer, ConsumerConfig, Producer, ProducerConfig
from cursus.types import ConsumerMode

from gateway.protocols.tank.client import TankClient
from tests.protocols.kafka08.conftest import KCAT_08, kcat
from tests.protocols.tank.test_interop import iggy, tank
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    listeners = {
        "cursus": {},
        "tank": {},
        "kafka08": {},
        "iggy": {"users": [{"username": "iggy", "password": "iggy"}]},
    }
    with GatewayProcess(tmp_path_factory.mktemp("cursus-interop"), listeners=listeners) as proc:
        yield proc


def addr(gw, name: str) -> str:
    host, port = gw.address(name)
    return f"{host}:{port}"


def test_cursus_to_kafka08_iggy_and_tank(gw) -> None:
    pc = ProducerConfig(
        brokers=[addr(gw, "cursus")], topic="from-cursus", partitions=1, acks=Acks.ONE,
        batch_size=10, linger_ms=5,
    )  # fmt: skip
    with Producer(pc) as p:
        for i in range(3):
            p.send(f"cursus-{i}", key=f"k{i}")
        p.flush()
        assert p.unique_ack_count == 3
    got = kcat("-b", addr(gw, "kafka08"), "-C", "-t", "from-cursus", "-p", "0", "-o",
               "beginning", "-e", "-f", "%o|%k|%s\n", *KCAT_08)  # fmt: skip
    assert got.splitlines() == ["0|k0|cursus-0", "1|k1|cursus-1", "2|k2|cursus-2"]
    out = iggy(gw.address("iggy"), op="poll", topic="from-cursus", count=10)["messages"]
    assert [(m["offset"], bytes.fromhex(m["payload"])) for m in out] == [
        (i, b"cursus-%d" % i) for i in range(3)
    ]

    async def consume(c: TankClient) -> object:
        return await c.consume("from-cursus", 0, 0)

    msgs, hwmark = tank(gw.address("tank"), consume)
    assert hwmark == 3
    assert [(m.seq, m.key, m.content) for m in msgs] == [
        (i + 1, b"k%d" % i, b"cursus-%d" % i) for i in range(3)
    ]


def test_kafka08_iggy_and_tank_to_cursus(gw) -> None:
    async def create_and_produce(c: TankClient) -> None:
        assert await c.create_topic("to-cursus", 1) == 0

    tank(gw.address("tank"), create_and_produce)
    kcat("-b", addr(gw, "kafka08"), "-P", "-t", "to-cursus", "-p", "0", "-K:", *KCAT_08,
         stdin="ka:kafka-a\nkb:kafka-b\n")  # fmt: skip
    iggy(gw.address("iggy"), op="send", topic="to-cursus", payloads=["iggy-c"])

    async def produce(c: TankClient) -> None:
        assert await c.produce("to-cursus", 0, [(b"kt", b"tank-d", 1_700_000_000_000)]) == 0

    tank(gw.address("tank"), produce)
    want = [("kafka-a", "ka"), ("kafka-b", "kb"), ("iggy-c", ""), ("tank-d", "kt")]
    for mode in (ConsumerMode.POLLING, ConsumerMode.STREAMING):
        cc = ConsumerConfig(
            brokers=[addr(gw, "cursus")], topic="to-cursus", group_id=f"g-{mode.value}",
            mode=mode, heartbeat_interval_ms=500,
        )  # fmt: skip
        c = Consumer(cc)
        got = []

        timer = threading.Timer(20, c.close)
        timer.start()
        try:
            for m in c:
                got.append((m.partition, m.offset, m.payload, m.key))
                if len(got) >= len(want):
                    break
        finally:
            timer.cancel()
            c.close()
        assert [(p, k) for _, _, p, k in got] == want
        assert [o for _, o, _, _ in got] == [0, 1, 2, 3]
