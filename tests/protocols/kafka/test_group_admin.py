"""DescribeGroups, ListGroups and DeleteGroups through the dispatcher: Kafka groups with their
members' metadata and assignments, groups of other protocols, groups known only by their
committed offsets, and the names nobody used."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode as K

from gateway.model import CommitOffset, JoinGroup
from tests.protocols.kafka.kio_calls import call, make_context, sub
from tests.protocols.kafka.test_groups import assignment, join, subscription


@pytest.mark.parametrize("version", [0, 3, 5])
async def test_describe_groups(version: int) -> None:
    ctx = make_context()
    me = (await join(ctx, 3)).member_id
    plan = (sub(14, 3, "SyncGroupRequestAssignment", member_id=me, assignment=assignment("t", 0)),)
    await call(ctx, 14, 3, group_id="g", generation_id=1, member_id=me, assignments=plan)
    await ctx.core.execute(JoinGroup("cursus-group", ("t",)))
    await ctx.core.execute(CommitOffset("offsets-only", "t", 0, 1))
    groups = ("g", "cursus-group", "offsets-only", "nobody")
    answer = await call(ctx, 15, version, groups=groups, include_authorized_operations=False)
    by_name = {g.group_id: g for g in answer.groups}
    kafka = by_name["g"]
    assert (kafka.group_state, kafka.protocol_type, kafka.protocol_data) == (
        "Stable", "consumer", "range")  # fmt: skip
    [m] = kafka.members
    assert (m.member_id, m.member_metadata, m.member_assignment) == (
        me, subscription("t"), assignment("t", 0))  # fmt: skip
    assert m.client_id == "test" and m.client_host == "127.0.0.1"
    assert by_name["cursus-group"].group_state == "Stable"
    assert len(by_name["cursus-group"].members) == 1
    assert by_name["offsets-only"].group_state == "Empty"
    assert by_name["nobody"].group_state == "Dead"
    assert all(g.error_code == K.none for g in answer.groups)


async def test_list_groups_with_state_filter() -> None:
    ctx = make_context()
    await join(ctx, 3)  # a round waiting for the leader's sync: CompletingRebalance
    await ctx.core.execute(CommitOffset("idle", "t", 0, 1))
    listed = await call(ctx, 16, 0)
    assert {(g.group_id, g.protocol_type) for g in listed.groups} == {
        ("g", "consumer"), ("idle", "")}  # fmt: skip
    v4 = await call(ctx, 16, 4, states_filter=("Empty",))
    assert [(g.group_id, g.group_state) for g in v4.groups] == [("idle", "Empty")]
    v5 = await call(ctx, 16, 5, states_filter=(), types_filter=("classic",))
    assert {g.group_id for g in v5.groups} == {"g", "idle"}
    assert {g.group_type for g in v5.groups} == {"classic"}


@pytest.mark.parametrize("version", [0, 2])
async def test_delete_groups(version: int) -> None:
    ctx = make_context()
    await join(ctx, 3)
    await ctx.core.execute(CommitOffset("idle", "t", 0, 1))
    answer = await call(ctx, 42, version, groups_names=("g", "idle", "nobody"))
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("g", K.non_empty_group),
        ("idle", K.none),
        ("nobody", K.group_id_not_found),
    ]
    assert await ctx.core.groups.committed("idle") == []
