"""Byte-exact test vectors of the Kafka 0.8 wire format, replayed in both roles: as the server
(decode requests, encode responses) and as the client (encode requests, decode responses)."""

from __future__ import annotations

import zlib

import pytest

from gateway.canonical import CANONICAL
from gateway.model import Record
from gateway.protocols.kafka08 import codec as c
from gateway.protocols.kafka08.compression import XERIAL_MAGIC, snappy_compress, snappy_decompress
from gateway.protocols.kafka08.messageset import (
    InvalidMessageSet,
    decode_message_set,
    encode_message,
    encode_message_set,
    parse_produce,
)


def hx(s: str) -> bytes:
    return bytes.fromhex(s)


METADATA_REQUEST = hx("00000015 0003 0000 00000001 000163 00000001 0004 74657374")
ENTRY_HELLO = hx("0000000000000000 00000013 87a77ab2 0000 ffffffff 00000005 68656c6c6f")
PRODUCE_REQUEST = hx(
    "00000046000000000000000200016300010000 03e8000000010004746573740000000100000000"
    "0000001f0000000000000000000000 1387a77ab20000ffffffff0000000568656c6c6f"
)
PRODUCE_RESPONSE = hx(
    "00000020 00000002 00000001 0004 74657374 00000001 00000000 0000 0000000000000000"
)
ENTRY_MAGIC1 = hx(
    "0000000000000000 0000001b ca1882f4 01 00 0000015d3ef79800 ffffffff 00000005 68656c6c6f"
)
API_VERSIONS_V0_REQUEST = hx("0000000b 0012 0000 00000001 000163")
API_VERSIONS_V3_REQUEST = hx("00000011 0012 0003 00000001 000163 00 027802 31 00")
API_VERSIONS_V0_RESPONSE = hx(
    "0000003a00000001000000000008000000000000000100000000000200000000000300000000000800000001"
    "000900000001000a00000000001200000003"
)
API_VERSIONS_V3_RESPONSE = hx(
    "00 00 00 44 00 00 00 01 00 00 09 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 02 00 00 00 00"
    "00 00 03 00 00 00 00 00 00 08 00 00 00 01 00 00 09 00 00 00 01 00 00 0a 00 00 00 00 00 00 12"
    "00 00 00 03 00 00 00 00 00 00"
)
API_VERSIONS_V4_ANSWER = hx("00000010 00000001 0023 00000001 0012 0000 0003")
XERIAL_PREFIX = hx("82534e415050590000000001 00000001")


def server_decode(frame: bytes) -> c.Request:
    conn = c.ServerConnection()
    conn.receive_data(frame)
    request = conn.next_request()
    assert request is not None
    assert conn.next_request() is None
    return request


# ------------------------------------------------------------------ server role


def test_metadata_request_server_role() -> None:
    r = server_decode(METADATA_REQUEST)
    assert (r.api_key, r.api_version, r.correlation_id, r.client_id) == (3, 0, 1, "c")
    assert r.body.topics == ["test"]


def test_produce_request_server_role() -> None:
    r = server_decode(PRODUCE_REQUEST)
    assert (r.api_key, r.correlation_id, r.client_id) == (0, 2, "c")
    assert (r.body.acks, r.body.timeout_ms) == (1, 1000)
    [topic] = r.body.topics
    assert topic.topic == "test"
    [part] = topic.partitions
    assert part.partition == 0
    assert bytes(part.message_set) == ENTRY_HELLO
    batch = parse_produce(part.message_set, now_us=1_000_000)
    assert batch.count == 1
    assert batch.encoded_window(CANONICAL) is not None  # plain magic 0: canonical in one pass
    [rec] = batch.records
    assert (rec.key, rec.value, rec.timestamp_us) == (None, b"hello", 1_000_000)


def test_produce_response_server_role() -> None:
    r = server_decode(PRODUCE_REQUEST)
    body = c.PRODUCE_RESPONSE([c.PRODUCE_TOPIC_RESULT("test", [c.PRODUCE_RESULT(0, 0, 0)])])
    assert c.ServerConnection.send_response(r, body) == PRODUCE_RESPONSE


def test_message_entries_encode() -> None:
    assert encode_message(None, b"hello") == ENTRY_HELLO
    assert encode_message(None, b"hello", magic=1, timestamp_ms=1_500_000_000_000) == ENTRY_MAGIC1


def test_magic1_entry_server_role() -> None:
    batch = parse_produce(ENTRY_MAGIC1, now_us=5)
    [rec] = batch.records
    assert (rec.key, rec.value, rec.timestamp_us) == (None, b"hello", 1_500_000_000_000_000)


@pytest.mark.parametrize(
    ("frame", "version"),
    [(API_VERSIONS_V0_REQUEST, 0), (API_VERSIONS_V3_REQUEST, 3)],
)
def test_api_versions_requests_server_role(frame: bytes, version: int) -> None:
    r = server_decode(frame)
    assert (r.api_key, r.api_version, r.correlation_id, r.client_id) == (18, version, 1, "c")
    if version == 3:
        assert (r.body.client_software_name, r.body.client_software_version) == ("x", "1")


@pytest.mark.parametrize(
    ("version", "expected"),
    [(0, API_VERSIONS_V0_RESPONSE), (3, API_VERSIONS_V3_RESPONSE), (4, API_VERSIONS_V4_ANSWER)],
)
def test_api_versions_responses_server_role(version: int, expected: bytes) -> None:
    assert c.encode_response(18, version, 1, c.api_versions_response(version)) == expected


# ------------------------------------------------------------------ client role


def test_metadata_request_client_role() -> None:
    assert c.encode_request(3, 0, 1, "c", c.METADATA_REQUEST(["test"])) == METADATA_REQUEST


def test_produce_request_client_role() -> None:
    message_set = encode_message_set([Record(None, b"hello")])
    body = c.PRODUCE_REQUEST(
        1, 1000, [c.PRODUCE_TOPIC("test", [c.PRODUCE_PARTITION(0, message_set)])]
    )
    assert c.encode_request(0, 0, 2, "c", body) == PRODUCE_REQUEST


def test_produce_response_client_role() -> None:
    client = c.ClientConnection("c")
    client._next_corr = 2
    body = c.PRODUCE_REQUEST(
        1, 1000, [c.PRODUCE_TOPIC("test", [c.PRODUCE_PARTITION(0, ENTRY_HELLO)])]
    )
    assert client.send_request(0, 0, body) == PRODUCE_REQUEST
    client.receive_data(PRODUCE_RESPONSE[:7])
    assert client.next_response() is None
    client.receive_data(PRODUCE_RESPONSE[7:])
    api, resp = client.next_response()
    assert api == 0
    [topic] = resp.topics
    assert topic.topic == "test"
    assert topic.partitions == [c.PRODUCE_RESULT(0, 0, 0)]


def test_fetched_entries_client_role() -> None:
    assert decode_message_set(ENTRY_HELLO) == [Record(None, b"hello", (), -1, 0)]
    assert decode_message_set(ENTRY_MAGIC1) == [
        Record(None, b"hello", (), 1_500_000_000_000_000, 0)
    ]


@pytest.mark.parametrize(
    ("frame", "version"),
    [(API_VERSIONS_V0_REQUEST, 0), (API_VERSIONS_V3_REQUEST, 3)],
)
def test_api_versions_requests_client_role(frame: bytes, version: int) -> None:
    body = c.API_VERSIONS_REQUEST_V3("x", "1") if version == 3 else c.API_VERSIONS_REQUEST_V0()
    assert c.encode_request(18, version, 1, "c", body) == frame


@pytest.mark.parametrize(
    ("version", "frame"),
    [(0, API_VERSIONS_V0_RESPONSE), (3, API_VERSIONS_V3_RESPONSE), (4, API_VERSIONS_V4_ANSWER)],
)
def test_api_versions_responses_client_role(version: int, frame: bytes) -> None:
    corr, body = c.decode_response(18, version, frame[4:])
    assert corr == 1
    table = [(k.api_key, k.min_version, k.max_version) for k in body.api_keys]
    if version == 4:
        assert body.error == 35
        assert table == [(18, 0, 3)]
    else:
        assert body.error == 0
        assert table == [tuple(map(int, row)) for row in c.API_TABLE]


# ------------------------------------------------------------------ checksums, snappy


def test_crc32_check_value() -> None:
    assert zlib.crc32(b"123456789") == 0xCBF43926


def test_bad_crc_is_invalid_message() -> None:
    bad = bytearray(ENTRY_HELLO)
    bad[-1] ^= 1
    with pytest.raises(InvalidMessageSet) as info:
        parse_produce(bytes(bad), now_us=0)
    assert info.value.code == 2


def test_xerial_snappy_header() -> None:
    framed = snappy_compress(b"x" * 100_000)
    assert framed[:16] == XERIAL_PREFIX
    assert framed[:8] == XERIAL_MAGIC
    assert snappy_decompress(framed) == b"x" * 100_000
    assert snappy_decompress(snappy_compress(b"raw", xerial=False)) == b"raw"
