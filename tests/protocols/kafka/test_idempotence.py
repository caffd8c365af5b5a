"""Idempotent producers through the Produce and InitProducerId handlers, sans sockets (a real
Core on the memory backend): a duplicate batch is answered with its first offset and stored
once, a gap gets OUT_OF_ORDER_SEQUENCE_NUMBER, a transactional id is refused."""

from __future__ import annotations

import datetime
from typing import Any

import structlog
import trio
from kio.index import load_request_schema
from kio.static.primitive import i32Timedelta

from gateway.backends.kafka.records import encode_batch
from gateway.backends.memory import MemoryBackend
from gateway.config import parse_config
from gateway.core.engine import Core
from gateway.model import CreateTopic, ListOffsets, Record
from gateway.protocols.base import ConnectionContext
from gateway.protocols.kafka import dispatch
from gateway.protocols.kafka.context import KafkaContext
from gateway.protocols.kafka08 import Kafka08ListenerConfig
from tests.protocols.kafka.test_batches import with_producer
from tests.protocols.kafka.test_dispatch import read_response, request_payload

RECORDS = [Record(b"k", b"v%d" % i, (), 1_700_000_000_000_000) for i in range(3)]


def context(core: Core) -> KafkaContext:
    conn = ConnectionContext(
        "kafka08",
        core,  # type: ignore[arg-type]
        Kafka08ListenerConfig(),
        parse_config({}),
        "127.0.0.1:1",
        "gw.example",
        9092,
        log=structlog.get_logger(),
    )
    return KafkaContext.for_connection(conn)


def produce(pid: int, epoch: int, seq: int) -> bytes:
    cls = load_request_schema(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    records = with_producer(encode_batch(RECORDS, 0), pid, epoch, seq)
    body = cls(
        transactional_id=None,
        acks=-1,
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(
            mod.TopicProduceData(
                name="t", partition_data=(mod.PartitionProduceData(index=0, records=records),)
            ),
        ),
    )
    return request_payload(0, 9, body)


def answer(ctx: KafkaContext, payload: bytes, key: int, version: int) -> Any:
    async def run() -> Any:
        return await dispatch.serve(ctx, payload)

    _, body = read_response(trio.run(run), key, version)
    return body


def test_duplicate_answered_with_first_offset_and_gap_refused() -> None:
    async def setup() -> Core:
        core = Core({"a": MemoryBackend("a")}, [("*", "a")])
        await core.execute(CreateTopic("t", 1))
        return core

    core = trio.run(setup)
    ctx = context(core)
    init = load_request_schema(22, 4)(
        transactional_id=None,
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        producer_id=-1,
        producer_epoch=-1,
    )
    got = answer(ctx, request_payload(22, 4, init), 22, 4)
    assert got.error_code == 0 and got.producer_id > 0 and got.producer_epoch == 0
    pid = got.producer_id

    def partition(payload: bytes) -> Any:
        return answer(ctx, payload, 0, 9).responses[0].partition_responses[0]

    first = partition(produce(pid, 0, 0))
    assert (first.error_code, first.base_offset) == (0, 0)
    second = partition(produce(pid, 0, 3))
    assert (second.error_code, second.base_offset) == (0, 3)
    retry = partition(produce(pid, 0, 3))  # the same batch again: its first offset, not stored
    assert (retry.error_code, retry.base_offset) == (0, 3)
    gap = partition(produce(pid, 0, 9))  # expected 6
    assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER

    async def high_watermark() -> int:
        return (await core.execute(ListOffsets("t", 0))).high_watermark

    assert trio.run(high_watermark) == 6


def test_transactional_id_is_refused() -> None:
    core = Core({"a": MemoryBackend("a")}, [("*", "a")])
    init = load_request_schema(22, 4)(
        transactional_id="tx-1",
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        producer_id=-1,
        producer_epoch=-1,
    )
    got = answer(context(core), request_payload(22, 4, init), 22, 4)
    assert got.error_code == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert got.producer_id == -1
