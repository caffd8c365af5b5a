"""Consumer groups on a Kafka backend run on the cluster's own group coordinator: two gateway
replicas on one cluster form one group. The cluster is a gateway serving the Kafka listener
(modern APIs, embedded log), whose coordinator waits for every member in JoinGroup as Kafka's
does, or a Tansu broker."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from kio.schema.join_group.v3 import request as jg_req

from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.backends.kafka.cluster import ms
from gateway.backends.kafka.connection import BrokerConnection
from gateway.backends.kafka.group_codec import (
    GroupView,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from gateway.backends.kafka.groups import CLUSTER_GROUPS
from gateway.core.engine import Core
from gateway.model import (
    CommitOffset,
    ErrorCode,
    GatewayError,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
)
from gateway.observability import LIMIT_HITS
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.iggy import codec as ic
from gateway.protocols.iggy.client import IggyClient
from gateway.protocols.liftbridge import liftbridge_api_pb2 as lpb
from gateway.protocols.liftbridge.client import LiftbridgeClient
from tests.backends.servers import TansuServer, shared_tansu
from tests.backends.test_upstream_groups import Member, owners
from tests.reliability.test_replicas import cursus_text
from tests.support import GatewayProcess

PARTITIONS = 6


def describe(gw: GatewayProcess, group: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{gw.admin_url}/v1/groups/{group}", timeout=20) as resp:
        return json.loads(resp.read())


TIMINGS = {
    "group_heartbeat_ms": 200,
    "group_rebalance_timeout_ms": 1000,
}


def kafka_backend(cluster: GatewayProcess, **extra: Any) -> dict[str, Any]:
    host, port = cluster.address("kafka08")
    return {"default": {"type": "kafka", "bootstrap": f"{host}:{port}", **TIMINGS, **extra}}


def test_codec_round_trip_and_range_over_every_gateway() -> None:
    subs = {"a1": ("t",), "a2": ("t", "u")}
    assert decode_subscription(encode_subscription(subs)) == subs
    topics_of = {"a1": ("t",), "a2": ("t", "u"), "b1": ("t",)}
    parts = range_assign(topics_of, {"t": 6, "u": 1})
    assert parts == {
        "a1": (("t", 0), ("t", 1)),
        "a2": (("t", 2), ("t", 3), ("u", 0)),
        "b1": (("t", 4), ("t", 5)),
    }
    view = GroupView(7, topics_of, parts)
    assert decode_assignment(encode_assignment(["a1", "a2"], view)) == view


async def _make_kv_topic(cluster: GatewayProcess) -> None:
    """The cluster's Kafka listener has no compacted topics: make the key-value topic the
    backend would otherwise create compacted (a plain one serves these tests)."""
    async with await CursusClient.connect(*cluster.address("cursus")) as client:
        reply = await client.text("CREATE topic=__gateway_kv partitions=1")
        assert "now has 1 partitions" in reply, reply


async def _run_members(a: GatewayProcess, b: GatewayProcess) -> dict[str, Any]:
    async with (
        await CursusClient.connect(*a.address("cursus")) as ca1,
        await CursusClient.connect(*a.address("cursus")) as ca2,
        await CursusClient.connect(*b.address("cursus")) as cb1,
    ):
        reply = await ca1.text(f"CREATE topic=t partitions={PARTITIONS}")
        assert f"now has {PARTITIONS} partitions" in reply, reply
        members = [Member(ca1, "a1"), Member(cb1, "b1"), Member(ca2, "a2")]
        async with trio.open_nursery() as nursery:  # joins wait for the cluster's round
            for m in members:
                nursery.start_soon(m.join)
        with trio.fail_after(60):
            while True:
                if all([await m.heartbeat() for m in members]):
                    break
                await trio.sleep(0.05)
        generation = members[0].generation
        assert {m.generation for m in members} == {generation}
        owned = {m.member: await m.assignment() for m in members}
        views = [describe(gw, "g") for gw in (a, b)]

        # a member's commit moves the committed offset, seen through the other replica
        a1, b1 = members[0], members[1]
        part = owned[a1.member][0]
        reply = await ca1.text(
            f"COMMIT_OFFSET topic=t partition={part} group=g offset=5 "
            f"member={a1.member} generation={generation}"
        )
        assert reply == "OK", reply
        fetched = await cb1.text(f"FETCH_OFFSET topic=t partition={part} group=g")
        # a stale generation's commit is refused, the offset stays
        stale = await cb1.text(
            f"COMMIT_OFFSET topic=t partition={owned[b1.member][0]} group=g offset=9 "
            f"member={b1.member} generation={generation - 1}"
        )
        # a member that left: refused too, and the others get a new generation
        assert await ca2.text(f"LEAVE_GROUP topic=t group=g member={members[2].member}")
        left = await ca2.text(
            f"COMMIT_OFFSET topic=t partition={part} group=g offset=7 "
            f"member={members[2].member} generation={generation}"
        )
        with trio.fail_after(60):
            while not all([await m.heartbeat() for m in members[:2]]):
                await trio.sleep(0.05)
        after = {m.member: await m.assignment() for m in members[:2]}
        return {
            "owned": owned,
            "generation": generation,
            "views": views,
            "fetched": fetched,
            "stale": stale,
            "left": left,
            "after": after,
            "after_generation": members[0].generation,
            "after_views": [describe(gw, "g") for gw in (a, b)],
        }


def _check_views(views: list[dict[str, Any]], generation: int, owned: dict[str, list[int]]) -> None:
    for view in views:
        assert view["generation"] == generation, view
        got = {m["member_id"]: sorted(p for _, p in m["assignment"]) for m in view["members"]}
        assert got == {k: sorted(v) for k, v in owned.items()}, view


@contextmanager
def kafka_cluster(tmp_path: Path, kind: str) -> Iterator[tuple[dict[str, Any], Any]]:
    """The gateways' backend table and the cluster: a gateway serving the Kafka listener, or
    a Tansu broker (its own coordinator)."""
    if kind == "tansu":
        with TansuServer() as tansu:
            yield {"default": {"type": "kafka", "bootstrap": tansu.bootstrap, **TIMINGS}}, tansu
        return
    listeners: dict[str, Any] = {"kafka08": {}, "cursus": {}}
    with GatewayProcess(tmp_path / "cluster", listeners=listeners, name="cluster") as cluster:
        trio.run(_make_kv_topic, cluster)
        yield kafka_backend(cluster), cluster


@pytest.mark.parametrize("kind", ["gateway", "tansu"])
def test_two_replicas_on_a_kafka_cluster_form_one_group(tmp_path: Path, kind: str) -> None:
    listeners = {"cursus": {"session_timeout_ms": 10_000}}
    with kafka_cluster(tmp_path, kind) as (backends, cluster):
        with (
            GatewayProcess(tmp_path / "a", listeners=listeners, backends=backends, name="a") as a,
            GatewayProcess(tmp_path / "b", listeners=listeners, backends=backends, name="b") as b,
            GatewayProcess(tmp_path / "c", listeners=listeners, backends=backends, name="c") as c,
        ):
            got = trio.run(_run_members, a, b)
            if kind == "gateway":  # Tansu 0.6 answers DescribeGroups without the assignments
                # a replica without members describes the cluster's group (DescribeGroups)
                _check_views([describe(c, "g")], got["after_generation"], got["after"])
            owned, generation = got["owned"], got["generation"]
            every = sorted(p for parts in owned.values() for p in parts)
            assert every == list(range(PARTITIONS)), owned  # each partition owned exactly once
            assert all(owned.values()), owned
            _check_views(got["views"], generation, owned)
            assert got["fetched"] == "OK offset=5", got
            assert "GEN_MISMATCH" in got["stale"] or "not_owner" in got["stale"], got
            assert got["left"] != "OK", got
            after = got["after"]
            assert got["after_generation"] > generation
            assert sorted(p for parts in after.values() for p in parts) == list(range(PARTITIONS))
            _check_views(got["after_views"], got["after_generation"], after)
            for gw in (a, b):
                assert "Traceback" not in gw.log_text(), gw.log_text()[-3000:]
            if kind == "gateway":
                # the cluster's coordinator holds one group: two members, the two gateways
                view = describe(cluster, "g")
                assert view["generation"] == got["after_generation"], view
                assert len(view["members"]) == 2, view
                # the commit reached the cluster's group offsets
                offsets = {(o["topic"], o["partition"]): o["committed"] for o in view["offsets"]}
                assert offsets[("t", owned[next(iter(owned))][0])] == 5, view


def test_membership_timings_are_validated() -> None:
    problems = KafkaConfig(group_heartbeat_ms=7000).validate()
    assert any(p.startswith("group_heartbeat_ms: got 7000") for p in problems), problems
    problems = KafkaConfig(group_rebalance_timeout_ms=500).validate()
    assert any(p.startswith("group_rebalance_timeout_ms: got 500") for p in problems), problems
    problems = KafkaConfig(max_cluster_groups=0).validate()
    assert any(p.startswith("max_cluster_groups: got 0") for p in problems), problems
    assert KafkaConfig().validate() == []


async def test_cluster_groups_are_bounded_released_and_expired(nursery: trio.Nursery) -> None:
    """Each cluster group the gateway is a member of holds a connection: at most
    max_cluster_groups; the last member's leave (or its session timeout) leaves the cluster's
    group and gives the slot back. A member's commit is the gateway membership's commit in
    Kafka's group offsets."""
    tag = uuid.uuid4().hex[:6]
    backend = KafkaBackend(
        "k",
        KafkaConfig(
            bootstrap=shared_tansu().bootstrap,
            kv_topic=f"__gw_kv_{tag}",
            max_cluster_groups=1,
            group_session_timeout_ms=2000,
            group_heartbeat_ms=200,
            group_rebalance_timeout_ms=1000,
        ),
    )
    await backend.open(nursery)
    topic, g1, g2 = f"t{tag}", f"g1{tag}", f"g2{tag}"
    await backend.create_topic(topic, 2)
    core = Core({"k": backend}, [("*", "k")])
    gauge = CLUSTER_GROUPS.labels(backend="k")
    try:
        first = await core.execute(JoinGroup(g1, (topic,), session_timeout_ms=60_000))
        assert gauge._value.get() == 1
        hits = LIMIT_HITS.labels("max_cluster_groups", "kafka")._value.get()
        with pytest.raises(GatewayError) as full:
            await core.execute(JoinGroup(g2, (topic,), session_timeout_ms=60_000))
        assert full.value.code is ErrorCode.INVALID_REQUEST
        assert "backends.k.max_cluster_groups" in full.value.message
        assert LIMIT_HITS.labels("max_cluster_groups", "kafka")._value.get() == hits + 1

        await core.execute(
            CommitOffset(g1, topic, 1, 3, generation=first.generation, member_id=first.member_id)
        )
        in_kafka = await backend.kv._offset_fetch(f"{g1}\x1f{topic}\x1f1")
        assert in_kafka is not None and json.loads(in_kafka)["offset"] == 3
        with pytest.raises(GatewayError) as stale:
            await core.execute(
                CommitOffset(g1, topic, 1, 4, generation=first.generation + 1, member_id="x")
            )
        assert stale.value.code is ErrorCode.UNKNOWN_MEMBER

        await core.execute(LeaveGroup(g1, first.member_id))
        assert backend.groups.membership(g1) is None
        assert gauge._value.get() == 0
        quiet = await core.execute(JoinGroup(g2, (topic,), session_timeout_ms=300))
        assert backend.groups.membership(g2) is not None
        with trio.fail_after(15):  # dropped after its session timeout, the cluster group left
            while backend.groups.membership(g2) is not None:
                await trio.sleep(0.1)
        assert gauge._value.get() == 0
        with pytest.raises(GatewayError) as gone:
            await core.execute(Heartbeat(g2, quiet.member_id, quiet.generation))
        assert gone.value.code is ErrorCode.UNKNOWN_MEMBER
    finally:
        await backend.close()


async def _join_beside_a_kafka_consumer(cluster: GatewayProcess, replica: GatewayProcess) -> str:
    """A Kafka consumer (range assignor) holds group k on the cluster; a Cursus member then
    joins k through the replica."""
    host, port = cluster.address("kafka08")
    conn = BrokerConnection(host, port, "consumer", 1 << 20)
    async with trio.open_nursery() as nursery:
        await conn.connect(nursery, 5)
        joined = await conn.call(
            jg_req.JoinGroupRequest(
                group_id="k",
                session_timeout=ms(30_000),
                rebalance_timeout=ms(30_000),
                member_id="",
                protocol_type="consumer",
                protocols=(jg_req.JoinGroupRequestProtocol(name="range", metadata=b""),),
            ),
            10,
        )
        assert int(joined.error_code) == 0, joined
        async with await CursusClient.connect(*replica.address("cursus")) as client:
            reply = await client.text("CREATE topic=u partitions=2")
            assert "now has 2 partitions" in reply, reply
            with trio.fail_after(10):  # refused at once, not after the join's deadline
                reply = await client.text("JOIN_GROUP topic=u group=k member=m")
        await conn.aclose()
        nursery.cancel_scope.cancel()
    return reply


def test_a_group_held_by_kafka_consumers_is_refused_clearly(tmp_path: Path) -> None:
    with kafka_cluster(tmp_path, "gateway") as (backends, cluster):
        with GatewayProcess(
            tmp_path / "a", listeners={"cursus": {}}, backends=backends, name="a"
        ) as a:
            reply = trio.run(_join_beside_a_kafka_consumer, cluster, a)
            assert reply.startswith("ERROR"), reply
            assert "members that are not gateways" in reply, reply
            assert a.log_text().count("kafka_group_round_failed") == 1, a.log_text()[-3000:]
            assert "Traceback" not in a.log_text()


async def _cursus_join(replica: GatewayProcess) -> str:
    async with await CursusClient.connect(*replica.address("cursus")) as client:
        reply = await client.text("CREATE topic=s partitions=2")
        assert "now has 2 partitions" in reply, reply
        return await client.text("JOIN_GROUP topic=s group=g member=m")


def test_a_session_timeout_the_cluster_refuses_names_the_key(tmp_path: Path) -> None:
    """The cluster (a gateway's Kafka listener: Kafka's 6 s minimum) refuses the backend's
    group_session_timeout_ms: the join fails and the gateway's one log line names the key."""
    with kafka_cluster(tmp_path, "gateway") as (backends, cluster):
        backends["default"]["group_session_timeout_ms"] = 3000
        with GatewayProcess(
            tmp_path / "a", listeners={"cursus": {}}, backends=backends, name="a"
        ) as a:
            reply = trio.run(_cursus_join, a)
            assert reply.startswith("ERROR"), reply
            log = a.log_text()
            assert log.count("kafka_group_round_failed") == 1, log[-3000:]
            assert "group_session_timeout_ms = 3000 (INVALID_SESSION_TIMEOUT)" in log
            assert "Traceback" not in log


def test_iggy_members_over_two_replicas_share_the_partitions(tmp_path: Path) -> None:
    """Iggy members (connections) joined through two replicas on one cluster: each partition is
    polled by exactly one of them and every record is read once."""
    with kafka_cluster(tmp_path, "gateway") as (backends, _):
        listeners: dict[str, Any] = {"iggy": {}}
        with (
            GatewayProcess(tmp_path / "a", listeners=listeners, backends=backends, name="a") as a,
            GatewayProcess(tmp_path / "b", listeners=listeners, backends=backends, name="b") as b,
        ):

            async def main() -> dict[int, set[bytes]]:
                clients = [await IggyClient.connect(*gw.address("iggy")) for gw in (a, b, a)]
                s, t = ic.Identifier("s"), ic.Identifier("t")
                await clients[0].call(ic.CreateStream(1, "s"))
                await clients[0].call(ic.CreateTopic(s, 1, PARTITIONS, 0, "t"))
                await clients[0].call(ic.CreateConsumerGroup(s, t, 7))
                async with trio.open_nursery() as nursery:  # joins wait for the round
                    for cl in clients:
                        nursery.start_soon(cl.call, ic.JoinConsumerGroup(s, t, 7))
                records = [ic.Message(0, b"r%d" % i) for i in range(60)]
                for p in range(PARTITIONS):  # ten records in each partition
                    part = ic.Partitioning.partition_id(p + 1)
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
                assert owners(views[1]) == owners(views[0])
                group = ic.Consumer(ic.ConsumerKind.CONSUMER_GROUP, ic.Identifier(7))
                got: dict[int, set[bytes]] = {}
                for i, cl in enumerate(clients):
                    got[i] = set()
                    for _ in range(PARTITIONS):
                        polled = await cl.poll(
                            "s", "t", 0, ic.PollingKind.OFFSET, 0, 100, consumer=group
                        )
                        got[i] |= {m.payload for m in polled.messages}
                for cl in clients:
                    await cl.aclose()
                return got

            got = trio.run(main)
            every = [v for values in got.values() for v in values]
            assert sorted(every) == sorted(b"r%d" % i for i in range(60))  # each by one member
            assert all(got.values()), got  # every member had partitions


def test_liftbridge_consumers_over_two_replicas_split_the_partitions(tmp_path: Path) -> None:
    """Liftbridge consumers joined through two replicas: once every member fetches the same
    epoch, the partitions are split among all of them, and both replicas describe all three."""
    with kafka_cluster(tmp_path, "gateway") as (backends, _):
        listeners: dict[str, Any] = {"liftbridge": {}}
        with (
            GatewayProcess(tmp_path / "a", listeners=listeners, backends=backends, name="a") as a,
            GatewayProcess(tmp_path / "b", listeners=listeners, backends=backends, name="b") as b,
        ):
            gws = {"a1": a, "b1": b, "a2": a}

            async def main() -> dict[str, tuple[int, list[int]]]:
                clients = {
                    m: await LiftbridgeClient.connect(*gw.address("liftbridge"))
                    for m, gw in gws.items()
                }
                await clients["a1"].create_stream("t", PARTITIONS)
                async with trio.open_nursery() as nursery:  # joins wait for the round
                    for m, cl in clients.items():
                        request = lpb.JoinConsumerGroupRequest(
                            groupId="g", consumerId=m, streams=["t"]
                        )
                        nursery.start_soon(cl.call, "JoinConsumerGroup", request)
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
            for gw in (a, b):  # the whole group on each replica
                view = describe(gw, "g")
                assert {m["member_id"] for m in view["members"]} == set(gws), view
                for m in view["members"]:
                    assert sorted(p for _, p in m["assignment"]) == got[m["member_id"]][1]


def test_workers_on_a_kafka_backend_form_one_group(tmp_path: Path) -> None:
    """``serve --workers 2`` on a Kafka backend: the kernel spreads the members' connections
    over both workers, and they still form one group; no per-worker warning."""
    with kafka_cluster(tmp_path, "gateway") as (backends, _):
        gw = GatewayProcess(
            tmp_path / "gw",
            listeners={"cursus": {"session_timeout_ms": 30_000}},
            backends=backends,
            extra_args=("--workers", "2"),
        )
        with gw:
            addr = gw.address("cursus")
            assert "8 partitions" in cursus_text(addr, "CREATE topic=w partitions=8")[0]
            for i in range(4):
                reply = cursus_text(addr, f"JOIN_GROUP topic=w group=wg member=m{i}")[0]
                assert reply.startswith("OK generation="), reply
            status = json.loads(cursus_text(addr, "GROUP_STATUS group=wg")[0])
            assert status["member_count"] == 4, status
            owned = sorted(p for m in status["members"] for p in m["assignments"])
            assert owned == list(range(8)), status
            assert gw.stop() == 0
        assert "workers_do_not_share" not in gw.log_text()
        assert "Traceback" not in gw.log_text()
