"""Idempotent Cursus producers across a gateway crash: a real gateway subprocess on the embedded
backend is killed with SIGKILL after acknowledging a batch, restarted on the same data, and the
producer's retry of that batch is answered as a duplicate, not stored a second time."""

from __future__ import annotations

import json
from dataclasses import asdict

from gateway.config import parse_config
from gateway.observability import LIMIT_HITS
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Ack, Message
from gateway.protocols.cursus.producers import NS, DurableProducers, ProducerState, state_key
from gateway.protocols.cursus.state import state_for
from tests.support import GatewayProcess, make_config, serving

from .conftest import cursus_gateway


def batch(seqs: range, epoch: int = 7) -> list[Message]:
    return [
        Message(seq=s, producer_id=b"py-durable", epoch=epoch, payload=b"m%d" % s) for s in seqs
    ]


def encoded(state: ProducerState) -> bytes:
    return json.dumps(asdict(state)).encode()


async def stored(c: CursusClient) -> int:
    return json.loads(await c.text("DESCRIBE topic=orders"))["partitions"][0]["hwm"]


async def test_a_retry_after_a_crash_is_not_stored_twice(tmp_path):
    gw = GatewayProcess(tmp_path, listeners={"cursus": {}}, backend="embedded").start()
    try:
        async with await CursusClient.connect(*gw.address("cursus")) as c:
            await c.text("CREATE topic=orders partitions=1", "admin")
            first = await c.produce("orders", 0, batch(range(1, 4)), idempotent=True)
            assert isinstance(first, Ack) and first.status == "OK", first
            assert (first.last_offset, first.seq_start, first.seq_end) == (2, 1, 3)
        gw.kill()  # SIGKILL: no clean shutdown, nothing flushed by the gateway on the way out
        gw = GatewayProcess(tmp_path, listeners={"cursus": {}}, backend="embedded").start()
        async with await CursusClient.connect(*gw.address("cursus")) as c:
            retry = await c.produce("orders", 0, batch(range(1, 4)), idempotent=True)
            assert isinstance(retry, Ack) and retry.status == "OK", retry
            assert retry.last_offset == 2  # the offsets the original got
            assert await stored(c) == 3  # exactly once
            older = await c.produce("orders", 0, batch(range(2, 3)), idempotent=True)
            assert isinstance(older, Ack) and older.status == "OK" and older.last_offset == 0
            assert await stored(c) == 3
            gap = await c.produce("orders", 0, batch(range(9, 10)), idempotent=True)
            assert isinstance(gap, Ack) and gap.status == "ERROR"
            assert gap.error.startswith("idempotency_gap:"), gap
            fenced = await c.produce("orders", 0, batch(range(4, 5), epoch=6), idempotent=True)
            assert isinstance(fenced, Ack) and fenced.error.startswith("stale_producer_epoch:")
            nxt = await c.produce("orders", 0, batch(range(4, 6)), idempotent=True)
            assert isinstance(nxt, Ack) and nxt.status == "OK" and nxt.last_offset == 4, nxt
            assert await stored(c) == 5
            # PUBLISH (one text record) shares the state: a retry of its sequence is refused
            await c.text("CREATE topic=one partitions=1 idempotent=true", "")
            pub = "PUBLISH topic=one acks=1 producerId=pp seqNum=1 epoch=1 message=hello"
            assert json.loads(await c.text(pub))["last_offset"] == 0
        gw.kill()
        gw = GatewayProcess(tmp_path, listeners={"cursus": {}}, backend="embedded").start()
        async with await CursusClient.connect(*gw.address("cursus")) as c:
            again = json.loads(await c.text(pub))
            assert (again["status"], again["last_offset"]) == ("OK", 0)
            desc = json.loads(await c.text("DESCRIBE topic=one"))
            assert desc["partitions"][0]["hwm"] == 1
            assert await stored(c) == 5
    finally:
        gw.stop()


async def test_the_number_of_producer_states_is_bounded(tmp_path):
    """``max_idempotent_producers``: past it the state written longest ago is dropped (counted in
    gateway_limit_hits_total), so that producer's retry is stored again, while the producers
    still tracked are de-duplicated."""
    counter = LIMIT_HITS.labels("max_idempotent_producers", "cursus")
    before = counter._value.get()
    async with cursus_gateway(tmp_path, max_idempotent_producers=2) as addr:
        async with await CursusClient.connect(*addr) as c:
            await c.text("CREATE topic=orders partitions=1", "admin")

            async def send(pid: bytes) -> Ack:
                msgs = [Message(seq=1, producer_id=pid, epoch=1, payload=pid)]
                ack = await c.produce("orders", 0, msgs, idempotent=True)
                assert isinstance(ack, Ack) and ack.status == "OK", ack
                return ack

            for pid in (b"p1", b"p2", b"p3"):
                await send(pid)
            assert counter._value.get() == before + 1  # p1 dropped
            assert (await send(b"p3")).last_offset == 2  # still tracked: a duplicate
            assert (await send(b"p2")).last_offset == 1
            assert await stored(c) == 3
            assert (await send(b"p1")).last_offset == 3  # dropped: stored again
            assert await stored(c) == 4
            assert counter._value.get() == before + 2  # and p2 (written longest ago) went


async def test_a_state_written_before_a_crash_is_settled_from_the_log(tmp_path):
    """The two sides of the crash window, with the producers' memory wiped as a restart would:
    a state written down whose batch never reached the log is appended on retry (not answered
    as a duplicate, which would lose it); a batch that reached the log, with other producers'
    records after it, is found there and answered with the offsets it got."""
    config = parse_config(make_config(tmp_path, {"cursus": {}}, admin=False))
    async with serving(config) as server:
        state = state_for(server.core)
        backend = server.core.router.backend_for("orders")
        async with await CursusClient.connect(*server.addresses()["cursus"]) as c:
            await c.text("CREATE topic=orders partitions=1", "admin")
            assert (
                await c.produce("orders", 0, batch(range(1, 3)), idempotent=True)
            ).status == "OK"
            # crash after writing the state of seq 3..4, before appending it
            lost = ProducerState(7, 3, 4, floor=2, at=1.0)
            await backend.kv_put(NS, state_key("orders", 0, "py-durable"), encoded(lost))
            state.producers = DurableProducers()
            retry = await c.produce("orders", 0, batch(range(3, 5)), idempotent=True)
            assert isinstance(retry, Ack) and (retry.status, retry.last_offset) == ("OK", 3)
            assert await stored(c) == 4
            # appended, then a crash before the ack; others write after it
            assert (
                await c.produce("orders", 0, batch(range(5, 8)), idempotent=True)
            ).status == "OK"
            other = [Message(seq=1, producer_id=b"other", epoch=1, payload=b"o")]
            for _ in range(3):
                await c.produce("orders", 0, other)
            state.producers = DurableProducers()
            retry = await c.produce("orders", 0, batch(range(5, 8)), idempotent=True)
            assert isinstance(retry, Ack) and (retry.status, retry.last_offset) == ("OK", 6)
            assert await stored(c) == 10
