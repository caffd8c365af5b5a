"""OffsetCommit v2-v9 and OffsetFetch v2-v9 through the dispatcher: the gateway's one offset
store (what a Cursus or Kafka 0.8 consumer of the group reads), generation fencing of members,
simple commits refused while the group has members, partitions that do not exist, all-topics
fetches (null topics) and the v8+ batch by group."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as K

from gateway.model import CommitOffset, CreateTopic, FetchOffset
from tests.protocols.kafka.kio_calls import call, make_context, sub
from tests.protocols.kafka.test_groups import join

UNKNOWN_TP = K.unknown_topic_or_partition


def commit_topics(version: int, topic: str, *pairs: tuple[int, int], metadata: str = "m"):
    parts = tuple(
        sub(
            8,
            version,
            "OffsetCommitRequestPartition",
            partition_index=p,
            committed_offset=o,
            committed_leader_epoch=-1,
            committed_metadata=metadata,
        )  # fmt: skip
        for p, o in pairs
    )
    return (sub(8, version, "OffsetCommitRequestTopic", name=topic, partitions=parts),)


async def commit(
    ctx, version: int, group: str, topics, generation: int = -1, member: str = "", instance=None
):
    return await call(
        ctx,
        8,
        version,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=instance,
        topics=topics,
    )


def codes(answer) -> list[tuple[str, int, K]]:
    return [(t.name, p.partition_index, p.error_code) for t in answer.topics for p in t.partitions]


@pytest.mark.parametrize(("commit_v", "fetch_v"), [(2, 2), (5, 5), (8, 7), (9, 7)])
async def test_simple_commit_is_the_one_store_and_fetches_back(commit_v: int, fetch_v: int) -> None:
    ctx = make_context()
    await ctx.core.execute(CreateTopic("t", 2))
    answer = await commit(ctx, commit_v, "g", commit_topics(commit_v, "t", (0, 5), (1, 7)))
    assert codes(answer) == [("t", 0, K.none), ("t", 1, K.none)]
    # what any other protocol's consumer of group g reads
    assert (await ctx.core.execute(FetchOffset("g", "t", 1))).offset == 7
    await ctx.core.execute(CommitOffset("g", "u", 0, 3))  # a commit from another protocol
    asked = (sub(9, fetch_v, "OffsetFetchRequestTopic", name="t", partition_indexes=(0, 1, 2)),)
    fetched = await call(ctx, 9, fetch_v, group_id="g", topics=asked, require_stable=False)
    assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
            for p in fetched.topics[0].partitions] == [
        (0, 5, "m", K.none), (1, 7, "m", K.none), (2, -1, "", K.none)]  # fmt: skip
    everything = await call(ctx, 9, fetch_v, group_id="g", topics=None, require_stable=False)
    assert {(t.name, p.partition_index, p.committed_offset) for t in everything.topics
            for p in t.partitions} == {("t", 0, 5), ("t", 1, 7), ("u", 0, 3)}  # fmt: skip


async def test_offset_fetch_v8_batches_groups() -> None:
    ctx = make_context()
    await ctx.core.execute(CommitOffset("g1", "t", 0, 4))
    await ctx.core.execute(CommitOffset("g2", "t", 0, 9))
    topics = (sub(9, 8, "OffsetFetchRequestTopics", name="t", partition_indexes=(0,)),)
    groups = (
        sub(9, 8, "OffsetFetchRequestGroup", group_id="g1", topics=topics),
        sub(9, 8, "OffsetFetchRequestGroup", group_id="g2", topics=None),
    )
    answer = await call(ctx, 9, 8, groups=groups, require_stable=False)
    assert [(g.group_id, g.topics[0].partitions[0].committed_offset) for g in answer.groups] == [
        ("g1", 4),
        ("g2", 9),
    ]


async def test_member_commits_are_fenced_and_metadata_is_bounded() -> None:
    ctx = make_context()
    await ctx.core.execute(CreateTopic("t", 1))
    joined = await join(ctx, 3)
    me = joined.member_id
    plan = (sub(14, 3, "SyncGroupRequestAssignment", member_id=me, assignment=b""),)
    await call(ctx, 14, 3, group_id="g", generation_id=1, member_id=me, assignments=plan)
    ok = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 1)), 1, me)
    assert codes(ok) == [("t", 0, K.none)]
    stale = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 2)), 0, me)
    assert codes(stale) == [("t", 0, K.illegal_generation)]
    stranger = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 2)), 1, "x")
    assert codes(stranger) == [("t", 0, K.unknown_member_id)]
    big = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 2), metadata="x" * 4097), 1, me)
    assert codes(big) == [("t", 0, K.offset_metadata_too_large)]
    assert (await ctx.core.execute(FetchOffset("g", "t", 0))).offset == 1


async def test_simple_commit_into_a_group_with_members_is_unknown_member() -> None:
    ctx = make_context()
    await ctx.core.execute(CreateTopic("t", 2))
    me = (await join(ctx, 3)).member_id
    plan = (sub(14, 3, "SyncGroupRequestAssignment", member_id=me, assignment=b""),)
    await call(ctx, 14, 3, group_id="g", generation_id=1, member_id=me, assignments=plan)
    topics = commit_topics(7, "t", (0, 5), (1, 5)) + commit_topics(7, "nope", (0, 5))
    refused = await commit(ctx, 7, "g", topics)
    # every partition the group would take is refused; a missing topic is missing first
    assert codes(refused) == [
        ("t", 0, K.unknown_member_id), ("t", 1, K.unknown_member_id), ("nope", 0, UNKNOWN_TP)
    ]  # fmt: skip
    big = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 5), metadata="x" * 5000))
    assert codes(big) == [("t", 0, K.unknown_member_id)]  # the group answers first
    assert (await ctx.core.execute(FetchOffset("g", "t", 0))).offset == -1
    # a group without members takes it; so does g from another protocol (a Cursus or 0.8
    # consumer commits through the core as ever)
    free = await commit(ctx, 7, "free", commit_topics(7, "t", (0, 5)))
    assert codes(free) == [("t", 0, K.none)]
    await ctx.core.execute(CommitOffset("g", "t", 1, 4))
    assert (await ctx.core.execute(FetchOffset("g", "t", 1))).offset == 4
    # the member's own commit still goes in
    mine = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 2)), 1, me)
    assert codes(mine) == [("t", 0, K.none)]
    # once the last member has left, the group is empty and takes simple commits again
    left = await call(ctx, 13, 1, group_id="g", member_id=me)
    assert left.error_code == K.none
    again = await commit(ctx, 2, "g", commit_topics(2, "t", (0, 6), (1, 6)))
    assert codes(again) == [("t", 0, K.none), ("t", 1, K.none)]
    assert (await ctx.core.execute(FetchOffset("g", "t", 0))).offset == 6


async def test_commit_for_a_missing_topic_or_partition_stores_nothing() -> None:
    ctx = make_context()
    await ctx.core.execute(CreateTopic("t", 2))
    lookups: list[str] = []
    looked_up = ctx.core.topic

    async def counted(name: str, create: bool = False):
        lookups.append(name)
        return await looked_up(name, create)

    ctx.core.topic = counted  # type: ignore[method-assign]
    topics = (
        commit_topics(5, "t", (0, 3), (2, 3), (-1, 3))
        + commit_topics(5, "nope", (0, 3), (1, 3))
        + commit_topics(5, "t", (1, 4))
    )
    answer = await commit(ctx, 5, "g", topics)
    assert codes(answer) == [
        ("t", 0, K.none), ("t", 2, UNKNOWN_TP), ("t", -1, UNKNOWN_TP),
        ("nope", 0, UNKNOWN_TP), ("nope", 1, UNKNOWN_TP), ("t", 1, K.none),
    ]  # fmt: skip
    assert sorted(lookups) == ["nope", "t"]  # one lookup per topic, not per partition
    stored = [(t, p, o.offset) for t, p, o in await ctx.core.groups.committed("g")]
    assert stored == [("t", 0, 3), ("t", 1, 4)]


async def test_a_member_id_makes_a_members_commit_whatever_its_generation() -> None:
    ctx = make_context()
    await ctx.core.execute(CreateTopic("t", 1))
    me = (await join(ctx, 3)).member_id
    plan = (sub(14, 3, "SyncGroupRequestAssignment", member_id=me, assignment=b""),)
    await call(ctx, 14, 3, group_id="g", generation_id=1, member_id=me, assignments=plan)
    topics = commit_topics(7, "t", (0, 5)) + commit_topics(7, "nope", (0, 5))
    # a known member without its generation: ILLEGAL_GENERATION (a missing topic first)
    known = await commit(ctx, 7, "g", topics, -1, me)
    assert codes(known) == [("t", 0, K.illegal_generation), ("nope", 0, UNKNOWN_TP)]
    stranger = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 5)), -1, "x")
    assert codes(stranger) == [("t", 0, K.unknown_member_id)]
    # a generation without a member id is not a member's
    nobody = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 5)), 1, "")
    assert codes(nobody) == [("t", 0, K.unknown_member_id)]
    # a static instance id alone makes it a member's commit too
    static = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 5)), -1, "", "i1")
    assert codes(static) == [("t", 0, K.unknown_member_id)]
    # into an empty or unknown group a member id is unknown: nothing stored there either
    for group in ("g", "fresh"):
        if group == "g":
            assert (await call(ctx, 13, 1, group_id="g", member_id=me)).error_code == K.none
        answer = await commit(ctx, 7, group, commit_topics(7, "t", (0, 5)), -1, "x")
        assert codes(answer) == [("t", 0, K.unknown_member_id)]
        assert (await ctx.core.execute(FetchOffset(group, "t", 0))).offset == -1
    # a simple commit (no member id, no instance) into the empty group still goes in
    simple = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 5)))
    assert codes(simple) == [("t", 0, K.none)]


async def test_a_members_commit_into_a_group_that_does_not_exist_is_illegal_generation() -> None:
    ctx = make_context()
    await ctx.core.execute(CreateTopic("t", 1))
    topics = commit_topics(7, "t", (0, 5)) + commit_topics(7, "nope", (0, 5))
    answer = await commit(ctx, 7, "never", topics, 3, "m-1")
    assert codes(answer) == [("t", 0, K.illegal_generation), ("nope", 0, UNKNOWN_TP)]
    assert (await ctx.core.execute(FetchOffset("never", "t", 0))).offset == -1
    # a group that exists without members: one of simple consumers (committed offsets) ...
    await commit(ctx, 7, "simple", commit_topics(7, "t", (0, 1)))
    answer = await commit(ctx, 7, "simple", commit_topics(7, "t", (0, 5)), 3, "m-1")
    assert codes(answer) == [("t", 0, K.unknown_member_id)]
    # ... and one whose members all left (its snapshot remains, no offsets committed)
    me = (await join(ctx, 3)).member_id
    assert (await call(ctx, 13, 1, group_id="g", member_id=me)).error_code == K.none
    assert ctx.core.classic.get("g") is None and await ctx.core.groups.stored("g") is not None
    answer = await commit(ctx, 7, "g", commit_topics(7, "t", (0, 5)), 1, me)
    assert codes(answer) == [("t", 0, K.unknown_member_id)]
    assert (await ctx.core.execute(FetchOffset("g", "t", 0))).offset == -1
