"""Iggy's wire types, sans-IO: errors, codes, identifiers, the field types its layouts are
declared with (:mod:`gateway.protocols.layout`, little endian) and the headers block (2.1).

Requests are declared in ``requests.py``, responses in ``responses.py``, framing in ``codec.py``
(which re-exports all three). Reference: ``docs/protocols/iggy.md``.

Two error types keep blame clear (as in h11): :class:`RemoteProtocolError` (the peer sent
something we cannot decode: the real server drops the connection) and
:class:`LocalProtocolError` (we were asked to encode something invalid: a bug). A request that
decodes but fails Iggy's ``validate()`` raises :class:`ValidationError` carrying the Iggy status
code, which the server answers with an error frame.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.protocols import layout as engine
from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError
from gateway.protocols.layout import Buffer

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

    def __init__(
        self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
    ) -> None:
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

WIRE = engine.Wire("<")
U8 = WIRE.int("B", "u8")
U32 = WIRE.int("I", "u32")
U64 = WIRE.int("Q", "u64")
F32 = WIRE.int("f", "f32")
STR8 = engine.Text(U8)
STR32 = engine.Text(U32)
BOOL8 = engine.Bool(U8)


class IdentifierType(engine.Type):
    """kind u8 (1 numeric, 2 string) · length u8 · u32 or the name."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[Identifier, int]:
        kind, pos = U8.read(buf, pos)
        length, pos = U8.read(buf, pos)
        if kind == 1:
            if length != 4:
                raise RemoteProtocolError(
                    f"numeric identifier of length {length}", "bad_identifier"
                )
            value, pos = U32.read(buf, pos)
            return Identifier(value), pos
        if kind == 2:
            if length == 0:
                raise RemoteProtocolError("empty string identifier", "bad_identifier")
            if pos + length > len(buf):
                raise WIRE.short("identifier", pos, length, len(buf))
            raw = bytes(buf[pos : pos + length])
            try:
                return Identifier(raw.decode()), pos + length
            except UnicodeDecodeError:
                raise RemoteProtocolError(f"text is not UTF-8: {raw!r}", "bad_utf8") from None
        raise RemoteProtocolError(f"unknown identifier kind {kind}", "bad_identifier")

    def write(self, value: Identifier, out: list[Buffer]) -> None:
        out.append(value.encode())


class ConsumerType(engine.Type):
    """kind u8 (1 consumer, 2 group) · id: a u32 in the old dialect, an identifier in 0.6."""

    __slots__ = ("v06",)

    def __init__(self, v06: bool) -> None:
        self.v06 = v06

    def read(self, buf: Buffer, pos: int) -> tuple[Consumer, int]:
        kind, pos = U8.read(buf, pos)
        if kind not in (1, 2):
            raise RemoteProtocolError(f"unknown consumer kind {kind}", "bad_consumer")
        if self.v06:
            ident, pos = IDENT.read(buf, pos)
            return Consumer(kind, ident), pos
        value, pos = U32.read(buf, pos)
        return Consumer(kind, Identifier(value)), pos

    def write(self, value: Consumer, out: list[Buffer]) -> None:
        if self.v06:
            out.append(bytes((value.kind,)) + value.id.encode())
            return
        if not isinstance(value.id.value, int):
            raise LocalProtocolError("the old dialect has numeric consumer ids only")
        out.append(bytes((value.kind,)) + _U32.pack(value.id.value))


class PartitioningType(engine.Type):
    """kind u8 · length u8 · value."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[Partitioning, int]:
        kind, pos = U8.read(buf, pos)
        length, pos = U8.read(buf, pos)
        if kind not in (1, 2, 3):
            raise RemoteProtocolError(f"unknown partitioning kind {kind}", "bad_partitioning")
        if pos + length > len(buf):
            raise WIRE.short("partitioning value", pos, length, len(buf))
        return Partitioning(kind, bytes(buf[pos : pos + length])), pos + length

    def write(self, value: Partitioning, out: list[Buffer]) -> None:
        if len(value.value) > 255:
            raise LocalProtocolError("partitioning value longer than 255 bytes")
        out.append(bytes((value.kind, len(value.value))) + value.value)


class Checked(engine.Type):
    """A u8 that must be one of ``allowed``, else a remote error of ``kind``."""

    __slots__ = ("allowed", "kind", "what")

    def __init__(self, allowed: Iterable[int], kind: str, what: str) -> None:
        self.allowed = frozenset(allowed)
        self.kind = kind
        self.what = what

    def read(self, buf: Buffer, pos: int) -> tuple[int, int]:
        value, pos = U8.read(buf, pos)
        if value not in self.allowed:
            raise RemoteProtocolError(f"unknown {self.what} {value}", self.kind)
        return value, pos

    def write(self, value: int, out: list[Buffer]) -> None:
        U8.write(value, out)


IDENT = IdentifierType()
CONSUMER_OLD = ConsumerType(v06=False)
CONSUMER_V06 = ConsumerType(v06=True)
PARTITIONING = PartitioningType()
POLLING_KIND = Checked(PollingKind, "bad_polling_kind", "polling kind")


def encode_fields(obj: Any, fields: engine.Layout | Sequence[tuple[str, engine.Type]]) -> bytes:
    """``obj``'s attributes written with a layout or a list of fields."""
    if not isinstance(fields, engine.Layout):
        fields = engine.Layout(type(obj).__name__, fields, type(obj), wire=WIRE)
    return fields.encode(obj)


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
