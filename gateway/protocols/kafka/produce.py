"""Produce v3-v9 (v0 is the 0.8 session's fast path): one record batch v2 per partition, any
codec, headers and timestamps kept; idempotent producers (producer id >= 0) go through the
core's per-partition (producer id, epoch, sequence) check, so a retried batch is answered with
its first offsets and stored once, and a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER.

A topic created with ``cleanup.policy=compact`` (or ``compact,delete``) takes only records with
a key, as a broker's compacted topic: a batch holding a record without one (a null key; an
empty key is a key) is INVALID_RECORD, with the broker's message and the first such record's
index in the record errors (v8+). Whether a topic is compacted is looked up once per topic of
a request, on the memory, embedded and NATS backends (elsewhere a look-up would cost a round
trip to an upstream server on every produce)."""

from __future__ import annotations

from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode as K

from gateway.model import Acks, GatewayError, Produce
from gateway.observability import RECORDS_IN, labelled, limit_hit, protocol_error
from gateway.protocols.driver import run_steps
from gateway.protocols.kafka.admin import CLEANUP_KEY, KEEPS_RECORDS_UNLESS_TOLD
from gateway.protocols.kafka.batches import (
    NO_PRODUCER,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    InvalidBatch,
    KeylessRecord,
    produced_steps,
)
from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import PROTOCOL, KafkaContext, RequestHeader
from gateway.protocols.kafka08 import STEP_LIMIT

API = "produce"
_RECORDS_IN = labelled(RECORDS_IN, PROTOCOL)


async def _compacted(ctx: KafkaContext, topic: str) -> bool:
    """Whether ``topic`` was created with a ``cleanup.policy`` of ``compact`` or
    ``compact,delete`` (a broker's compacted topic either way), on a backend where the gateway
    remembers the policy (others would cost a round trip to an upstream server per request); a
    topic it cannot look up is produced to as ever, which answers why."""
    backend = ctx.core.router.backend_for(topic)
    if backend.type_name not in KEEPS_RECORDS_UNLESS_TOLD:
        return False
    try:
        info = await backend.topic(topic)
    except GatewayError:
        return False
    return "compact" in dict(info.config).get(CLEANUP_KEY, "").split(",")


def _acks(acks: int) -> Acks:
    return Acks.NONE if acks == 0 else Acks.LEADER if acks == 1 else Acks.ALL


async def handle(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(0, header.api_version)
    topic_cls = nested(cls, "TopicProduceResponse")
    part_cls = nested(cls, "PartitionProduceResponse")
    error_cls = nested(cls, "BatchIndexAndErrorMessage") if header.api_version >= 8 else None
    max_bytes = ctx.listener.message_max_bytes
    acks = _acks(request.acks)
    timeout_ms = max(0, int(request.timeout.total_seconds() * 1000))
    transactional = request.transactional_id is not None
    topics = []
    compacted: dict[str, bool] = {}
    for t in request.topic_data:
        if t.name not in compacted and not transactional:
            compacted[t.name] = await _compacted(ctx, t.name)
        keyed = compacted.get(t.name, False)
        parts = []
        for p in t.partition_data:
            code, base, message, keyless = await _one(
                ctx, t.name, p.index, p.records, max_bytes, acks, timeout_ms, transactional, keyed
            )
            errors: tuple[Any, ...] = ()
            if keyless >= 0 and error_cls is not None:
                errors = (build(error_cls, batch_index=keyless, batch_index_error_message=message),)
            parts.append(
                build(
                    part_cls,
                    index=p.index,
                    error_code=K(code),
                    base_offset=base,
                    log_append_time=None,
                    log_start_offset=-1,
                    record_errors=errors,
                    error_message=message,
                )
            )
        topics.append(build(topic_cls, name=t.name, partition_responses=tuple(parts)))
    if request.acks == 0:
        return None
    return build(cls, responses=tuple(topics), throttle_time=NO_THROTTLE)


async def _one(
    ctx: KafkaContext,
    topic: str,
    partition: int,
    records: bytes | None,
    max_bytes: int,
    acks: Acks,
    timeout_ms: int,
    transactional: bool,
    keyed: bool,
) -> tuple[int, int, str | None, int]:
    """(error code, base offset, error message, index of the record without a key or -1) of
    one partition's batch."""
    if transactional:
        protocol_error(
            ctx.log,
            PROTOCOL,
            "transactional_produce",
            topic=topic,
            error="transactions are not supported",
        )
        ctx.count(API, str(TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        return TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, "transactions are not supported", -1
    step = ctx.listener.max_records_per_step
    try:
        produced = await run_steps(
            produced_steps(records or b"", max_bytes, step, keyed),
            partial(limit_hit, STEP_LIMIT, PROTOCOL, ctx.log, topic=topic, **{STEP_LIMIT: step}),
        )
    except KeylessRecord as exc:
        message = (
            "Compacted topic cannot accept message without key in topic partition "
            f"{topic}-{partition}."
        )
        protocol_error(ctx.log, PROTOCOL, "keyless_record", topic=topic, error=str(exc))
        ctx.count(API, str(exc.code))
        return exc.code, -1, message, exc.index
    except InvalidBatch as exc:
        protocol_error(ctx.log, PROTOCOL, "invalid_batch", topic=topic, error=str(exc))
        ctx.count(API, str(exc.code))
        return exc.code, -1, str(exc), -1
    idempotent = produced.producer_id != NO_PRODUCER
    try:
        result = await ctx.core.execute(
            Produce(
                topic,
                produced.batch,
                partition,
                acks=acks,
                producer_id=produced.producer_id if idempotent else None,
                producer_epoch=produced.producer_epoch,
                sequence=produced.base_sequence if idempotent else None,
                timeout_ms=timeout_ms,
            )
        )
    except GatewayError as exc:
        return ctx.error(API, exc, topic=topic, partition=partition), -1, exc.message, -1
    append = result.appends[0]
    if not append.duplicate:
        _RECORDS_IN.inc(produced.batch.count)
    ctx.count(API, "ok")
    return 0, append.base_offset, None, -1
