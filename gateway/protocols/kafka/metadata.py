"""Metadata v1-v12 (v0 is the 0.8 session's): one broker (this listener), every partition led by
it, topic ids (v10+) derived from the names. Topics are created on first mention, as the 0.8
path does, when the server allows it and the request asks (v4+ ``allow_auto_topic_creation``),
at most ``max_topics_created_per_request`` per request."""

from __future__ import annotations

import base64
from typing import Any

from kio.schema.errors import ErrorCode as K

from gateway.model import DescribeTopic, ErrorCode, GatewayError, ListTopics, TopicDescription
from gateway.observability import limit_hit
from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import PROTOCOL, KafkaContext, RequestHeader
from gateway.protocols.kafka.topics import NAMESPACE, ZERO, names_by_id, topic_id

API = "metadata"
CLUSTER_ID = base64.urlsafe_b64encode(NAMESPACE.bytes).decode().rstrip("=")
"""The cluster id every gateway answers (22 characters, as Kafka's): one logical cluster."""


async def describe(
    ctx: KafkaContext, name: str, create: bool, may_create: bool
) -> tuple[TopicDescription | None, bool]:
    """(the topic, whether this call created it); (None, False) when it would have to be
    created but the request's creations are used up."""
    try:
        return await ctx.core.execute(DescribeTopic(name)), False
    except GatewayError as exc:
        if exc.code is not ErrorCode.UNKNOWN_TOPIC or not create:
            raise
        if not ctx.config.server.auto_create_topics:
            raise
        if not may_create:
            return None, False
    return await ctx.core.execute(DescribeTopic(name, create=True)), True


async def handle(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    cls = response_class(3, version)
    topic_cls = nested(cls, "MetadataResponseTopic")
    part_cls = nested(cls, "MetadataResponsePartition")
    broker_cls = nested(cls, "MetadataResponseBroker")
    node = ctx.node_id
    wanted = request.topics
    names: list[tuple[str | None, Any]] = []  # (name or None for an unknown id, the id)
    if wanted is None:
        names = [(info.name, None) for info in await ctx.core.execute(ListTopics())]
    else:
        ids = {t.topic_id for t in wanted if getattr(t, "topic_id", None) not in (None, ZERO)}
        by_id = await names_by_id(ctx.core, ids) if ids else {}
        for t in wanted:
            tid = getattr(t, "topic_id", None)
            if t.name is None and tid not in (None, ZERO):
                names.append((by_id.get(tid), tid))
            else:
                names.append((t.name or "", None))
    create = wanted is not None and getattr(request, "allow_auto_topic_creation", True)
    creations = ctx.config.server.max_topics_created_per_request
    topics = []
    for name, tid in names:
        common = {"is_internal": False, "topic_authorized_operations": -2147483648}
        if name is None:
            ctx.count(API, str(int(K.unknown_topic_id)))
            topics.append(
                build(
                    topic_cls,
                    error_code=K.unknown_topic_id,
                    name=None,
                    topic_id=tid,
                    partitions=(),
                    **common,
                )
            )
            continue
        try:
            desc, created = await describe(ctx, name, create, creations > 0)
            if desc is None:
                limit_hit("max_topics_created_per_request", PROTOCOL, ctx.log, topic=name)
                ctx.count(API, str(int(K.leader_not_available)))
                topics.append(
                    build(
                        topic_cls,
                        error_code=K.leader_not_available,
                        name=name,
                        topic_id=topic_id(name),
                        partitions=(),
                        **common,
                    )
                )
                continue
            creations -= created
        except GatewayError as exc:
            code = ctx.error(API, exc, topic=name)
            topics.append(
                build(
                    topic_cls, error_code=K(code), name=name, topic_id=ZERO, partitions=(), **common
                )
            )
            continue
        parts = tuple(
            build(
                part_cls,
                error_code=K.none,
                partition_index=p.partition,
                leader_id=node,
                leader_epoch=0,
                replica_nodes=(node,),
                isr_nodes=(node,),
                offline_replicas=(),
            )
            for p in desc.partitions
        )
        topics.append(
            build(
                topic_cls,
                error_code=K.none,
                name=name,
                topic_id=topic_id(name, ctx.core),
                partitions=parts,
                **common,
            )
        )
    ctx.count(API, "ok")
    broker = build(broker_cls, node_id=node, host=ctx.host, port=ctx.port, rack=None)
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        brokers=(broker,),
        cluster_id=CLUSTER_ID,
        controller_id=node,
        topics=tuple(topics),
        cluster_authorized_operations=-2147483648,
    )
