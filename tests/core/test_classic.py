"""Client-assigned groups (Kafka's classic protocol) on an in-memory Core: rounds, the leader's
assignment, MEMBER_ID_REQUIRED, static members, fencing, timeouts, budgets."""

from __future__ import annotations

import pytest
import trio

from gateway.backends.memory import MemoryBackend
from gateway.core.engine import Core
from gateway.model import (
    CommitOffset,
    CreateTopic,
    DescribeGroup,
    ErrorCode,
    FetchOffset,
    GatewayError,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    MemberIdRequired,
    SyncGroup,
)
from gateway.observability import GROUP_MEMBERS, LIMIT_HITS


def make_core(**kw) -> Core:
    return Core({"a": MemoryBackend("a")}, [("*", "a")], **kw)


def join_cmd(member: str = "", protocols=(("range", b"m"),), **kw) -> JoinGroup:
    kw.setdefault("session_timeout_ms", 10_000)
    kw.setdefault("rebalance_timeout_ms", 20_000)
    return JoinGroup(
        "g", ("t",), member, protocols=protocols, protocol_type="consumer", client_id="c", **kw
    )


async def fails(core: Core, cmd: object, code: ErrorCode) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await core.execute(cmd)
    assert info.value.code is code, info.value
    return info.value


async def new_member(core: Core, **kw) -> str:
    """The MEMBER_ID_REQUIRED step of a v4+ client."""
    with pytest.raises(MemberIdRequired) as info:
        await core.execute(join_cmd(require_member_id=True, **kw))
    return info.value.member_id


async def test_one_member_leads_and_gets_its_own_assignment() -> None:
    core = make_core()
    mid = await new_member(core)
    joined = await core.execute(join_cmd(mid, require_member_id=True))
    assert (joined.member_id, joined.generation, joined.leader_id) == (mid, 1, mid)
    assert joined.protocol == "range"
    assert joined.member_metadata == ((mid, None, b"m"),)
    synced = await core.execute(SyncGroup("g", mid, 1, ((mid, b"A", (("t", 0),)),)))
    assert synced.data == b"A" and synced.assignment.partitions == (("t", 0),)
    await core.execute(Heartbeat("g", mid, 1))
    desc = await core.execute(DescribeGroup("g"))
    assert desc.state == "stable" and desc.members[0].partitions == (("t", 0),)


async def test_a_second_member_starts_a_round_both_join_the_leader_assigns() -> None:
    core = make_core()
    a = (await core.execute(join_cmd())).member_id
    await core.execute(SyncGroup("g", a, 1, ((a, b"all", ()),)))
    answers: dict[str, JoinGroupResult] = {}

    async def join_b() -> None:
        answers["b"] = await core.execute(join_cmd(protocols=(("range", b"mb"),)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join_b)
        await trio.testing.wait_all_tasks_blocked()
        assert "b" not in answers  # waits for a to join again
        await fails(core, Heartbeat("g", a, 1), ErrorCode.REBALANCE_IN_PROGRESS)
        await fails(core, SyncGroup("g", a, 1), ErrorCode.REBALANCE_IN_PROGRESS)
        # while the members join again, the current generation may still commit
        await core.execute(CommitOffset("g", "t", 0, 5, "", 1, a))
        answers["a"] = await core.execute(join_cmd(a))
    b = answers["b"].member_id
    assert answers["a"].generation == answers["b"].generation == 2
    assert answers["a"].leader_id == answers["b"].leader_id == a  # the leader stays
    assert set(answers["a"].member_metadata) == {(a, None, b"m"), (b, None, b"mb")}
    assert answers["b"].member_metadata == ()  # only the leader gets them
    synced = {}

    async def sync_b() -> None:
        synced["b"] = await core.execute(SyncGroup("g", b, 2))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sync_b)
        await trio.testing.wait_all_tasks_blocked()
        assert "b" not in synced  # a follower waits for the leader's assignment
        commit = CommitOffset("g", "t", 0, 6, "", 2, b)
        await fails(core, commit, ErrorCode.REBALANCE_IN_PROGRESS)  # until it has come
        # Kafka's order: a wrong generation is ILLEGAL_GENERATION even now
        old = CommitOffset("g", "t", 0, 6, "", 1, b)
        await fails(core, old, ErrorCode.ILLEGAL_GENERATION)
        await fails(core, SyncGroup("g", a, 1), ErrorCode.ILLEGAL_GENERATION)
        plan = ((a, b"half-a", (("t", 0),)), (b, b"half-b", (("t", 1),)))
        synced["a"] = await core.execute(SyncGroup("g", a, 2, plan))
    assert (synced["a"].data, synced["b"].data) == (b"half-a", b"half-b")
    await core.execute(Heartbeat("g", b, 2))
    await fails(core, Heartbeat("g", b, 1), ErrorCode.ILLEGAL_GENERATION)
    await fails(core, Heartbeat("g", "nobody", 2), ErrorCode.UNKNOWN_MEMBER)


async def test_an_unchanged_follower_rejoining_gets_the_current_generation() -> None:
    core = make_core()
    a = (await core.execute(join_cmd())).member_id
    await core.execute(SyncGroup("g", a, 1, ((a, b"x", ()),)))
    again = await core.execute(join_cmd(a))  # the leader joining again starts a round
    assert again.generation == 2
    await core.execute(SyncGroup("g", a, 2, ((a, b"x", ()),)))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(core.execute, join_cmd())
        await trio.testing.wait_all_tasks_blocked()
        await core.execute(join_cmd(a))
    b = [m for m in (await core.execute(DescribeGroup("g"))).members if m.member_id != a][0]
    rejoin = await core.execute(join_cmd(b.member_id))
    assert rejoin.generation == 3  # no new round: metadata unchanged, not the leader


async def test_a_simple_commit_is_for_groups_without_members() -> None:
    """check_simple_commit (the Kafka listener's, for commits without a member id and
    generation): UNKNOWN_MEMBER while the group has members, fine once it has none."""
    core = make_core()
    core.classic.check_simple_commit("g")  # a group nobody used
    a = (await core.execute(join_cmd())).member_id
    with pytest.raises(GatewayError) as info:
        core.classic.check_simple_commit("g")
    assert info.value.code is ErrorCode.UNKNOWN_MEMBER and "1 members" in info.value.message
    await core.execute(LeaveGroup("g", a))
    core.classic.check_simple_commit("g")  # empty again


async def test_leave_starts_a_round_for_the_others_and_the_last_leave_empties() -> None:
    core = make_core()
    a = (await core.execute(join_cmd())).member_id
    async with trio.open_nursery() as nursery:
        nursery.start_soon(core.execute, join_cmd())
        await trio.testing.wait_all_tasks_blocked()
        await core.execute(join_cmd(a))
    b = next(m for m in core.classic.groups["g"].members if m != a)
    await core.execute(LeaveGroup("g", a))
    await fails(core, Heartbeat("g", b, 2), ErrorCode.REBALANCE_IN_PROGRESS)
    alone = await core.execute(join_cmd(b))
    assert (alone.generation, alone.leader_id) == (3, b)
    await fails(core, LeaveGroup("g", a), ErrorCode.UNKNOWN_MEMBER)
    await core.execute(LeaveGroup("g", b))
    assert not core.classic.has("g")  # forgotten once empty
    again = await core.execute(join_cmd())
    assert again.generation == 5  # the numbering continues from the snapshot (3, empty 4)


async def test_a_member_that_does_not_join_again_is_dropped_at_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    core = make_core()
    a = (await core.execute(join_cmd(session_timeout_ms=60_000))).member_id
    await core.execute(SyncGroup("g", a, 1, ((a, b"x", ()),)))
    started = trio.current_time()
    b = await core.execute(join_cmd(session_timeout_ms=60_000, rebalance_timeout_ms=5_000))
    # a never joined again: dropped at the round's deadline (the largest rebalance timeout)
    assert trio.current_time() - started == pytest.approx(20, abs=0.1)
    assert (b.generation, b.leader_id, b.members) == (2, b.member_id, (b.member_id,))
    await fails(core, Heartbeat("g", a, 1), ErrorCode.UNKNOWN_MEMBER)


async def test_a_silent_member_expires_after_its_session_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    core = make_core()
    a = (await core.execute(join_cmd(session_timeout_ms=3_000))).member_id
    await core.execute(SyncGroup("g", a, 1, ((a, b"x", ()),)))
    await trio.sleep(2)
    await core.execute(Heartbeat("g", a, 1))
    await trio.sleep(3.5)
    assert (await core.execute(DescribeGroup("g"))).members == ()
    await fails(core, Heartbeat("g", a, 1), ErrorCode.UNKNOWN_MEMBER)


async def test_a_follower_waiting_for_a_dead_leader_is_told_to_rejoin(
    autojump_clock: trio.testing.MockClock,
) -> None:
    core = make_core()
    a = (await core.execute(join_cmd(session_timeout_ms=3_000))).member_id
    await core.execute(SyncGroup("g", a, 1, ((a, b"x", ()),)))
    got: dict[str, JoinGroupResult] = {}

    async def join_b() -> None:
        got["b"] = await core.execute(join_cmd(session_timeout_ms=60_000))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join_b)
        await trio.testing.wait_all_tasks_blocked()
        await core.execute(join_cmd(a, session_timeout_ms=3_000))
    assert got["b"].leader_id == a
    # a (the leader) never syncs: b's sync ends when a's session runs out
    await fails(core, SyncGroup("g", got["b"].member_id, 2), ErrorCode.REBALANCE_IN_PROGRESS)


async def test_member_id_required_ids_count_against_the_budget_and_lapse(
    autojump_clock: trio.testing.MockClock,
) -> None:
    core = make_core(max_group_members=2)
    await new_member(core)
    await new_member(core)
    await fails(core, join_cmd(require_member_id=True), ErrorCode.INVALID_REQUEST)
    await trio.sleep(11)  # the ids handed out lapse after the session timeout
    assert await new_member(core)


async def test_kafka_groups_are_bounded_and_silent_ones_are_forgotten(
    autojump_clock: trio.testing.MockClock,
) -> None:
    core = make_core(max_kafka_groups=2)
    hits = LIMIT_HITS.labels("max_kafka_groups", "server")._value.get()
    for name in ("g1", "g2"):
        await core.execute(JoinGroup(name, ("t",), protocols=(("range", b""),),
                                     session_timeout_ms=6_000))  # fmt: skip
    third = JoinGroup("g3", ("t",), protocols=(("range", b""),))
    error = await fails(core, third, ErrorCode.INVALID_REQUEST)
    assert "server.max_kafka_groups" in error.message
    assert LIMIT_HITS.labels("max_kafka_groups", "server")._value.get() == hits + 1
    await trio.sleep(7)  # g1 and g2 went silent: the next new group sweeps them away
    assert (await core.execute(third)).generation == 1
    assert core.classic.names() == ["g3"]
    # the forgotten groups' metric series went with them
    series = {s.labels.get("group") for m in GROUP_MEMBERS.collect() for s in m.samples}
    assert "g3" in series and not {"g1", "g2"} & series


async def test_unknown_member_id_is_refused() -> None:
    core = make_core()
    await fails(core, join_cmd("ghost"), ErrorCode.UNKNOWN_MEMBER)


async def test_static_member_rejoins_under_a_new_id_without_a_rebalance() -> None:
    core = make_core()
    first = await core.execute(join_cmd(instance_id="i1"))
    a = first.member_id
    await core.execute(SyncGroup("g", a, 1, ((a, b"x", ()),), instance_id="i1"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(core.execute, join_cmd(instance_id="i2"))
        await trio.testing.wait_all_tasks_blocked()
        await core.execute(join_cmd(a, instance_id="i1"))
    group = core.classic.groups["g"]
    b = group.instances["i2"]
    plan = ((a, b"pa", ()), (b, b"pb", ()))
    await core.execute(SyncGroup("g", a, 2, plan, instance_id="i1"))
    # i2 restarts: a new member id, same generation, its old id fenced
    back = await core.execute(join_cmd(instance_id="i2"))
    assert back.generation == 2 and back.member_id != b
    synced = await core.execute(SyncGroup("g", back.member_id, 2, instance_id="i2"))
    assert synced.data == b"pb"
    await fails(core, Heartbeat("g", b, 2, "i2"), ErrorCode.FENCED_INSTANCE_ID)
    await core.execute(LeaveGroup("g", "", "i2"))
    await fails(core, Heartbeat("g", a, 2, "i1"), ErrorCode.REBALANCE_IN_PROGRESS)


async def test_protocols_must_agree_and_kinds_do_not_mix() -> None:
    core = make_core()
    a = await core.execute(join_cmd(protocols=(("range", b""), ("roundrobin", b""))))
    assert a.protocol == "range"
    await fails(core, join_cmd(protocols=(("sticky", b""),)), ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    # a member of the other kind (server-side assignment) is refused, and the reverse
    await fails(core, JoinGroup("g", ("t",)), ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    await core.execute(JoinGroup("h", ("t",)))
    cmd = JoinGroup("h", ("t",), protocols=(("range", b""),), protocol_type="consumer")
    await fails(core, cmd, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)


async def test_the_protocol_most_members_prefer_wins() -> None:
    core = make_core()
    a = (await core.execute(join_cmd(protocols=(("range", b""), ("rr", b""))))).member_id
    await core.execute(SyncGroup("g", a, 1, ()))
    got = {}

    async def join(key: str) -> None:
        got[key] = await core.execute(join_cmd(protocols=(("rr", b""), ("range", b""))))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join, "b")
        nursery.start_soon(join, "c")
        await trio.testing.wait_all_tasks_blocked()
        got["a"] = await core.execute(join_cmd(a, protocols=(("range", b""), ("rr", b""))))
    assert {r.protocol for r in got.values()} == {"rr"}


async def test_commits_are_fenced_by_generation_and_shared_with_every_protocol() -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 2))
    a = (await core.execute(join_cmd())).member_id
    await core.execute(SyncGroup("g", a, 1, ((a, b"", (("t", 0), ("t", 1))),)))
    await core.execute(CommitOffset("g", "t", 0, 7, "", 1, a))
    await fails(core, CommitOffset("g", "t", 0, 9, "", 0, a), ErrorCode.ILLEGAL_GENERATION)
    await fails(core, CommitOffset("g", "t", 0, 9, "", 1, "x"), ErrorCode.UNKNOWN_MEMBER)
    # the one store: what any protocol's consumer of group g reads
    assert (await core.execute(FetchOffset("g", "t", 0))).offset == 7
