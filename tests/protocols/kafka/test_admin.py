"""CreateTopics, DeleteTopics, CreatePartitions and DescribeConfigs through the dispatcher,
versions old and new: configs mapped to the gateway's topic keys, the errors a broker gives."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode as K

from gateway.model import DescribeTopic
from gateway.protocols.kafka.topics import topic_id
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
        creatable(version, "d", 1, cleanup_policy="compact"),
    )
    got = {t.name: t for t in answer.topics}
    assert got["a"].error_code == K.none
    assert got["b"].error_code == K.invalid_config and "compression.type" in got["b"].error_message
    assert got["c"].error_code == K.invalid_partitions
    assert got["bad\x01name"].error_code == K.invalid_topic_exception
    assert got["d"].error_code == K.invalid_config
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
