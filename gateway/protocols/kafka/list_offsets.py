"""ListOffsets v1-v7 (v0 is the 0.8 session's Offsets): -1 latest (the high watermark),
-2 earliest (the log start), a timestamp in ms: the first offset at or after it. -3 (the
record with the largest timestamp, v7) is not kept by the backends: UNSUPPORTED_VERSION."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K

from gateway.model import ErrorCode, GatewayError, ListOffsets, OffsetSpec
from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import KafkaContext, RequestHeader

API = "list_offsets"
LATEST = -1
EARLIEST = -2


async def _offset(ctx: KafkaContext, topic: str, partition: int, when: int) -> tuple[int, int]:
    """(timestamp, offset) the answer carries."""
    if when == LATEST:
        r = await ctx.core.execute(ListOffsets(topic, partition, OffsetSpec.LATEST))
        return -1, r.high_watermark
    if when == EARLIEST:
        r = await ctx.core.execute(ListOffsets(topic, partition, OffsetSpec.EARLIEST))
        return -1, r.log_start_offset
    if when < 0:
        raise GatewayError(ErrorCode.UNSUPPORTED, f"ListOffsets timestamp {when} is not kept")
    r = await ctx.core.execute(ListOffsets(topic, partition, when * 1000))
    if r.offset >= r.high_watermark:
        return -1, -1  # no record at or after it, as a broker answers
    return when, r.offset


async def handle(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(2, header.api_version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    part_cls = nested(cls, "ListOffsetsPartitionResponse")
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                ts, offset = await _offset(ctx, t.name, p.partition_index, p.timestamp)
                code = K.none
                ctx.count(API, "ok")
            except GatewayError as exc:
                code = K(ctx.error(API, exc, topic=t.name, partition=p.partition_index))
                ts, offset = -1, -1
            parts.append(
                build(
                    part_cls,
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=ts,
                    offset=offset,
                    leader_epoch=0,
                    old_style_offsets=(offset,) if offset >= 0 else (),
                )
            )
        topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
    return build(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))
