"""The scenarios a tank-cli user runs, driven by the in-repo TANK client (the codec's client role)
against a gateway serving in this process.

No TANK client or broker installs from PyPI or apt; the wire captures
(test_golden.py) tie this client and the listener to the real programs.
"""

from __future__ import annotations

import pytest
import trio

from gateway.config import parse_config
from gateway.protocols.tank.client import TAIL, TankClient, TankError
from gateway.protocols.tank.codec import CT_EXISTS, CT_INVALID, P_INVALID_SEQNUMS
from tests.support import make_config, serving

TS = 1_700_000_000_123


@pytest.fixture
async def addr(tmp_path):
    config = parse_config(make_config(tmp_path, listeners={"tank": {}}, backend="memory"))
    async with serving(config) as server:
        yield server.addresses()["tank"]


async def test_create_produce_consume_discover(addr) -> None:
    async with await TankClient.connect(*addr) as c:
        assert await c.create_topic("orders", 2) == 0
        assert await c.create_topic("orders", 2) == CT_EXISTS
        assert await c.create_topic("", 2) == CT_INVALID
        assert await c.create_topic("zero", 0) == CT_INVALID
        assert await c.create_topic("events", 1, b"retention.segments.count = 8\n# comment\n") == 0
        # plain, keyed, compressed (snappy above 1 KiB), explicit sequence numbers
        assert await c.produce("orders", 0, [(None, b"plain", TS)]) == 0
        assert await c.produce("orders", 0, [(b"k1", b"keyed", TS + 1)]) == 0
        big = [(None, bytes([65 + i]) * 700, TS + 2) for i in range(3)]
        assert await c.produce("orders", 0, big) == 0
        assert await c.produce("orders", 0, [(None, b"seq6", TS + 3)], base_seqnum=6) == 0
        assert (
            await c.produce("orders", 0, [(None, b"seq7", TS + 4)], base_seqnum=7, sparse=True) == 0
        )
        assert (
            await c.produce("orders", 0, [(None, b"gap", TS)], base_seqnum=20) == P_INVALID_SEQNUMS
        )
        assert c.pings == 1  # the greeting

        msgs, hw = await c.consume("orders", 0, 0)
        assert hw == 7
        assert [(m.seq, m.key, m.content, m.timestamp_ms) for m in msgs] == [
            (1, None, b"plain", TS),
            (2, b"k1", b"keyed", TS + 1),
            (3, None, b"A" * 700, TS + 2),
            (4, None, b"B" * 700, TS + 2),
            (5, None, b"C" * 700, TS + 2),
            (6, None, b"seq6", TS + 3),
            (7, None, b"seq7", TS + 4),
        ]
        # from a sequence number inside a bundle: the chunk may start earlier, the client skips
        msgs, _ = await c.consume("orders", 0, 4)
        assert [m.seq for m in msgs] == [4, 5, 6, 7]
        # a fetch size smaller than one bundle: the last bundle is cut, the client asks again
        part = await c.consume_raw("orders", 0, 3, fetch_size=10)
        assert len(part.chunk) == 10 and part.messages() == []
        msgs, _ = await c.consume("orders", 0, 3, fetch_size=10)
        assert [m.seq for m in msgs][:3] == [3, 4, 5]
        # past the high watermark + 1: boundary fault
        with pytest.raises(TankError) as exc:
            await c.consume("orders", 0, 9)
        assert exc.value.code == 0x01
        part = await c.consume_raw("orders", 0, 500)
        assert (part.err, part.hwmark, part.first_available) == (1, 7, 1)
        # client_version 3 carries a flags byte
        part = await c.consume_raw("orders", 0, 1, client_version=3)
        assert part.err == 0 and part.base_seq == 1

        assert await c.discover_partitions("orders") == [(1, 7), (0, 0)]
        assert await c.discover_partitions("nosuch") == []
        assert sorted(await c.discover_topics()) == [("events", 1), ("orders", 2)]
        status = await c.status()
        assert (status.topics, status.partitions, status.open_partitions, status.version) == (
            2,
            3,
            3,
            400,
        )
        assert (await c.discover_topology()).cluster is None
        assert await c.reload_conf("orders", 1) == 0
        assert await c.reload_conf("orders", 9) == 10
        assert await c.reload_conf("nosuch", 0) == 11
        assert await c.produce("nosuch", 0, [(None, b"x", TS)]) is None


async def test_tail_long_poll_is_woken_by_a_produce(addr) -> None:
    async with (
        await TankClient.connect(*addr) as consumer,
        await TankClient.connect(*addr) as producer,
    ):
        assert await producer.create_topic("tail", 1) == 0
        assert await producer.produce("tail", 0, [(None, b"old", TS)]) == 0
        got: list = []

        async def consume() -> None:
            got.append(await consumer.consume("tail", 0, TAIL, max_wait_ms=30_000))

        with trio.fail_after(10):  # far below max_wait: only the produce can end the wait
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                await trio.sleep(0.2)
                assert not got
                assert await producer.produce("tail", 0, [(None, b"new", TS + 1)]) == 0
        ((msgs, hw),) = got
        assert hw == 2 and [(m.seq, m.content) for m in msgs] == [(2, b"new")]
        # at the tail with a short wait and nothing new: empty answer, base = first available
        part = await consumer.consume_raw("tail", 0, TAIL, max_wait_ms=50)
        assert (part.err, part.base_seq, part.hwmark, part.messages()) == (0, 1, 2, [])


async def test_long_poll_on_one_connection_does_not_block_a_produce_on_it(addr) -> None:
    """The real broker parks a consume and keeps serving the connection; so does the gateway."""
    from gateway.protocols.tank import codec as C

    async with await TankClient.connect(*addr) as c:
        assert await c.create_topic("same", 1) == 0
        consume = C.ConsumeRequest(
            100, [C.ConsumeTopic("same", [C.ConsumePartitionRequest(0, TAIL, 1 << 20)])], 30_000
        )
        await c.stream.send_all(c.conn.send(consume))
        with trio.fail_after(10):
            assert await c.produce("same", 0, [(None, b"v", TS)]) == 0
            event = await c.response(100)  # the parked consume answers after the produce
        assert [m.content for m in event.topics[0].partitions[0].messages()] == [b"v"]


async def test_parked_consume_is_not_a_slow_request(tmp_path) -> None:
    """A consume parked longer than the read timeout is idle time, not a slowloris request; a
    frame left half sent is one, and the server closes that connection."""
    listeners = {"tank": {"read_timeout_s": 0.3}}
    config = parse_config(make_config(tmp_path, listeners=listeners, backend="memory"))
    async with serving(config) as server:
        addr = server.addresses()["tank"]
        async with await TankClient.connect(*addr) as c:
            assert await c.create_topic("slow", 1) == 0
            with trio.fail_after(10):
                part = await c.consume_raw("slow", 0, TAIL, max_wait_ms=1000)
            assert (part.err, part.hwmark, part.messages()) == (0, 0, [])
            assert await c.produce("slow", 0, [(None, b"still open", TS)]) == 0
        async with await TankClient.connect(*addr) as c:
            await c.stream.send_all(b"\x0a\x04\x00\x00\x00\x01")  # status request, cut short
            with trio.fail_after(10):
                while await c.stream.receive_some(1024):  # the greeting, then end of stream
                    pass


async def test_one_consume_of_several_topics_and_partitions(addr) -> None:
    from gateway.protocols.tank import codec as C

    def req(rid: int, wait: int, *topics: tuple[str, list[tuple[int, int]]]) -> C.ConsumeRequest:
        return C.ConsumeRequest(
            rid,
            [
                C.ConsumeTopic(name, [C.ConsumePartitionRequest(p, s, 1 << 20) for p, s in parts])
                for name, parts in topics
            ],
            wait,
        )

    async with await TankClient.connect(*addr) as c, await TankClient.connect(*addr) as p:
        assert await c.create_topic("multi", 2) == 0
        assert await c.produce("multi", 1, [(None, b"p1-a", TS), (None, b"p1-b", TS)]) == 0
        resp = await c.request(
            req(50, 0, ("multi", [(0, 0), (1, 0), (1, 2), (5, 0), (1, 9)]), ("nosuch", [(0, 0)]))
        )
        multi, nosuch = resp.topics
        assert nosuch.partitions is None
        p0, p1, p1_from_2, p5, p1_past = multi.partitions
        assert (p0.err, p0.hwmark, p0.messages()) == (0, 0, [])
        assert [(m.seq, m.content) for m in p1.messages()] == [(1, b"p1-a"), (2, b"p1-b")]
        assert p1_from_2.base_seq == 1  # the chunk starts at the bundle holding seq 2
        assert [m.seq for m in p1_from_2.messages() if m.seq >= 2] == [2]
        assert p5.err == C.C_UNKNOWN_PARTITION
        assert (p1_past.err, p1_past.hwmark, p1_past.first_available) == (C.C_BOUNDARY, 2, 1)

        # both partitions at the tail: parked until the first one gets data
        await c.stream.send_all(c.conn.send(req(51, 30_000, ("multi", [(0, TAIL), (1, TAIL)]))))
        with trio.fail_after(10):
            await trio.sleep(0.2)
            assert await p.produce("multi", 0, [(None, b"p0-new", TS)]) == 0
            resp = await c.response(51)
        p0, p1 = resp.topics[0].partitions
        assert [(m.seq, m.content) for m in p0.messages()] == [(1, b"p0-new")]
        assert (p1.err, p1.hwmark, p1.messages()) == (0, 2, [])


async def test_tail_consume_waits_for_min_bytes(addr) -> None:
    from gateway.protocols.tank import codec as C

    async with await TankClient.connect(*addr) as c, await TankClient.connect(*addr) as p:
        assert await c.create_topic("minb", 1) == 0
        req = C.ConsumeRequest(
            7, [C.ConsumeTopic("minb", [C.ConsumePartitionRequest(0, TAIL, 1 << 20)])], 20_000, 500
        )
        await c.stream.send_all(c.conn.send(req))
        with trio.fail_after(10):
            assert await p.produce("minb", 0, [(None, b"small", TS)]) == 0
            # 5 bytes are not min_bytes: the consume stays parked (no answer arrives)
            with trio.move_on_after(0.3):
                c.conn.receive_data(await c.stream.receive_some(1 << 16))
            assert c.conn.next_event() is C.NEED_DATA
            assert await p.produce("minb", 0, [(None, b"x" * 600, TS)]) == 0
            resp = await c.response(7)
        got = resp.topics[0].partitions[0].messages()
        assert [(m.seq, len(m.content)) for m in got] == [(1, 5), (2, 600)]
