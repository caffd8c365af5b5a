"""A batch with one malformed record, sent by a raw socket to the real Kafka listener: its
partition gets CORRUPT_MESSAGE and nothing is stored there, the request's other partition is
stored, the connection stays open, the refusal is counted, and the partition takes the next
valid batch at offset 0 (one hostile producer does not poison it for readers)."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.static.primitive import i32Timedelta

from gateway.backends.kafka.records import decode_batches
from tests.protocols.kafka.conftest import metric
from tests.protocols.kafka.test_bad_input import send
from tests.protocols.kafka.test_batches import raw_batch, record
from tests.protocols.kafka.test_dispatch import read_response, request_payload
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess

TOPIC = "poison"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: Any) -> Iterator[GatewayProcess]:
    with GatewayProcess(
        tmp_path_factory.mktemp("kafka-validate"),
        listeners={"kafka08": {}},
        server={"default_partitions": 2},
    ) as gw:
        yield gw


def _module(api: int, version: int) -> tuple[Any, Any]:
    cls = load_request_schema(api, version)
    return cls, __import__(cls.__module__, fromlist=["x"])


def create_topic() -> bytes:
    """A Metadata request that creates the topic (as a client's first mention does)."""
    cls, mod = _module(3, 9)
    body = cls(
        topics=(mod.MetadataRequestTopic(name=TOPIC),),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    return request_payload(3, 9, body)


def produce(batches: dict[int, bytes]) -> bytes:
    cls, mod = _module(0, 9)
    parts = tuple(mod.PartitionProduceData(index=p, records=b) for p, b in batches.items())
    body = cls(
        transactional_id=None,
        acks=-1,
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(mod.TopicProduceData(name=TOPIC, partition_data=parts),),
    )
    return request_payload(0, 9, body)


def fetch(partition: int) -> bytes:
    cls, mod = _module(1, 11)
    part = mod.FetchPartition(
        partition=partition,
        current_leader_epoch=-1,
        fetch_offset=0,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    body = cls(
        replica_id=-1,
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(mod.FetchTopic(topic=TOPIC, partitions=(part,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    return request_payload(1, 11, body)


def answers(sock: socket.socket, payload: bytes) -> dict[int, Any]:
    """Partition -> its answer in a Produce (v9) response."""
    _corr, got = read_response(send(sock, payload), 0, 9)
    return {p.index: p for t in got.responses for p in t.partition_responses}


def stored(sock: socket.socket, partition: int) -> list[tuple[int, bytes | None]]:
    _corr, got = read_response(send(sock, fetch(partition)), 1, 11)
    (part,) = [p for t in got.responses for p in t.partitions]
    assert int(part.error_code) == 0
    return [(r.offset, r.value) for r in decode_batches(part.records or b"", 0)]


def good(n: int, tag: bytes) -> bytes:
    return raw_batch([record(i, value=tag + b"%d" % i) for i in range(n)])


def test_a_malformed_record_refuses_its_partition_only(gateway: GatewayProcess) -> None:
    baseline = Footprint.of(gateway)
    before = metric(
        gateway, "gateway_protocol_errors_total", protocol="kafka08", kind="invalid_batch"
    )
    poisoned = {
        "key length past the end": record(1, klen=200),
        "header count too large": record(1, nh=1000),
        "record shorter than its prefix": record(1, tail=b"\0\0"),
        "negative value length": record(1, value=b"", vlen=-7),
    }
    with Bystander(gateway) as bystander:
        with socket.create_connection(gateway.address("kafka08"), timeout=10) as sock:
            _corr, meta = read_response(send(sock, create_topic()), 3, 9)
            assert [len(t.partitions) for t in meta.topics] == [2]
            for shape, body in poisoned.items():
                bad = raw_batch([record(0), body, record(2)], codec=4)
                got = answers(sock, produce({0: bad, 1: good(1, b"p1-")}))
                assert int(got[0].error_code) == 2, shape  # CORRUPT_MESSAGE
                assert got[0].base_offset == -1 and got[0].error_message
                assert int(got[1].error_code) == 0, shape
            assert stored(sock, 0) == []
            assert [o for o, _v in stored(sock, 1)] == [0, 1, 2, 3]
            got = answers(sock, produce({0: good(3, b"p0-")}))
            assert int(got[0].error_code) == 0 and got[0].base_offset == 0
            assert stored(sock, 0) == [(0, b"p0-0"), (1, b"p0-1"), (2, b"p0-2")]
    bystander.check()
    after = metric(
        gateway, "gateway_protocol_errors_total", protocol="kafka08", kind="invalid_batch"
    )
    assert after == before + len(poisoned)
    Footprint.of(gateway).check_within(baseline)
