"""Consumer groups of today's clients on the Kafka listener, against a running gateway on the
embedded backend, on NATS JetStream, on a Kafka cluster (Tansu) and on an Iggy upstream (a second
gateway's Iggy listener): confluent-kafka (librdkafka 2.x; eager and cooperative-sticky) and
kafka-python 3.0.12 members subscribe, a second member splits the partitions with the first
(disjoint shares, all partitions), each commits, a member that leaves hands its partitions over, a
restarted member resumes from the committed offsets, and a Cursus client reads the very offsets
the Kafka group committed."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
import trio

from gateway.protocols.cursus.client import CursusClient
from tests.protocols.kafka.group_clients import Member, admin, wait_for
from tests.protocols.kafka.test_backends import backend_table
from tests.support import GatewayProcess

PARTITIONS = 4
_names = itertools.count()


@pytest.fixture(scope="module")
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    tmp = tmp_path_factory.mktemp(f"gw-{request.param}")
    listeners = {"kafka08": {}, "cursus": {}}
    if request.param != "embedded":  # the Kafka group still lives in this gateway
        backends = backend_table(request.param, tmp)
        with GatewayProcess(tmp, listeners=listeners, backends=backends) as gw:
            yield gw
        return
    with GatewayProcess(tmp, listeners=listeners, backend="embedded") as gw:
        yield gw


def all_partitions(topic: str) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(PARTITIONS)}


async def cursus_offsets(addr: tuple[str, int], topic: str, group: str) -> list[int]:
    async with await CursusClient.connect(*addr) as cl:
        return [await cl.fetch_offset(topic, p, group) for p in range(PARTITIONS)]


CASES = {
    "confluent-kafka": ("confluent-kafka", {}),  # range,roundrobin: eager
    "confluent-kafka-cooperative": (
        "confluent-kafka",
        {"partition.assignment.strategy": "cooperative-sticky"},  # incremental rebalances
    ),
    "kafka-python-3": ("kafka-python-3", {}),
}


# on a Kafka cluster (Tansu) too: the group runs here, its offsets are the cluster's; on an
# Iggy upstream (a second gateway's Iggy listener, logged in) the offsets are Iggy consumer offsets
RUNS = [(backend, case) for backend in ("embedded", "nats", "kafka") for case in CASES]
RUNS += [("upstream-iggy", case) for case in CASES]


@pytest.mark.parametrize(("gateway", "case"), RUNS, indirect=["gateway"])
def test_group_splits_commits_hands_over_and_resumes(gateway: GatewayProcess, case: str) -> None:
    venv, settings = CASES[case]
    n = next(_names)
    topic, group = f"gt-{n}", f"g-{n}"
    bootstrap = "%s:%d" % gateway.address("kafka08")  # noqa: UP031
    created, produced = admin(
        bootstrap, ("create_topics", [[topic, PARTITIONS, {}]]), ("produce", [topic, 10, 4])
    )
    assert created == {topic: {"ok": None}} and produced == 0
    a = Member(venv, bootstrap, topic, group, settings)
    b = None
    try:
        wait_for([a], lambda: a.owned == all_partitions(topic), what="the first member's share")
        b = Member(venv, bootstrap, topic, group, settings)
        both = [a, b]

        def split() -> bool:
            if not a.owned or not b.owned:
                return False
            return not a.owned & b.owned and a.owned | b.owned == all_partitions(topic)

        wait_for(both, split, what="two disjoint shares of every partition")
        a.commit_until(10)
        b.commit_until(10)
        assert split()  # no rebalance meanwhile
        mine = {p for _, p in a.owned or ()}
        before = {p: len(b.got.get(p, [])) for p in mine}
        a.stop()
        wait_for([b], lambda: b.owned == all_partitions(topic), what="b taking a's share")
        done_b = b.stop()
        assert {int(p): o for p, o in done_b["committed"].items()} == dict.fromkeys(
            range(PARTITIONS), 10
        )
        # b took a's partitions over at a's commits: it read none of them again
        assert all(len(b.got.get(p, [])) == before[p] for p in mine)
    finally:
        a.kill()
        if b is not None:
            b.kill()
    # a restarted member resumes from the committed offsets
    assert admin(bootstrap, ("produce", [topic, 5, 4])) == [0]
    c = Member(venv, bootstrap, topic, group, settings)
    try:
        wait_for([c], lambda: c.owned == all_partitions(topic), what="the restarted member")
        c.commit_until(15)
        done_c = c.stop()
    finally:
        c.kill()
    assert {p: sorted(offs) for p, offs in c.got.items()} == {
        p: list(range(10, 15)) for p in range(PARTITIONS)
    }
    assert {int(p): o for p, o in done_c["committed"].items()} == dict.fromkeys(
        range(PARTITIONS), 15
    )
    # one group model: a Cursus consumer of the group reads the Kafka group's commits
    offsets = trio.run(cursus_offsets, gateway.address("cursus"), topic, group)
    assert offsets == [15] * PARTITIONS
