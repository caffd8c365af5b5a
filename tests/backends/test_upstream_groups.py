"""Consumer groups on upstream backends: the broker's own groups where its protocol has them
(Cursus), so two gateways on one broker form one group; a clear refusal where it has none (TANK,
Kafka 0.8), committed offsets still working; ``local_groups`` keeps them in the gateway."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

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
    JoinGroup,
    LeaveGroup,
    SyncGroup,
)
from gateway.observability import LIMIT_HITS
from gateway.protocols.cursus.client import CursusClient, assignments
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from gateway.protocols.liftbridge import liftbridge_api_pb2 as lpb
from gateway.protocols.liftbridge.client import LiftbridgeClient
from tests.backends.upstream import provision_on_second_gateway, upstream_factory
from tests.support import GatewayProcess

PARTITIONS = 6


def upstream_backend(gw: GatewayProcess, protocol: str, **extra: Any) -> dict[str, Any]:
    host, port = gw.address(protocol)
    return {"default": {"type": "upstream", "protocol": protocol, "address": f"{host}:{port}"}}


def describe(gw: GatewayProcess, group: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{gw.admin_url}/v1/groups/{group}", timeout=10) as resp:
        return json.loads(resp.read())


class Member:
    """A Cursus group member speaking to one gateway: join, then heartbeat, joining again on
    GEN_MISMATCH as cursus clients do."""

    def __init__(self, client: CursusClient, name: str) -> None:
        self.client, self.name = client, name
        self.member = name
        self.generation = 0

    async def join(self) -> None:
        reply = await self.client.text(f"JOIN_GROUP topic=t group=g member={self.member}")
        found = re.search(r"generation=(\d+) member=(\S+)", reply)
        assert found, reply
        self.generation, self.member = int(found.group(1)), found.group(2)

    async def heartbeat(self) -> bool:
        """True when the member is in the current generation; else it joins again."""
        reply = await self.client.text(
            f"HEARTBEAT topic=t group=g member={self.member} generation={self.generation}"
        )
        if reply == "OK":
            return True
        assert "GEN_MISMATCH" in reply or "member_not_found" in reply, reply
        await self.join()
        return False

    async def assignment(self) -> list[int]:
        reply = await self.client.text(
            f"SYNC_GROUP topic=t group=g member={self.member} generation={self.generation}"
        )
        assert reply.startswith("OK"), reply
        return assignments(reply)


def test_two_gateways_on_one_cursus_upstream_form_one_group(tmp_path: Path) -> None:
    listeners = {"cursus": {"session_timeout_ms": 5000}}
    with GatewayProcess(tmp_path / "up", listeners={"cursus": {}}, name="up") as up:
        backends = upstream_backend(up, "cursus")
        with (
            GatewayProcess(tmp_path / "a", listeners=listeners, backends=backends, name="a") as a,
            GatewayProcess(tmp_path / "b", listeners=listeners, backends=backends, name="b") as b,
        ):

            async def main() -> tuple[list[list[int]], int]:
                async with (
                    await CursusClient.connect(*a.address("cursus")) as ca1,
                    await CursusClient.connect(*a.address("cursus")) as ca2,
                    await CursusClient.connect(*b.address("cursus")) as cb1,
                ):
                    reply = await ca1.text(f"CREATE topic=t partitions={PARTITIONS}")
                    assert f"now has {PARTITIONS} partitions" in reply, reply
                    members = [Member(ca1, "a1"), Member(cb1, "b1"), Member(ca2, "a2")]
                    for m in members:
                        await m.join()
                    with trio.fail_after(30):
                        while True:
                            if all([await m.heartbeat() for m in members]):
                                break
                            await trio.sleep(0.05)
                    assert len({m.generation for m in members}) == 1
                    return [await m.assignment() for m in members], members[0].generation

            owned, generation = trio.run(main)
            every = sorted(p for parts in owned for p in parts)
            assert every == list(range(PARTITIONS)), owned  # disjoint, covering all
            assert all(parts for parts in owned), owned  # three members, six partitions
            # both gateways describe the broker's one group: same generation and assignment
            views = [describe(gw, "g") for gw in (a, b)]
            for view in views:
                assert view["generation"] == generation, view
                got = sorted(sorted(p for _, p in m["assignment"]) for m in view["members"])
                assert got == sorted(sorted(parts) for parts in owned), view
            # the broker holds the group: its own view, under the gateways' topic prefix
            upstream = describe(up, "g")
            assert upstream["generation"] == generation and len(upstream["members"]) == 3


@pytest.mark.parametrize("protocol", ["tank", "kafka08"])
def test_a_join_on_an_upstream_without_groups_is_refused(tmp_path: Path, protocol: str) -> None:
    with GatewayProcess(tmp_path / "up", listeners={protocol: {}, "cursus": {}}, name="up") as up:
        with GatewayProcess(
            tmp_path / "a", listeners={"cursus": {}}, backends=upstream_backend(up, protocol)
        ) as a:

            async def main() -> list[str]:
                async with await CursusClient.connect(*up.address("cursus")) as admin:
                    reply = await admin.text("CREATE topic=t partitions=2")
                    assert "now has 2 partitions" in reply, reply
                async with await CursusClient.connect(*a.address("cursus")) as client:
                    return [
                        await client.text("JOIN_GROUP topic=t group=g member=m") for _ in range(3)
                    ]

            replies = trio.run(main)
            for reply in replies:
                assert reply.startswith("ERROR: unsupported:"), reply
                assert "has no consumer groups its gateways could share" in reply, reply
            deadline = time.monotonic() + 10
            while "group_join_refused" not in a.log_text():
                assert time.monotonic() < deadline, a.log_text()[-2000:]
                time.sleep(0.1)
            assert a.log_text().count("group_join_refused") == 1  # once, not per join
            assert "Traceback" not in a.log_text()


async def test_kafka08_upstream_refuses_membership_but_keeps_committed_offsets(
    tmp_path: Path,
) -> None:
    async with upstream_factory("kafka08")(tmp_path) as backend:
        await provision_on_second_gateway(backend, "t", 2)
        core = Core({"up": backend}, [("*", "up")])
        with pytest.raises(GatewayError) as refused:
            await core.execute(JoinGroup("g", ("t",), session_timeout_ms=5000))
        assert refused.value.code is ErrorCode.UNSUPPORTED
        await core.execute(CommitOffset("g", "t", 1, 17, "meta"))
        got = await core.execute(FetchOffset("g", "t", 1))
        assert (got.offset, got.metadata) == (17, "meta")


async def test_local_groups_keeps_groups_in_the_gateway(tmp_path: Path) -> None:
    async with upstream_factory("tank")(tmp_path, local_groups=True) as backend:
        await backend.create_topic("t", 2, ())
        core = Core({"up": backend}, [("*", "up")])
        joined = await core.execute(JoinGroup("g", ("t",), session_timeout_ms=5000))
        assert joined.members == (joined.member_id,)
        assert joined.generation == 1


def owners(view: dict[str, Any]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for m in view["members"]:
        for _, p in m["assignment"]:
            out.setdefault(p, []).append(m["member_id"])
    return out


def test_two_gateways_on_one_iggy_upstream_form_one_group(tmp_path: Path) -> None:
    """Iggy members (connections) joined through two gateways are members of the broker's one
    group: each partition is polled by exactly one of them and every record read once."""
    with GatewayProcess(tmp_path / "up", listeners={"iggy": {}}, name="up") as up:
        backends = upstream_backend(up, "iggy")
        with (
            GatewayProcess(
                tmp_path / "a", listeners={"iggy": {}}, backends=backends, name="a"
            ) as a,
            GatewayProcess(
                tmp_path / "b", listeners={"iggy": {}}, backends=backends, name="b"
            ) as b,
        ):

            async def main() -> dict[int, set[bytes]]:
                where = [a, b, a]
                clients = [await IggyClient.connect(*gw.address("iggy")) for gw in where]
                s, t = c.Identifier("s"), c.Identifier("t")
                await clients[0].call(c.CreateStream(1, "s"))
                await clients[0].call(c.CreateTopic(s, 1, PARTITIONS, 0, "t"))
                for cl in clients[:2]:  # the group, in each gateway's Iggy registry
                    await cl.call(c.CreateConsumerGroup(s, t, 7))
                for cl in clients:
                    await cl.call(c.JoinConsumerGroup(s, t, 7))
                records = [c.Message(0, b"r%d" % i) for i in range(60)]
                for p in range(PARTITIONS):  # ten records in each partition
                    part = c.Partitioning.partition_id(p + 1)
                    await clients[0].send_messages("s", "t", records[p::PARTITIONS], part)
                with trio.fail_after(30):
                    while True:
                        views = [await trio.to_thread.run_sync(describe, gw, "7") for gw in (a, b)]
                        own = owners(views[0])
                        if (
                            len(views[0]["members"]) == 3
                            and views[0]["generation"] == views[1]["generation"]
                            and sorted(own) == list(range(PARTITIONS))
                            and all(len(v) == 1 for v in own.values())
                        ):
                            break
                        await trio.sleep(0.1)
                assert owners(views[1]) == {p: [m] for p, [m] in owners(views[1]).items()}
                assert sorted(owners(views[1])) == list(range(PARTITIONS))
                group = c.Consumer(c.ConsumerKind.CONSUMER_GROUP, c.Identifier(7))
                # each poll reads the member's next partition (from offset 0: committed offsets
                # are not kept by an Iggy upstream): PARTITIONS polls see all of the member's
                got: dict[int, set[bytes]] = {}
                for i, cl in enumerate(clients):
                    got[i] = set()
                    for _ in range(PARTITIONS):
                        polled = await cl.poll(
                            "s", "t", 0, c.PollingKind.OFFSET, 0, 100, consumer=group
                        )
                        got[i] |= {m.payload for m in polled.messages}
                for cl in clients:
                    await cl.aclose()
                return got

            got = trio.run(main)
            every = [v for values in got.values() for v in values]
            assert sorted(every) == sorted(b"r%d" % i for i in range(60))  # each by one member
            assert all(got.values()), got  # every member had partitions


async def test_iggy_upstream_members_are_bounded_and_released(tmp_path: Path) -> None:
    """Each Iggy member holds a connection to the broker: at most max_group_connections; a
    leave gives its connection back, and a member whose client goes silent past its session
    timeout is dropped (its connection closed, which ends its membership on the broker)."""
    async with upstream_factory("iggy")(tmp_path, max_group_connections=1) as backend:
        await backend.create_topic("t", 2, ())
        core = Core({"up": backend}, [("*", "up")])
        first = await core.execute(JoinGroup("g", ("t",), session_timeout_ms=60_000))
        hits = LIMIT_HITS.labels("max_group_connections", "iggy")._value.get()
        with pytest.raises(GatewayError) as full:
            await core.execute(JoinGroup("g", ("t",), session_timeout_ms=60_000))
        assert full.value.code is ErrorCode.INVALID_REQUEST
        assert "max_group_connections" in full.value.message
        assert LIMIT_HITS.labels("max_group_connections", "iggy")._value.get() == hits + 1
        synced = await core.execute(SyncGroup("g", first.member_id, first.generation))
        assert sorted(p for _, p in synced.assignment.partitions) == [0, 1]
        await core.execute(LeaveGroup("g", first.member_id))
        assert (await core.execute(DescribeGroup("g"))).members == ()
        quiet = await core.execute(JoinGroup("g", ("t",), session_timeout_ms=200))
        assert [m.member_id for m in (await core.execute(DescribeGroup("g"))).members] == [
            quiet.member_id
        ]
        with trio.fail_after(10):  # dropped after its session timeout (checked every second)
            while (await backend.groups.describe("g", "t")).members:
                await trio.sleep(0.1)
        await core.execute(JoinGroup("g", ("t",), session_timeout_ms=60_000))  # room again


def test_two_gateways_on_one_liftbridge_upstream_form_one_group(tmp_path: Path) -> None:
    """Liftbridge consumers joined through two gateways are members of the broker's one group:
    once every member fetches the same epoch, the partitions are split among all of them."""
    with GatewayProcess(tmp_path / "up", listeners={"liftbridge": {}}, name="up") as up:
        backends = upstream_backend(up, "liftbridge")
        with (
            GatewayProcess(tmp_path / "a", listeners={"liftbridge": {}}, backends=backends) as a,
            GatewayProcess(tmp_path / "b", listeners={"liftbridge": {}}, backends=backends) as b,
        ):
            gws = {"a1": a, "b1": b, "a2": a}

            async def main() -> dict[str, tuple[int, list[int]]]:
                clients = {
                    m: await LiftbridgeClient.connect(*gw.address("liftbridge"))
                    for m, gw in gws.items()
                }
                await clients["a1"].create_stream("t", PARTITIONS)
                for m, cl in clients.items():
                    await cl.call(
                        "JoinConsumerGroup",
                        lpb.JoinConsumerGroupRequest(groupId="g", consumerId=m, streams=["t"]),
                    )
                with trio.fail_after(30):
                    while True:
                        got = {}
                        for m, cl in clients.items():
                            resp = await cl.call(
                                "FetchConsumerGroupAssignments",
                                lpb.FetchConsumerGroupAssignmentsRequest(groupId="g", consumerId=m),
                            )
                            parts = [p for a in resp.assignments for p in a.partitions]
                            got[m] = (resp.epoch, sorted(parts))
                        if len({epoch for epoch, _ in got.values()}) == 1:
                            break
                        await trio.sleep(0.1)
                for cl in clients.values():
                    await cl.aclose()
                return got

            got = trio.run(main)
            every = sorted(p for _, parts in got.values() for p in parts)
            assert every == list(range(PARTITIONS)), got  # disjoint, covering all
            assert all(parts for _, parts in got.values()), got
            # each gateway describes its own members with the broker's assignment
            for gw, mine in ((a, {"a1", "a2"}), (b, {"b1"})):
                view = describe(gw, "g")
                assert {m["member_id"] for m in view["members"]} == mine, view
                for m in view["members"]:
                    assert sorted(p for _, p in m["assignment"]) == got[m["member_id"]][1]


async def test_a_broker_group_reads_one_topic_on_that_broker(tmp_path: Path) -> None:
    """The broker's groups are per topic and hold only its topics: a join with two topics, or
    with a topic another backend holds, is refused with the reason."""
    async with upstream_factory("cursus")(tmp_path) as backend:
        await backend.create_topic("t", 2, ())
        await backend.create_topic("u", 2, ())
        other = MemoryBackend("mem")
        core = Core({"up": backend, "mem": other}, [("local.*", "mem"), ("*", "up")])
        await core.execute(CreateTopic("local.t", 1))
        for topics, says in (
            (("t", "u"), "a Cursus group reads one topic, not 2"),
            (("local.t",), "is not on backend 'upstream-cursus'"),
        ):
            with pytest.raises(GatewayError) as refused:
                await core.execute(JoinGroup("g", topics, session_timeout_ms=5000))
            assert refused.value.code is ErrorCode.INVALID_REQUEST
            assert says in refused.value.message
        joined = await core.execute(JoinGroup("g", ("t",), session_timeout_ms=5000))
        synced = await core.execute(SyncGroup("g", joined.member_id, joined.generation))
        assert sorted(p for _, p in synced.assignment.partitions) == [0, 1]
        await core.execute(LeaveGroup("g", joined.member_id))
        assert (await core.execute(DescribeGroup("g"))).members == ()
