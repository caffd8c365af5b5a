"""Bad input against a running gateway: each case gets Kafka 0.8's answer (an error code, or a
closed connection where the 0.8.2 broker closes), is counted in gateway_protocol_errors_total, and
leaves other connections working."""

from __future__ import annotations

import itertools
import struct
import zlib

import pytest

from gateway.model import Record
from gateway.protocols.kafka08 import codec as c
from gateway.protocols.kafka08.messageset import decode_message_set, encode_message_set
from tests.protocols.kafka08.conftest import RawClient, protocol_errors
from tests.support import GatewayProcess

_names = itertools.count()


def new_topic(client: RawClient) -> str:
    """A topic created through Metadata auto-create."""
    name = f"bad-{next(_names)}"
    md = client.call(3, 0, c.METADATA_REQUEST([name]))
    assert [(t.error, t.topic, len(t.partitions)) for t in md.topics] == [(0, name, 1)]
    return name


def produce(client: RawClient, topic: str, message_set: bytes, partition: int = 0) -> c.Request:
    body = c.PRODUCE_REQUEST(
        1, 1000, [c.PRODUCE_TOPIC(topic, [c.PRODUCE_PARTITION(partition, message_set)])]
    )
    [t] = client.call(0, 0, body).topics
    [p] = t.partitions
    return p


def fetch(client: RawClient, topic: str, offset: int, partition: int = 0, max_bytes=1 << 20):
    body = c.FETCH_REQUEST(
        -1, 0, 1, [c.FETCH_TOPIC(topic, [c.FETCH_PARTITION(partition, offset, max_bytes)])]
    )
    [t] = client.call(1, 0, body).topics
    [p] = t.partitions
    return p


def still_works(client: RawClient) -> None:
    """The bystander connection still answers (opened before the bad input)."""
    topic = new_topic(client)
    assert produce(client, topic, encode_message_set([Record(b"k", b"v")])).error == 0
    p = fetch(client, topic, 0)
    assert p.error == 0
    assert [(r.key, r.value) for r in decode_message_set(p.message_set)] == [(b"k", b"v")]


@pytest.fixture
def bystander(gateway: GatewayProcess):
    client = RawClient(gateway.address("kafka08"))
    client.call(3, 0, c.METADATA_REQUEST([]))  # connected and served before the bad input
    yield client
    client.close()


# ------------------------------------------------------------------ closes


@pytest.mark.parametrize(
    ("kind", "data"),
    [
        ("wrong_size", struct.pack(">i", 0)),
        ("wrong_size", struct.pack(">i", -5)),
        ("wrong_size", struct.pack(">i", 200 << 20)),  # above max_frame_bytes (100 MiB)
        ("truncated", struct.pack(">i", 5) + b"\x00\x03\x00\x00\x00"),  # header cut short
        # a Metadata request whose topic string claims more bytes than the frame holds
        ("truncated", struct.pack(">ihhih", 16, 3, 0, 1, -1) + struct.pack(">ih", 1, 50)),
        ("unknown_api", struct.pack(">ihhih", 10, 4, 0, 1, -1)),  # LeaderAndIsr: 0.8 closes
        # JoinGroup and OffsetCommit v2 are today's APIs (api_versions "full"): a body that
        # is not there does not parse
        ("malformed", struct.pack(">ihhih", 10, 11, 0, 1, -1)),
        ("malformed", struct.pack(">ihhih", 10, 8, 2, 1, -1)),
    ],
    ids=[
        "size-0",
        "size-negative",
        "size-too-big",
        "short-header",
        "short-string",
        "leader-and-isr",
        "join-group",
        "offset-commit-v2",
    ],  # fmt: skip
)
def test_bad_frames_close_the_connection(
    gateway: GatewayProcess, bystander: RawClient, kind: str, data: bytes
) -> None:
    before = protocol_errors(gateway, kind)
    bad = RawClient(gateway.address("kafka08"))
    bad.send_raw(data)
    assert bad.closed_by_peer()
    bad.close()
    assert protocol_errors(gateway, kind) == before + 1
    still_works(bystander)


def test_peer_closing_inside_a_frame_is_counted(
    gateway: GatewayProcess, bystander: RawClient
) -> None:
    before = protocol_errors(gateway, "truncated")
    bad = RawClient(gateway.address("kafka08"))
    bad.send_raw(struct.pack(">i", 100) + b"\x00\x03" * 10)  # 20 of 100 bytes, then EOF
    bad.sock.shutdown(1)
    assert bad.closed_by_peer()
    bad.close()
    assert protocol_errors(gateway, "truncated") == before + 1
    still_works(bystander)


def test_idle_and_half_sent_connections_time_out_and_are_counted(tmp_path) -> None:
    """The listener's idle and read timeouts close a quiet connection (after an answer) and one
    that stopped inside a frame, each counted by kind."""
    listener = {"idle_timeout_s": 0.5, "read_timeout_s": 0.5}
    with GatewayProcess(tmp_path, listeners={"kafka08": listener}) as gw:
        quiet = RawClient(gw.address("kafka08"))
        quiet.call(3, 0, c.METADATA_REQUEST([]))
        half = RawClient(gw.address("kafka08"))
        half.send_raw(struct.pack(">i", 100) + b"\x00\x03" * 10)  # 20 of 100 bytes
        assert quiet.closed_by_peer()
        assert half.closed_by_peer()
        assert protocol_errors(gw, "idle_timeout") == 1
        assert protocol_errors(gw, "read_timeout") == 1
        quiet.close()
        half.close()


def test_api_versions_closes_when_disabled(tmp_path) -> None:
    listener = {"api_versions": False}
    with GatewayProcess(tmp_path, listeners={"kafka08": listener}) as gw:
        client = RawClient(gw.address("kafka08"))
        client.send(18, 0, c.API_VERSIONS_REQUEST_V0())
        assert client.closed_by_peer()
        assert protocol_errors(gw, "unknown_api") == 1


# ------------------------------------------------------------------ error codes


def test_bad_crc_gets_invalid_message_and_stores_nothing(
    gateway: GatewayProcess, raw: RawClient, bystander: RawClient
) -> None:
    topic = new_topic(raw)
    good = encode_message_set([Record(b"k1", b"v1"), Record(b"k2", b"v2")])
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # the last value byte: the second message's CRC no longer matches
    before = protocol_errors(gateway, "invalid_message")
    p = produce(raw, topic, bytes(bad))
    assert (p.error, p.offset) == (2, -1)
    assert protocol_errors(gateway, "invalid_message") == before + 1
    offsets = raw.call(2, 0, c.OFFSETS_REQUEST(-1, [c.OFFSETS_TOPIC(topic, [
        c.OFFSETS_PARTITION(0, -1, 1)])]))  # fmt: skip
    assert offsets.topics[0].partitions[0].offsets == [0]  # nothing stored
    assert produce(raw, topic, good).error == 0  # the same connection goes on
    still_works(bystander)


def test_message_below_minimum_size_is_invalid(gateway: GatewayProcess, raw: RawClient) -> None:
    topic = new_topic(raw)
    p = produce(raw, topic, struct.pack(">qi", 0, 10) + b"\x00" * 10)
    assert p.error == 2


def test_trailing_partial_message_is_dropped(raw: RawClient) -> None:
    topic = new_topic(raw)
    data = encode_message_set([Record(None, b"a"), Record(None, b"b")])
    p = produce(raw, topic, data[:-3])  # the second entry cut short: dropped, like Kafka
    assert (p.error, p.offset) == (0, 0)
    got = decode_message_set(fetch(raw, topic, 0).message_set)
    assert [r.value for r in got] == [b"a"]


def test_unknown_topic_and_partition(
    gateway: GatewayProcess, raw: RawClient, bystander: RawClient
) -> None:
    before = protocol_errors(gateway, "unknown_topic")
    data = encode_message_set([Record(None, b"x")])
    assert produce(raw, "never-created", data).error == 3  # Produce never auto-creates
    assert fetch(raw, "never-created", 0).error == 3
    assert protocol_errors(gateway, "unknown_topic") == before + 2
    md = raw.call(3, 0, c.METADATA_REQUEST([]))
    assert "never-created" not in [t.topic for t in md.topics]

    topic = new_topic(raw)
    before = protocol_errors(gateway, "unknown_partition")
    assert produce(raw, topic, data, partition=7).error == 3
    p = fetch(raw, topic, 0, partition=7)
    assert (p.error, p.high_watermark, bytes(p.message_set)) == (3, -1, b"")
    assert protocol_errors(gateway, "unknown_partition") == before + 2
    still_works(bystander)


def test_offset_out_of_range(gateway: GatewayProcess, raw: RawClient) -> None:
    topic = new_topic(raw)
    produce(raw, topic, encode_message_set([Record(None, b"x")]))
    before = protocol_errors(gateway, "offset_out_of_range")
    p = fetch(raw, topic, 5)
    assert (p.error, p.high_watermark, bytes(p.message_set)) == (1, -1, b"")
    assert fetch(raw, topic, -1).error == 1
    assert protocol_errors(gateway, "offset_out_of_range") == before + 2
    caught_up = fetch(raw, topic, 1)  # FetchOffset == HW: the normal caught-up answer
    assert (caught_up.error, caught_up.high_watermark, bytes(caught_up.message_set)) == (0, 1, b"")


def test_acks_0_failure_closes_the_connection(gateway: GatewayProcess, raw: RawClient) -> None:
    body = c.PRODUCE_REQUEST(
        0,
        1000,
        [c.PRODUCE_TOPIC("no-such-topic", [c.PRODUCE_PARTITION(0, encode_message_set(
            [Record(None, b"x")]))])],
    )  # fmt: skip
    raw.send(0, 0, body)
    assert raw.closed_by_peer()


def test_invalid_topic_name_in_metadata(raw: RawClient) -> None:
    md = raw.call(3, 0, c.METADATA_REQUEST(["bad name!"]))
    assert [(t.error, t.topic, t.partitions) for t in md.topics] == [(17, "bad name!", [])]


def test_inconsistent_lengths_with_a_valid_crc_are_invalid(raw: RawClient) -> None:
    """A message whose CRC matches but whose key or value length does not fit its size."""
    topic = new_topic(raw)
    for body in (
        struct.pack(">bbii", 0, 0, -1, 9) + b"12345",  # value length 9, 5 bytes follow
        struct.pack(">bbi", 0, 0, 50) + b"k" * 4 + struct.pack(">i", 0),  # key runs past
        struct.pack(">bbii", 0, 0, -7, 1) + b"x",  # key length below -1
    ):
        entry = struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body
        assert produce(raw, topic, entry).error == 2
