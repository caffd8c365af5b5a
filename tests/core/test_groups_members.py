"""Two and three members of one group over Cursus and over Iggy, against a running gateway: each
partition consumed by exactly one member, rebalances on join, leave and missed heartbeats (Iggy:
a dropped connection), and no record skipped or consumed twice by the group across the
rebalances, since members commit before they leave."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import trio

from gateway.config import parse_config
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Batch, Message
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from tests.support import make_config, serving

PARTITIONS = 6
PER_PARTITION = 12
ALL = sorted((p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION))


def check_exclusive(assignments: dict[str, list[int]]) -> None:
    """Every partition owned by exactly one member."""
    owned = Counter(p for parts in assignments.values() for p in parts)
    assert sorted(owned) == list(range(PARTITIONS)), assignments
    assert set(owned.values()) == {1}, assignments


# ----------------------------------------------------------------------------------- Cursus
class CursusMember:
    def __init__(self, addr: tuple[str, int], name: str) -> None:
        self.addr, self.name = addr, name
        self.member = ""
        self.c: CursusClient | None = None
        self.beating = trio.CancelScope()

    async def join(self, nursery: trio.Nursery) -> None:
        self.c = await CursusClient.connect(*self.addr)
        reply = await self.c.text(f"JOIN_GROUP topic=t group=g member={self.name}")
        m = re.fullmatch(r"OK generation=\d+ member=(\S+) assignments=\[.*\]", reply)
        assert m, reply
        self.member = m.group(1)
        nursery.start_soon(self._heartbeats)

    async def _heartbeats(self) -> None:
        """The client's heartbeat thread: its own connection, every 100 ms, until stopped."""
        with self.beating:
            async with await CursusClient.connect(*self.addr) as hb:
                while True:
                    await hb.text(f"HEARTBEAT topic=t group=g member={self.member} generation=0")
                    await trio.sleep(0.1)

    async def status(self) -> dict:
        assert self.c is not None
        return json.loads(await self.c.text("GROUP_STATUS group=g"))

    async def consume(self, consumed: list[tuple[int, int]], limit: int) -> None:
        """Read up to ``limit`` records of each owned partition from the group's committed
        offset, then commit what was read."""
        assert self.c is not None
        status = await self.status()
        generation = status["generation"]
        mine = await self.assignment()
        for p in mine:
            reply = await self.c.text(f"FETCH_OFFSET topic=t partition={p} group=g")
            offset = int(reply.removeprefix("OK offset="))
            batch = await self.c.consume(
                "t", p, offset, self.member, group="g", generation=generation, batch=limit
            )
            assert isinstance(batch, Batch), batch
            got = [m.offset for m in batch.messages()]
            assert got == list(range(offset, offset + len(got)))
            consumed.extend((p, o) for o in got)
            if got:
                commit = (
                    f"COMMIT_OFFSET topic=t partition={p} group=g offset={got[-1] + 1} "
                    f"generation={generation} member={self.member}"
                )
                assert await self.c.text(commit) == "OK"

    async def assignment(self) -> list[int]:
        assert self.c is not None
        reply = await self.c.text(f"SYNC_GROUP topic=t group=g member={self.member}")
        m = re.fullmatch(r"OK assignments=\[(.*)\]", reply)
        assert m, reply
        return [int(x) for x in m.group(1).split()]

    async def leave(self) -> None:
        assert self.c is not None
        self.beating.cancel()
        reply = await self.c.text(f"LEAVE_GROUP topic=t group=g member={self.member}")
        assert reply == "\u2705 Left group 'g'"
        await self.c.aclose()

    async def go_silent(self) -> None:
        """Stop heartbeating (a stuck consumer): the session timeout expires it."""
        self.beating.cancel()
        assert self.c is not None
        await self.c.aclose()


async def settle(members: list[CursusMember]) -> dict[str, list[int]]:
    """Wait until the group has exactly ``members``; their assignments (checked exclusive)."""
    want = sorted(m.member for m in members)
    with trio.fail_after(30):
        while True:
            status = await members[0].status()
            if sorted(x["member_id"] for x in status["members"]) == want:
                break
            await trio.sleep(0.1)
    assignments = {m.member: await m.assignment() for m in members}
    check_exclusive(assignments)
    return assignments


@pytest.mark.parametrize("n", [2, 3])
async def test_cursus_members_share_partitions_across_rebalances(tmp_path: Path, n: int) -> None:
    cfg = make_config(tmp_path, {"cursus": {"session_timeout_ms": 2000}}, admin=False)
    async with serving(parse_config(cfg)) as server, trio.open_nursery() as nursery:
        addr = server.addresses()["cursus"]
        async with await CursusClient.connect(*addr) as admin:
            await admin.text(f"CREATE topic=t partitions={PARTITIONS}")
            for p in range(PARTITIONS):
                msgs = [
                    Message(seq=i + 1, producer_id=b"p", key=b"", payload=b"%d-%d" % (p, i))
                    for i in range(PER_PARTITION)
                ]
                await admin.produce("t", p, msgs)
        consumed: list[tuple[int, int]] = []
        members = [CursusMember(addr, f"m{i}") for i in range(n)]
        for m in members:
            await m.join(nursery)
        assignments = await settle(members)
        assert sorted(len(v) for v in assignments.values()) == sorted(
            [PARTITIONS // n] * n
        )  # range: 6 partitions over 2 or 3 members split evenly
        # a member reading a partition it does not own gets nothing
        first, second = members[0], members[1]
        foreign = assignments[second.member][0]
        assert first.c is not None
        empty = await first.c.consume("t", foreign, 0, first.member, group="g")
        assert isinstance(empty, Batch) and empty.messages() == []

        for m in members:
            await m.consume(consumed, 3)
        # the last member stops heartbeating (it committed): the others get its partitions
        silent = members.pop()
        await silent.go_silent()
        await settle(members)
        for m in members:
            await m.consume(consumed, 3)
        # a new member joins: a rebalance hands it a share
        newcomer = CursusMember(addr, "late")
        await newcomer.join(nursery)
        members.append(newcomer)
        assignments = await settle(members)
        assert assignments[newcomer.member]
        for m in members:
            await m.consume(consumed, 3)
        # the first member leaves cleanly after committing
        leaver = members.pop(0)
        await leaver.leave()
        await settle(members)
        for m in members:
            await m.consume(consumed, PER_PARTITION)
        assert sorted(consumed) == ALL  # nothing skipped, nothing twice
        for m in members:
            await m.leave()
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------------------------------- Iggy
S, T, G = c.Identifier(1), c.Identifier(1), 7
USERS = [{"username": "iggy", "password": "iggy"}]


def as_group() -> c.Consumer:
    return c.Consumer(c.ConsumerKind.CONSUMER_GROUP, c.Identifier(G))


async def iggy_assignments(cl: IggyClient, clients: dict[int, IggyClient]) -> dict[str, list[int]]:
    det = await cl.call(c.GetConsumerGroup(S, T, G))
    got = {str(cid): [p - 1 for p in parts] for cid, parts in det.members}
    assert sorted(int(k) for k in got) == sorted(clients)
    check_exclusive(got)
    return got


async def iggy_poll(cl: IggyClient, consumed: list[tuple[int, int]], polls: int) -> None:
    for _ in range(polls):
        got = await cl.poll(1, 1, 0, count=2, auto_commit=True, consumer=as_group())
        consumed.extend((got.partition_id - 1, m.offset) for m in got.messages)


@pytest.mark.parametrize("n", [2, 3])
async def test_iggy_members_share_partitions_across_rebalances(tmp_path: Path, n: int) -> None:
    cfg = make_config(tmp_path, {"iggy": {"users": USERS}}, admin=False)
    async with serving(parse_config(cfg)) as server:
        addr = server.addresses()["iggy"]
        async with await IggyClient.connect(*addr) as admin:
            await admin.call(c.CreateStream(1, "s"))
            await admin.call(c.CreateTopic(S, 1, PARTITIONS, 0, "t"))
            for p in range(PARTITIONS):
                msgs = [c.Message(0, b"%d-%d" % (p, i)) for i in range(PER_PARTITION)]
                await admin.send_messages(1, 1, msgs, c.Partitioning.partition_id(p + 1))
            await admin.call(c.CreateConsumerGroup(S, T, G))
            clients: dict[int, IggyClient] = {}
            for _ in range(n):
                cl = await IggyClient.connect(*addr)
                await cl.call(c.JoinConsumerGroup(S, T, G))
                clients[(await cl.call(c.GetMe())).client_id] = cl
            await iggy_assignments(admin, clients)
            consumed: list[tuple[int, int]] = []
            for cl in clients.values():
                await iggy_poll(cl, consumed, 3)
            # one member leaves (its polls auto-committed)
            cid, leaver = next(iter(clients.items()))
            await leaver.call(c.LeaveConsumerGroup(S, T, G))
            await leaver.aclose()
            del clients[cid]
            await iggy_assignments(admin, clients)
            for cl in clients.values():
                await iggy_poll(cl, consumed, 3)
            # a newcomer joins
            late = await IggyClient.connect(*addr)
            await late.call(c.JoinConsumerGroup(S, T, G))
            clients[(await late.call(c.GetMe())).client_id] = late
            await iggy_assignments(admin, clients)
            for cl in clients.values():
                await iggy_poll(cl, consumed, 3)
            # a member's connection drops without leaving (Iggy members live as long as their
            # connection): the group rebalances to the rest
            cid, dropped = next(iter(clients.items()))
            await dropped.aclose()
            del clients[cid]
            with trio.fail_after(10):
                while True:
                    det = await admin.call(c.GetConsumerGroup(S, T, G))
                    if sorted(x for x, _ in det.members) == sorted(clients):
                        break
                    await trio.sleep(0.05)
            await iggy_assignments(admin, clients)
            for cl in clients.values():
                await iggy_poll(cl, consumed, PARTITIONS * PER_PARTITION)
            assert sorted(consumed) == ALL  # nothing skipped, nothing twice
            # the group is the model group named "7": its committed offsets are all at the end
            core = server.core
            assert sorted((t, p, o.offset) for t, p, o in await core.groups.committed("7")) == [
                ("s.t", p, PER_PARTITION) for p in range(PARTITIONS)
            ]
            for cl in clients.values():
                await cl.aclose()
