"""Commits of confluent-kafka consumers that assign themselves partitions (``assign()`` and
commit: no member id, no generation) against a running gateway on the embedded backend, as a
Kafka broker answers them: refused with UNKNOWN_MEMBER_ID while the group has members (a
subscribed confluent-kafka member), stored once it has none; a partition of a topic that does
not exist is UNKNOWN_TOPIC_OR_PART and nothing is stored for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.protocols.kafka.group_clients import Member, admin, wait_for
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(
        tmp_path_factory.mktemp("gw"), listeners={"kafka08": {}}, backend="embedded"
    ) as gw:
        yield gw


def test_simple_commit_refused_while_the_group_has_members(gateway: GatewayProcess) -> None:
    bootstrap = "%s:%d" % gateway.address("kafka08")  # noqa: UP031
    assert admin(bootstrap, ("create_topics", [["sc", 2, {}]]), ("produce", ["sc", 3, 2])) == [
        {"sc": {"ok": None}},
        0,
    ]
    member = Member("confluent-kafka", bootstrap, "sc", "sc-g")
    try:
        wait_for([member], lambda: member.owned == {("sc", 0), ("sc", 1)}, what="assignment")
        member.commit_until(3)
        refused, kept = admin(
            bootstrap,
            ("commit", ["sc-g", [["sc", 0, 1], ["sc", 1, 1]]]),
            ("committed", ["sc-g", [["sc", 0], ["sc", 1]]]),
        )
        assert refused == {"error": "UNKNOWN_MEMBER_ID"}
        assert kept == {"sc/0": 3, "sc/1": 3}  # the member's commits, untouched
        member.stop()
    finally:
        member.kill()
    stored, read = admin(
        bootstrap,
        ("commit", ["sc-g", [["sc", 0, 1], ["sc", 1, 2]]]),
        ("committed", ["sc-g", [["sc", 0], ["sc", 1]]]),
    )
    assert stored == {"sc/0": "ok", "sc/1": "ok"}  # no members any more: stored as it comes
    assert read == {"sc/0": 1, "sc/1": 2}


def test_commit_for_a_missing_topic_stores_nothing(gateway: GatewayProcess) -> None:
    bootstrap = "%s:%d" % gateway.address("kafka08")  # noqa: UP031
    created, missing, good, read = admin(
        bootstrap,
        ("create_topics", [["mt", 1, {}]]),
        ("commit", ["mt-g", [["no-such-topic", 0, 5]]]),
        ("commit", ["mt-g", [["mt", 0, 4]]]),
        ("committed", ["mt-g", [["no-such-topic", 0], ["mt", 0]]]),
    )
    assert created == {"mt": {"ok": None}}
    assert missing == {"error": "UNKNOWN_TOPIC_OR_PART"}
    assert good == {"mt/0": "ok"}
    assert read["mt/0"] == 4 and read["no-such-topic/0"] < 0  # nothing stored for it
