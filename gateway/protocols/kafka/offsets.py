"""OffsetCommit v2-v9 and OffsetFetch v2-v9 (v8+ batched by group); v0-v1 are the 0.8
session's. Committed offsets are the gateway's one store, keyed by (group, topic, partition):
what a Kafka consumer of group ``g`` commits, a Cursus, Iggy or Kafka 0.8 consumer of ``g``
reads, and the reverse.

A commit is checked as a Kafka broker checks it, in its order: a partition of a topic that does
not exist (or past its partition count) is UNKNOWN_TOPIC_OR_PARTITION and nothing is stored
for it (one topic lookup per topic of the request); a member's commit (generation >= 0) is
fenced by the group's generation; a commit without one (a simple consumer, ``assign()``) is
UNKNOWN_MEMBER_ID for every partition while the Kafka group has members, and stored as it comes
into an empty or unknown group. A commit with a member id or a static instance id is a member's
whatever its generation (as Kafka checks it): generation -1 from a known member is
ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID. A member's commit (generation >= 0)
into a group that does not exist (no members, no snapshot, no committed offsets) is
ILLEGAL_GENERATION. The group is checked once per request. Groups of another protocol's
members (server-assigned) are the core's business, as before."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K

from gateway.model import CommitOffset, ErrorCode, FetchOffset, GatewayError
from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import KafkaContext, RequestHeader
from gateway.protocols.kafka.groups import group_error

OFFSET_METADATA_MAX = 4096
"""Kafka's ``offset.metadata.max.bytes``: longer commit metadata is OFFSET_METADATA_TOO_LARGE."""


class _Refusal:
    """One error that answers many partitions of a commit: counted for each, logged (when the
    client is at fault) once."""

    def __init__(self, exc: GatewayError, **fields: Any) -> None:
        self.exc = exc
        self.fields = fields
        self.code: K | None = None

    def answer(self, ctx: KafkaContext) -> K:
        if self.code is None:
            self.code = group_error(ctx, "offset_commit", self.exc, **self.fields)
        else:
            ctx.count("offset_commit", str(int(self.code)))
        return self.code


async def _partitions(ctx: KafkaContext, topic: str, group: str) -> int | _Refusal:
    """The partition count of ``topic``, or why no partition of it takes a commit."""
    try:
        return (await ctx.core.topic(topic)).partitions
    except GatewayError as exc:
        return _Refusal(exc, group=group, topic=topic)


async def _commit_refused(
    ctx: KafkaContext, group: str, generation: int, member_id: str, instance_id: str | None
) -> _Refusal | None:
    """Why the group refuses every partition of this commit (checked once per request), or
    None when the commit goes on to the store (see the module docstring)."""
    classic = ctx.core.classic
    try:
        if generation < 0 and not member_id and instance_id is None:
            classic.check_simple_commit(group)
            return None
        if classic.get(group) is not None:
            classic.check_generation(group, member_id, generation, instance_id)
            return None
        if ctx.core.groups.has_members(group):
            return None  # another protocol's members: the core fences it as ever
        if generation >= 0 and not await classic.exists(group):
            raise GatewayError(
                ErrorCode.ILLEGAL_GENERATION,
                f"group {group!r} does not exist, so has no generation {generation}",
            )
        if generation >= 0 and member_id:
            return None  # the core answers (a group of a shared store may have the member)
        raise GatewayError(
            ErrorCode.UNKNOWN_MEMBER,
            f"group {group!r} has no member {member_id!r} (instance {instance_id!r})",
        )
    except GatewayError as exc:
        return _Refusal(exc, group=group)


async def offset_commit(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(8, header.api_version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    part_cls = nested(cls, "OffsetCommitResponsePartition")
    group = request.group_id
    generation = request.generation_id_or_member_epoch
    member_id = request.member_id if generation >= 0 else ""
    instance_id = getattr(request, "group_instance_id", None)
    refused = await _commit_refused(ctx, group, generation, request.member_id, instance_id)
    counts: dict[str, int | _Refusal] = {}
    topics = []
    for t in request.topics:
        if t.name not in counts:
            counts[t.name] = await _partitions(ctx, t.name, group)
        count = counts[t.name]
        parts = []
        for p in t.partitions:
            metadata = p.committed_metadata or ""
            if isinstance(count, _Refusal):
                code = count.answer(ctx)
            elif not 0 <= p.partition_index < count:
                missing = GatewayError(
                    ErrorCode.UNKNOWN_PARTITION,
                    f"topic {t.name!r} has {count} partitions, no partition {p.partition_index}",
                )
                code = group_error(ctx, "offset_commit", missing, group=group, topic=t.name)
            elif refused is not None:
                code = refused.answer(ctx)
            elif len(metadata.encode()) > OFFSET_METADATA_MAX:
                code = K.offset_metadata_too_large
                ctx.count("offset_commit", str(int(code)))
            else:
                cmd = CommitOffset(
                    group,
                    t.name,
                    p.partition_index,
                    p.committed_offset,
                    metadata,
                    generation,
                    member_id,
                )
                try:
                    await ctx.core.execute(cmd)
                    code = K.none
                    ctx.count("offset_commit", "ok")
                except GatewayError as exc:
                    code = group_error(ctx, "offset_commit", exc, group=group, topic=t.name)
            parts.append(build(part_cls, partition_index=p.partition_index, error_code=code))
        topics.append(build(topic_cls, name=t.name, partitions=tuple(parts)))
    return build(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _committed_topics(ctx: KafkaContext, group: str) -> list[tuple[str, list[int]]]:
    """Every (topic, partitions) with an offset committed by ``group`` (a request for all)."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition, _ in await ctx.core.groups.committed(group):
        by_topic.setdefault(topic, []).append(partition)
    return sorted(by_topic.items())


async def _group_topics(
    ctx: KafkaContext, group: str, wanted: Any, topic_cls: Any, part_cls: Any
) -> tuple[Any, ...]:
    """The answer's topics for one group: ``wanted`` is the request's topics (None: all)."""
    if wanted is None:
        asked = await _committed_topics(ctx, group)
        everything = True
    else:
        asked = [(t.name, list(t.partition_indexes)) for t in wanted]
        everything = False
    topics = []
    for name, partitions in asked:
        parts = []
        for partition in partitions:
            offset, metadata, code = -1, "", K.none
            try:
                got = await ctx.core.execute(FetchOffset(group, name, partition))
                offset, metadata = got.offset, got.metadata
                ctx.count("offset_fetch", "ok")
            except GatewayError as exc:
                if everything and exc.code in (ErrorCode.UNAUTHORIZED, ErrorCode.UNKNOWN_TOPIC):
                    continue  # a topic this listener may not read is not listed
                code = group_error(ctx, "offset_fetch", exc, group=group, topic=name)
            parts.append(
                build(
                    part_cls,
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    metadata=metadata if offset >= 0 else "",
                    error_code=code,
                )
            )
        if parts or not everything:
            topics.append(build(topic_cls, name=name, partitions=tuple(parts)))
    return tuple(topics)


async def offset_fetch(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(9, header.api_version)
    if header.api_version >= 8:
        group_cls = nested(cls, "OffsetFetchResponseGroup")
        topic_cls = nested(cls, "OffsetFetchResponseTopics")
        part_cls = nested(cls, "OffsetFetchResponsePartitions")
        groups = []
        for g in request.groups:
            topics = await _group_topics(ctx, g.group_id, g.topics, topic_cls, part_cls)
            groups.append(build(group_cls, group_id=g.group_id, topics=topics, error_code=K.none))
        return build(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    part_cls = nested(cls, "OffsetFetchResponsePartition")
    topics = await _group_topics(ctx, request.group_id, request.topics, topic_cls, part_cls)
    return build(cls, throttle_time=NO_THROTTLE, topics=topics, error_code=K.none)
