"""The backend conformance suite: every backend in ``BACKEND_FACTORIES`` runs every test.

A capability a backend does not declare is not skipped: the test asserts that the operation fails
with ``ErrorCode.UNSUPPORTED``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from gateway.backends.base import Backend
from gateway.canonical import CANONICAL
from gateway.core.groups import GroupCoordinator
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch, TopicInfo
from tests.backends.upstream import TOPIC_PROVISIONERS

T0 = 1_700_000_000_000_000  # a fixed time in microseconds


def make_records(n: int, start: int = 0, ts: int = T0, size: int = 100) -> list[Record]:
    out = []
    for i in range(start, start + n):
        value = (f"value-{i}-".encode() * (size // 8 + 1))[:size]
        out.append(Record(f"key-{i % 7}".encode(), value, (("h", str(i).encode()),), ts + i))
    return out


def encoded(records: list[Record]) -> RecordBatch:
    """A batch as a canonical-speaking session hands it over: an encoded block."""
    block = CANONICAL.encode(records)
    return RecordBatch(
        encoded=block,
        codec=CANONICAL,
        count=len(records),
        max_timestamp_us=max(r.timestamp_us for r in records),
    )


def strip(records: Any) -> list[tuple[Any, ...]]:
    return [(r.key, r.value, r.headers, r.timestamp_us) for r in records]


class _AnyTime:
    """Equal to every timestamp: what a backend that stamps its own time gives back."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int)

    def __repr__(self) -> str:
        return "<its own time>"


def kept(backend: Backend, records: Any) -> list[tuple[Any, ...]]:
    """``strip`` of the records as the backend declares it keeps them (``stored_form``: the
    identity for backends that keep every field). A backend without timestamps has its own
    (a stored form with timestamp -1): any time matches there."""
    out = strip(backend.stored_form(r) for r in records)
    if not backend.capabilities.timestamps:
        out = [(k, v, h, _AnyTime()) for k, v, h, _ in out]
    return out


async def read_all(backend: Backend, topic: str, partition: int, offset: int) -> list[Record]:
    out: list[Record] = []
    while True:
        batches = await backend.read(topic, partition, offset, 1_000_000, 1 << 20)
        if not batches:
            return out
        for b in batches:
            # dense backends answer from exactly ``offset``; others from the first record at or
            # after it (a gap falls between batches); every batch is a dense window either way
            if backend.capabilities.dense_offsets:
                assert b.first_offset == offset
            else:
                assert b.first_offset >= offset
            records = b.records
            assert [r.offset for r in records] == list(range(b.first_offset, b.last_offset + 1))
            out.extend(records)
            offset = b.last_offset + 1


async def create_topic(
    backend: Backend, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
) -> TopicInfo:
    """A topic for a test: made by the backend, or, for one that cannot make topics (asserted:
    UNSUPPORTED), made out of band by its provisioner (tests/backends/upstream.py)."""
    if backend.capabilities.create_topics:
        return await backend.create_topic(name, partitions, config)
    await raises(ErrorCode.UNSUPPORTED, backend.create_topic(name, partitions, config))
    await TOPIC_PROVISIONERS[backend.name](backend, name, partitions)
    return await backend.topic(name)


async def raises(code: ErrorCode, call: Awaitable[Any]) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await call
    assert info.value.code is code, info.value
    return info.value


async def expect_capability(
    backend: Backend, capable: bool, call: Callable[[], Awaitable[Any]]
) -> Any:
    """Run ``call``: its result when the backend is capable, else assert UNSUPPORTED."""
    if capable:
        return await call()
    await raises(ErrorCode.UNSUPPORTED, call())
    return None


# ----------------------------------------------------------------------------- data


async def test_round_trip_keeps_every_field(backend: Backend) -> None:
    await create_topic(backend, "rt", 1)
    records = [
        Record(b"k1", b"v1", (("a", b"1"), ("b", b"")), T0),
        Record(None, b"no key", (), T0 + 1),
        Record(b"no value", None, (), T0 + 2),
        Record(None, None, (), T0 + 3),
        Record(b"", b"", (("dup", b"x"), ("dup", b"y")), T0 + 4),
        Record(b"\x00\xff" * 100, bytes(range(256)) * 40, (("bin", b"\x00\x01"),), T0 + 5),
    ]
    caps = backend.capabilities
    # a field a backend cannot store is dropped, the way its stored_form declares
    if not caps.headers:
        assert all(not backend.stored_form(r).headers for r in records)
    if not caps.keys:
        assert all(backend.stored_form(r).key is None for r in records)
    if not caps.timestamps:
        assert all(backend.stored_form(r).timestamp_us < 0 for r in records)
    result = await backend.append("rt", 0, RecordBatch(records))
    assert (result.partition, result.base_offset, result.last_offset) == (0, 0, len(records) - 1)
    got = await read_all(backend, "rt", 0, 0)
    assert strip(got) == kept(backend, records)
    assert [r.offset for r in got] == list(range(len(records)))


async def test_encoded_and_decoded_batches_read_back_the_same(backend: Backend) -> None:
    await create_topic(backend, "enc", 1)
    first, second = make_records(50), make_records(50, start=50)
    await backend.append("enc", 0, encoded(first))
    await backend.append("enc", 0, RecordBatch(second))
    got = await read_all(backend, "enc", 0, 0)
    assert strip(got) == kept(backend, first + second)


async def test_dense_offsets_across_batches(backend: Backend) -> None:
    await create_topic(backend, "dense", 2)
    sizes = [1, 7, 100, 3, 250, 1]
    expected: list[Record] = []
    next_offset = 0
    for i, n in enumerate(sizes):
        recs = make_records(n, start=next_offset)
        batch = encoded(recs) if i % 2 else RecordBatch(recs)
        result = await backend.append("dense", 1, batch)
        assert (result.base_offset, result.last_offset) == (next_offset, next_offset + n - 1)
        next_offset += n
        expected.extend(recs)
    info = await backend.partition_info("dense", 1)
    assert (info.log_start_offset, info.high_watermark) == (0, next_offset)
    got = await read_all(backend, "dense", 1, 0)
    assert [r.offset for r in got] == list(range(next_offset))
    assert strip(got) == kept(backend, expected)
    # partition 0 is untouched
    assert (await backend.partition_info("dense", 0)).high_watermark == 0
    assert await backend.read("dense", 0, 0, 10, 1000) == []


async def test_empty_batch_appends_nothing(backend: Backend) -> None:
    await create_topic(backend, "empty", 1)
    await backend.append("empty", 0, RecordBatch(make_records(3)))
    await backend.append("empty", 0, RecordBatch([]))
    assert (await backend.partition_info("empty", 0)).high_watermark == 3


async def test_conditional_append(backend: Backend) -> None:
    """``expected_offset``: a wrong one fails with OFFSET_MISMATCH and stores nothing (single
    records, batches, encoded batches, empty batches, offsets behind and ahead); the right one
    appends exactly there."""
    await create_topic(backend, "cond", 2)
    first = make_records(3)
    await backend.append("cond", 0, RecordBatch(first))
    for expected in (0, 2, 4, 99):
        for batch in (
            RecordBatch(make_records(1, start=100)),
            RecordBatch(make_records(4, start=100)),
            encoded(make_records(4, start=100)),
            RecordBatch([]),
        ):
            err = await raises(
                ErrorCode.OFFSET_MISMATCH, backend.append("cond", 0, batch, expected)
            )
            assert str(expected) in err.message and "3" in err.message
    assert (await backend.partition_info("cond", 0)).high_watermark == 3
    assert strip(await read_all(backend, "cond", 0, 0)) == kept(backend, first)

    second = make_records(2, start=3)
    result = await backend.append("cond", 0, RecordBatch(second), 3)
    assert (result.partition, result.base_offset, result.last_offset) == (0, 3, 4)
    empty = await backend.append("cond", 0, RecordBatch([]), 5)
    assert (empty.base_offset, empty.last_offset) == (5, 4)
    third = make_records(3, start=5)
    result = await backend.append("cond", 0, encoded(third), 5)
    assert (result.base_offset, result.last_offset) == (5, 7)
    await raises(ErrorCode.OFFSET_MISMATCH, backend.append("cond", 0, RecordBatch(second), 3))
    stored = await read_all(backend, "cond", 0, 0)
    assert [r.offset for r in stored] == list(range(8))
    assert strip(stored) == kept(backend, first + second + third)
    # the other partition has its own next offset; numbers past int64 match nothing (JetStream
    # would read 2**64 as 0, the next offset of an empty stream)
    for expected in (8, 1 << 63, 1 << 64, (1 << 64) + 1):
        call = backend.append("cond", 1, RecordBatch(first), expected)
        await raises(ErrorCode.OFFSET_MISMATCH, call)
    result = await backend.append("cond", 1, RecordBatch(first), 0)
    assert (result.partition, result.base_offset, result.last_offset) == (1, 0, 2)


async def test_concurrent_conditional_appends(backend: Backend) -> None:
    """Writers racing for the same offsets: exactly one wins each, and every winner's record
    is at the offset it named. Then the same race with a plain writer in between: a conditional
    record is never stored anywhere but where it asked, and the log stays dense."""
    writers, offsets = 4, 12
    await create_topic(backend, "race", 2)

    async def conditional(partition: int, w: int, wins: list[tuple[int, int]]) -> None:
        e = 0
        while e < offsets:
            record = Record(None, f"c{w}:{e}".encode(), (), T0 + e)
            try:
                await backend.append("race", partition, RecordBatch([record]), e)
            except GatewayError as exc:
                assert exc.code is ErrorCode.OFFSET_MISMATCH, exc
            else:
                wins.append((w, e))
            e += 1
            await trio.sleep(0)  # let the others in between attempts (local backends)

    async def plain(partition: int, count: int) -> None:
        for i in range(count):
            await backend.append("race", partition, RecordBatch([Record(None, b"p%d" % i)]))
            await trio.sleep(0)

    # 1. conditional writers only: one winner per offset, no gaps, no duplicates
    wins: list[tuple[int, int]] = []
    async with trio.open_nursery() as nursery:
        for w in range(writers):
            nursery.start_soon(conditional, 0, w, wins)
    assert sorted(e for _, e in wins) == list(range(offsets))
    stored = await read_all(backend, "race", 0, 0)
    assert [r.offset for r in stored] == list(range(offsets))
    assert [r.value for r in stored] == [
        f"c{w}:{e}".encode() for w, e in sorted(wins, key=lambda we: we[1])
    ]

    # 2. with a plain writer as well
    wins = []
    plain_count = 5
    async with trio.open_nursery() as nursery:
        nursery.start_soon(plain, 1, plain_count)
        for w in range(writers):
            nursery.start_soon(conditional, 1, w, wins)
    taken = [e for _, e in wins]
    assert len(taken) == len(set(taken)), f"an offset won twice: {sorted(wins)}"
    stored = await read_all(backend, "race", 1, 0)
    assert [r.offset for r in stored] == list(range(len(stored)))
    assert len(stored) == len(wins) + plain_count
    at = {r.offset: r.value for r in stored}
    for w, e in wins:
        assert at[e] == f"c{w}:{e}".encode(), (w, e, at[e])
    assert sum(1 for v in at.values() if v.startswith(b"p")) == plain_count


async def test_read_from_the_middle_and_limits(backend: Backend) -> None:
    await create_topic(backend, "mid", 1)
    recs = make_records(100)
    await backend.append("mid", 0, encoded(recs[:40]))
    await backend.append("mid", 0, encoded(recs[40:]))

    batches = await backend.read("mid", 0, 17, 1_000_000, 1 << 20)
    assert batches[0].first_offset == 17
    assert strip([r for b in batches for r in b.records]) == kept(backend, recs[17:])
    assert [r.offset for b in batches for r in b.records] == list(range(17, 100))

    batches = await backend.read("mid", 0, 35, 10, 1 << 20)
    assert sum(b.count for b in batches) == 10
    assert [r.offset for b in batches for r in b.records] == list(range(35, 45))

    batches = await backend.read("mid", 0, 99, 10, 1 << 20)
    assert [r.offset for b in batches for r in b.records] == [99]

    # max_bytes is soft: at least one batch comes back, starting exactly at the offset
    batches = await backend.read("mid", 0, 5, 1_000_000, 1)
    assert batches and batches[0].first_offset == 5
    assert sum(b.count for b in batches) < 95

    assert await backend.read("mid", 0, 100, 10, 1 << 20) == []


async def test_reads_across_segment_boundaries(backend: Backend) -> None:
    # ~300 KB in 60 batches: the embedded test backend rolls segments every 16 KiB
    await create_topic(backend, "segs", 1)
    expected: list[Record] = []
    for i in range(60):
        recs = make_records(1 + i % 45, start=len(expected), size=100)
        await backend.append("segs", 0, encoded(recs) if i % 3 else RecordBatch(recs))
        expected.extend(recs)
    total = len(expected)
    for start in (0, 1, 44, 45, 46, total // 2, total - 46, total - 1):
        got = await read_all(backend, "segs", 0, start)
        assert [r.offset for r in got] == list(range(start, total))
        assert strip(got) == kept(backend, expected[start:])
    # small reads walk the whole log one window at a time
    offset, seen = 0, 0
    while offset < total:
        batches = await backend.read("segs", 0, offset, 33, 2000)
        assert batches and batches[0].first_offset == offset
        for b in batches:
            assert strip(b.records) == kept(backend, expected[b.first_offset : b.last_offset + 1])
            offset = b.last_offset + 1
            seen += b.count
    assert seen == total


async def test_offset_for_timestamp(backend: Backend) -> None:
    await create_topic(backend, "ts", 1)
    if not backend.capabilities.offset_for_timestamp:
        await raises(ErrorCode.UNSUPPORTED, backend.offset_for_timestamp("ts", 0, T0))
        return
    # timestamps T0 + 10*i, written in batches of 20, enough to span embedded segments
    recs = [Record(b"k", b"x" * 100, (), T0 + 10 * i) for i in range(400)]
    for i in range(0, 400, 20):
        await backend.append("ts", 0, encoded(recs[i : i + 20]))
    lookup = backend.offset_for_timestamp
    assert await lookup("ts", 0, 0) == 0
    assert await lookup("ts", 0, T0) == 0
    assert await lookup("ts", 0, T0 + 1) == 1
    assert await lookup("ts", 0, T0 + 10 * 123) == 123
    assert await lookup("ts", 0, T0 + 10 * 123 - 5) == 123
    assert await lookup("ts", 0, T0 + 10 * 399) == 399
    assert await lookup("ts", 0, T0 + 10 * 399 + 1) == 400  # none: the high watermark
    # out-of-order timestamps: the first offset (in log order) whose timestamp is >= the target
    late = [Record(None, b"late", (), T0 - 1000), Record(None, b"future", (), T0 + 10**9)]
    await backend.append("ts", 0, RecordBatch(late))
    assert await lookup("ts", 0, T0 + 10 * 399 + 1) == 401
    assert await lookup("ts", 0, T0 + 10**9 + 1) == 402


async def test_out_of_range(backend: Backend) -> None:
    await create_topic(backend, "oor", 1)
    await backend.append("oor", 0, RecordBatch(make_records(5)))
    await raises(ErrorCode.OFFSET_OUT_OF_RANGE, backend.read("oor", 0, 6, 10, 1000))
    await raises(ErrorCode.OFFSET_OUT_OF_RANGE, backend.read("oor", 0, -1, 10, 1000))
    assert await backend.read("oor", 0, 5, 10, 1000) == []


async def test_unknown_topic_and_partition(backend: Backend) -> None:
    batch = RecordBatch(make_records(1))
    for call in (
        lambda: backend.append("nope", 0, batch),
        lambda: backend.read("nope", 0, 0, 10, 1000),
        lambda: backend.partition_info("nope", 0),
        lambda: backend.topic("nope"),
    ):
        await raises(ErrorCode.UNKNOWN_TOPIC, call())
    await create_topic(backend, "two", 2)
    for call in (
        lambda: backend.append("two", 2, batch),
        lambda: backend.read("two", 2, 0, 10, 1000),
        lambda: backend.partition_info("two", 2),
        lambda: backend.partition_info("two", -1),
    ):
        await raises(ErrorCode.UNKNOWN_PARTITION, call())
    if backend.capabilities.offset_for_timestamp:
        await raises(ErrorCode.UNKNOWN_TOPIC, backend.offset_for_timestamp("nope", 0, T0))
        await raises(ErrorCode.UNKNOWN_PARTITION, backend.offset_for_timestamp("two", 9, T0))


# ----------------------------------------------------------------------------- topics


async def test_topic_admin(backend: Backend) -> None:
    info = await create_topic(backend, "admin-a", 3, (("subject", "a.b"),))
    assert (info.name, info.partitions) == ("admin-a", 3)
    if backend.capabilities.create_topics:
        assert info.get("subject") == "a.b"
    assert (await backend.topic("admin-a")).partitions == 3
    await create_topic(backend, "admin-b", 1)
    names = [t.name for t in await backend.list_topics()]
    assert "admin-a" in names and "admin-b" in names
    await raises(ErrorCode.TOPIC_EXISTS, backend.create_topic("admin-a", 1))
    await raises(ErrorCode.INVALID_TOPIC, backend.create_topic("bad/name", 1))
    await raises(ErrorCode.INVALID_TOPIC, backend.create_topic("", 1))
    await raises(ErrorCode.INVALID_PARTITIONS, backend.create_topic("zero", 0))

    caps = backend.capabilities
    await backend.append("admin-a", 2, RecordBatch(make_records(4)))
    deletes = caps.topic_admin if caps.delete_topics is None else caps.delete_topics
    await expect_capability(backend, deletes, lambda: backend.delete_topic("admin-b"))
    if deletes:
        await raises(ErrorCode.UNKNOWN_TOPIC, backend.topic("admin-b"))
        await raises(ErrorCode.UNKNOWN_TOPIC, backend.delete_topic("admin-b"))
        assert "admin-b" not in [t.name for t in await backend.list_topics()]
        # a re-created topic starts empty
        await create_topic(backend, "admin-b", 1)
        await backend.append("admin-b", 0, RecordBatch(make_records(2)))
        await backend.delete_topic("admin-b")
        await create_topic(backend, "admin-b", 1)
        assert (await backend.partition_info("admin-b", 0)).high_watermark == 0

    grown = await expect_capability(
        backend, caps.topic_admin, lambda: backend.create_partitions("admin-a", 2)
    )
    if grown is not None:
        assert grown.partitions == 5 and grown.get("subject") == "a.b"
        assert (await backend.topic("admin-a")).partitions == 5
        result = await backend.append("admin-a", 4, RecordBatch(make_records(3)))
        assert result.base_offset == 0
        assert (await backend.partition_info("admin-a", 2)).high_watermark == 4

    shrunk = await expect_capability(
        backend, caps.delete_partitions, lambda: backend.delete_partitions("admin-a", 3)
    )
    if shrunk is not None:
        assert shrunk.partitions == 2
        await raises(ErrorCode.UNKNOWN_PARTITION, backend.partition_info("admin-a", 2))
        await raises(ErrorCode.INVALID_PARTITIONS, backend.delete_partitions("admin-a", 2))
        regrown = await backend.create_partitions("admin-a", 1)
        assert regrown.partitions == 3
        # a partition added again starts empty
        assert (await backend.partition_info("admin-a", 2)).high_watermark == 0


# ----------------------------------------------------------------------------- kv store


async def test_kv_store(backend: Backend) -> None:
    if not backend.capabilities.kv_store:
        await raises(ErrorCode.UNSUPPORTED, backend.kv_put("ns", "k", b"v"))
        await raises(ErrorCode.UNSUPPORTED, backend.kv_get("ns", "k"))
        return
    assert await backend.kv_get("ns", "missing") is None
    await backend.kv_put("ns", "a/1", b"one")
    await backend.kv_put("ns", "a/2", b"\x00two\xff")
    await backend.kv_put("ns", "b/1", b"")
    await backend.kv_put("other", "a/1", b"other")
    await backend.kv_put("ns", "a/1", b"one again")
    assert await backend.kv_get("ns", "a/1") == b"one again"
    assert await backend.kv_get("ns", "b/1") == b""
    assert await backend.kv_get("other", "a/1") == b"other"
    assert await backend.kv_scan("ns", "a/") == [("a/1", b"one again"), ("a/2", b"\x00two\xff")]
    assert [k for k, _ in await backend.kv_scan("ns")] == ["a/1", "a/2", "b/1"]
    await backend.kv_delete("ns", "a/1")
    await backend.kv_delete("ns", "never-there")
    assert await backend.kv_get("ns", "a/1") is None
    assert await backend.kv_scan("ns", "a/") == [("a/2", b"\x00two\xff")]


# ----------------------------------------------------------------------------- retention


async def test_retention(backend: Backend) -> None:
    if not backend.capabilities.retention:
        await raises(ErrorCode.UNSUPPORTED, backend.enforce_retention())
        return
    # by size: ~30 KB kept at most, the newest data always kept
    await create_topic(backend, "ret.bytes", 1, (("retention_bytes", "30000"),))
    total = 0
    for _ in range(50):
        await backend.append("ret.bytes", 0, encoded(make_records(20, start=total)))
        total += 20
    await backend.enforce_retention()
    info = await backend.partition_info("ret.bytes", 0)
    assert info.high_watermark == total
    assert 0 < info.log_start_offset < total - 20
    await raises(
        ErrorCode.OFFSET_OUT_OF_RANGE,
        backend.read("ret.bytes", 0, info.log_start_offset - 1, 10, 1000),
    )
    got = await read_all(backend, "ret.bytes", 0, info.log_start_offset)
    assert [r.offset for r in got] == list(range(info.log_start_offset, total))
    assert await backend.offset_for_timestamp("ret.bytes", 0, 0) == info.log_start_offset

    # by age: records stamped long ago go, the newest data stays
    await create_topic(backend, "ret.age", 1, (("retention_ms", "60000"),))
    old = T0 - 10**12
    for i in range(40):
        recs = [r._replace(timestamp_us=old + i) for r in make_records(20, start=20 * i)]
        await backend.append("ret.age", 0, encoded(recs))
    await backend.enforce_retention()
    info = await backend.partition_info("ret.age", 0)
    assert info.high_watermark == 800
    assert 0 < info.log_start_offset < 800
    got = await read_all(backend, "ret.age", 0, info.log_start_offset)
    assert got[-1].offset == 799
    # and appends go on after retention
    result = await backend.append("ret.age", 0, RecordBatch(make_records(1)))
    assert result.base_offset == 800


async def test_retention_minus_one_keeps_everything(backend: Backend) -> None:
    """Kafka's -1 for either retention key (what a client sets to keep a topic whole, e.g. a
    compact topic) is accepted by every backend that has retention and deletes nothing."""
    if not backend.capabilities.retention:
        return  # test_retention checks these refuse retention
    config = (("retention_ms", "-1"), ("retention_bytes", "-1"))
    await create_topic(backend, "ret.whole", 1, config)
    old = T0 - 10**12
    for i in range(10):
        recs = [r._replace(timestamp_us=old + i) for r in make_records(20, start=20 * i)]
        await backend.append("ret.whole", 0, encoded(recs))
    await backend.enforce_retention()
    info = await backend.partition_info("ret.whole", 0)
    assert (info.log_start_offset, info.high_watermark) == (0, 200)
    got = await read_all(backend, "ret.whole", 0, 0)
    assert [r.offset for r in got] == list(range(200))


# ----------------------------------------------------------------------------- groups, restart


async def test_committed_offsets_and_data_across_restart(open_backend: Any) -> None:
    async with open_backend() as backend:
        coordinator = GroupCoordinator(lambda topic: backend, backend)
        await create_topic(backend, "restart", 2)
        await backend.append("restart", 1, encoded(make_records(30)))
        offsets = backend.capabilities.committed_offsets
        exact = backend.capabilities.exact_committed_offsets
        durable = backend.capabilities.durable
        if offsets:
            await coordinator.commit("g1", "restart", 1, 17, "meta")
            await coordinator.commit("g1", "restart", 0, 0)
            await coordinator.commit("g2", "restart", 1, 30)
            await coordinator.commit("g1", "restart", 1, 21, "newer")
            assert (await coordinator.fetch("g1", "restart", 1)).offset == 21
        else:
            await raises(ErrorCode.UNSUPPORTED, coordinator.commit("g1", "restart", 1, 17))
            await raises(ErrorCode.UNSUPPORTED, coordinator.fetch("g1", "restart", 1))
    async with open_backend() as backend:
        coordinator = GroupCoordinator(lambda topic: backend, backend)
        if durable:
            if offsets:
                committed = await coordinator.fetch("g1", "restart", 1)
                # not exact (an Iggy upstream): no metadata, and 0 (nothing read) is none
                assert (committed.offset, committed.metadata) == (21, "newer" if exact else "")
                assert (await coordinator.fetch("g2", "restart", 1)).offset == 30
                assert (await coordinator.fetch("g1", "restart", 0)).offset == (0 if exact else -1)
                assert (await coordinator.fetch("g3", "restart", 0)).offset == -1
            assert (await backend.topic("restart")).partitions == 2
            got = await read_all(backend, "restart", 1, 0)
            assert strip(got) == kept(backend, make_records(30))
            result = await backend.append("restart", 1, RecordBatch(make_records(1)))
            assert result.base_offset == 30
        else:
            if offsets:  # a non-durable backend starts empty
                assert (await coordinator.fetch("g1", "restart", 1)).offset == -1
            await raises(ErrorCode.UNKNOWN_TOPIC, backend.topic("restart"))


async def test_append_listener_is_told(backend: Backend) -> None:
    calls: list[tuple[str, int, int]] = []
    backend.append_listener = lambda topic, partition, hw: calls.append((topic, partition, hw))
    await create_topic(backend, "notify", 2)
    await backend.append("notify", 1, RecordBatch(make_records(3)))
    await backend.append("notify", 1, encoded(make_records(2)))
    await backend.append("notify", 0, RecordBatch(make_records(1)))
    if backend.capabilities.notifies_appends:
        assert calls == [("notify", 1, 3), ("notify", 1, 5), ("notify", 0, 1)]
    else:
        assert calls == []
