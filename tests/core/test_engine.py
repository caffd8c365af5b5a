"""The core engine on the memory backend: routing, partitioning, long polls, groups."""

from __future__ import annotations

import pytest
import trio

from gateway.backends.memory import MemoryBackend
from gateway.core.engine import Core
from gateway.core.partitioner import murmur2
from gateway.model import (
    CommitOffset,
    CreateTopic,
    DescribeTopic,
    ErrorCode,
    Fetch,
    FetchOffset,
    GatewayError,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    ListOffsets,
    ListTopics,
    OffsetSpec,
    Partitioning,
    Produce,
    Record,
    RecordBatch,
    SyncGroup,
)


def make_core(**kw) -> Core:
    return Core(
        {"a": MemoryBackend("a"), "b": MemoryBackend("b")},
        [("logs.*", "b"), ("*", "a")],
        **kw,
    )


def batch(*values: bytes, key: bytes | None = None) -> RecordBatch:
    return RecordBatch([Record(key, v, (), 1000 + i) for i, v in enumerate(values)])


def test_murmur2_matches_kafka_reference_values() -> None:
    # values from the Java client's UtilsTest.testMurmur2 (signed ints there)
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for data, expected in cases.items():
        assert murmur2(data) == expected & 0xFFFFFFFF, data


async def test_routes_topics_by_glob_first_match_wins() -> None:
    core = make_core()
    await core.execute(CreateTopic("logs.app", 2))
    await core.execute(CreateTopic("orders", 1))
    assert [t.name for t in await core.backends["b"].list_topics()] == ["logs.app"]
    assert [t.name for t in await core.backends["a"].list_topics()] == ["orders"]
    assert [t.name for t in await core.execute(ListTopics())] == ["logs.app", "orders"]


async def test_produce_fetch_round_trip_with_offsets() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 1))
    r1 = await core.execute(Produce("t", batch(b"a", b"b"), partition=0))
    r2 = await core.execute(Produce("t", batch(b"c"), partition=0))
    assert (r1.base_offset, r1.last_offset, r2.base_offset) == (0, 1, 2)
    res = await core.execute(Fetch("t", 0, 1))
    assert [(r.offset, r.value) for r in res.records] == [(1, b"b"), (2, b"c")]
    assert res.high_watermark == 3


async def test_produce_with_expected_offset() -> None:
    """The core hands ``expected_offset`` to the backend, refuses it without an explicit
    partition or below zero, and keeps idempotent retries answering from memory."""
    core = make_core()
    await core.execute(CreateTopic("t", 2))
    await core.execute(Produce("t", batch(b"a", b"b"), partition=0))
    err = await raises(Produce("t", batch(b"x"), partition=0, expected_offset=1), core)
    assert err.code is ErrorCode.OFFSET_MISMATCH
    r = await core.execute(Produce("t", batch(b"c"), partition=0, expected_offset=2))
    assert (r.base_offset, r.last_offset) == (2, 2)
    for cmd in (
        Produce("t", batch(b"x"), expected_offset=3),
        Produce("t", batch(b"x", key=b"k"), partitioning=Partitioning.KEY_HASH, expected_offset=3),
        Produce("t", batch(b"x"), partition=0, expected_offset=-1),
    ):
        err = await raises(cmd, core)
        assert err.code is ErrorCode.INVALID_REQUEST, err
    # idempotent: a new sequence is appended conditionally, a retry answers from memory
    idem = {"producer_id": 7, "sequence": 0}
    r = await core.execute(Produce("t", batch(b"d"), partition=0, expected_offset=3, **idem))
    assert r.base_offset == 3
    retry = await core.execute(Produce("t", batch(b"d"), partition=0, expected_offset=3, **idem))
    assert retry.appends[0].duplicate and retry.base_offset == 3
    err = await raises(
        Produce("t", batch(b"e"), partition=0, expected_offset=9, producer_id=7, sequence=1), core
    )
    assert err.code is ErrorCode.OFFSET_MISMATCH
    res = await core.execute(Fetch("t", 0, 0))
    assert [r.value for r in res.records] == [b"a", b"b", b"c", b"d"]
    assert (await core.execute(ListOffsets("t", 1))).high_watermark == 0


async def raises(cmd: Produce, core: Core) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await core.execute(cmd)
    return info.value


async def test_key_hash_partitioning_is_stable_per_key() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 4))
    records = [Record(f"k{i % 5}".encode(), b"v", (), 1) for i in range(50)]
    res = await core.execute(Produce("t", RecordBatch(records), partitioning=Partitioning.KEY_HASH))
    assert sum(a.last_offset - a.base_offset + 1 for a in res.appends) == 50
    seen: dict[bytes, int] = {}
    for p in range(4):
        for r in (await core.execute(Fetch("t", p, 0))).records:
            assert seen.setdefault(r.key, p) == p


async def test_fetch_at_log_end_waits_for_an_append() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 1))
    results = []

    async def consumer() -> None:
        results.append(await core.execute(Fetch("t", 0, 0, max_wait_ms=5000)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        await trio.testing.wait_all_tasks_blocked()
        assert results == []
        await core.execute(Produce("t", batch(b"x"), partition=0))
    assert [r.value for r in results[0].records] == [b"x"]


async def test_fetch_at_log_end_returns_empty_at_the_deadline() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 1))
    with trio.fail_after(5):
        res = await core.execute(Fetch("t", 0, 0, max_wait_ms=50))
    assert res.records == [] and res.high_watermark == 0


async def test_errors_for_unknown_topic_partition_and_range() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 1))
    for cmd, code in [
        (Fetch("nope", 0, 0), ErrorCode.UNKNOWN_TOPIC),
        (Fetch("t", 3, 0), ErrorCode.UNKNOWN_PARTITION),
        (Fetch("t", 0, 5), ErrorCode.OFFSET_OUT_OF_RANGE),
        (CreateTopic("t", 1), ErrorCode.TOPIC_EXISTS),
        (CreateTopic("bad name!", 1), ErrorCode.INVALID_TOPIC),
    ]:
        with pytest.raises(GatewayError) as info:
            await core.execute(cmd)
        assert info.value.code is code


async def test_describe_auto_creates_only_when_enabled() -> None:
    core = make_core(auto_create_topics=False)
    with pytest.raises(GatewayError):
        await core.execute(DescribeTopic("new", create=True))
    core = make_core(auto_create_topics=True, default_partitions=3)
    desc = await core.execute(DescribeTopic("new", create=True))
    assert desc.topic.partitions == 3 and len(desc.partitions) == 3


async def test_list_offsets_earliest_latest_and_by_time() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 1))
    await core.execute(Produce("t", batch(b"a", b"b", b"c"), partition=0))  # ts 1000..1002
    assert (await core.execute(ListOffsets("t", 0, OffsetSpec.EARLIEST))).offset == 0
    assert (await core.execute(ListOffsets("t", 0, OffsetSpec.LATEST))).offset == 3
    assert (await core.execute(ListOffsets("t", 0, 1001))).offset == 1
    assert (await core.execute(ListOffsets("t", 0, 5000))).offset == 3


async def test_committed_offsets_are_per_group_topic_partition() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 2))
    await core.execute(CommitOffset("g", "t", 1, 42, "meta"))
    got = await core.execute(FetchOffset("g", "t", 1))
    assert (got.offset, got.metadata) == (42, "meta")
    assert (await core.execute(FetchOffset("g", "t", 0))).offset == -1
    assert (await core.execute(FetchOffset("other", "t", 1))).offset == -1


async def test_group_membership_range_assignment_and_rebalance() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 3))
    a = await core.execute(JoinGroup("g", ("t",)))
    b = await core.execute(JoinGroup("g", ("t",)))
    assert b.generation == a.generation + 1
    with pytest.raises(GatewayError) as info:
        await core.execute(Heartbeat("g", a.member_id, a.generation))
    assert info.value.code is ErrorCode.REBALANCE_IN_PROGRESS
    sa = await core.execute(SyncGroup("g", a.member_id, b.generation))
    sb = await core.execute(SyncGroup("g", b.member_id, b.generation))
    parts = sorted(sa.assignment.partitions + sb.assignment.partitions)
    assert parts == [("t", 0), ("t", 1), ("t", 2)]
    await core.execute(LeaveGroup("g", b.member_id))
    sa = await core.execute(SyncGroup("g", a.member_id, b.generation + 1))
    assert sorted(sa.assignment.partitions) == [("t", 0), ("t", 1), ("t", 2)]


class _SlowAppends(MemoryBackend):
    """Appends that yield before storing, as a network backend's do."""

    async def append(self, *args, **kw):  # type: ignore[no-untyped-def]
        await trio.sleep(0.01)
        return await super().append(*args, **kw)


async def test_concurrent_sends_of_one_idempotent_batch_append_it_once() -> None:
    """A retry on another connection while the first send is still being appended waits for
    it and is answered as the duplicate it is."""
    core = Core({"a": _SlowAppends("a")}, [("*", "a")])
    await core.execute(CreateTopic("t", 1))
    cmd = Produce("t", batch(b"x", b"y"), partition=0, producer_id=7, sequence=0)
    results = []

    async def send() -> None:
        results.append(await core.execute(cmd))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(send)
    assert sorted(r.appends[0].duplicate for r in results) == [False, True, True]
    assert {(r.base_offset, r.last_offset) for r in results} == {(0, 1)}
    assert (await core.execute(ListOffsets("t", 0))).high_watermark == 2
    assert core.producers._locks == {}


async def test_producer_states_are_bounded_least_recently_used_forgotten() -> None:
    """``max_producer_states``: a third producer on a core that keeps two forgets the one that
    wrote least recently (counted as a budget hit); the others' retries are still duplicates."""
    from gateway.observability import LIMIT_HITS

    core = Core({"a": MemoryBackend("a")}, [("*", "a")], max_producer_states=2)
    await core.execute(CreateTopic("t", 1))
    hits = LIMIT_HITS.labels("max_producer_states", "server")
    before = hits._value.get()

    def send(pid: int, seq: int) -> Produce:
        return Produce("t", batch(b"r"), partition=0, producer_id=pid, sequence=seq)

    await core.execute(send(1, 0))
    await core.execute(send(2, 0))
    await core.execute(send(1, 1))  # producer 1 is now the most recent, 2 the least
    await core.execute(send(3, 0))  # forgets producer 2
    assert hits._value.get() == before + 1
    assert len(core.producers._state) == 2
    assert (await core.execute(send(1, 1))).appends[0].duplicate
    assert (await core.execute(send(3, 0))).appends[0].duplicate
    forgotten = await core.execute(send(2, 0))  # taken as new: stored again
    assert not forgotten.appends[0].duplicate
    assert (await core.execute(ListOffsets("t", 0))).high_watermark == 5
