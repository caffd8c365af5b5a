"""Framing of the modern Kafka APIs, sans-IO: request header v1/v2 in, kio bodies, response
header v0/v1 out. A frame is ``size i32 | header | body``; the 0.8 session splits frames and
hands the payload (without the size) here.

Which header a message has follows from its kio schema: a flexible request (``__flexible__``)
has header v2 (tagged fields after the client id), a flexible response header v1 (tagged fields
after the correlation id), except ApiVersions, whose response header is always v0 so that a
client can read the answer of a broker older than its request.
"""

from __future__ import annotations

import datetime
import struct
from functools import cache
from io import BytesIO
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

from gateway.protocols.kafka.context import RequestHeader

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))
"""``throttle_time`` of every answer: the gateway has no quotas."""

_HEADER = struct.Struct(">hhih")
_SIZE = struct.Struct(">i")
_SIZE_CORR = struct.Struct(">ii")


class MalformedRequest(ValueError):
    """A request frame that does not parse as its (api key, version): the connection closes."""


def peek_api(payload: bytes | memoryview) -> tuple[int, int] | None:
    """(api key, api version) of a request payload, or None when it is too short to say."""
    if len(payload) < 4:
        return None
    return struct.unpack_from(">hh", payload, 0)


def _read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise MalformedRequest("tagged fields truncated")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedRequest("varint longer than 5 bytes")


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    """The position after a tagged-field section (the fields are ignored, as unknown tags are)."""
    count, pos = _read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(buf, pos)
        size, pos = _read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise MalformedRequest("tagged field truncated")
    return pos


@cache
def request_class(api_key: int, version: int) -> Any:
    return load_request_schema(api_key, version)


@cache
def response_class(api_key: int, version: int) -> Any:
    return load_response_schema(api_key, version)


@cache
def _reader(cls: Any) -> Any:
    return entity_reader(cls)


_WRITERS: dict[Any, Any] = {}


def _writer(cls: Any) -> Any:
    writer = _WRITERS.get(cls)
    if writer is None:
        writer = _WRITERS[cls] = entity_writer(cls)
    return writer


def decode_header(payload: bytes | memoryview, flexible: bool) -> tuple[RequestHeader, int]:
    """The request header (v1, or v2 when ``flexible``) and the position of the body."""
    if len(payload) < _HEADER.size:
        raise MalformedRequest(f"request header truncated ({len(payload)} bytes)")
    api_key, version, corr, n = _HEADER.unpack_from(payload, 0)
    pos = _HEADER.size
    client_id = None
    if n >= 0:
        if pos + n > len(payload):
            raise MalformedRequest("client id truncated")
        client_id = bytes(payload[pos : pos + n]).decode("utf-8", "replace")
        pos += n
    if flexible:
        pos = skip_tagged_fields(payload, pos)
    return RequestHeader(api_key, version, corr, client_id), pos


def decode_request(payload: bytes | memoryview) -> tuple[RequestHeader, Any]:
    """(header, kio request entity) of a request payload whose (key, version) kio knows."""
    key_version = peek_api(payload)
    if key_version is None:
        raise MalformedRequest("request header truncated")
    cls = request_class(*key_version)
    header, pos = decode_header(payload, cls.__flexible__)
    try:
        body, _size = _reader(cls)(payload, pos)
    except Exception as exc:  # kio raises several types for malformed input
        raise MalformedRequest(f"cannot parse {cls.__name__} v{header.api_version}: {exc}") from exc
    return header, body


def response_header_size(response: Any) -> int:
    """4 (correlation id) or 5 (correlation id and an empty tagged-field section)."""
    return 5 if response.__header_schema__.__flexible__ else 4


def encode_response(correlation_id: int, response: Any) -> bytes:
    """The full frame (size included) of a kio response entity."""
    buf = BytesIO()
    if response.__header_schema__.__flexible__:
        buf.write(b"\0\0\0\0\0\0\0\0\0")  # size, correlation id, no tagged fields
    else:
        buf.write(b"\0\0\0\0\0\0\0\0")
    _writer(type(response))(buf, response)
    data = buf.getbuffer()
    _SIZE_CORR.pack_into(data, 0, len(data) - 4, correlation_id)
    return bytes(data)


def frame_pieces(correlation_id: int, flexible_header: bool, body: list[bytes]) -> list[bytes]:
    """A response frame from an already encoded body (the fast paths), as pieces to send."""
    head = _SIZE_CORR.pack(sum(len(p) for p in body) + 4 + flexible_header, correlation_id) + (
        b"\0" if flexible_header else b""
    )
    return [head, *body]


@cache
def _field_names(cls: Any) -> frozenset[str]:
    import dataclasses

    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: Any, **values: Any) -> Any:
    """An entity of ``cls`` from the values its version has (the others are dropped): one
    handler builds every version of a response."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(cls: Any, name: str) -> Any:
    """The class of a nested entity of ``cls``'s version (``PartitionData`` of a Fetch v13)."""
    import sys

    return getattr(sys.modules[cls.__module__], name)
