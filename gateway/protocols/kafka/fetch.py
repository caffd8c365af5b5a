"""Fetch v4-v13 (v0 is the 0.8 session's fast path), as a broker without fetch sessions
(session id 0: every request lists its partitions). Record batches v2 out at the backend's true
offsets; isolation levels accepted (nothing is transactional), no aborted transactions.

Waiting: ``max_wait`` and ``min_bytes`` over the whole request, as the 0.8 path: a one-partition
fetch is the core's long poll; with several, one pass, and if it found less than ``min_bytes``
a wait for the first partition to get data, then a second pass. Sizes: each partition at most
its ``partition_max_bytes`` (at least one batch, as brokers do), the answer at most the request's
``max_bytes`` and the listener's ``max_answer_bytes``, taken from the process's answer pool
(``[server] max_answer_memory``: less when it is short) while the answer is read and sent."""

from __future__ import annotations

from typing import Any

import trio
from kio.schema.errors import ErrorCode as K

from gateway.model import Fetch, GatewayError, now_us
from gateway.observability import RECORDS_OUT, labelled
from gateway.protocols.answers import MEMORY_LIMIT, WAIT_BYTES, AnswerBudget
from gateway.protocols.kafka.batches import fetch_records
from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import PROTOCOL, KafkaContext, RequestHeader
from gateway.protocols.kafka.topics import names_by_id

API = "fetch"
_RECORDS_OUT = labelled(RECORDS_OUT, PROTOCOL)


class _Part:
    __slots__ = ("topic", "key", "partition", "offset", "max_bytes", "code", "hw", "lso", "data")

    def __init__(self, topic: str | None, key: Any, partition: int, offset: int, max_bytes: int):
        self.topic = topic  # None: an unknown topic id
        self.key = key  # what the answer names the topic by (name, or id from v13)
        self.partition = partition
        self.offset = offset
        self.max_bytes = max_bytes
        self.code = 0
        self.hw = -1
        self.lso = -1
        self.data: list[bytes | memoryview] = []


async def _read(
    ctx: KafkaContext, part: _Part, wait_ms: int, min_bytes: int, budget: AnswerBudget
) -> int:
    """Fill ``part`` from the core; the bytes of records it got (-1 on an error)."""
    if part.topic is None:
        part.code = K.unknown_topic_id
        ctx.count(API, str(int(K.unknown_topic_id)))
        return -1
    share, bounded = budget.share(part.max_bytes)
    try:
        result = await ctx.core.execute(
            Fetch(
                part.topic,
                part.partition,
                part.offset,
                max_bytes=max(1, share),
                max_wait_ms=max(0, wait_ms),
                min_bytes=max(1, min(min_bytes, max(1, share))),
            )
        )
    except GatewayError as exc:
        part.code = ctx.error(API, exc, topic=part.topic, partition=part.partition)
        return -1
    part.code = 0
    part.hw = part.lso = result.high_watermark
    if share or not bounded:
        part.data = fetch_records(result.batches, now_us() // 1000)
        count = sum(b.count for b in result.batches)
    else:  # nothing left of the budget (the answer pool is empty): the client asks again
        part.data, count = [], 0
    size = sum(len(d) for d in part.data)
    if bounded and part.offset + count < result.high_watermark:
        budget.hit = True
    budget.spend(size)
    if count:
        _RECORDS_OUT.inc(count)
    ctx.count(API, "ok")
    return size


async def handle(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    cls = response_class(1, version)
    by_id = version >= 13
    names: dict[Any, str] = {}
    if by_id:
        names = await names_by_id(ctx.core, {t.topic_id for t in request.topics})
    parts: list[_Part] = []
    for t in request.topics:
        key = t.topic_id if by_id else t.topic
        name = names.get(t.topic_id) if by_id else t.topic
        for p in t.partitions:
            parts.append(_Part(name, key, p.partition, p.fetch_offset, p.partition_max_bytes))
    limit = min(ctx.listener.max_answer_bytes, max(1, request.max_bytes))
    wait_ms = int(request.max_wait.total_seconds() * 1000)
    min_bytes = max(1, request.min_bytes)

    async def one_pass(wait: int, waiting: bool = False) -> tuple[int, bool, AnswerBudget]:
        wanted = sum(max(0, p.max_bytes) for p in parts)
        if waiting:
            budget = await AnswerBudget.take_for_wait(wanted)
        else:
            budget = await AnswerBudget.take(wanted, limit)
        total, error = 0, False
        for part in parts:
            size = await _read(ctx, part, wait, min_bytes, budget)
            error |= size < 0
            total += max(0, size)
        budget.trim()
        return total, error, budget

    if len(parts) == 1 and (wait_ms <= 0 or min(limit, parts[0].max_bytes) <= WAIT_BYTES):
        _, _, budget = await one_pass(wait_ms)
    elif len(parts) == 1:
        # a share of the answer pool larger than WAIT_BYTES is not held while waiting at the
        # log end: read at once, and with less than min_bytes there wait holding WAIT_BYTES
        total, error, budget = await one_pass(0)
        if not error and total < min_bytes:
            budget.release()
            parts[0].data = []
            _, _, budget = await one_pass(wait_ms, waiting=True)
    else:
        total, error, budget = await one_pass(0)
        if not error and wait_ms > 0 and total < min_bytes and parts:
            budget.release()  # read again after the wait
            for part in parts:
                part.data = []
            await _wait_any(ctx, parts, wait_ms)
            _, _, budget = await one_pass(0)
    if budget.key == MEMORY_LIMIT or limit == ctx.listener.max_answer_bytes:
        budget.report(PROTOCOL, ctx.log, peer=ctx.peer)
    return _answer(cls, parts, by_id)


async def _wait_any(ctx: KafkaContext, parts: list[_Part], wait_ms: int) -> None:
    with trio.move_on_after(wait_ms / 1000):
        async with trio.open_nursery() as nursery:

            async def wait_one(part: _Part) -> None:
                try:
                    result = await ctx.core.execute(
                        Fetch(part.topic or "", part.partition, part.offset, 1, 1, wait_ms, 1)
                    )
                except GatewayError:
                    result = None
                if result is None or result.count:
                    nursery.cancel_scope.cancel()

            for part in parts:
                nursery.start_soon(wait_one, part)


def _answer(cls: Any, parts: list[_Part], by_id: bool) -> Any:
    topic_cls = nested(cls, "FetchableTopicResponse")
    part_cls = nested(cls, "PartitionData")
    grouped: dict[Any, list[Any]] = {}
    for part in parts:
        grouped.setdefault(part.key, []).append(
            build(
                part_cls,
                partition_index=part.partition,
                error_code=K(part.code),
                high_watermark=part.hw,
                last_stable_offset=part.lso,
                log_start_offset=-1,
                aborted_transactions=(),
                preferred_read_replica=-1,
                records=b"".join(part.data),
            )
        )
    topics = tuple(
        build(topic_cls, topic=key, topic_id=key, partitions=tuple(ps))
        for key, ps in grouped.items()
    )
    return build(cls, throttle_time=NO_THROTTLE, error_code=K.none, session_id=0, responses=topics)
