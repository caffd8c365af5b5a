"""Kafka 0.8 wire codec, sans-IO, in both roles (``docs/protocols/kafka08.md``).

- :class:`FrameBuffer` accumulates bytes and cuts int32-size-prefixed frames (h11's receive buffer
  at a smaller scale); a size <= 0 or above the limit is a :class:`RemoteProtocolError`.
- The request and response bodies of every 0.8.2 API (plus ApiVersions) are declared
  as layouts below; :data:`REQUESTS` and :data:`RESPONSES` map (api key, version) to them.
- :class:`ServerConnection` (a listener): bytes in, :class:`Request` out; responses out as bytes.
  :class:`ClientConnection` (an upstream or a test client): requests out, responses in, matched
  by its own FIFO of pending requests (the response header has only the correlation id).

Message sets inside Produce requests and Fetch responses stay raw (``memoryview``) here; the
hand-tuned ``messageset`` module reads and writes them.
"""

from __future__ import annotations

import collections
import enum
import struct
from dataclasses import dataclass
from typing import Any

from gateway.protocols.buffer import SizePrefixedFrames
from gateway.protocols.kafka08.layout import (
    COMPACT_STRING,
    INT16,
    INT32,
    INT64,
    MESSAGE_SET,
    STRING,
    TAGS,
    Array,
    Buffer,
    CompactArray,
    Layout,
    LocalProtocolError,
    RemoteProtocolError,
    layout,
)
from gateway.protocols.layout import Table

__all__ = [
    "ApiKey",
    "ClientConnection",
    "FrameBuffer",
    "LocalProtocolError",
    "RemoteProtocolError",
    "Request",
    "ServerConnection",
]

_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    CONSUMER_METADATA = 10
    API_VERSIONS = 18


# ----------------------------------------------------------------------------- layouts

# Produce (0)
PRODUCE_PARTITION = layout("ProducePartition", ("partition", INT32), ("message_set", MESSAGE_SET))
PRODUCE_TOPIC = layout("ProduceTopic", ("topic", STRING), ("partitions", Array(PRODUCE_PARTITION)))
PRODUCE_REQUEST = layout(
    "ProduceRequest", ("acks", INT16), ("timeout_ms", INT32), ("topics", Array(PRODUCE_TOPIC))
)
PRODUCE_RESULT = layout(
    "ProducePartitionResult", ("partition", INT32), ("error", INT16), ("offset", INT64)
)
PRODUCE_TOPIC_RESULT = layout(
    "ProduceTopicResult", ("topic", STRING), ("partitions", Array(PRODUCE_RESULT))
)
PRODUCE_RESPONSE = layout("ProduceResponse", ("topics", Array(PRODUCE_TOPIC_RESULT)))
PRODUCE_RESPONSE_V1 = layout(
    "ProduceResponseV1", ("topics", Array(PRODUCE_TOPIC_RESULT)), ("throttle_ms", INT32)
)

# Fetch (1)
FETCH_PARTITION = layout(
    "FetchPartition", ("partition", INT32), ("offset", INT64), ("max_bytes", INT32)
)
FETCH_TOPIC = layout("FetchTopic", ("topic", STRING), ("partitions", Array(FETCH_PARTITION)))
FETCH_REQUEST = layout(
    "FetchRequest",
    ("replica_id", INT32),
    ("max_wait_ms", INT32),
    ("min_bytes", INT32),
    ("topics", Array(FETCH_TOPIC)),
)
FETCH_RESULT = layout(
    "FetchPartitionResult",
    ("partition", INT32),
    ("error", INT16),
    ("high_watermark", INT64),
    ("message_set", MESSAGE_SET),
)
FETCH_TOPIC_RESULT = layout(
    "FetchTopicResult", ("topic", STRING), ("partitions", Array(FETCH_RESULT))
)
FETCH_RESPONSE = layout("FetchResponse", ("topics", Array(FETCH_TOPIC_RESULT)))
FETCH_RESPONSE_V1 = layout(
    "FetchResponseV1", ("throttle_ms", INT32), ("topics", Array(FETCH_TOPIC_RESULT))
)

# Offsets (2)
OFFSETS_PARTITION = layout(
    "OffsetsPartition", ("partition", INT32), ("time", INT64), ("max_offsets", INT32)
)
OFFSETS_TOPIC = layout("OffsetsTopic", ("topic", STRING), ("partitions", Array(OFFSETS_PARTITION)))
OFFSETS_REQUEST = layout("OffsetsRequest", ("replica_id", INT32), ("topics", Array(OFFSETS_TOPIC)))
OFFSETS_RESULT = layout(
    "OffsetsPartitionResult", ("partition", INT32), ("error", INT16), ("offsets", Array(INT64))
)
OFFSETS_TOPIC_RESULT = layout(
    "OffsetsTopicResult", ("topic", STRING), ("partitions", Array(OFFSETS_RESULT))
)
OFFSETS_RESPONSE = layout("OffsetsResponse", ("topics", Array(OFFSETS_TOPIC_RESULT)))

# Metadata (3)
METADATA_REQUEST = layout("MetadataRequest", ("topics", Array(STRING)))
BROKER = layout("Broker", ("node_id", INT32), ("host", STRING), ("port", INT32))
PARTITION_METADATA = layout(
    "PartitionMetadata",
    ("error", INT16),
    ("partition", INT32),
    ("leader", INT32),
    ("replicas", Array(INT32)),
    ("isr", Array(INT32)),
)
TOPIC_METADATA = layout(
    "TopicMetadata",
    ("error", INT16),
    ("topic", STRING),
    ("partitions", Array(PARTITION_METADATA)),
)
METADATA_RESPONSE = layout(
    "MetadataResponse", ("brokers", Array(BROKER)), ("topics", Array(TOPIC_METADATA))
)

# OffsetCommit (8)
COMMIT_PARTITION_V0 = layout(
    "CommitPartitionV0", ("partition", INT32), ("offset", INT64), ("metadata", STRING)
)
COMMIT_PARTITION_V1 = layout(
    "CommitPartitionV1",
    ("partition", INT32),
    ("offset", INT64),
    ("timestamp", INT64),
    ("metadata", STRING),
)
COMMIT_TOPIC_V0 = layout(
    "CommitTopicV0", ("topic", STRING), ("partitions", Array(COMMIT_PARTITION_V0))
)
COMMIT_TOPIC_V1 = layout(
    "CommitTopicV1", ("topic", STRING), ("partitions", Array(COMMIT_PARTITION_V1))
)
COMMIT_REQUEST_V0 = layout(
    "OffsetCommitRequestV0", ("group", STRING), ("topics", Array(COMMIT_TOPIC_V0))
)
COMMIT_REQUEST_V1 = layout(
    "OffsetCommitRequestV1",
    ("group", STRING),
    ("generation", INT32),
    ("member_id", STRING),
    ("topics", Array(COMMIT_TOPIC_V1)),
)
COMMIT_RESULT = layout("CommitPartitionResult", ("partition", INT32), ("error", INT16))
COMMIT_TOPIC_RESULT = layout(
    "CommitTopicResult", ("topic", STRING), ("partitions", Array(COMMIT_RESULT))
)
COMMIT_RESPONSE = layout("OffsetCommitResponse", ("topics", Array(COMMIT_TOPIC_RESULT)))

# OffsetFetch (9): v0 and v1 are byte-identical
OFFSET_FETCH_TOPIC = layout("OffsetFetchTopic", ("topic", STRING), ("partitions", Array(INT32)))
OFFSET_FETCH_REQUEST = layout(
    "OffsetFetchRequest", ("group", STRING), ("topics", Array(OFFSET_FETCH_TOPIC))
)
OFFSET_FETCH_RESULT = layout(
    "OffsetFetchPartitionResult",
    ("partition", INT32),
    ("offset", INT64),
    ("metadata", STRING),
    ("error", INT16),
)
OFFSET_FETCH_TOPIC_RESULT = layout(
    "OffsetFetchTopicResult", ("topic", STRING), ("partitions", Array(OFFSET_FETCH_RESULT))
)
OFFSET_FETCH_RESPONSE = layout("OffsetFetchResponse", ("topics", Array(OFFSET_FETCH_TOPIC_RESULT)))

# ConsumerMetadata (10)
CONSUMER_METADATA_REQUEST = layout("ConsumerMetadataRequest", ("group", STRING))
CONSUMER_METADATA_RESPONSE = layout(
    "ConsumerMetadataResponse",
    ("error", INT16),
    ("node_id", INT32),
    ("host", STRING),
    ("port", INT32),
)

# ApiVersions (18)
API_VERSIONS_REQUEST_V0 = layout("ApiVersionsRequest")
API_VERSIONS_REQUEST_V3 = layout(
    "ApiVersionsRequestV3",
    ("client_software_name", COMPACT_STRING),
    ("client_software_version", COMPACT_STRING),
    ("tags", TAGS),
)
API_VERSION = layout(
    "ApiVersion", ("api_key", INT16), ("min_version", INT16), ("max_version", INT16)
)
API_VERSION_V3 = layout(
    "ApiVersionV3",
    ("api_key", INT16),
    ("min_version", INT16),
    ("max_version", INT16),
    ("tags", TAGS),
)
API_VERSIONS_RESPONSE_V0 = layout(
    "ApiVersionsResponse", ("error", INT16), ("api_keys", Array(API_VERSION))
)
API_VERSIONS_RESPONSE_V1 = layout(
    "ApiVersionsResponseV1",
    ("error", INT16),
    ("api_keys", Array(API_VERSION)),
    ("throttle_ms", INT32),
)
API_VERSIONS_RESPONSE_V3 = layout(
    "ApiVersionsResponseV3",
    ("error", INT16),
    ("api_keys", CompactArray(API_VERSION_V3)),
    ("throttle_ms", INT32),
    ("tags", TAGS),
)

UNSUPPORTED_VERSION = 35
"""The one post-0.8 error code we send: inside an ApiVersions answer to a version above 3."""

API_TABLE: tuple[tuple[int, int, int], ...] = (
    (ApiKey.PRODUCE, 0, 0),
    (ApiKey.FETCH, 0, 0),
    (ApiKey.OFFSETS, 0, 0),
    (ApiKey.METADATA, 0, 0),
    (ApiKey.OFFSET_COMMIT, 0, 1),
    (ApiKey.OFFSET_FETCH, 0, 1),
    (ApiKey.CONSUMER_METADATA, 0, 0),
    (ApiKey.API_VERSIONS, 0, 3),
)
"""What ApiVersions advertises: the 0.8.2 table plus key 18 (docs/protocols/kafka08.md)."""


ANY = -(1 << 15)
"""The lowest int16 version: a row from ``ANY`` with no last version covers every version."""

REQUESTS = Table(
    [
        # Produce, Fetch, Offsets, Metadata, OffsetFetch (v1 = v0 on the wire) and
        # ConsumerMetadata: a 0.8.2 broker reads the v0 body whatever the version says.
        (ApiKey.PRODUCE, ANY, None, PRODUCE_REQUEST),
        (ApiKey.FETCH, ANY, None, FETCH_REQUEST),
        (ApiKey.OFFSETS, ANY, None, OFFSETS_REQUEST),
        (ApiKey.METADATA, ANY, None, METADATA_REQUEST),
        (ApiKey.OFFSET_COMMIT, 0, 0, COMMIT_REQUEST_V0),
        (ApiKey.OFFSET_COMMIT, 1, 1, COMMIT_REQUEST_V1),
        (ApiKey.OFFSET_FETCH, ANY, None, OFFSET_FETCH_REQUEST),
        (ApiKey.CONSUMER_METADATA, ANY, None, CONSUMER_METADATA_REQUEST),
        (ApiKey.API_VERSIONS, 0, 2, API_VERSIONS_REQUEST_V0),
        (ApiKey.API_VERSIONS, 3, None, API_VERSIONS_REQUEST_V3),
    ]
)
"""Request body layouts by (api key, version); a pair not in it closes the connection."""

RESPONSES = Table(
    [
        (ApiKey.PRODUCE, ANY, 0, PRODUCE_RESPONSE),
        (ApiKey.PRODUCE, 1, None, PRODUCE_RESPONSE_V1),
        (ApiKey.FETCH, ANY, 0, FETCH_RESPONSE),
        (ApiKey.FETCH, 1, None, FETCH_RESPONSE_V1),
        (ApiKey.OFFSETS, ANY, None, OFFSETS_RESPONSE),
        (ApiKey.METADATA, ANY, None, METADATA_RESPONSE),
        (ApiKey.OFFSET_COMMIT, ANY, None, COMMIT_RESPONSE),
        (ApiKey.OFFSET_FETCH, ANY, None, OFFSET_FETCH_RESPONSE),
        (ApiKey.CONSUMER_METADATA, ANY, None, CONSUMER_METADATA_RESPONSE),
        # ApiVersions above v3 (or below 0) is answered in v0 with error 35
        (ApiKey.API_VERSIONS, ANY, 0, API_VERSIONS_RESPONSE_V0),
        (ApiKey.API_VERSIONS, 1, 2, API_VERSIONS_RESPONSE_V1),
        (ApiKey.API_VERSIONS, 3, 3, API_VERSIONS_RESPONSE_V3),
        (ApiKey.API_VERSIONS, 4, None, API_VERSIONS_RESPONSE_V0),
    ]
)
"""Response body layouts by (api key, version of the request answered)."""


def request_layout(api_key: int, version: int) -> Layout | None:
    """The body layout a 0.8.2 broker would read for (key, version), or None: close."""
    return REQUESTS.get(api_key, version)


def response_layout(api_key: int, version: int) -> Layout:
    """The body layout of the response to a request with (key, version)."""
    found = RESPONSES.get(api_key, version)
    if found is None:
        raise LocalProtocolError(f"no response layout for api key {api_key} v{version}")
    return found


def api_versions_response(version: int) -> Any:
    """The ApiVersions answer for a request of ``version`` (error 35 + ``18: 0-3`` above v3)."""
    if version > 3 or version < 0:
        return API_VERSIONS_RESPONSE_V0(
            UNSUPPORTED_VERSION, [API_VERSION(ApiKey.API_VERSIONS, 0, 3)]
        )
    if version == 3:
        return API_VERSIONS_RESPONSE_V3(0, [API_VERSION_V3(*row) for row in API_TABLE], 0)
    if version >= 1:
        return API_VERSIONS_RESPONSE_V1(0, [API_VERSION(*row) for row in API_TABLE], 0)
    return API_VERSIONS_RESPONSE_V0(0, [API_VERSION(*row) for row in API_TABLE])


# ----------------------------------------------------------------------------- framing


class FrameBuffer(SizePrefixedFrames):
    """Cuts Kafka frames (an int32 size, then the body) out of received bytes; a size <= 0 or
    above ``max_frame_bytes`` is ``wrong_size`` (the broker closes the connection)."""

    __slots__ = ()

    def __init__(self, max_frame_bytes: int = 100 << 20) -> None:
        super().__init__(max_frame_bytes, signed=True, min_size=1, kind="wrong_size")


def frame(parts: list[Buffer]) -> bytes:
    """Prefix the concatenation of ``parts`` with its int32 size."""
    size = 0
    for p in parts:
        size += len(p)
    return b"".join([_I32.pack(size), *parts])


# ----------------------------------------------------------------------------- requests


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def decode_request_header(payload: Buffer) -> tuple[int, int, int, str | None, int]:
    """(api key, version, correlation id, client id, body position)."""
    if len(payload) < 8:
        raise RemoteProtocolError(f"request header truncated ({len(payload)} bytes)", "truncated")
    api_key, version, corr = _HEADER.unpack_from(payload, 0)
    client_id, pos = STRING.read(payload, 8)
    if api_key == ApiKey.API_VERSIONS and version >= 3:
        _, pos = TAGS.read(payload, pos)
    return api_key, version, corr, client_id, pos


def decode_request(payload: Buffer) -> Request:
    """One request frame's payload. An unknown api key or version raises RemoteProtocolError
    with kind ``unknown_api`` (the 0.8 broker closes the connection)."""
    if len(payload) >= 10:
        api_key, version, corr, n = _HEADER_CLIENT.unpack_from(payload, 0)
        if api_key == 0 and n >= 0:
            request = _decode_produce(payload, version, corr, n)
            if request is not None:
                return request
    return decode_request_generic(payload)


def decode_request_generic(payload: Buffer) -> Request:
    """:func:`decode_request` through the layouts only (what the Produce fast path must match)."""
    api_key, version, corr, client_id, pos = decode_request_header(payload)
    body_layout = request_layout(api_key, version)
    if body_layout is None:
        raise RemoteProtocolError(f"unsupported api key {api_key} version {version}", "unknown_api")
    return Request(api_key, version, corr, client_id, body_layout.decode(payload, pos))


def encode_request(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any
) -> bytes:
    body_layout = request_layout(api_key, version)
    if body_layout is None:
        raise LocalProtocolError(f"no request layout for api key {api_key} v{version}")
    parts: list[Buffer] = [_HEADER.pack(api_key, version, correlation_id)]
    STRING.write(client_id, parts)
    if api_key == ApiKey.API_VERSIONS and version >= 3:
        TAGS.write(None, parts)
    body_layout.write(body, parts)
    return frame(parts)


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A response frame: int32 size, correlation id, body (ApiVersions keeps the v0 header)."""
    if api_key == 0:
        data = _encode_produce_response(version, correlation_id, body)
        if data is not None:
            return data
    return encode_response_generic(api_key, version, correlation_id, body)


def encode_response_generic(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """:func:`encode_response` through the layouts only (what the Produce fast path must match)."""
    parts: list[Buffer] = [_I32.pack(correlation_id)]
    response_layout(api_key, version).write(body, parts)
    return frame(parts)


def response_pieces(api_key: int, version: int, correlation_id: int, body: Any) -> list[Buffer]:
    """:func:`encode_response` as the pieces it is built from (int32 size first), unjoined: a
    Fetch answer's message sets stay the buffers they were built as, for the session to write
    one after the other instead of copying them into one frame."""
    parts: list[Buffer] = [b"", _I32.pack(correlation_id)]
    response_layout(api_key, version).write(body, parts)
    size = 0
    for p in parts:
        size += len(p)
    parts[0] = _I32.pack(size)
    return parts


def decode_response(api_key: int, version: int, payload: Buffer) -> tuple[int, Any]:
    """(correlation id, body) of a response payload to a request of (key, version)."""
    if len(payload) < 4:
        raise RemoteProtocolError("response shorter than its header", "truncated")
    (corr,) = _I32.unpack_from(payload, 0)
    return corr, response_layout(api_key, version).decode(payload, 4)


# ----------------------------------------------------------------------------- produce fast path
#
# Produce is the one request sent at high rates, and the generic layouts cost ~7.5 us to decode a
# one-record one and ~4.4 us to encode its answer (a call and a tuple per field); these two
# functions take ~3.7 and ~1.6 us with a few precompiled structs, for well-formed input only
# (bench/README.md, Profiles item 14). Anything they do not expect (a truncated or negative
# length, a null string, bad UTF-8, a value a struct cannot pack) makes them return None and the
# generic path decodes or encodes it, so results and errors are the generic ones by construction
# (tests/protocols/kafka08/test_produce_fast_path.py compares them).

_HEADER_CLIENT = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_PRODUCE_HEAD = struct.Struct(">hii")  # acks, timeout, topic count
_I16 = struct.Struct(">h")
_PARTITION_HEAD = struct.Struct(">ii")  # partition, message set size
_PARTITION_RESULT = struct.Struct(">ihq")  # partition, error, offset
_ProduceRequest = PRODUCE_REQUEST.cls
_ProduceTopic = PRODUCE_TOPIC.cls
_ProducePartition = PRODUCE_PARTITION.cls
_ProduceResponse = PRODUCE_RESPONSE.cls
_ProduceResponseV1 = PRODUCE_RESPONSE_V1.cls


def _decode_produce(payload: Buffer, version: int, corr: int, client_len: int) -> Request | None:
    """A Produce request whose header was read up to the client id's length, or None."""
    end = len(payload)
    pos = 10 + client_len
    if pos + 10 > end:
        return None
    try:
        client_id = str(payload[10:pos], "utf-8")
    except UnicodeDecodeError:
        return None
    acks, timeout_ms, count = _PRODUCE_HEAD.unpack_from(payload, pos)
    pos += 10
    i16 = _I16.unpack_from
    i32 = _I32.unpack_from
    head = _PARTITION_HEAD.unpack_from
    view = memoryview(payload)
    topics = []
    for _ in range(count):
        if pos + 2 > end:
            return None
        (n,) = i16(payload, pos)
        pos += 2
        if n < 0 or pos + n + 4 > end:
            return None
        try:
            topic = str(payload[pos : pos + n], "utf-8")
        except UnicodeDecodeError:
            return None
        pos += n
        (n,) = i32(payload, pos)
        pos += 4
        partitions = []
        for _ in range(n):
            if pos + 8 > end:
                return None
            partition, size = head(payload, pos)
            pos += 8
            if size < 0 or pos + size > end:
                return None
            partitions.append(_ProducePartition(partition, view[pos : pos + size]))
            pos += size
        topics.append(_ProduceTopic(topic, partitions))
    return Request(0, version, corr, client_id, _ProduceRequest(acks, timeout_ms, topics))


def _encode_produce_response(version: int, correlation_id: int, body: Any) -> bytes | None:
    """The frame of a Produce answer, or None (then the generic path encodes it or raises)."""
    if type(body) is not (_ProduceResponseV1 if version >= 1 else _ProduceResponse):
        return None
    i32 = _I32.pack
    result = _PARTITION_RESULT.pack
    topics = body.topics
    try:
        parts = [b"", i32(correlation_id), i32(len(topics))]
        append = parts.append
        for topic, partitions in topics:
            if topic is None:
                append(b"\xff\xff")
            else:
                raw = topic.encode()
                if len(raw) > 32767:
                    return None
                append(_I16.pack(len(raw)))
                append(raw)
            append(i32(len(partitions)))
            for partition, error, offset in partitions:
                append(result(partition, error, offset))
        if version >= 1:
            append(i32(body.throttle_ms))
        size = 0
        for p in parts:
            size += len(p)
        parts[0] = i32(size)
    except (ValueError, TypeError, AttributeError, struct.error):
        return None
    return b"".join(parts)


# ----------------------------------------------------------------------------- connections


class ServerConnection:
    """The listener's side: ``receive_data`` then ``next_request`` until it returns None."""

    def __init__(self, max_frame_bytes: int = 100 << 20) -> None:
        self._frames = FrameBuffer(max_frame_bytes)

    def receive_data(self, data: Buffer) -> None:
        self._frames.feed(data)

    def next_request(self) -> Request | None:
        payload = self._frames.next_frame()
        if payload is None:
            return None
        return decode_request(payload)

    @property
    def buffered(self) -> int:
        return len(self._frames)

    @staticmethod
    def send_response(request: Request, body: Any) -> bytes:
        return encode_response(request.api_key, request.api_version, request.correlation_id, body)

    @staticmethod
    def response_pieces(request: Request, body: Any) -> list[Buffer]:
        return response_pieces(request.api_key, request.api_version, request.correlation_id, body)


class ClientConnection:
    """The client's side (upstream backend, tests): ``send_request`` returns the bytes to write
    and remembers what it asked, so ``next_response`` can decode the answers in order."""

    def __init__(self, client_id: str | None = "gateway", max_frame_bytes: int = 100 << 20) -> None:
        self.client_id = client_id
        self._frames = FrameBuffer(max_frame_bytes)
        self._pending: collections.deque[tuple[int, int, int]] = collections.deque()
        self._next_corr = 0

    def send_request(self, api_key: int, version: int, body: Any) -> bytes:
        corr = self._next_corr
        self._next_corr = (self._next_corr + 1) & 0x7FFFFFFF
        data = encode_request(api_key, version, corr, self.client_id, body)
        if not (api_key == ApiKey.PRODUCE and body.acks == 0):
            self._pending.append((api_key, version, corr))
        return data

    def receive_data(self, data: Buffer) -> None:
        self._frames.feed(data)

    def next_response(self) -> tuple[int, Any] | None:
        """(api key, body) of the next answer, or None until one is complete."""
        payload = self._frames.next_frame()
        if payload is None:
            return None
        if not self._pending:
            raise RemoteProtocolError("a response nobody asked for", "unexpected_response")
        api_key, version, corr = self._pending.popleft()
        got, body = decode_response(api_key, version, payload)
        if got != corr:
            raise RemoteProtocolError(
                f"response correlation id {got}, expected {corr}", "unexpected_response"
            )
        return api_key, body
