"""CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs through the dispatcher,
versions old and new: configs mapped to the gateway's topic keys, the errors a broker gives."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode as K

from gateway.backends.embedded import EmbeddedBackend, EmbeddedConfig
from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.backends.memory import MemoryBackend
from gateway.core.engine import Core
from gateway.model import DescribeTopic
from gateway.protocols.kafka.topics import topic_id
from tests.backends.servers import opened
from tests.protocols.kafka.kio_calls import call, make_context, sub

TIMEOUT = datetime.timedelta(seconds=5)


def creatable(version: int, name: str, partitions: int = 2, **configs: str):
    cfg = tuple(
        sub(19, version, "CreatableTopicConfig", name=k.replace("_", "."), value=v)
        for k, v in configs.items()
    )
    return sub(19, version, "CreatableTopic", name=name, num_partitions=partitions,
               replication_factor=-1, assignments=(), configs=cfg)  # fmt: skip


async def create(ctx, version: int, *topics, validate_only: bool = False):
    return await call(ctx, 19, version, topics=topics, timeout=TIMEOUT, validate_only=validate_only)


@pytest.mark.parametrize("version", [2, 5, 7])
async def test_create_topics(version: int) -> None:
    ctx = make_context()
    answer = await create(
        ctx,
        version,
        creatable(version, "a", 3, retention_ms="60000"),
        creatable(version, "b", 1, **{"compression_type": "zstd"}),
        creatable(version, "c", 0),
        creatable(version, "bad\x01name"),
        creatable(version, "d", 1, cleanup_policy="lru"),
    )
    got = {t.name: t for t in answer.topics}
    assert got["a"].error_code == K.none
    assert got["b"].error_code == K.invalid_config and "compression.type" in got["b"].error_message
    assert got["c"].error_code == K.invalid_partitions
    assert got["bad\x01name"].error_code == K.invalid_topic_exception
    assert got["d"].error_code == K.invalid_config and "'lru'" in got["d"].error_message
    info = (await ctx.core.execute(DescribeTopic("a"))).topic
    assert info.partitions == 3 and dict(info.config) == {"retention_ms": "60000"}
    if version >= 5:
        assert (got["a"].num_partitions, got["a"].replication_factor) == (3, 1)
        configs = {c.name: c.value for c in got["a"].configs}
        assert configs["retention.ms"] == "60000" and configs["cleanup.policy"] == "delete"
    if version >= 7:
        assert got["a"].topic_id == topic_id("a")
    again = await create(ctx, version, creatable(version, "a"))
    assert again.topics[0].error_code == K.topic_already_exists


async def test_create_topics_validate_only_and_duplicates() -> None:
    ctx = make_context()
    answer = await create(ctx, 4, creatable(4, "v"), validate_only=True)
    assert answer.topics[0].error_code == K.none
    assert await ctx.core.router.default_backend.list_topics() == []  # nothing created
    twice = await create(ctx, 4, creatable(4, "x"), creatable(4, "x"))
    assert [t.error_code for t in twice.topics] == [K.invalid_request, K.invalid_request]


@pytest.mark.parametrize("version", [1, 5, 6])
async def test_delete_topics(version: int) -> None:
    ctx = make_context()
    await create(ctx, 4, creatable(4, "a"), creatable(4, "b"))
    if version >= 6:
        topics = (
            sub(20, 6, "DeleteTopicState", name="a", topic_id=None),
            sub(20, 6, "DeleteTopicState", name=None, topic_id=topic_id("b")),
            sub(20, 6, "DeleteTopicState", name=None, topic_id=topic_id("nope")),
        )
        answer = await call(ctx, 20, 6, topics=topics, timeout=TIMEOUT)
        assert [(r.name, r.error_code) for r in answer.responses] == [
            ("a", K.none), ("b", K.none), (None, K.unknown_topic_id)]  # fmt: skip
    else:
        answer = await call(ctx, 20, version, topic_names=("a", "b", "nope"), timeout=TIMEOUT)
        assert [(r.name, r.error_code) for r in answer.responses] == [
            ("a", K.none), ("b", K.none), ("nope", K.unknown_topic_or_partition)]  # fmt: skip
    assert await ctx.core.router.default_backend.list_topics() == []


@pytest.mark.parametrize("version", [0, 3])
async def test_create_partitions(version: int) -> None:
    ctx = make_context()
    await create(ctx, 4, creatable(4, "a", 2))

    def grow(name: str, count: int):
        return sub(37, version, "CreatePartitionsTopic", name=name, count=count, assignments=None)

    answer = await call(ctx, 37, version, topics=(grow("a", 4), grow("nope", 3)),
                        timeout=TIMEOUT, validate_only=False)  # fmt: skip
    assert [(r.name, r.error_code) for r in answer.results] == [
        ("a", K.none), ("nope", K.unknown_topic_or_partition)]  # fmt: skip
    assert (await ctx.core.execute(DescribeTopic("a"))).topic.partitions == 4
    fewer = await call(ctx, 37, version, topics=(grow("a", 3),), timeout=TIMEOUT,
                       validate_only=False)  # fmt: skip
    assert fewer.results[0].error_code == K.invalid_partitions
    dry = await call(ctx, 37, version, topics=(grow("a", 9),), timeout=TIMEOUT, validate_only=True)
    assert dry.results[0].error_code == K.none
    assert (await ctx.core.execute(DescribeTopic("a"))).topic.partitions == 4


@pytest.mark.parametrize("version", [1, 4])
async def test_describe_configs(version: int) -> None:
    ctx = make_context(message_max_bytes=5000)
    await create(ctx, 4, creatable(4, "a", 1, retention_bytes="1000"))

    def resource(kind: int, name: str, keys=None):
        return sub(32, version, "DescribeConfigsResource", resource_type=kind,
                   resource_name=name, configuration_keys=keys)  # fmt: skip

    answer = await call(
        ctx,
        32,
        version,
        resources=(
            resource(2, "a"),
            resource(2, "a", ("retention.bytes",)),
            resource(4, "0"),
            resource(4, "7"),
            resource(2, "nope"),
            resource(8, "x"),
        ),
        include_synonyms=False,
        include_documentation=False,
    )
    topic, only, broker, other_broker, missing, logger = answer.results
    rows = {c.name: (c.value, c.config_source) for c in topic.configs}
    assert rows["retention.bytes"] == ("1000", 1)  # set on the topic
    assert rows["retention.ms"] == ("-1", 5)  # the default
    assert rows["max.message.bytes"][0] == "5000"
    assert [c.name for c in only.configs] == ["retention.bytes"]
    assert {c.name: c.value for c in broker.configs}["message.max.bytes"] == "5000"
    assert other_broker.error_code == K.invalid_request
    assert missing.error_code == K.unknown_topic_or_partition
    assert logger.error_code == K.invalid_request


def described(answer) -> dict[str, tuple[int, str | None, str | None]]:
    """Per topic of a CreateTopics v5+ answer: (error code, message, its cleanup.policy)."""
    return {
        t.name: (
            t.error_code,
            t.error_message,
            next((c.value for c in t.configs or () if c.name == "cleanup.policy"), None),
        )
        for t in answer.topics
    }


KEEP_ALL = {"cleanup_policy": "compact", "retention_ms": "-1", "retention_bytes": "-1"}


async def test_cleanup_policy_compact_where_every_record_is_kept(tmp_path: Path) -> None:
    """The gateway never compacts: ``compact`` is taken where the topic keeps every record (kept
    whole, the policy remembered), refused naming the retention in the way elsewhere."""
    embedded = EmbeddedBackend("disk", EmbeddedConfig(retention_ms=3_600_000), tmp_path)
    async with opened(embedded):
        core = Core(
            {"mem": MemoryBackend("mem"), "disk": embedded}, [("disk.*", "disk"), ("*", "mem")]
        )
        ctx = make_context(core)
        answer = await create(
            ctx,
            7,
            creatable(7, "kept", 1, cleanup_policy="compact"),
            creatable(7, "both", 1, cleanup_policy="delete, compact", retention_ms="1000"),
            creatable(7, "aged", 1, cleanup_policy="compact", retention_ms="60000"),
            creatable(7, "disk.default", 1, cleanup_policy="compact"),
            creatable(7, "disk.kept", 1, **KEEP_ALL),
        )
        got = described(answer)
        assert got["kept"] == (K.none, None, "compact")
        assert got["both"] == (K.none, None, "compact,delete")
        assert got["disk.kept"] == (K.none, None, "compact")
        code, message, _ = got["aged"]
        assert code == K.invalid_config
        assert "cleanup.policy" in message and "'compact'" in message
        assert "retention.ms = 60000" in message
        code, message, _ = got["disk.default"]
        assert code == K.invalid_config and "backend 'disk'" in message
        assert "retention_ms = 3600000" in message
        made = [*await core.backends["mem"].list_topics(), *await embedded.list_topics()]
        assert {t.name for t in made} == {"kept", "both", "disk.kept"}  # none of the refused
        assert dict((await core.topic("disk.kept")).config)["cleanup_policy"] == "compact"
        keys = ("cleanup.policy",)
        resources = tuple(
            sub(
                32,
                4,
                "DescribeConfigsResource",
                resource_type=2,
                resource_name=name,
                configuration_keys=keys,
            )  # fmt: skip
            for name in ("kept", "disk.kept", "both")
        )
        configs = await call(ctx, 32, 4, resources=resources, include_synonyms=False,
                             include_documentation=False)  # fmt: skip
        assert [(r.resource_name, [(c.name, c.value, c.config_source) for c in r.configs])
                for r in configs.results] == [
            ("kept", [("cleanup.policy", "compact", 1)]),
            ("disk.kept", [("cleanup.policy", "compact", 1)]),
            ("both", [("cleanup.policy", "compact,delete", 1)]),
        ]  # fmt: skip
        checked = await create(
            ctx, 7, creatable(7, "disk.v", 1, cleanup_policy="compact"), validate_only=True
        )
        assert checked.topics[0].error_code == K.invalid_config  # validate_only checks it too


async def test_cleanup_policy_compact_refused_where_the_backend_has_its_own_retention() -> None:
    """A Kafka cluster deletes by its own retention (the gateway cannot see it): refused before
    the cluster is asked anything (this backend is never opened)."""
    cluster = KafkaBackend("cluster", KafkaConfig(bootstrap="127.0.0.1:1"))
    ctx = make_context(Core({"cluster": cluster}, [("*", "cluster")]))
    answer = await create(ctx, 7, creatable(7, "c", 1, **KEEP_ALL))
    code, message, _ = described(answer)["c"]
    assert code == K.invalid_config and "backend 'cluster' (kafka)" in message
    assert "'compact'" in message
