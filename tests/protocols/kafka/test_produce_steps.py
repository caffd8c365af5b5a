"""A Produce carrying a megabyte of zstd that holds a million tiny records, through the Kafka
listener's session in-process (tests.protocols.driving): while its records are checked, other
tasks of the event loop keep running (the check goes in steps of ``max_records_per_step``), the
batch is stored whole, and the stepped batch is counted under that key; then the same over a
real gateway process with a bystander, and confluent-kafka batching with zstd."""

from __future__ import annotations

import datetime
import socket
import struct
from typing import Any

import crc32c
import trio
from kio.index import load_request_schema
from kio.static.primitive import i32Timedelta

from gateway.backends.kafka.records import BATCH_BODY, BATCH_HEAD, compress, varint
from gateway.observability import LIMIT_HITS
from tests.protocols.driving import driven
from tests.protocols.kafka.conftest import confluent, expected, metric
from tests.protocols.kafka.test_bad_input import send
from tests.protocols.kafka.test_dispatch import read_response, request_payload
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess

TOPIC = "huge"
RECORDS = 1_000_000
BASE_MS = 1_700_000_000_000


def tiny_records(n: int) -> bytes:
    """``n`` records of a null key, a one-byte value and no header, timestamp delta 0."""
    out = []
    for i in range(n):
        delta = varint(i)
        out.append(varint(6 + len(delta)) + b"\0\0" + delta + b"\x01\x02v\0")
    return b"".join(out)


def zstd_batch(n: int, records: bytes | None = None) -> bytes:
    payload = compress(4, tiny_records(n) if records is None else records)
    body = BATCH_BODY.pack(4, n - 1, BASE_MS, BASE_MS, -1, -1, -1, n) + payload
    return BATCH_HEAD.pack(0, 9 + len(body), -1, 2, crc32c.crc32c(body)) + body


def frame(api: int, version: int, body: Any) -> bytes:
    payload = request_payload(api, version, body)
    return struct.pack(">i", len(payload)) + payload


def metadata_creating_the_topic() -> bytes:
    cls = load_request_schema(3, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    return frame(
        3,
        9,
        cls(
            topics=(mod.MetadataRequestTopic(name=TOPIC),),
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )


def produce(batch: bytes) -> bytes:
    cls = load_request_schema(0, 9)
    mod = __import__(cls.__module__, fromlist=["x"])
    part = mod.PartitionProduceData(index=0, records=batch)
    return frame(
        0,
        9,
        cls(
            transactional_id=None,
            acks=-1,
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
            topic_data=(mod.TopicProduceData(name=TOPIC, partition_data=(part,)),),
        ),
    )


def whole(got: bytes) -> bool:
    return len(got) >= 4 and len(got) >= 4 + int.from_bytes(got[:4], "big")


def parts(answer: Any) -> list[Any]:
    return [p for t in answer.responses for p in t.partition_responses]


def steps_counted() -> float:
    return LIMIT_HITS.labels("max_records_per_step", "kafka08")._value.get()


async def test_other_tasks_run_while_a_million_record_batch_is_checked() -> None:
    batch = zstd_batch(RECORDS)
    assert len(batch) < 1_000_000  # within the listener's message_max_bytes
    before = steps_counted()
    async with driven("kafka08") as conn:
        await conn.client.send_all(metadata_creating_the_topic())
        read_response(await conn.receive(whole), 3, 9)
        request = produce(batch)
        ran = 0
        answered = False

        async def another_task() -> None:
            nonlocal ran
            while not answered:
                await trio.lowlevel.checkpoint()
                ran += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(another_task)
            await conn.client.send_all(request)
            _corr, got = read_response(await conn.receive(whole), 0, 9)
            answered = True
        # the next batch's first offset: the million records were stored
        await conn.client.send_all(produce(zstd_batch(1)))
        _corr, then = read_response(await conn.receive(whole), 0, 9)
    assert [(int(p.error_code), p.base_offset) for r in (got, then) for p in parts(r)] == [
        (0, 0),
        (0, RECORDS),
    ]
    # 100 steps of 10,000 records, the other task scheduled between two: in one go it would
    # only run while the request's bytes arrive and the answer leaves (a dozen times)
    assert ran >= 80, ran
    assert steps_counted() == before + 1


def test_confluent_zstd_batches_checked_in_steps_store_every_record_once(tmp_path: Any) -> None:
    """librdkafka (confluent-kafka) batching 40,000 records a batch with zstd, against a
    listener checking 1,000 records a step: every record stored once, read back whole."""
    count = 40_000
    produce = {
        "compression.type": "zstd",
        "enable.idempotence": True,
        "linger.ms": 1000,
        "batch.num.messages": count,
        "batch.size": 64 << 20,
        "message.max.bytes": 64 << 20,
    }
    with GatewayProcess(
        tmp_path, listeners={"kafka08": {"max_records_per_step": 1000}}, backend="embedded"
    ) as gw:
        host, port = gw.address("kafka08")
        out = confluent(
            {"bootstrap": f"{host}:{port}", "topic": "zstd", "count": count, "produce": produce}
        )
        stepped = metric(
            gw, "gateway_limit_hits_total", limit="max_records_per_step", protocol="kafka08"
        )
    assert out["delivery_errors"] == [] and out["unflushed"] == 0 and out["errors"] == []
    assert sorted(out["offsets"]) == list(range(count))
    assert out["records"] == expected(count)
    assert stepped >= 1  # at least one batch was large enough to be checked in steps


def test_huge_batches_over_a_socket_while_another_client_is_answered(tmp_path: Any) -> None:
    """A real gateway: three million-record batches stored one after the other while the
    bystander's probes are answered; a batch whose records would inflate to 128 MiB gets
    MESSAGE_TOO_LARGE; the process holds no more than before once they are done."""
    batch = zstd_batch(RECORDS)
    bomb = zstd_batch(1, bytes(128 << 20))
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}) as gw:
        baseline = Footprint.of(gw)
        before = metric(
            gw, "gateway_limit_hits_total", limit="max_records_per_step", protocol="kafka08"
        )
        with (
            Bystander(gw) as bystander,
            socket.create_connection(gw.address("kafka08"), timeout=30) as sock,
        ):
            read_response(send(sock, metadata_creating_the_topic()[4:]), 3, 9)
            stored = []
            for _ in range(3):
                _corr, got = read_response(send(sock, produce(batch)[4:]), 0, 9)
                stored += [(int(p.error_code), p.base_offset) for p in parts(got)]
            _corr, refused = read_response(send(sock, produce(bomb)[4:]), 0, 9)
        bystander.check()
        assert stored == [(0, 0), (0, RECORDS), (0, 2 * RECORDS)]
        assert [int(p.error_code) for p in parts(refused)] == [10]  # MESSAGE_TOO_LARGE
        after = metric(
            gw, "gateway_limit_hits_total", limit="max_records_per_step", protocol="kafka08"
        )
        assert after == before + 3
        Footprint.of(gw).check_within(baseline)
