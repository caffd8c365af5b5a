"""The classic group APIs through the dispatcher, versions old and new, flexible and not:
FindCoordinator, JoinGroup (MEMBER_ID_REQUIRED from v4, static members from v5), SyncGroup,
Heartbeat, LeaveGroup (batched from v3), and the consumer-protocol reading behind them."""

from __future__ import annotations

import datetime
import struct

import pytest
import trio
from kio.schema.errors import ErrorCode as K

from gateway.protocols.kafka.groups import assigned_partitions, subscribed_topics
from tests.protocols.kafka.kio_calls import call, make_context, sub

SESSION = datetime.timedelta(seconds=10)
REBALANCE = datetime.timedelta(seconds=20)


def subscription(*topics: str, version: int = 0) -> bytes:
    """ConsumerProtocolSubscription v0/v1 as clients write it."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)  # no user data
    if version >= 1:
        out += struct.pack(">i", 0)  # no owned partitions
    return out


def assignment(topic: str, *partitions: int) -> bytes:
    out = struct.pack(">hih", 0, 1, len(topic)) + topic.encode()
    out += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    return out + struct.pack(">i", -1)


def protocols(version: int, *topics: str) -> tuple:
    data = subscription(*topics)
    return (sub(11, version, "JoinGroupRequestProtocol", name="range", metadata=data),)


async def join(ctx, version: int, member_id: str = "", **kw):
    fields = dict(
        group_id="g",
        session_timeout=SESSION,
        rebalance_timeout=REBALANCE,
        member_id=member_id,
        protocol_type="consumer",
        protocols=protocols(version, "t"),
    )
    fields.update(kw)
    return await call(ctx, 11, version, **fields)


def test_consumer_protocol_reading() -> None:
    assert subscribed_topics("consumer", (("range", subscription("b", "a", version=1)),)) == (
        "a",
        "b",
    )
    assert subscribed_topics("connect", (("x", subscription("a")),)) == ()
    assert subscribed_topics("consumer", (("range", b"\x00"),)) == ()  # opaque: not read
    assert assigned_partitions("consumer", assignment("t", 2, 0)) == (("t", 0), ("t", 2))
    assert assigned_partitions("consumer", b"junk") == ()


@pytest.mark.parametrize("version", [1, 3, 4, 5])
async def test_find_coordinator_names_this_listener(version: int) -> None:
    ctx = make_context()
    if version >= 4:
        answer = await call(ctx, 10, version, key_type=0, coordinator_keys=("g1", "g2"))
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in answer.coordinators] == [
            ("g1", 0, "gw.example", 9092, K.none),
            ("g2", 0, "gw.example", 9092, K.none),
        ]
        refused = await call(ctx, 10, version, key_type=1, coordinator_keys=("tx",))
        assert refused.coordinators[0].error_code == K.invalid_request  # no transactions here
    else:
        answer = await call(ctx, 10, version, key="g", key_type=0)
        assert (answer.error_code, answer.node_id, answer.host, answer.port) == (
            K.none,
            0,
            "gw.example",
            9092,
        )


async def test_join_v0_and_sync_heartbeat_leave_old_versions() -> None:
    ctx = make_context()
    joined = await join(ctx, 0)  # no MEMBER_ID_REQUIRED before v4
    assert joined.error_code == K.none and joined.generation_id == 1
    me = joined.member_id
    assert joined.leader == me and joined.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in joined.members] == [(me, subscription("t"))]
    plan = (sub(14, 0, "SyncGroupRequestAssignment", member_id=me, assignment=assignment("t", 0)),)
    synced = await call(ctx, 14, 0, group_id="g", generation_id=1, member_id=me, assignments=plan)
    assert synced.error_code == K.none and synced.assignment == assignment("t", 0)
    beat = await call(ctx, 12, 0, group_id="g", generation_id=1, member_id=me)
    assert beat.error_code == K.none
    stale = await call(ctx, 12, 0, group_id="g", generation_id=0, member_id=me)
    assert stale.error_code == K.illegal_generation
    unknown = await call(ctx, 12, 0, group_id="g", generation_id=1, member_id="nobody")
    assert unknown.error_code == K.unknown_member_id
    left = await call(ctx, 13, 0, group_id="g", member_id=me)
    assert left.error_code == K.none
    again = await call(ctx, 13, 0, group_id="g", member_id=me)
    assert again.error_code == K.unknown_member_id
    # the group's assignment, as gateway groups shows it, came from the leader's bytes
    assert ctx.core.classic.get("g") is None  # forgotten once empty


@pytest.mark.parametrize("version", [4, 7, 9])
async def test_join_member_id_required_then_a_rebalance_with_two(version: int) -> None:
    ctx = make_context()
    first = await join(ctx, version)
    assert first.error_code == K.member_id_required and first.member_id
    a = first.member_id
    joined = await join(ctx, version, a)
    assert joined.error_code == K.none and joined.leader == a and joined.generation_id == 1
    if version >= 7:
        assert joined.protocol_type == "consumer"
    sync_version = min(version - 4, 5)
    plan = (sub(14, sync_version, "SyncGroupRequestAssignment", member_id=a, assignment=b"A"),)
    await call(ctx, 14, sync_version, group_id="g", generation_id=1, member_id=a, assignments=plan,
               protocol_type="consumer", protocol_name="range")  # fmt: skip
    b = (await join(ctx, version)).member_id
    answers = {}

    async def join_b() -> None:
        answers["b"] = await join(ctx, version, b)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join_b)
        await trio.testing.wait_all_tasks_blocked()
        beat = await call(ctx, 12, min(version - 4, 4), group_id="g", generation_id=1, member_id=a)
        assert beat.error_code == K.rebalance_in_progress
        answers["a"] = await join(ctx, version, a)
    assert answers["a"].generation_id == answers["b"].generation_id == 2
    assert {m.member_id for m in answers["a"].members} == {a, b}
    assert answers["b"].members == ()


async def test_static_member_rejoins_with_a_new_id_and_the_old_one_is_fenced() -> None:
    ctx = make_context()
    joined = await join(ctx, 5, group_instance_id="host-1")
    assert joined.error_code == K.none  # static members skip MEMBER_ID_REQUIRED
    old = joined.member_id
    plan = (sub(14, 3, "SyncGroupRequestAssignment", member_id=old, assignment=b"x"),)
    await call(ctx, 14, 3, group_id="g", generation_id=1, member_id=old,
               group_instance_id="host-1", assignments=plan)  # fmt: skip
    back = await join(ctx, 5, group_instance_id="host-1")
    assert back.error_code == K.none and back.member_id != old
    fenced = await call(ctx, 12, 3, group_id="g", generation_id=back.generation_id,
                        member_id=old, group_instance_id="host-1")  # fmt: skip
    assert fenced.error_code == K.fenced_instance_id
    member = sub(13, 5, "MemberIdentity", member_id="", group_instance_id="host-1", reason="bye")
    left = await call(ctx, 13, 5, group_id="g", members=(member,))
    assert left.error_code == K.none and left.members[0].error_code == K.none


async def test_leave_v3_answers_per_member() -> None:
    ctx = make_context()
    a = (await join(ctx, 3)).member_id
    members = (
        sub(13, 3, "MemberIdentity", member_id=a, group_instance_id=None),
        sub(13, 3, "MemberIdentity", member_id="ghost", group_instance_id=None),
    )
    left = await call(ctx, 13, 3, group_id="g", members=members)
    assert [(m.member_id, m.error_code) for m in left.members] == [
        (a, K.none),
        ("ghost", K.unknown_member_id),
    ]


async def test_join_refusals() -> None:
    ctx = make_context()
    short = await join(ctx, 5, session_timeout=datetime.timedelta(seconds=1))
    assert short.error_code == K.invalid_session_timeout
    nameless = await join(ctx, 5, group_id="")
    assert nameless.error_code == K.invalid_group_id
    await join(ctx, 3)
    other = sub(11, 3, "JoinGroupRequestProtocol", name="roundrobin", metadata=b"")
    clash = await join(ctx, 3, protocols=(other,))
    assert clash.error_code == K.inconsistent_group_protocol


async def test_the_group_budget_answers_group_max_size_reached() -> None:
    from gateway.backends.memory import MemoryBackend
    from gateway.core.engine import Core

    core = Core({"a": MemoryBackend("a")}, [("*", "a")], max_group_members=1)
    ctx = make_context(core)
    assert (await join(ctx, 3)).error_code == K.none
    assert (await join(ctx, 3)).error_code == K.group_max_size_reached
