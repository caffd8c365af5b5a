"""A consume answer holds at most the listener's ``max_answer_bytes`` of chunks, whatever the
fetch sizes and however many partitions (or repeats of one) a request lists; records stored in
another protocol's format are re-encoded only as far as they fit, in whole bundles."""

from __future__ import annotations

import types

import structlog
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.backends.memory import MemoryBackend
from gateway.canonical import CANONICAL
from gateway.core.engine import Core
from gateway.model import CreateTopic, Produce, Record, RecordBatch
from gateway.observability import LIMIT_HITS
from gateway.protocols.tank import codec as C
from gateway.protocols.tank.bundle import TANK_BUNDLE, encode_bundle, read_varint
from gateway.protocols.tank.chunk import bundle_from_canonical
from gateway.protocols.tank.session import TankSession

BUDGET = 5000
U32_MAX = 2**32 - 1


def session(budget: int = BUDGET) -> TankSession:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    ctx = types.SimpleNamespace(
        core=core,
        log=structlog.get_logger(),
        shutdown=trio.Event(),
        listener=types.SimpleNamespace(max_answer_bytes=budget),
        peer="test",
    )
    return TankSession(ctx)  # type: ignore[arg-type]


def hits() -> float:
    return LIMIT_HITS.labels("max_answer_bytes", "tank")._value.get()


async def canonical_topic(s: TankSession, name: str, count: int = 1000, partitions: int = 1):
    """``count`` 100-byte records per partition, stored as one canonical block (as Kafka 0.8,
    Iggy and others store them)."""
    await s.core.execute(CreateTopic(name, partitions))
    for p in range(partitions):
        records = [
            Record(None, b"%03d" % (i % 1000) + b"x" * 97, (), 1_000_000) for i in range(count)
        ]
        block = CANONICAL.encode(records)
        batch = RecordBatch(encoded=block, codec=CANONICAL, count=count)
        await s.core.execute(Produce(name, batch, partition=p))


def whole_bundles(chunk: bytes) -> bool:
    """The chunk is bundles with their length varints, the last one not cut."""
    pos = 0
    while pos < len(chunk):
        size, pos = read_varint(chunk, pos, len(chunk))
        pos += size
    return pos == len(chunk)


async def consume(s: TankSession, topic: str, entries: list[tuple[int, int, int]]):
    req = C.ConsumeRequest(
        1,
        [C.ConsumeTopic(topic, [C.ConsumePartitionRequest(p, seq, fs) for p, seq, fs in entries])],
    )
    # what a client decodes: the encoded answer
    resp = C.decode_response(C.MsgId.CONSUME, C.encode_response(await s.consume(req))[5:])
    return resp.topics[0].partitions


async def test_a_huge_fetch_size_gets_the_budget_in_whole_bundles() -> None:
    s = session()
    await canonical_topic(s, "big")
    before = hits()
    [part] = await consume(s, "big", [(0, 0, U32_MAX)])
    assert part.err == 0 and part.hwmark == 1000 and part.base_seq == 1
    assert BUDGET - 200 < len(part.chunk) <= BUDGET
    msgs = part.messages()  # whole messages only: nothing cut
    assert whole_bundles(part.chunk) and len(msgs) * 100 < len(part.chunk)
    assert [m.seq for m in msgs] == list(range(1, len(msgs) + 1))
    assert msgs[7].content == b"007" + b"x" * 97
    assert hits() == before + 1
    # from the middle of the block, within the budget: exactly what was asked, no hit
    [part] = await consume(s, "big", [(0, 501, 1000)])
    assert [m.seq for m in part.messages()][:1] == [501]
    assert len(part.chunk) <= 1000
    assert hits() == before + 1


async def test_partitions_and_repeats_share_one_budget() -> None:
    s = session()
    await canonical_topic(s, "many", partitions=3)
    before = hits()
    # partition 1 listed three times (the real broker answers every entry; so do we)
    entries = [(0, 0, 2000), (1, 0, U32_MAX), (1, 0, U32_MAX), (2, 0, 100), (1, 0, U32_MAX)]
    parts = await consume(s, "many", entries)
    sizes = [len(p.chunk) for p in parts]
    assert sum(sizes) <= BUDGET
    assert 1800 < sizes[0] <= 2000 and sizes[1] > 2500  # first come, first served
    # then what is left: less than a record, so empty chunks (not cut ones), hwmark still given
    assert sum(sizes[2:]) < 120
    assert all(whole_bundles(p.chunk) for p in parts)
    assert [(p.err, p.hwmark) for p in parts] == [(0, 1000)] * 5
    assert hits() == before + 1


async def test_stored_tank_bundles_still_go_out_untouched() -> None:
    s = session(budget=300)
    await s.create_topic(C.CreateTopicRequest(1, "native", 1))
    bundles = [encode_bundle([(None, b"m%d-%d" % (b, i), 5) for i in range(10)]) for b in range(20)]
    for i, bundle in enumerate(bundles):
        req = C.ProduceRequest(i, [C.ProduceTopic("native", [C.ProducePartition(0, bundle)])])
        req = C.decode_request(C.MsgId.PRODUCE, C.encode_request(req)[5:])
        assert (await s.produce(req)).topics[0].statuses == [C.P_OK]
    [part] = await consume(s, "native", [(0, 0, U32_MAX)])
    whole = len(bundles[0]) + 1  # its length varint, then the bundle as produced
    fit = 300 // whole
    assert bytes(part.chunk) == b"".join(bytes([len(b)]) + b for b in bundles[:fit])
    assert len(part.messages()) == 10 * fit


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=300)),
            st.one_of(st.none(), st.binary(max_size=200)),
            st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2),
            st.integers(min_value=-1, max_value=2**50),
        ),
        min_size=1,
        max_size=40,
    ),
    st.data(),
)
def test_bundles_written_from_canonical_blocks_match_the_generic_encoder(rows, data) -> None:
    records = [Record(k, v, tuple(h), ts) for k, v, h, ts in rows]
    block = CANONICAL.encode(records)
    start = data.draw(st.integers(0, len(records) - 1))
    n = data.draw(st.integers(1, len(records) - start))
    expected = TANK_BUNDLE.encode(records[start : start + n])
    assert bundle_from_canonical(block, start, n) == expected
    assert bundle_from_canonical(memoryview(block), start, n) == expected


async def test_records_without_a_stored_encoding_are_cut_to_the_budget_too() -> None:
    s = session(budget=2000)
    await s.core.execute(CreateTopic("plain", 1))
    records = [Record(b"k%d" % i, b"%03d" % i + b"y" * 97, (), 2_000_000) for i in range(100)]
    await s.core.execute(Produce("plain", RecordBatch(records), partition=0))
    before = hits()
    [part] = await consume(s, "plain", [(0, 11, U32_MAX)])
    msgs = part.messages()
    assert whole_bundles(part.chunk) and 1500 < len(part.chunk) <= 2000
    assert [m.seq for m in msgs] == list(range(11, 11 + len(msgs)))
    assert [(m.key, m.content[:3]) for m in msgs[:2]] == [(b"k10", b"010"), (b"k11", b"011")]
    assert hits() == before + 1


async def test_parked_consumes_wait_holding_no_answer() -> None:
    """Several partitions below min_bytes: parked until one that had nothing gets data (the
    answer's data is read again then, not held while waiting)."""
    s = session()
    await s.create_topic(C.CreateTopicRequest(1, "park", 2))
    one = encode_bundle([(None, b"small", 5)])
    req = C.ProduceRequest(1, [C.ProduceTopic("park", [C.ProducePartition(0, one)])])
    await s.produce(C.decode_request(C.MsgId.PRODUCE, C.encode_request(req)[5:]))
    entries = [C.ConsumePartitionRequest(0, 0, 1 << 20), C.ConsumePartitionRequest(1, 0, 1 << 20)]
    got: list = []

    async def consume_parked() -> None:
        plan = await s.start_consume(
            C.ConsumeRequest(7, [C.ConsumeTopic("park", entries)], 30_000, 1000)
        )
        got.append(await s.finish_consume(plan))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume_parked)
            await trio.sleep(0.3)
            assert not got  # 5 bytes of partition 0 are not min_bytes: still parked
            assert not s.answer_lock.locked()
            req = C.ProduceRequest(2, [C.ProduceTopic("park", [C.ProducePartition(1, one)])])
            await s.produce(C.decode_request(C.MsgId.PRODUCE, C.encode_request(req)[5:]))
    p0, p1 = got[0].topics[0].partitions
    assert [m.content for m in p0.messages()] == [m.content for m in p1.messages()] == [b"small"]
