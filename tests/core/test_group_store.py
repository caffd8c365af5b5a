"""The shared group coordinator: two cores (two gateways) on one nats-server form one group,
a member whose gateway stops renewing its lease leaves on its own, the generation fences a
stale member's commit, and concurrent joins through both cores all land (compare-and-set)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gateway.core.engine import Core
from gateway.core.group_store import SharedGroupCoordinator
from gateway.model import (
    CommitOffset,
    CreateTopic,
    DescribeGroup,
    ErrorCode,
    FetchOffset,
    GatewayError,
    Heartbeat,
    JoinGroup,
    SyncGroup,
)
from tests.backends.servers import nats_backend

LEASE_MS = 600


def _core(backend) -> Core:  # type: ignore[no-untyped-def]
    return Core({"js": backend}, [("*", "js")], group_lease_ms=LEASE_MS)


async def _owned(core: Core, group: str) -> dict[str, list[int]]:
    desc = await core.execute(DescribeGroup(group))
    return {m.member_id: sorted(p for _, p in m.partitions) for m in desc.members}


async def test_two_cores_share_one_group_and_fence_stale_commits(tmp_path: Path) -> None:
    async with nats_backend(tmp_path) as b1, nats_backend(tmp_path) as b2:
        a, b = _core(b1), _core(b2)
        assert isinstance(a.groups, SharedGroupCoordinator)
        await a.execute(CreateTopic("t", 8))
        joins: list = []

        async def join(core: Core) -> None:
            joins.append(await core.execute(JoinGroup("g", ("t",), session_timeout_ms=30_000)))

        async with trio.open_nursery() as n:  # concurrent joins through both gateways
            for core in (a, b, a, b):
                n.start_soon(join, core)
        owned_a, owned_b = await _owned(a, "g"), await _owned(b, "g")
        assert owned_a == owned_b
        assert len(owned_a) == 4
        assert sorted(p for ps in owned_a.values() for p in ps) == list(range(8))
        gen = (await a.execute(DescribeGroup("g"))).generation
        assert gen == (await b.execute(DescribeGroup("g"))).generation == 4
        first = joins[0]
        # everyone syncs on either gateway at the current generation
        for j in joins:
            synced = await b.execute(SyncGroup("g", j.member_id, gen))
            assert [p for _, p in synced.assignment.partitions] == owned_a[j.member_id]
        # a current member commits; the stale generation is refused and the offset stays
        mine = owned_a[first.member_id][0]
        await a.execute(CommitOffset("g", "t", mine, 5, "", gen, first.member_id))
        with pytest.raises(GatewayError) as exc:
            await b.execute(CommitOffset("g", "t", mine, 9, "", gen - 1, first.member_id))
        assert exc.value.code is ErrorCode.ILLEGAL_GENERATION
        assert (await b.execute(FetchOffset("g", "t", mine))).offset == 5
        with pytest.raises(GatewayError) as exc:
            await a.execute(Heartbeat("g", first.member_id, gen - 1))
        assert exc.value.code is ErrorCode.REBALANCE_IN_PROGRESS
        # asking about groups that do not exist keeps nothing in memory
        for i in range(50):
            assert (await b.execute(DescribeGroup(f"nope{i}"))).members == ()
        assert b.groups.group_names() == ["g"]


async def test_a_dead_gateways_members_leave_when_their_lease_runs_out(tmp_path: Path) -> None:
    async with nats_backend(tmp_path) as b1, nats_backend(tmp_path) as b2:
        a, b = _core(b1), _core(b2)
        await a.execute(CreateTopic("t", 8))
        async with trio.open_nursery() as n:
            n.start_soon(a.groups.run)  # a renews its members' leases; b is "killed": never
            ja = await a.execute(JoinGroup("g", ("t",), session_timeout_ms=60_000))
            jb = await b.execute(JoinGroup("g", ("t",), session_timeout_ms=60_000))
            assert len(await _owned(a, "g")) == 2
            # a's lease renewal keeps its member; b's member is gone after the lease
            with trio.fail_after(10):
                while len(await _owned(a, "g")) != 1:
                    await trio.sleep(0.1)
            owned = await _owned(b, "g")
            assert owned == {ja.member_id: list(range(8))}
            with pytest.raises(GatewayError) as exc:
                await b.execute(Heartbeat("g", jb.member_id, jb.generation))
            assert exc.value.code is ErrorCode.UNKNOWN_MEMBER
            # well past several leases, a's member is still there (renewed in the background)
            await trio.sleep(LEASE_MS * 3 / 1000)
            assert list(await _owned(b, "g")) == [ja.member_id]
            n.cancel_scope.cancel()


def test_group_lease_is_checked_in_the_config(tmp_path: Path) -> None:
    from gateway.config import ConfigError, parse_config
    from tests.support import make_config

    with pytest.raises(ConfigError) as exc:
        parse_config(make_config(tmp_path, server={"group_lease_ms": 5}))
    assert "server.group_lease_ms: got 5" in str(exc.value)
    cfg = parse_config(make_config(tmp_path, server={"group_lease_ms": 2500}))
    assert cfg.server.group_lease_ms == 2500


async def test_nats_compare_and_set(tmp_path: Path) -> None:
    async with nats_backend(tmp_path) as kv:
        assert await kv.kv_get_revision("groups", "x") == (None, 0)
        first = await kv.kv_put_if("groups", "x", b"1", 0)
        assert first and await kv.kv_put_if("groups", "x", b"again", 0) is None
        second = await kv.kv_put_if("groups", "x", b"2", first)
        assert second and await kv.kv_put_if("groups", "x", b"stale", first) is None
        assert await kv.kv_get_revision("groups", "x") == (b"2", second)
        await kv.kv_delete("groups", "x")
        value, revision = await kv.kv_get_revision("groups", "x")
        assert value is None and await kv.kv_put_if("groups", "x", b"3", revision)


async def test_max_group_members_in_one_process_and_on_nats(tmp_path: Path) -> None:
    from gateway.backends.memory import MemoryBackend
    from gateway.observability import LIMIT_HITS

    hits = LIMIT_HITS.labels("max_group_members", "server")
    async with nats_backend(tmp_path) as js:
        for core in (
            Core({"m": MemoryBackend("m")}, [("*", "m")], max_group_members=2),
            Core({"js": js}, [("*", "js")], max_group_members=2),
        ):
            await core.execute(CreateTopic("t", 4))
            ids = [(await core.execute(JoinGroup("g", ("t",)))).member_id for _ in range(2)]
            before = hits._value.get()
            with pytest.raises(GatewayError) as exc:
                await core.execute(JoinGroup("g", ("t",)))
            assert exc.value.code is ErrorCode.INVALID_REQUEST
            assert "server.max_group_members" in exc.value.message
            assert hits._value.get() == before + 1
            # the members there may still rejoin; another group is not affected
            await core.execute(JoinGroup("g", ("t",), ids[0]))
            await core.execute(JoinGroup("other", ("t",)))
            assert len((await core.execute(DescribeGroup("g"))).members) == 2


async def test_a_snapshot_from_an_unshared_gateway_keeps_its_generation_not_members(
    tmp_path: Path,
) -> None:
    import json

    async with nats_backend(tmp_path) as js:
        old = {"generation": 5, "leader": "old", "protocol": "range",
               "members": {"old": {"topics": ["t"], "session_timeout_ms": 30_000,
                                   "assignment": [["t", 0]]}}}  # fmt: skip
        await js.kv_put("groups", "g", json.dumps(old).encode())
        core = _core(js)
        await core.execute(CreateTopic("t", 2))
        joined = await core.execute(JoinGroup("g", ("t",)))
        assert joined.generation == 6 and joined.members == (joined.member_id,)
