"""Topic administration: CreateTopics v2-v7, DeleteTopics v1-v6, CreatePartitions v0-v3 and
DescribeConfigs v1-v4 (topics and this broker).

Topic configs map onto the gateway's own topic keys: ``retention.ms`` -> ``retention_ms``,
``retention.bytes`` -> ``retention_bytes`` (every backend with retention), ``segment.bytes``
-> ``segment_bytes`` (the embedded log). Any other config is INVALID_CONFIG, as a broker answers
a name it does not know.

``cleanup.policy``: the gateway's logs are never compacted. ``delete`` is what every topic
does; ``compact,delete`` is taken too (retention deletes old records as Kafka's would, and
nothing is compacted, so readers see every version of a key). ``compact`` is taken only where
the topic keeps every record (its backend deletes nothing: no ``retention_ms`` or
``retention_bytes`` applies to it, on a backend whose retention the gateway decides): then the
topic is kept whole, reads see every version of a key, the latest last. Either is remembered
under the topic key ``cleanup_policy``, which DescribeConfigs reports.
The replication factor and manual replica assignments are accepted and not used (replication
is the backend's business); the topic reports a replication factor of 1: this one broker.
Configs are read-only (no AlterConfigs).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K

from gateway.core.names import check_topic
from gateway.model import (
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    ErrorCode,
    GatewayError,
    TopicInfo,
)
from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import KafkaContext, RequestHeader
from gateway.protocols.kafka.topics import ZERO, names_by_id, topic_id

TOPIC_KEYS = {
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "segment.bytes": "segment_bytes",
}
"""Kafka topic config -> the gateway's topic key."""

CLEANUP_KEY = "cleanup_policy"
"""The gateway's topic key remembering a ``cleanup.policy`` other than ``delete``."""

KEEPS_RECORDS_UNLESS_TOLD = frozenset({"memory", "embedded", "nats"})
"""Backend types that delete a topic's records only by its ``retention_ms`` / ``retention_bytes``
(topic keys, or the backend's defaults); any other (a Kafka cluster, an upstream server)
applies retention of its own the gateway cannot see, so a ``compact`` topic is refused there."""

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

# DescribeConfigs config sources and types
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_BOOLEAN, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 3, 5, 7


class InvalidConfig(GatewayError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, message)


def gateway_config(configs: Any) -> tuple[tuple[str, str], ...]:
    """The gateway's topic keys for a CreateTopics request's configs (InvalidConfig for a
    config the gateway does not keep)."""
    out = []
    for c in configs:
        if c.name == "cleanup.policy":
            policy = cleanup_policy(c.value)
            if policy != "delete":
                out.append((CLEANUP_KEY, policy))
            continue
        key = TOPIC_KEYS.get(c.name)
        if key is None:
            known = ", ".join([*TOPIC_KEYS, "cleanup.policy"])
            raise InvalidConfig(f"unknown topic config {c.name!r} (the gateway keeps {known})")
        if c.value is None:
            continue
        try:
            int(c.value)
        except ValueError:
            raise InvalidConfig(f"{c.name}: got {c.value!r}, expected an integer") from None
        out.append((key, c.value))
    return tuple(out)


def cleanup_policy(value: str | None) -> str:
    """``delete``, ``compact`` or ``compact,delete`` for a CreateTopics ``cleanup.policy``."""
    if value is None:
        return "delete"
    policies = {v.strip() for v in value.split(",")}
    if not policies or not policies <= {"delete", "compact"}:
        raise InvalidConfig(
            f"cleanup.policy: got {value!r}, expected delete, compact or compact,delete"
        )
    return ",".join(sorted(policies))


def check_kept_whole(ctx: KafkaContext, topic: str, config: tuple[tuple[str, str], ...]) -> None:
    """InvalidConfig unless topic ``topic``, created with ``config``, keeps every record: the
    condition of ``cleanup.policy=compact``, which the gateway honours by never deleting."""
    own = dict(config)
    if own.get(CLEANUP_KEY) != "compact":
        return
    backend = ctx.core.router.backend_for(topic)
    refused = "cleanup.policy: got 'compact', which the gateway keeps whole (never compacted)"
    if backend.type_name not in KEEPS_RECORDS_UNLESS_TOLD:
        raise InvalidConfig(
            f"{refused}, but the topic's backend {backend.name!r} ({backend.type_name}) deletes "
            "old records by a retention of its own; use cleanup.policy=delete"
        )
    defaults = getattr(backend, "config", None)
    for kafka_name, key in TOPIC_KEYS.items():
        if key not in ("retention_ms", "retention_bytes"):
            continue
        value: str | int | None
        if key in own:
            value, where = own[key], f"the topic's {kafka_name}"
        else:
            value = getattr(defaults, key, None)
            where = f"backend {backend.name!r}'s {key}"
        if value is not None and int(value) >= 0:
            raise InvalidConfig(
                f"{refused}, but {where} = {value} deletes old records; give the topic "
                f"{kafka_name}=-1 or use cleanup.policy=delete"
            )


def _error(ctx: KafkaContext, api: str, exc: GatewayError, **fields: Any) -> K:
    if isinstance(exc, InvalidConfig):
        ctx.count(api, str(int(K.invalid_config)))
        return K.invalid_config
    return K(ctx.error(api, exc, **fields))


# ---------------------------------------------------------------------------- topic configs


ConfigRow = tuple[str, str, int, int]
"""(name, value, source, type) of one config DescribeConfigs answers."""


def topic_configs(
    ctx: KafkaContext, name: str, config: tuple[tuple[str, str], ...]
) -> list[ConfigRow]:
    """(name, value, source, type) of every config the gateway knows for topic ``name``."""
    own = dict(config)
    backend_config = getattr(ctx.core.router.backend_for(name), "config", None)
    rows: list[ConfigRow] = []
    for kafka_name, key in TOPIC_KEYS.items():
        default = getattr(backend_config, key, None)
        if key in own:
            rows.append((kafka_name, own[key], SOURCE_TOPIC, TYPE_LONG))
        elif default is not None:
            rows.append((kafka_name, str(default), SOURCE_DEFAULT, TYPE_LONG))
        elif kafka_name != "segment.bytes":
            rows.append((kafka_name, "-1", SOURCE_DEFAULT, TYPE_LONG))
    max_bytes = ctx.listener.message_max_bytes
    rows.append(("max.message.bytes", str(max_bytes), SOURCE_DEFAULT, TYPE_INT))
    if CLEANUP_KEY in own:
        rows.append(("cleanup.policy", own[CLEANUP_KEY], SOURCE_TOPIC, TYPE_LIST))
    else:
        rows.append(("cleanup.policy", "delete", SOURCE_DEFAULT, TYPE_LIST))
    return rows


def broker_configs(ctx: KafkaContext) -> list[ConfigRow]:
    server = ctx.config.server
    return [
        ("message.max.bytes", str(ctx.listener.message_max_bytes),
         SOURCE_STATIC_BROKER, TYPE_INT),
        ("auto.create.topics.enable", str(server.auto_create_topics).lower(),
         SOURCE_STATIC_BROKER, TYPE_BOOLEAN),
        ("num.partitions", str(server.default_partitions), SOURCE_STATIC_BROKER, TYPE_INT),
        ("default.replication.factor", "1", SOURCE_DEFAULT, TYPE_INT),
    ]  # fmt: skip


# ---------------------------------------------------------------------------- CreateTopics


async def _create(ctx: KafkaContext, t: Any, validate_only: bool) -> Any:
    """The created topic's TopicInfo (or, validating only, what it would be)."""
    partitions = t.num_partitions if t.num_partitions > 0 else None
    if t.num_partitions == 0 or t.num_partitions < -1:
        raise GatewayError(
            ErrorCode.INVALID_PARTITIONS, f"num_partitions {t.num_partitions}: expected >= 1"
        )
    if partitions is None and t.assignments:
        partitions = len(t.assignments)
    if t.replication_factor == 0 or t.replication_factor < -1:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"replication_factor {t.replication_factor}: expected >= 1"
        )
    config = gateway_config(t.configs)
    check_kept_whole(ctx, t.name, config)
    if not validate_only:
        return await ctx.core.execute(CreateTopic(t.name, partitions, config))
    check_topic(t.name)
    try:
        await ctx.core.topic(t.name)
    except GatewayError as exc:
        if exc.code is not ErrorCode.UNKNOWN_TOPIC:
            raise
    else:
        raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {t.name!r} already exists")
    return TopicInfo(t.name, partitions or ctx.config.server.default_partitions, config)


async def create_topics(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(19, header.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if header.api_version >= 5 else None
    names = [t.name for t in request.topics]
    results = []
    for t in request.topics:
        info = None
        message = None
        if names.count(t.name) > 1:
            code = K.invalid_request
            message = f"topic {t.name!r} is named more than once"
            ctx.count("create_topics", str(int(code)))
        else:
            try:
                info = await _create(ctx, t, request.validate_only)
                code = K.none
                ctx.count("create_topics", "ok")
            except GatewayError as exc:
                code = _error(ctx, "create_topics", exc, topic=t.name)
                message = exc.message
        configs = None
        if info is not None and config_cls is not None:
            configs = tuple(
                build(
                    config_cls,
                    name=n,
                    value=v,
                    read_only=True,
                    config_source=source,
                    is_sensitive=False,
                )
                for n, v, source, _type in topic_configs(ctx, t.name, info.config)
            )
        results.append(
            build(
                result_cls,
                name=t.name,
                topic_id=topic_id(t.name) if info is not None else ZERO,
                error_code=code,
                error_message=message,
                topic_config_error_code=0,
                num_partitions=info.partitions if info is not None else -1,
                replication_factor=1 if info is not None else -1,
                configs=configs,
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, topics=tuple(results))


# ---------------------------------------------------------------------------- DeleteTopics


async def delete_topics(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(20, header.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    if header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
        ids = {tid for name, tid in wanted if not name and tid is not None and tid != ZERO}
        by_id = await names_by_id(ctx.core, ids) if ids else {}
    else:
        wanted = [(name, None) for name in request.topic_names]
        by_id = {}
    results = []
    for name, tid in wanted:
        message = None
        if not name and tid is not None and tid != ZERO:
            name = by_id.get(tid)
            if name is None:
                ctx.count("delete_topics", str(int(K.unknown_topic_id)))
                results.append(
                    build(
                        result_cls,
                        name=None,
                        topic_id=tid,
                        error_code=K.unknown_topic_id,
                        error_message=f"unknown topic id {tid}",
                    )
                )
                continue
        try:
            await ctx.core.execute(DeleteTopic(name or ""))
            code = K.none
            ctx.count("delete_topics", "ok")
        except GatewayError as exc:
            code = K(ctx.error("delete_topics", exc, topic=name))
            message = exc.message
        results.append(
            build(
                result_cls,
                name=name,
                topic_id=topic_id(name) if name else ZERO,
                error_code=code,
                error_message=message,
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, responses=tuple(results))


# ---------------------------------------------------------------------------- CreatePartitions


async def create_partitions(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(37, header.api_version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    names = [t.name for t in request.topics]
    results = []
    for t in request.topics:
        message = None
        try:
            if names.count(t.name) > 1:
                raise GatewayError(
                    ErrorCode.INVALID_REQUEST, f"topic {t.name!r} is named more than once"
                )
            current = (await ctx.core.topic(t.name)).partitions
            if t.count <= current:
                raise GatewayError(
                    ErrorCode.INVALID_PARTITIONS,
                    f"topic {t.name!r} has {current} partitions; the new count {t.count} "
                    "must be more",
                )
            if not request.validate_only:
                await ctx.core.execute(CreatePartitions(t.name, t.count - current))
            code = K.none
            ctx.count("create_partitions", "ok")
        except GatewayError as exc:
            code = K(ctx.error("create_partitions", exc, topic=t.name))
            message = exc.message
        results.append(build(result_cls, name=t.name, error_code=code, error_message=message))
    return build(cls, throttle_time=NO_THROTTLE, results=tuple(results))


# ---------------------------------------------------------------------------- DescribeConfigs


async def describe_configs(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(32, header.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    results = []
    for r in request.resources:
        rows: list[ConfigRow] = []
        code, message = K.none, None
        try:
            if r.resource_type == TOPIC_RESOURCE:
                info = await ctx.core.topic(r.resource_name)
                rows = topic_configs(ctx, r.resource_name, info.config)
            elif r.resource_type == BROKER_RESOURCE:
                if r.resource_name not in ("", str(ctx.node_id)):
                    raise GatewayError(
                        ErrorCode.INVALID_REQUEST,
                        f"broker {r.resource_name!r}: this broker is {ctx.node_id}",
                    )
                rows = broker_configs(ctx)
            else:
                raise GatewayError(
                    ErrorCode.INVALID_REQUEST,
                    f"resource type {r.resource_type}: only topics (2) and brokers (4)",
                )
            ctx.count("describe_configs", "ok")
        except GatewayError as exc:
            code = K(ctx.error("describe_configs", exc, resource=r.resource_name))
            message = exc.message
        keys = r.configuration_keys
        configs = tuple(
            build(
                entry_cls,
                name=name,
                value=value,
                read_only=True,
                config_source=source,
                is_default=source == SOURCE_DEFAULT,
                is_sensitive=False,
                synonyms=(),
                config_type=kind,
                documentation=None,
            )
            for name, value, source, kind in rows
            if keys is None or name in keys
        )
        results.append(
            build(
                result_cls,
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                configs=configs,
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, results=tuple(results))
