"""Sans-IO codec for Iggy's binary TCP protocol, both roles, old (56bee28ca) and 0.6 dialects.

Hand-written: no Python library implements this wire format (the only SDK is a Rust extension
module), so layouts are declared below as field tables and the two hot paths (send and poll
message sets) are hand-tuned with ``struct.Struct``.

Reference: ``docs/protocols/iggy.md``. Framing, little endian::

    request   length u32 (= 4 + payload) | code u32 | payload
    response  status u32 | length u32 (payload only) | payload

Two error types keep blame clear (as in h11): :class:`RemoteProtocolError` (the peer sent
something we cannot decode: the real server drops the connection) and
:class:`LocalProtocolError` (we were asked to encode something invalid: a bug). A request that
decodes but fails Iggy's ``validate()`` raises :class:`ValidationError` carrying the Iggy status
code, which the server answers with an error frame.

Dialects: a connection starts in :data:`Dialect.OLD`; the server connection switches itself to
:data:`Dialect.V06` on LOGIN_USER (38), the first non-PING command any 0.6 client sends and a code
the pre-authentication generation never has (docs/protocols/iggy.md, wire notes).
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gateway.protocols.buffer import ReceiveBuffer
from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError

# ------------------------------------------------------------------------------ errors


class ValidationError(Exception):
    """A decoded request fails Iggy's validation; ``status`` is the Iggy error code to send."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------ constants


class Dialect(enum.Enum):
    OLD = "old"  # pre-authentication generation, apache/iggy 56bee28ca
    V06 = "0.6"  # crate iggy 0.6.202, spoken by iggy-py 0.4.0


class Code(enum.IntEnum):
    PING = 1
    GET_STATS = 10
    GET_ME = 20
    GET_CLIENT = 21
    GET_CLIENTS = 22
    LOGIN_USER = 38
    POLL_MESSAGES = 100
    SEND_MESSAGES = 101
    GET_CONSUMER_OFFSET = 120
    STORE_CONSUMER_OFFSET = 121
    GET_STREAM = 200
    GET_STREAMS = 201
    CREATE_STREAM = 202
    DELETE_STREAM = 203
    GET_TOPIC = 300
    GET_TOPICS = 301
    CREATE_TOPIC = 302
    DELETE_TOPIC = 303
    CREATE_PARTITIONS = 402
    DELETE_PARTITIONS = 403
    GET_CONSUMER_GROUP = 600
    GET_CONSUMER_GROUPS = 601
    CREATE_CONSUMER_GROUP = 602
    DELETE_CONSUMER_GROUP = 603
    JOIN_CONSUMER_GROUP = 604
    LEAVE_CONSUMER_GROUP = 605


class Status(enum.IntEnum):
    """Iggy error codes (docs/protocols/iggy.md, wire notes)."""

    OK = 0
    ERROR = 1
    INVALID_CONFIGURATION = 2
    INVALID_COMMAND = 3
    INVALID_FORMAT = 4
    FEATURE_UNAVAILABLE = 5
    UNAUTHENTICATED = 40
    UNAUTHORIZED = 41
    INVALID_CREDENTIALS = 42
    CLIENT_NOT_FOUND = 100
    INVALID_CLIENT_ID = 101
    STREAM_ID_NOT_FOUND = 1009
    STREAM_NAME_NOT_FOUND = 1010
    STREAM_ID_ALREADY_EXISTS = 1011
    STREAM_NAME_ALREADY_EXISTS = 1012
    INVALID_STREAM_NAME = 1013
    INVALID_STREAM_ID = 1014
    TOPIC_ID_NOT_FOUND = 2010
    TOPIC_NAME_NOT_FOUND = 2011
    TOPIC_ID_ALREADY_EXISTS = 2012
    TOPIC_NAME_ALREADY_EXISTS = 2013
    INVALID_TOPIC_NAME = 2014
    TOO_MANY_PARTITIONS = 2015
    INVALID_TOPIC_ID = 2016
    PARTITION_NOT_FOUND = 3007
    NO_PARTITIONS = 3008
    INVALID_MESSAGES_COUNT = 4009
    CANNOT_APPEND_MESSAGE = 4010
    TOO_BIG_HEADERS_PAYLOAD = 4017
    INVALID_HEADER_KEY = 4018
    INVALID_HEADER_VALUE = 4019
    TOO_BIG_MESSAGE_PAYLOAD = 4022
    TOO_MANY_MESSAGES = 4023
    EMPTY_MESSAGE_PAYLOAD = 4024
    INVALID_KEY_VALUE_LENGTH = 4028
    INVALID_OFFSET = 4100
    CONSUMER_GROUP_NOT_FOUND = 5000
    CONSUMER_GROUP_ALREADY_EXISTS = 5001
    CONSUMER_GROUP_MEMBER_NOT_FOUND = 5002
    INVALID_CONSUMER_GROUP_ID = 5003


class PollingKind(enum.IntEnum):
    OFFSET = 1
    TIMESTAMP = 2
    FIRST = 3
    LAST = 4
    NEXT = 5


class ConsumerKind(enum.IntEnum):
    CONSUMER = 1
    CONSUMER_GROUP = 2


class PartitioningKind(enum.IntEnum):
    BALANCED = 1
    PARTITION_ID = 2
    MESSAGES_KEY = 3


class HeaderKind(enum.IntEnum):
    RAW = 1
    STRING = 2
    BOOL = 3
    INT8 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    INT128 = 8
    UINT8 = 9
    UINT16 = 10
    UINT32 = 11
    UINT64 = 12
    UINT128 = 13
    FLOAT32 = 14
    FLOAT64 = 15


HEADER_VALUE_SIZES = {
    HeaderKind.BOOL: 1,
    HeaderKind.INT8: 1,
    HeaderKind.INT16: 2,
    HeaderKind.INT32: 4,
    HeaderKind.INT64: 8,
    HeaderKind.INT128: 16,
    HeaderKind.UINT8: 1,
    HeaderKind.UINT16: 2,
    HeaderKind.UINT32: 4,
    HeaderKind.UINT64: 8,
    HeaderKind.UINT128: 16,
    HeaderKind.FLOAT32: 4,
    HeaderKind.FLOAT64: 8,
}

STATE_AVAILABLE = 1
MAX_HEADERS_SIZE = 100 * 1024
MAX_PAYLOAD_SIZE = 10 * 1024 * 1024
MAX_PARTITIONS = 100_000
U64_MAX = (1 << 64) - 1

# ------------------------------------------------------------------------------ shared encodings


@dataclass(frozen=True, slots=True)
class Identifier:
    """A stream or topic id: numeric (kind 1, u32) or string (kind 2, 1-255 bytes)."""

    value: int | str

    @classmethod
    def numeric(cls, value: int) -> Identifier:
        return cls(int(value))

    @property
    def is_numeric(self) -> bool:
        return isinstance(self.value, int)

    def encode(self) -> bytes:
        if isinstance(self.value, int):
            if not 0 <= self.value <= 0xFFFFFFFF:
                raise LocalProtocolError(f"numeric identifier out of range: {self.value}")
            return b"\x01\x04" + _U32.pack(self.value)
        raw = self.value.encode()
        if not 1 <= len(raw) <= 255:
            raise LocalProtocolError(f"string identifier must be 1-255 bytes: {self.value!r}")
        return bytes((2, len(raw))) + raw

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class Consumer:
    kind: int  # ConsumerKind
    id: Identifier


@dataclass(frozen=True, slots=True)
class Partitioning:
    kind: int  # PartitioningKind
    value: bytes = b""

    @classmethod
    def balanced(cls) -> Partitioning:
        return cls(PartitioningKind.BALANCED)

    @classmethod
    def partition_id(cls, partition_id: int) -> Partitioning:
        return cls(PartitioningKind.PARTITION_ID, _U32.pack(partition_id))

    @classmethod
    def messages_key(cls, key: bytes) -> Partitioning:
        return cls(PartitioningKind.MESSAGES_KEY, bytes(key))


_U8 = struct.Struct("<B")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F32 = struct.Struct("<f")
_II = struct.Struct("<II")


class Reader:
    """A cursor over one frame's payload; every read checks bounds and raises
    :class:`RemoteProtocolError` when the payload is too short."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def remaining(self) -> int:
        return self.end - self.pos

    def need(self, n: int) -> None:
        if self.pos + n > self.end:
            raise RemoteProtocolError(
                f"payload too short: need {n} bytes at {self.pos}, end {self.end}", "truncated"
            )

    def unpack(self, st: struct.Struct) -> tuple[Any, ...]:
        self.need(st.size)
        out = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return out

    def u8(self) -> int:
        self.need(1)
        v = self.buf[self.pos]
        self.pos += 1
        return v

    def u32(self) -> int:
        return self.unpack(_U32)[0]

    def u64(self) -> int:
        return self.unpack(_U64)[0]

    def u128(self) -> int:
        self.need(16)
        v = int.from_bytes(self.buf[self.pos : self.pos + 16], "little")
        self.pos += 16
        return v

    def f32(self) -> float:
        return self.unpack(_F32)[0]

    def take(self, n: int) -> bytes:
        self.need(n)
        v = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return v

    def text(self, n: int) -> str:
        raw = self.take(n)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise RemoteProtocolError(f"text is not UTF-8: {raw!r}", "bad_utf8") from None

    def done(self) -> None:
        if self.pos != self.end:
            raise RemoteProtocolError(
                f"{self.end - self.pos} unexpected bytes after the payload", "trailing_bytes"
            )


# ------------------------------------------------------------------------------ field types
# A field type is a pair (read(reader) -> value, write(value) -> bytes). Layouts are tuples of
# (attribute name, field type); ``encode_fields`` and ``decode_fields`` follow from them.


@dataclass(frozen=True, slots=True)
class FieldType:
    name: str
    read: Callable[[Reader], Any]
    write: Callable[[Any], bytes]


def _read_identifier(r: Reader) -> Identifier:
    kind = r.u8()
    length = r.u8()
    if kind == 1:
        if length != 4:
            raise RemoteProtocolError(f"numeric identifier of length {length}", "bad_identifier")
        return Identifier(r.u32())
    if kind == 2:
        if length == 0:
            raise RemoteProtocolError("empty string identifier", "bad_identifier")
        return Identifier(r.text(length))
    raise RemoteProtocolError(f"unknown identifier kind {kind}", "bad_identifier")


def _read_consumer_old(r: Reader) -> Consumer:
    kind = r.u8()
    if kind not in (1, 2):
        raise RemoteProtocolError(f"unknown consumer kind {kind}", "bad_consumer")
    return Consumer(kind, Identifier(r.u32()))


def _write_consumer_old(c: Consumer) -> bytes:
    if not isinstance(c.id.value, int):
        raise LocalProtocolError("the old dialect has numeric consumer ids only")
    return bytes((c.kind,)) + _U32.pack(c.id.value)


def _read_consumer_v06(r: Reader) -> Consumer:
    kind = r.u8()
    if kind not in (1, 2):
        raise RemoteProtocolError(f"unknown consumer kind {kind}", "bad_consumer")
    return Consumer(kind, _read_identifier(r))


def _read_partitioning(r: Reader) -> Partitioning:
    kind = r.u8()
    length = r.u8()
    if kind not in (1, 2, 3):
        raise RemoteProtocolError(f"unknown partitioning kind {kind}", "bad_partitioning")
    return Partitioning(kind, r.take(length))


def _write_partitioning(p: Partitioning) -> bytes:
    if len(p.value) > 255:
        raise LocalProtocolError("partitioning value longer than 255 bytes")
    return bytes((p.kind, len(p.value))) + p.value


def _read_str8(r: Reader) -> str:
    return r.text(r.u8())


def _write_str8(s: str) -> bytes:
    raw = s.encode()
    if len(raw) > 255:
        raise LocalProtocolError(f"name longer than 255 bytes: {s!r}")
    return bytes((len(raw),)) + raw


def _read_str32(r: Reader) -> str:
    return r.text(r.u32())


def _write_str32(s: str) -> bytes:
    raw = s.encode()
    return _U32.pack(len(raw)) + raw


def _int_writer(st: struct.Struct) -> Callable[[Any], bytes]:
    pack = st.pack

    def write(v: Any) -> bytes:
        try:
            return pack(v)
        except struct.error as exc:
            raise LocalProtocolError(f"{v!r} does not fit {st.format}: {exc}") from None

    return write


U8 = FieldType("u8", Reader.u8, _int_writer(_U8))
U32 = FieldType("u32", Reader.u32, _int_writer(_U32))
U64 = FieldType("u64", Reader.u64, _int_writer(_U64))
F32 = FieldType("f32", Reader.f32, _int_writer(_F32))
IDENT = FieldType("identifier", _read_identifier, lambda v: v.encode())
CONSUMER_OLD = FieldType("consumer", _read_consumer_old, _write_consumer_old)
CONSUMER_V06 = FieldType(
    "consumer06", _read_consumer_v06, lambda c: bytes((c.kind,)) + c.id.encode()
)
PARTITIONING = FieldType("partitioning", _read_partitioning, _write_partitioning)
STR8 = FieldType("str8", _read_str8, _write_str8)
STR32 = FieldType("str32", _read_str32, _write_str32)
BOOL8 = FieldType("bool", lambda r: r.u8() != 0, lambda v: b"\x01" if v else b"\x00")

Layout = tuple[tuple[str, FieldType], ...]


def encode_fields(obj: Any, layout: Layout) -> bytes:
    return b"".join(ft.write(getattr(obj, name)) for name, ft in layout)


def decode_fields(r: Reader, layout: Layout) -> dict[str, Any]:
    return {name: ft.read(r) for name, ft in layout}


# ------------------------------------------------------------------------------ requests


class Request:
    """Base of the request messages. ``CODE`` is the command code; ``LAYOUT`` (and
    ``LAYOUT_V06`` where the 0.6 dialect differs) declares the payload."""

    CODE: ClassVar[int]
    LAYOUT: ClassVar[Layout] = ()
    LAYOUT_V06: ClassVar[Layout | None] = None

    @classmethod
    def layout(cls, dialect: Dialect) -> Layout:
        if dialect is Dialect.V06 and cls.LAYOUT_V06 is not None:
            return cls.LAYOUT_V06
        return cls.LAYOUT

    def encode_payload(self, dialect: Dialect) -> bytes:
        return encode_fields(self, self.layout(dialect))

    @classmethod
    def decode_payload(cls, r: Reader, dialect: Dialect) -> Request:
        values = decode_fields(r, cls.layout(dialect))
        r.done()
        return cls(**values)

    def validate(self, dialect: Dialect) -> None:  # noqa: B027 - optional hook
        """Raise :class:`ValidationError` like the reference ``validate()``."""


@dataclass(frozen=True, slots=True)
class Ping(Request):
    CODE = Code.PING


@dataclass(frozen=True, slots=True)
class GetStats(Request):
    CODE = Code.GET_STATS


@dataclass(frozen=True, slots=True)
class GetMe(Request):
    CODE = Code.GET_ME


@dataclass(frozen=True, slots=True)
class GetClient(Request):
    client_id: int
    CODE = Code.GET_CLIENT
    LAYOUT = (("client_id", U32),)

    def validate(self, dialect: Dialect) -> None:
        if self.client_id == 0:
            raise ValidationError(Status.INVALID_CLIENT_ID, "client id 0")


@dataclass(frozen=True, slots=True)
class GetClients(Request):
    CODE = Code.GET_CLIENTS


@dataclass(frozen=True, slots=True)
class LoginUser(Request):
    """0.6 dialect only (the old protocol has no code 38)."""

    username: str
    password: str
    version: str = ""
    context: str = ""
    CODE = Code.LOGIN_USER
    LAYOUT = (("username", STR8), ("password", STR8), ("version", STR32), ("context", STR32))

    @classmethod
    def decode_payload(cls, r: Reader, dialect: Dialect) -> Request:
        username = _read_str8(r)
        password = _read_str8(r)
        # iggy-py 0.2.0 (crate 0.4.x) sends only the two strings
        version = _read_str32(r) if r.remaining() else ""
        context = _read_str32(r) if r.remaining() else ""
        r.done()
        return cls(username, password, version, context)


@dataclass(frozen=True, slots=True)
class PollMessages(Request):
    consumer: Consumer
    stream: Identifier
    topic: Identifier
    partition_id: int
    kind: int
    value: int
    count: int
    auto_commit: bool
    CODE = Code.POLL_MESSAGES
    LAYOUT = (
        ("consumer", CONSUMER_OLD),
        ("stream", IDENT),
        ("topic", IDENT),
        ("partition_id", U32),
        ("kind", U8),
        ("value", U64),
        ("count", U32),
        ("auto_commit", BOOL8),
    )
    LAYOUT_V06 = (("consumer", CONSUMER_V06),) + LAYOUT[1:]

    @classmethod
    def decode_payload(cls, r: Reader, dialect: Dialect) -> Request:
        req = cls(**decode_fields(r, cls.layout(dialect)))
        r.done()
        if req.kind not in (1, 2, 3, 4, 5):
            raise RemoteProtocolError(f"unknown polling kind {req.kind}", "bad_polling_kind")
        return req

    def validate(self, dialect: Dialect) -> None:
        if self.count == 0:
            raise ValidationError(Status.INVALID_MESSAGES_COUNT, "poll count 0")


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a SEND_MESSAGES request: id (u128, 0 = server assigns), the raw headers
    block (2.1; empty = none) and the payload."""

    id: int
    payload: bytes
    headers: bytes = b""


_SEND_MSG = struct.Struct("<QQI")  # id lo, id hi, headers_len


@dataclass(frozen=True, slots=True)
class SendMessages(Request):
    """``messages`` holds (id bytes16, headers block, payload) tuples when decoded by a server
    (the hot path builds no per-message objects) or :class:`Message` objects when built by a
    client; ``encode_payload`` accepts both."""

    stream: Identifier
    topic: Identifier
    partitioning: Partitioning
    messages: Sequence[Any]
    # totals filled in by decode (-1: compute in validate)
    payload_bytes: int = field(default=-1, compare=False, repr=False)
    headers_bytes: int = field(default=-1, compare=False, repr=False)
    CODE = Code.SEND_MESSAGES
    LAYOUT = (("stream", IDENT), ("topic", IDENT), ("partitioning", PARTITIONING))

    def encode_payload(self, dialect: Dialect) -> bytes:
        parts = [encode_fields(self, self.LAYOUT)]
        append = parts.append
        hdr = _SEND_MSG.pack
        u32 = _U32.pack
        for m in self.messages:
            if isinstance(m, Message):
                mid, headers, payload = m.id, m.headers, m.payload
                append(hdr(mid & U64_MAX, mid >> 64, len(headers)))
            else:
                raw_id, headers, payload = m
                append(raw_id)
                append(u32(len(headers)))
            if headers:
                append(headers)
            append(u32(len(payload)))
            append(payload)
        return b"".join(parts)

    @classmethod
    def decode_payload(cls, r: Reader, dialect: Dialect) -> Request:
        stream = _read_identifier(r)
        topic = _read_identifier(r)
        partitioning = _read_partitioning(r)
        buf = r.buf
        pos, end = r.pos, r.end
        out: list[tuple[bytes, bytes, bytes]] = []
        append = out.append
        unpack_u32 = _U32.unpack_from
        total = total_headers = 0
        try:
            while pos < end:
                hpos = pos + 16
                if hpos + 4 > end:
                    raise RemoteProtocolError("message header cut short", "truncated")
                (hlen,) = unpack_u32(buf, hpos)
                ppos = hpos + 4 + hlen
                if ppos + 4 > end:
                    raise RemoteProtocolError("message headers or length cut short", "truncated")
                (plen,) = unpack_u32(buf, ppos)
                nxt = ppos + 4 + plen
                if nxt > end:
                    raise RemoteProtocolError("message payload cut short", "truncated")
                append(
                    (
                        buf[pos:hpos],
                        buf[hpos + 4 : ppos] if hlen else b"",
                        buf[ppos + 4 : nxt],
                    )
                )
                total += plen
                total_headers += hlen
                pos = nxt
        finally:
            r.pos = pos
        return cls(stream, topic, partitioning, out, total, total_headers)

    def validate(self, dialect: Dialect) -> None:
        p = self.partitioning
        if p.kind == PartitioningKind.BALANCED:
            if p.value:
                raise ValidationError(Status.INVALID_KEY_VALUE_LENGTH, "balanced with a value")
        elif p.kind == PartitioningKind.PARTITION_ID:
            if len(p.value) != 4:
                raise ValidationError(
                    Status.INVALID_KEY_VALUE_LENGTH, "partition id must be 4 bytes"
                )
        elif not p.value:
            raise ValidationError(Status.INVALID_KEY_VALUE_LENGTH, "empty messages key")
        if not self.messages:
            raise ValidationError(Status.INVALID_MESSAGES_COUNT, "no messages")
        total, headers = self.payload_bytes, self.headers_bytes
        if total < 0 or headers < 0:
            total = headers = 0
            for m in self.messages:
                if isinstance(m, Message):
                    total += len(m.payload)
                    headers += len(m.headers)
                else:
                    total += len(m[2])
                    headers += len(m[1])
        if headers > MAX_HEADERS_SIZE:
            raise ValidationError(Status.TOO_BIG_HEADERS_PAYLOAD, f"{headers} bytes of headers")
        if total > MAX_PAYLOAD_SIZE:
            raise ValidationError(Status.TOO_BIG_MESSAGE_PAYLOAD, f"{total} payload bytes")
        if total == 0:
            raise ValidationError(Status.EMPTY_MESSAGE_PAYLOAD, "all payloads are empty")


@dataclass(frozen=True, slots=True)
class GetConsumerOffset(Request):
    consumer: Consumer
    stream: Identifier
    topic: Identifier
    partition_id: int
    CODE = Code.GET_CONSUMER_OFFSET
    LAYOUT = (
        ("consumer", CONSUMER_OLD),
        ("stream", IDENT),
        ("topic", IDENT),
        ("partition_id", U32),
    )
    LAYOUT_V06 = (("consumer", CONSUMER_V06),) + LAYOUT[1:]


@dataclass(frozen=True, slots=True)
class StoreConsumerOffset(Request):
    consumer: Consumer
    stream: Identifier
    topic: Identifier
    partition_id: int
    offset: int
    CODE = Code.STORE_CONSUMER_OFFSET
    LAYOUT = GetConsumerOffset.LAYOUT + (("offset", U64),)
    LAYOUT_V06 = (("consumer", CONSUMER_V06),) + LAYOUT[1:]


@dataclass(frozen=True, slots=True)
class GetStream(Request):
    stream: Identifier
    CODE = Code.GET_STREAM
    LAYOUT = (("stream", IDENT),)


@dataclass(frozen=True, slots=True)
class GetStreams(Request):
    CODE = Code.GET_STREAMS


def _check_name(name: str, status: int) -> None:
    if not name or len(name.encode()) > 255 or any(not ch.isprintable() for ch in name):
        raise ValidationError(status, f"invalid name {name!r}")


@dataclass(frozen=True, slots=True)
class CreateStream(Request):
    stream_id: int
    name: str
    CODE = Code.CREATE_STREAM
    LAYOUT = (("stream_id", U32), ("name", STR8))

    def validate(self, dialect: Dialect) -> None:
        if self.stream_id == 0 and dialect is Dialect.OLD:
            raise ValidationError(Status.INVALID_STREAM_ID, "stream id 0")
        _check_name(self.name, Status.INVALID_STREAM_NAME)


@dataclass(frozen=True, slots=True)
class DeleteStream(Request):
    stream: Identifier
    CODE = Code.DELETE_STREAM
    LAYOUT = (("stream", IDENT),)


@dataclass(frozen=True, slots=True)
class GetTopic(Request):
    stream: Identifier
    topic: Identifier
    CODE = Code.GET_TOPIC
    LAYOUT = (("stream", IDENT), ("topic", IDENT))


@dataclass(frozen=True, slots=True)
class GetTopics(Request):
    stream: Identifier
    CODE = Code.GET_TOPICS
    LAYOUT = (("stream", IDENT),)


@dataclass(frozen=True, slots=True)
class CreateTopic(Request):
    """``message_expiry`` is in the dialect's unit: old u32 (effectively ms), 0.6 u64 µs
    (0 = server default, u64::MAX = never)."""

    stream: Identifier
    topic_id: int
    partitions_count: int
    message_expiry: int
    name: str
    compression_algorithm: int = 1
    max_topic_size: int = 0
    replication_factor: int = 0
    CODE = Code.CREATE_TOPIC
    LAYOUT = (
        ("stream", IDENT),
        ("topic_id", U32),
        ("partitions_count", U32),
        ("message_expiry", U32),
        ("name", STR8),
    )
    LAYOUT_V06 = (
        ("stream", IDENT),
        ("topic_id", U32),
        ("partitions_count", U32),
        ("compression_algorithm", U8),
        ("message_expiry", U64),
        ("max_topic_size", U64),
        ("replication_factor", U8),
        ("name", STR8),
    )

    def expiry_us(self, dialect: Dialect) -> int:
        """Message expiry in µs, 0 = never."""
        if dialect is Dialect.V06:
            return 0 if self.message_expiry in (0, U64_MAX) else self.message_expiry
        return self.message_expiry * 1000

    def validate(self, dialect: Dialect) -> None:
        if self.topic_id == 0 and dialect is Dialect.OLD:
            raise ValidationError(Status.INVALID_TOPIC_ID, "topic id 0")
        _check_name(self.name, Status.INVALID_TOPIC_NAME)
        if self.partitions_count > MAX_PARTITIONS:
            raise ValidationError(Status.TOO_MANY_PARTITIONS, f"{self.partitions_count}")
        if dialect is Dialect.V06 and self.compression_algorithm not in (1, 2):
            raise ValidationError(Status.INVALID_FORMAT, "unknown compression algorithm")


@dataclass(frozen=True, slots=True)
class DeleteTopic(Request):
    stream: Identifier
    topic: Identifier
    CODE = Code.DELETE_TOPIC
    LAYOUT = (("stream", IDENT), ("topic", IDENT))


@dataclass(frozen=True, slots=True)
class CreatePartitions(Request):
    stream: Identifier
    topic: Identifier
    partitions_count: int
    CODE = Code.CREATE_PARTITIONS
    LAYOUT = (("stream", IDENT), ("topic", IDENT), ("partitions_count", U32))

    def validate(self, dialect: Dialect) -> None:
        if not 1 <= self.partitions_count <= MAX_PARTITIONS:
            raise ValidationError(Status.TOO_MANY_PARTITIONS, f"{self.partitions_count}")


@dataclass(frozen=True, slots=True)
class DeletePartitions(CreatePartitions):
    CODE = Code.DELETE_PARTITIONS


@dataclass(frozen=True, slots=True)
class _GroupRequest(Request):
    """The consumer-group commands (600-605) share ``stream · topic · group_id u32``; the 0.6
    dialect is not served with other layouts here (iggy-py 0.4.0 has no group API)."""

    stream: Identifier
    topic: Identifier
    group_id: int
    LAYOUT = (("stream", IDENT), ("topic", IDENT), ("group_id", U32))

    def validate(self, dialect: Dialect) -> None:
        if self.group_id == 0:
            raise ValidationError(Status.INVALID_CONSUMER_GROUP_ID, "group id 0")


@dataclass(frozen=True, slots=True)
class GetConsumerGroup(_GroupRequest):
    CODE = Code.GET_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class GetConsumerGroups(Request):
    stream: Identifier
    topic: Identifier
    CODE = Code.GET_CONSUMER_GROUPS
    LAYOUT = (("stream", IDENT), ("topic", IDENT))


@dataclass(frozen=True, slots=True)
class CreateConsumerGroup(_GroupRequest):
    CODE = Code.CREATE_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class DeleteConsumerGroup(_GroupRequest):
    CODE = Code.DELETE_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class JoinConsumerGroup(_GroupRequest):
    CODE = Code.JOIN_CONSUMER_GROUP


@dataclass(frozen=True, slots=True)
class LeaveConsumerGroup(_GroupRequest):
    CODE = Code.LEAVE_CONSUMER_GROUP


REQUESTS: dict[int, type[Request]] = {
    cls.CODE: cls
    for cls in (
        Ping,
        GetStats,
        GetMe,
        GetClient,
        GetClients,
        LoginUser,
        PollMessages,
        SendMessages,
        GetConsumerOffset,
        StoreConsumerOffset,
        GetStream,
        GetStreams,
        CreateStream,
        DeleteStream,
        GetTopic,
        GetTopics,
        CreateTopic,
        DeleteTopic,
        CreatePartitions,
        DeletePartitions,
        GetConsumerGroup,
        GetConsumerGroups,
        CreateConsumerGroup,
        DeleteConsumerGroup,
        JoinConsumerGroup,
        LeaveConsumerGroup,
    )
}


def encode_request(req: Request, dialect: Dialect = Dialect.OLD) -> bytes:
    """One request frame."""
    if req.CODE == Code.LOGIN_USER:
        dialect = Dialect.V06
    payload = req.encode_payload(dialect)
    return _II.pack(len(payload) + 4, req.CODE) + payload


def decode_request(code: int, payload: bytes | memoryview, dialect: Dialect) -> Request:
    """A request from its code and payload. Raises RemoteProtocolError for an unknown code (and
    for LOGIN_USER under a reference-only server, see ``ServerConnection``) or a bad payload."""
    cls = REQUESTS.get(code)
    if cls is None:
        raise RemoteProtocolError(f"unknown command code {code}", "unknown_code")
    return cls.decode_payload(Reader(payload), dialect)


# ------------------------------------------------------------------------------ responses


@dataclass(frozen=True, slots=True)
class StreamRecord:
    id: int
    created_at: int
    topics_count: int
    size_bytes: int
    messages_count: int
    name: str
    LAYOUT: ClassVar[Layout] = (
        ("id", U32),
        ("created_at", U64),
        ("topics_count", U32),
        ("size_bytes", U64),
        ("messages_count", U64),
        ("name", STR8),
    )


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic; ``message_expiry`` is the dialect's unit (old: u32, 0.6: u64 µs, 0 = never)."""

    id: int
    created_at: int
    partitions_count: int
    message_expiry: int
    size_bytes: int
    messages_count: int
    name: str
    compression_algorithm: int = 1
    max_topic_size: int = 0
    replication_factor: int = 1
    LAYOUT: ClassVar[Layout] = (
        ("id", U32),
        ("created_at", U64),
        ("partitions_count", U32),
        ("message_expiry", U32),
        ("size_bytes", U64),
        ("messages_count", U64),
        ("name", STR8),
    )
    LAYOUT_V06: ClassVar[Layout] = (
        ("id", U32),
        ("created_at", U64),
        ("partitions_count", U32),
        ("message_expiry", U64),
        ("compression_algorithm", U8),
        ("max_topic_size", U64),
        ("replication_factor", U8),
        ("size_bytes", U64),
        ("messages_count", U64),
        ("name", STR8),
    )


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    id: int
    created_at: int
    segments_count: int
    current_offset: int
    size_bytes: int
    messages_count: int
    LAYOUT: ClassVar[Layout] = (
        ("id", U32),
        ("created_at", U64),
        ("segments_count", U32),
        ("current_offset", U64),
        ("size_bytes", U64),
        ("messages_count", U64),
    )


@dataclass(frozen=True, slots=True)
class StreamDetails:
    stream: StreamRecord
    topics: tuple[TopicRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicDetails:
    topic: TopicRecord
    partitions: tuple[PartitionRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class StatsRecord:
    process_id: int = 0
    cpu_usage: float = 0.0
    memory_usage: int = 0
    total_memory: int = 0
    available_memory: int = 0
    run_time: int = 0
    start_time: int = 0
    read_bytes: int = 0
    written_bytes: int = 0
    messages_size_bytes: int = 0
    streams_count: int = 0
    topics_count: int = 0
    partitions_count: int = 0
    segments_count: int = 0
    messages_count: int = 0
    clients_count: int = 0
    consumer_groups_count: int = 0
    hostname: str = ""
    os_name: str = ""
    os_version: str = ""
    kernel_version: str = ""
    LAYOUT: ClassVar[Layout] = (
        ("process_id", U32),
        ("cpu_usage", F32),
        ("memory_usage", U64),
        ("total_memory", U64),
        ("available_memory", U64),
        ("run_time", U64),
        ("start_time", U64),
        ("read_bytes", U64),
        ("written_bytes", U64),
        ("messages_size_bytes", U64),
        ("streams_count", U32),
        ("topics_count", U32),
        ("partitions_count", U32),
        ("segments_count", U32),
        ("messages_count", U64),
        ("clients_count", U32),
        ("consumer_groups_count", U32),
        ("hostname", STR32),
        ("os_name", STR32),
        ("os_version", STR32),
        ("kernel_version", STR32),
    )


@dataclass(frozen=True, slots=True)
class ClientRecord:
    """``groups`` are (group_id, topic_id, stream_id); GET_CLIENTS sends none of them but still
    the count, so ``groups_count`` is kept separately."""

    client_id: int
    transport: int
    address: str
    groups_count: int
    groups: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class GroupRecord:
    id: int
    partitions_count: int
    members_count: int


@dataclass(frozen=True, slots=True)
class GroupDetails:
    group: GroupRecord
    members: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (member_id, partition ids)


@dataclass(frozen=True, slots=True)
class ConsumerOffsetRecord:
    partition_id: int
    current_offset: int
    stored_offset: int


@dataclass(frozen=True, slots=True)
class PolledMessage:
    offset: int
    state: int
    timestamp: int
    id: int
    checksum: int
    headers: bytes
    payload: bytes


@dataclass(frozen=True, slots=True)
class PolledMessages:
    partition_id: int
    current_offset: int
    messages: tuple[PolledMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class LoginResult:
    user_id: int


def _records(r: Reader, layout: Layout, cls: type, count: int | None = None) -> list[Any]:
    out = []
    while (count is None and r.remaining() > 0) or (count is not None and len(out) < count):
        out.append(cls(**decode_fields(r, layout)))
    return out


def topic_layout(dialect: Dialect) -> Layout:
    return TopicRecord.LAYOUT_V06 if dialect is Dialect.V06 else TopicRecord.LAYOUT


def encode_stream_details(d: StreamDetails, dialect: Dialect) -> bytes:
    tl = topic_layout(dialect)
    return encode_fields(d.stream, StreamRecord.LAYOUT) + b"".join(
        encode_fields(t, tl) for t in d.topics
    )


def encode_topic_details(d: TopicDetails, dialect: Dialect) -> bytes:
    return encode_fields(d.topic, topic_layout(dialect)) + b"".join(
        encode_fields(p, PartitionRecord.LAYOUT) for p in d.partitions
    )


def encode_client(c: ClientRecord, with_groups: bool) -> bytes:
    out = [_U32.pack(c.client_id) + bytes((c.transport,)) + _write_str32(c.address)]
    out.append(_U32.pack(c.groups_count))
    if with_groups:
        for g, t, s in c.groups:
            out.append(struct.pack("<III", g, t, s))
    return b"".join(out)


def _decode_client(r: Reader, with_groups: bool) -> ClientRecord:
    client_id = r.u32()
    transport = r.u8()
    address = _read_str32(r)
    count = r.u32()
    groups: tuple[tuple[int, int, int], ...] = ()
    if with_groups:
        groups = tuple((r.u32(), r.u32(), r.u32()) for _ in range(count))
    return ClientRecord(client_id, transport, address, count, groups)


def encode_group_details(d: GroupDetails) -> bytes:
    out = [struct.pack("<III", d.group.id, d.group.partitions_count, d.group.members_count)]
    for member_id, parts in d.members:
        out.append(_II.pack(member_id, len(parts)))
        out.append(struct.pack(f"<{len(parts)}I", *parts))
    return b"".join(out)


_POLL_HEAD = struct.Struct("<IQI")  # partition_id, current_offset, messages_count
_POLL_MSG = struct.Struct("<QBQQQII")  # offset, state, ts, id lo, id hi, checksum, headers_len


def encode_polled(
    partition_id: int,
    current_offset: int,
    messages: Iterable[tuple[int, int, int, bytes, bytes]],
) -> bytes:
    """A POLL_MESSAGES reply payload (5.8) from (offset, timestamp_us, id, headers block,
    payload) tuples; state is "available", the checksum is CRC-32 of the payload."""
    parts: list[bytes] = [b""]
    append = parts.append
    pack = _POLL_MSG.pack
    u32 = _U32.pack
    crc = zlib.crc32
    n = 0
    for offset, ts, mid, headers, payload in messages:
        append(pack(offset, 1, ts, mid & U64_MAX, mid >> 64, crc(payload), len(headers)))
        if headers:
            append(headers)
        append(u32(len(payload)))
        append(payload)
        n += 1
    parts[0] = _POLL_HEAD.pack(partition_id, current_offset, n)
    return b"".join(parts)


def decode_polled(payload: bytes | memoryview) -> PolledMessages:
    r = Reader(payload)
    partition_id, current_offset, _count = r.unpack(_POLL_HEAD)
    msgs = []
    while r.remaining() > 0:
        offset, state, ts, lo, hi, checksum, hlen = r.unpack(_POLL_MSG)
        headers = r.take(hlen)
        data = r.take(r.u32())
        msgs.append(PolledMessage(offset, state, ts, lo | (hi << 64), checksum, headers, data))
    return PolledMessages(partition_id, current_offset, tuple(msgs))


def encode_response_payload(code: int, result: Any, dialect: Dialect) -> bytes:
    """The OK payload for ``code`` from a response object (server role). ``None`` -> empty."""
    if result is None:
        return b""
    if isinstance(result, bytes | bytearray | memoryview):
        return bytes(result)
    if code == Code.LOGIN_USER:
        return _U32.pack(result.user_id)
    if code == Code.GET_STATS:
        return encode_fields(result, StatsRecord.LAYOUT)
    if code in (Code.GET_ME, Code.GET_CLIENT):
        return encode_client(result, True)
    if code == Code.GET_CLIENTS:
        return b"".join(encode_client(c, False) for c in result)
    if code == Code.POLL_MESSAGES:
        assert isinstance(result, PolledMessages)
        return encode_polled(
            result.partition_id,
            result.current_offset,
            ((m.offset, m.timestamp, m.id, m.headers, m.payload) for m in result.messages),
        )
    if code == Code.GET_CONSUMER_OFFSET:
        return struct.pack("<IQQ", result.partition_id, result.current_offset, result.stored_offset)
    if code in (Code.GET_STREAM, Code.CREATE_STREAM):
        return encode_stream_details(result, dialect)
    if code == Code.GET_STREAMS:
        return b"".join(encode_fields(s, StreamRecord.LAYOUT) for s in result)
    if code in (Code.GET_TOPIC, Code.CREATE_TOPIC):
        return encode_topic_details(result, dialect)
    if code == Code.GET_TOPICS:
        tl = topic_layout(dialect)
        return b"".join(encode_fields(t, tl) for t in result)
    if code == Code.GET_CONSUMER_GROUP:
        return encode_group_details(result)
    if code == Code.GET_CONSUMER_GROUPS:
        return b"".join(
            struct.pack("<III", g.id, g.partitions_count, g.members_count) for g in result
        )
    raise LocalProtocolError(f"command {code} has no response payload, got {result!r}")


def decode_response_payload(code: int, payload: bytes | memoryview, dialect: Dialect) -> Any:
    """The response object for ``code`` (client role); ``None`` for an empty payload."""
    if len(payload) <= 1:  # the Rust SDK's rule: length <= 1 is empty
        return None
    r = Reader(payload)
    if code == Code.LOGIN_USER:
        return LoginResult(r.u32())
    if code == Code.GET_STATS:
        out: Any = StatsRecord(**decode_fields(r, StatsRecord.LAYOUT))
    elif code in (Code.GET_ME, Code.GET_CLIENT):
        out = _decode_client(r, True)
    elif code == Code.GET_CLIENTS:
        out = []
        while r.remaining():
            out.append(_decode_client(r, False))
    elif code == Code.POLL_MESSAGES:
        return decode_polled(payload)
    elif code == Code.GET_CONSUMER_OFFSET:
        out = ConsumerOffsetRecord(*r.unpack(struct.Struct("<IQQ")))
    elif code in (Code.GET_STREAM, Code.CREATE_STREAM):
        stream = StreamRecord(**decode_fields(r, StreamRecord.LAYOUT))
        out = StreamDetails(stream, tuple(_records(r, topic_layout(dialect), TopicRecord)))
    elif code == Code.GET_STREAMS:
        out = _records(r, StreamRecord.LAYOUT, StreamRecord)
    elif code in (Code.GET_TOPIC, Code.CREATE_TOPIC):
        topic = TopicRecord(**decode_fields(r, topic_layout(dialect)))
        out = TopicDetails(topic, tuple(_records(r, PartitionRecord.LAYOUT, PartitionRecord)))
    elif code == Code.GET_TOPICS:
        out = _records(r, topic_layout(dialect), TopicRecord)
    elif code == Code.GET_CONSUMER_GROUP:
        group = GroupRecord(r.u32(), r.u32(), r.u32())
        members = []
        while r.remaining():
            member_id, n = r.u32(), r.u32()
            members.append((member_id, tuple(r.u32() for _ in range(n))))
        out = GroupDetails(group, tuple(members))
    elif code == Code.GET_CONSUMER_GROUPS:
        out = []
        while r.remaining():
            out.append(GroupRecord(r.u32(), r.u32(), r.u32()))
    else:
        raise RemoteProtocolError(f"command {code} answered with data", "unexpected_payload")
    r.done()
    return out


# ------------------------------------------------------------------------------ headers (2.1)


def decode_headers(block: bytes | memoryview) -> list[tuple[str, int, bytes]]:
    """(key, kind, value) entries of a headers block. Raises ValidationError with Iggy's code
    for a bad key or value (4018 / 4019) and RemoteProtocolError when the block is cut."""
    r = Reader(block)
    out = []
    while r.remaining():
        klen = r.u32()
        if not 1 <= klen <= 255:
            raise ValidationError(Status.INVALID_HEADER_KEY, f"header key length {klen}")
        try:
            key = bytes(r.take(klen)).decode()
        except UnicodeDecodeError:
            raise ValidationError(Status.INVALID_HEADER_KEY, "header key is not UTF-8") from None
        kind = r.u8()
        vlen = r.u32()
        value = r.take(vlen)
        if kind not in HeaderKind._value2member_map_ or not 1 <= vlen <= 255:
            raise ValidationError(
                Status.INVALID_HEADER_VALUE, f"header {key!r}: kind {kind}, {vlen} bytes"
            )
        size = HEADER_VALUE_SIZES.get(HeaderKind(kind))
        if size is not None and vlen != size:
            raise ValidationError(
                Status.INVALID_HEADER_VALUE, f"header {key!r}: kind {kind} needs {size} bytes"
            )
        if kind == HeaderKind.STRING:
            try:
                value.decode()
            except UnicodeDecodeError:
                raise ValidationError(
                    Status.INVALID_HEADER_VALUE, f"header {key!r} is not UTF-8"
                ) from None
        out.append((key, kind, value))
    return out


def encode_headers(entries: Iterable[tuple[str, int, bytes]]) -> bytes:
    out = []
    for key, kind, value in entries:
        raw = key.encode()
        if not 1 <= len(raw) <= 255 or not 1 <= len(value) <= 255:
            raise LocalProtocolError(f"header {key!r}: key and value must be 1-255 bytes")
        out.append(_U32.pack(len(raw)) + raw + bytes((kind,)) + _U32.pack(len(value)) + value)
    return b"".join(out)


# ------------------------------------------------------------------------------ connections

_FRAME_HEAD = struct.Struct("<II")


@dataclass(frozen=True, slots=True)
class RawRequest:
    """A request frame whose payload is not decoded (``ServerConnection.next_frame``)."""

    code: int
    payload: bytes


class ServerConnection:
    """The server role: bytes in, requests out; responses in, bytes out.

    ``next_request()`` returns the next complete request, ``None`` when more bytes are needed,
    and raises RemoteProtocolError (close the connection) or ValidationError (answer with
    ``send_error(exc.status)`` and go on)."""

    def __init__(self, max_frame_bytes: int = 100 << 20, accept_login: bool = True) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.accept_login = accept_login
        self.dialect = Dialect.OLD
        self._buf = ReceiveBuffer()
        self.broken = False

    def receive_data(self, data: bytes) -> None:
        self._buf.feed(data)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet part of a returned frame."""
        return len(self._buf)

    def next_frame(self) -> RawRequest | None:
        if self.broken:
            raise RemoteProtocolError("connection already failed", "broken")
        head = self._buf.peek(_FRAME_HEAD)
        if head is None:
            return None
        length, code = head
        if length < 4:
            self.broken = True
            raise RemoteProtocolError(f"request length {length} < 4", "bad_length")
        if length + 4 > self.max_frame_bytes:
            self.broken = True
            raise RemoteProtocolError(
                f"request of {length} bytes over the {self.max_frame_bytes} limit", "oversized"
            )
        if len(self._buf) < length + 4:
            return None
        self._buf.skip(8)
        payload = self._buf.take(length - 4)
        return RawRequest(code, payload)

    def next_request(self) -> Request | None:
        frame = self.next_frame()
        if frame is None:
            return None
        return self.decode(frame)

    def decode(self, frame: RawRequest) -> Request:
        code = frame.code
        try:
            if code == Code.LOGIN_USER:
                if not self.accept_login:
                    raise RemoteProtocolError("LOGIN_USER in the old dialect", "unknown_code")
                self.dialect = Dialect.V06
            req = decode_request(code, frame.payload, self.dialect)
        except RemoteProtocolError:
            self.broken = True
            raise
        req.validate(self.dialect)
        return req

    def send_response(self, code: int, result: Any = None) -> bytes:
        payload = encode_response_payload(code, result, self.dialect)
        if len(payload) == 1:
            raise LocalProtocolError("an OK payload of exactly 1 byte is read as empty by clients")
        return _FRAME_HEAD.pack(0, len(payload)) + payload

    @staticmethod
    def send_error(status: int) -> bytes:
        if status == 0:
            raise LocalProtocolError("an error status must not be 0")
        return _FRAME_HEAD.pack(status, 0)


@dataclass(slots=True)
class Response:
    """A response as the client role sees it: ``status`` 0 and ``result`` or an error status."""

    code: int
    status: int
    result: Any = None


@dataclass
class ClientConnection:
    """The client role: requests in, bytes out; bytes in, responses out (in request order)."""

    dialect: Dialect = Dialect.OLD
    _buf: ReceiveBuffer = field(default_factory=ReceiveBuffer)
    _pending: list[int] = field(default_factory=list)
    max_frame_bytes: int = 100 << 20

    def send(self, req: Request) -> bytes:
        if req.CODE == Code.LOGIN_USER:
            self.dialect = Dialect.V06
        self._pending.append(req.CODE)
        return encode_request(req, self.dialect)

    def receive_data(self, data: bytes) -> None:
        self._buf.feed(data)

    def next_response(self) -> Response | None:
        head = self._buf.peek(_FRAME_HEAD)
        if head is None:
            return None
        status, length = head
        if length > self.max_frame_bytes:
            raise RemoteProtocolError(f"response of {length} bytes", "oversized")
        if len(self._buf) < length + 8:
            return None
        if not self._pending:
            raise RemoteProtocolError("a response without a request", "unexpected")
        code = self._pending.pop(0)
        self._buf.skip(8)
        payload = self._buf.take(length)
        if status != 0:
            return Response(code, status)
        return Response(code, 0, decode_response_payload(code, payload, self.dialect))
