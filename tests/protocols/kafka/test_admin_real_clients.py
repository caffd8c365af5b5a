"""confluent-kafka's AdminClient against the Kafka listener (embedded backend): create and
delete topics, add partitions, describe topic and broker configs, list, describe and delete
consumer groups, with the errors a broker gives."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from tests.protocols.kafka.conftest import CLIENTS, confluent, venv_python
from tests.protocols.kafka.group_clients import Member, admin, wait_for
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(
        tmp_path_factory.mktemp("gw"), listeners={"kafka08": {}}, backend="embedded"
    ) as gw:
        yield gw


def test_topics_partitions_and_configs(gateway: GatewayProcess) -> None:
    bootstrap = "%s:%d" % gateway.address("kafka08")  # noqa: UP031
    created, again, grown, shrunk, counts, configs, deleted, counts_after = admin(
        bootstrap,
        ("create_topics", [["at-1", 3, {"retention.ms": "60000"}], ["at-2", 1, {"x.y": "1"}]]),
        ("create_topics", [["at-1", 3, {}]]),
        ("create_partitions", [["at-1", 5]]),
        ("create_partitions", [["at-1", 2]]),
        ("topics", ["at-1", "at-2"]),
        ("describe_configs", [["topic", "at-1"], ["broker", "0"], ["topic", "nope"]]),
        ("delete_topics", ["at-1", "nope"]),
        ("topics", ["at-1"]),
    )
    assert created["at-1"] == {"ok": None}
    assert created["at-2"]["error"] == "INVALID_CONFIG" and "x.y" in created["at-2"]["text"]
    assert again["at-1"]["error"] == "TOPIC_ALREADY_EXISTS"
    assert grown == {"at-1": {"ok": None}}
    assert shrunk["at-1"]["error"] == "INVALID_PARTITIONS"
    assert counts == {"at-1": 5}  # at-2 was refused, so never created
    topic = configs["at-1"]
    assert topic["retention.ms"][0] == "60000"
    assert topic["max.message.bytes"][0] == "1000012"
    assert topic["cleanup.policy"][0] == "delete"
    broker = configs["0"]
    assert broker["message.max.bytes"][0] == "1000012"
    assert broker["auto.create.topics.enable"][0] == "true"
    assert configs["nope"] == {"error": "UNKNOWN_TOPIC_OR_PART"}
    assert deleted["at-1"] == {"ok": None}
    assert deleted["nope"]["error"] == "UNKNOWN_TOPIC_OR_PART"
    assert counts_after == {}


def test_cleanup_policy_compact_is_kept_whole(gateway: GatewayProcess) -> None:
    """The embedded log keeps every record unless told otherwise: a compact topic is taken and
    kept whole (a key's every version is read, the latest last); one with retention is not."""
    bootstrap = "%s:%d" % gateway.address("kafka08")  # noqa: UP031
    created, configs = admin(
        bootstrap,
        ("create_topics", [
            ["cp-1", 1, {"cleanup.policy": "compact"}],
            ["cp-2", 1, {"cleanup.policy": "compact", "retention.ms": "60000"}],
        ]),
        ("describe_configs", [["topic", "cp-1"]]),
    )  # fmt: skip
    assert created["cp-1"] == {"ok": None}
    refused = created["cp-2"]
    assert refused["error"] == "INVALID_CONFIG"
    assert "cleanup.policy" in refused["text"] and "retention.ms = 60000" in refused["text"]
    assert configs["cp-1"]["cleanup.policy"][0] == "compact"
    confluent({"bootstrap": bootstrap, "topic": "cp-1", "count": 3})
    twice = confluent({"bootstrap": bootstrap, "topic": "cp-1", "count": 3})
    assert twice["errors"] == []
    assert [(offset, key) for offset, key, *_ in twice["records"]] == [
        (0, "key-0"), (1, "key-1"), (2, "key-2"), (3, "key-0"), (4, "key-1"), (5, "key-2")
    ]  # fmt: skip


def test_list_describe_and_delete_groups(gateway: GatewayProcess) -> None:
    bootstrap = "%s:%d" % gateway.address("kafka08")  # noqa: UP031
    assert admin(bootstrap, ("create_topics", [["ag", 2, {}]]), ("produce", ["ag", 3, 2])) == [
        {"ag": {"ok": None}},
        0,
    ]
    member = Member("confluent-kafka", bootstrap, "ag", "admin-g")
    try:
        wait_for([member], lambda: member.owned == {("ag", 0), ("ag", 1)}, what="assignment")
        member.commit_until(3)
        listed, described, refused = admin(
            bootstrap,
            ("list_groups", None),
            ("describe_groups", ["admin-g", "never-seen"]),
            ("delete_groups", ["admin-g"]),
        )
        assert ["admin-g", "STABLE"] in listed
        assert described["admin-g"] == {
            "state": "STABLE",
            "protocol": "range",
            "members": [[["ag", 0], ["ag", 1]]],
        }
        assert described["never-seen"]["state"] == "DEAD"
        assert refused["admin-g"]["error"] == "NON_EMPTY_GROUP"
        member.stop()
    finally:
        member.kill()
    listed, deleted, listed_after, again = admin(
        bootstrap,
        ("list_groups", None),
        ("delete_groups", ["admin-g"]),
        ("list_groups", None),
        ("delete_groups", ["admin-g"]),
    )
    assert ["admin-g", "EMPTY"] in listed  # its committed offsets keep it
    assert deleted == {"admin-g": {"ok": None}}
    assert all(name != "admin-g" for name, _ in listed_after)
    assert again["admin-g"]["error"] == "GROUP_ID_NOT_FOUND"


def test_a_compacted_topic_refuses_a_record_without_a_key(gateway: GatewayProcess) -> None:
    """As a broker's compacted topic: confluent-kafka's record without a key fails delivery
    with INVALID_RECORD (its batch with it), keyed records (an empty key too) are stored; a
    topic of the delete policy takes records without a key."""
    bootstrap = "%s:%d" % gateway.address("kafka08")  # noqa: UP031
    created, keyless, keyed, plain = admin(
        bootstrap,
        ("create_topics", [["ck-1", 1, {"cleanup.policy": "compact"}], ["ck-2", 1, {}]]),
        ("produce_keys", ["ck-1", [None]]),
        ("produce_keys", ["ck-1", ["a", "", "a"]]),
        ("produce_keys", ["ck-2", [None, "a"]]),
    )
    assert created == {"ck-1": {"ok": None}, "ck-2": {"ok": None}}
    assert [fate["error"] for fate in keyless] == ["INVALID_RECORD"]
    assert keyed == [{"ok": 0}, {"ok": 1}, {"ok": 2}]  # nothing of the refused batch stored
    assert plain == [{"ok": 0}, {"ok": 1}]


def test_kafka_python_learns_which_record_had_no_key(gateway: GatewayProcess) -> None:
    """kafka-python 3 reads the record errors (Produce v8+): the record without a key gets the
    broker's message, the rest of its batch a failure of their own; nothing of it is stored."""
    bootstrap = "%s:%d" % gateway.address("kafka08")  # noqa: UP031
    (created,) = admin(bootstrap, ("create_topics", [["ck-3", 1, {"cleanup.policy": "compact"}]]))
    assert created == {"ck-3": {"ok": None}}
    args = {"bootstrap": bootstrap, "topic": "ck-3", "keys": ["a", None, "b"]}
    proc = subprocess.run(
        [venv_python("kafka-python-3"), str(CLIENTS / "kafka_python_produce.py"), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    first, keyless, last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert keyless["error"] == "InvalidRecordError"
    assert (
        "Compacted topic cannot accept message without key in topic partition ck-3-0."
        in keyless["text"]
    )
    assert "error" in first and "error" in last  # their batch was refused with it
    args["keys"] = ["a"]
    proc = subprocess.run(
        [venv_python("kafka-python-3"), str(CLIENTS / "kafka_python_produce.py"), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [{"ok": 0}]
