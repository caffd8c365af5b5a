"""cursus-client 0.1.1 (PyPI, the real client) against a running gateway."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime

import trio
from cursus import Acks, Consumer, ConsumerConfig, Producer, ProducerConfig
from cursus.types import ConsumerMode

from gateway.protocols.cursus.client import CursusClient

from .conftest import cursus_gateway


def produce(addr: str, topic: str, n: int, partitions: int, acks: Acks = Acks.ONE) -> int:
    pc = ProducerConfig(
        brokers=[addr], topic=topic, partitions=partitions, acks=acks, batch_size=5, linger_ms=5
    )
    with Producer(pc) as p:
        for i in range(n):
            p.send(f"msg-{i}", key=f"k{i}")
        p.flush()
        return p.unique_ack_count


class Collector:
    """Iterates a Consumer in a thread until closed."""

    def __init__(self, cc: ConsumerConfig) -> None:
        self.consumer = Consumer(cc)
        self.got: list[tuple[int, int, str, str]] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for m in self.consumer:
                self.got.append((m.partition, m.offset, m.payload, m.key))
        except BaseException as exc:  # reported by the test
            self.error = exc

    def close(self) -> None:
        self.consumer.close()
        self.thread.join(10)


def wait_for(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def consume_all(addr: str, topic: str, mode: ConsumerMode, want: int) -> list:
    cc = ConsumerConfig(
        brokers=[addr], topic=topic, group_id="g-" + mode.value, mode=mode,
        heartbeat_interval_ms=500,
    )  # fmt: skip
    c = Collector(cc)
    try:
        wait_for(lambda: len(c.got) >= want or c.error is not None)
    finally:
        c.close()
    assert c.error is None, c.error
    return c.got


async def test_produce_then_consume_polling_and_streaming(tmp_path):
    async with cursus_gateway(tmp_path) as (host, port):
        addr = f"{host}:{port}"
        acked = await trio.to_thread.run_sync(produce, addr, "t", 20, 2)
        assert acked == 20
        for mode in (ConsumerMode.POLLING, ConsumerMode.STREAMING):
            got = await trio.to_thread.run_sync(consume_all, addr, "t", mode, 20)
            assert sorted(p for _, _, p, _ in got) == sorted(f"msg-{i}" for i in range(20))
            # keys are stored and returned; offsets are dense per partition
            assert {(p, k) for _, _, p, k in got} == {(f"msg-{i}", f"k{i}") for i in range(20)}
            for part in (0, 1):
                offsets = sorted(o for q, o, _, _ in got if q == part)
                assert offsets == list(range(len(offsets)))
        # the polling group committed what it consumed (next offset to read)
        async with await CursusClient.connect(host, port) as c:
            committed = [
                await c.text(f"FETCH_OFFSET topic=t partition={p} group=g-polling") for p in (0, 1)
            ]
        counts = [sum(1 for q, *_ in got if q == p) for p in (0, 1)]
        assert committed == [f"OK offset={n}" for n in counts]


async def test_acks_none_gets_a_json_ack_and_no_duplicates(tmp_path):
    async with cursus_gateway(tmp_path) as (host, port):
        addr = f"{host}:{port}"
        acked = await trio.to_thread.run_sync(produce, addr, "t0", 10, 1, Acks.NONE)
        assert acked == 10
        async with await CursusClient.connect(host, port) as c:
            assert '"hwm": 10' in await c.text("DESCRIBE topic=t0")


async def test_two_members_share_the_partitions(tmp_path):
    async with cursus_gateway(tmp_path) as (host, port):
        addr = f"{host}:{port}"
        async with await CursusClient.connect(host, port) as admin:
            assert "4 partitions" in await admin.text("CREATE topic=shared partitions=4")

            def config(name: str) -> ConsumerConfig:
                return ConsumerConfig(
                    brokers=[addr], topic="shared", group_id="pair", consumer_id=name,
                    mode=ConsumerMode.STREAMING, heartbeat_interval_ms=300,
                )  # fmt: skip

            async def status() -> dict:
                reply = await admin.text("GROUP_STATUS group=pair")
                if reply == "ERROR: group 'pair' not found":
                    return {"member_count": 0, "members": []}
                return json.loads(reply)

            a = Collector(config("alice"))
            b = None
            try:
                with trio.fail_after(20):
                    while (await status())["member_count"] != 1:
                        await trio.sleep(0.05)
                    b = Collector(config("bob"))
                    # stable: two members, each with a successful heartbeat since the last
                    # rebalance (alice has rejoined into bob's generation)
                    while True:
                        st = await status()
                        if st["member_count"] == 2 and all(
                            m["assignments"]
                            and datetime.fromisoformat(m["last_heartbeat"])
                            > datetime.fromisoformat(st["last_rebalance"])
                            for m in st["members"]
                        ):
                            break
                        await trio.sleep(0.05)
                    await trio.sleep(1.0)  # let both STREAM workers start on the new assignment
                acked = await trio.to_thread.run_sync(produce, addr, "shared", 40, 4)
                assert acked == 40
                with trio.fail_after(20):
                    while len({p for _, _, p, _ in a.got + b.got}) < 40:
                        await trio.sleep(0.05)
            finally:
                async with trio.open_nursery() as nursery:  # each close takes a second or two
                    for col in (a, b):
                        if col is not None:
                            nursery.start_soon(trio.to_thread.run_sync, col.close)
            assert a.error is None and b.error is None
            parts_a = {q for q, *_ in a.got}
            parts_b = {q for q, *_ in b.got}
            assert parts_a and parts_b and not parts_a & parts_b
            assert parts_a | parts_b == {0, 1, 2, 3}
            assert st["generation"] >= 2


async def test_gzip_producer_against_a_gzip_listener(tmp_path):
    async with cursus_gateway(tmp_path, compression="gzip") as (host, port):
        # the client sends its CREATE and METADATA uncompressed (the listener drops them, as
        # the broker does): the topic has to exist already
        async with await CursusClient.connect(host, port, compression="gzip") as c:
            assert await c.text("CREATE topic=z partitions=1") == "Topic 'z' now has 1 partitions"
        pc = ProducerConfig(
            brokers=[f"{host}:{port}"], topic="z", partitions=1, acks=Acks.ONE, batch_size=10,
            linger_ms=5, compression_type="gzip",
        )  # fmt: skip

        def run() -> int:
            with Producer(pc) as p:
                for i in range(10):
                    p.send(f"z-{i}")
                p.flush()
                return p.unique_ack_count

        assert await trio.to_thread.run_sync(run) == 10
        async with await CursusClient.connect(host, port, compression="gzip") as c:
            assert '"hwm": 10' in await c.text("DESCRIBE topic=z")
