"""Produce into a topic created with ``cleanup.policy=compact`` (or ``compact,delete``),
through the dispatcher (a real Core on the memory backend): a batch with a record without a key
is INVALID_RECORD with the broker's message (and, v8+, the record's index), nothing of it
stored; keyed records (an empty key is a key) go in; other topics take keyless records as ever;
the topic is looked up once a request."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode as K
from kio.static.primitive import i32Timedelta

from gateway.backends.kafka.records import encode_batch
from gateway.model import CreateTopic, Record
from gateway.observability import REGISTRY
from tests.protocols.kafka.kio_calls import call, make_context, sub

TS = 1_700_000_000_000_000
COMPACT = (("cleanup_policy", "compact"),)


def batch(*keys: bytes | None, codec: int = 0) -> bytes:
    return encode_batch([Record(k, b"v", (), TS) for k in keys], 0, codec=codec)


async def produce(ctx, version: int, *topics: tuple[str, tuple[tuple[int, bytes], ...]]):
    data = tuple(
        sub(0, version, "TopicProduceData", name=name, partition_data=tuple(
            sub(0, version, "PartitionProduceData", index=p, records=r) for p, r in parts))
        for name, parts in topics
    )  # fmt: skip
    return await call(
        ctx,
        0,
        version,
        transactional_id=None,
        acks=-1,
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=data,
    )


def results(answer) -> list[tuple[str, int, int, str | None]]:
    return [
        (t.name, p.index, p.error_code, getattr(p, "error_message", None))
        for t in answer.responses
        for p in t.partition_responses
    ]


NO_KEY = "Compacted topic cannot accept message without key in topic partition {}."


@pytest.mark.parametrize("version", [3, 7, 8, 9])
async def test_a_compacted_topic_refuses_records_without_a_key(version: int) -> None:
    ctx = make_context()
    await ctx.core.execute(CreateTopic("c", 2, COMPACT))
    await ctx.core.execute(CreateTopic("d", 1))
    await ctx.core.execute(CreateTopic("cd", 1, (("cleanup_policy", "compact,delete"),)))
    backend = ctx.core.router.backend_for("c")
    looked_up: list[str] = []
    topic = backend.topic

    async def counted(name: str):
        looked_up.append(name)
        return await topic(name)

    backend.topic = counted  # type: ignore[method-assign]
    refusals = {"protocol": "kafka08", "kind": "keyless_record"}
    before = REGISTRY.get_sample_value("gateway_protocol_errors_total", refusals) or 0
    answer = await produce(
        ctx,
        version,
        ("c", ((0, batch(b"a", None, b"b", None, codec=2)), (1, batch(b"a", b"")))),
        ("d", ((0, batch(None)),)),
        ("c", ((1, batch(None)),)),
        ("cd", ((0, batch(b"a", None)),)),
    )
    got = results(answer)
    assert got == [
        ("c", 0, K.invalid_record, NO_KEY.format("c-0") if version >= 8 else None),
        ("c", 1, K.none, None),
        ("d", 0, K.none, None),
        ("c", 1, K.invalid_record, NO_KEY.format("c-1") if version >= 8 else None),
        ("cd", 0, K.invalid_record, NO_KEY.format("cd-0") if version >= 8 else None),
    ]
    if version >= 8:
        errors = [
            [(e.batch_index, e.batch_index_error_message) for e in p.record_errors]
            for t in answer.responses
            for p in t.partition_responses
        ]
        assert errors == [
            [(1, NO_KEY.format("c-0"))], [], [], [(0, NO_KEY.format("c-1"))],
            [(1, NO_KEY.format("cd-0"))],
        ]  # fmt: skip
    assert REGISTRY.get_sample_value("gateway_protocol_errors_total", refusals) == before + 3
    assert sorted(looked_up) == ["c", "cd", "d"]  # once per topic of the request, not per batch
    # nothing of a refused batch is stored: c-0 is empty, c-1 holds the keyed batch only
    assert (await backend.partition_info("c", 0)).high_watermark == 0
    assert (await backend.partition_info("c", 1)).high_watermark == 2
