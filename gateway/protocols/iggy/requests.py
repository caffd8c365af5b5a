"""Iggy requests, sans-IO: each command is a dataclass whose ``LAYOUT`` (and ``LAYOUT_V06``
where the 0.6 dialect differs) lists its payload's fields once, in wire order; :data:`LAYOUTS`
turns those lists into :class:`gateway.protocols.layout.Layout` objects keyed by (code, dialect)
and both directions follow from them. SEND_MESSAGES keeps a hand-tuned message loop (the hot
path). ``validate`` mirrors the reference server's checks.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gateway.protocols.iggy.wire import (
    BOOL8,
    CONSUMER_OLD,
    CONSUMER_V06,
    IDENT,
    MAX_HEADERS_SIZE,
    MAX_PARTITIONS,
    MAX_PAYLOAD_SIZE,
    PARTITIONING,
    POLLING_KIND,
    STR8,
    STR32,
    U8,
    U32,
    U64,
    U64_MAX,
    WIRE,
    Code,
    Consumer,
    Dialect,
    Identifier,
    Partitioning,
    PartitioningKind,
    RemoteProtocolError,
    Status,
    ValidationError,
)
from gateway.protocols.layout import Buffer, Layout, Optional, Table, Type

Fields = tuple[tuple[str, Type], ...]
_U32 = struct.Struct("<I")
_II = struct.Struct("<II")
DIALECT_VERSION = {Dialect.OLD: 0, Dialect.V06: 1}
"""The dialect as the version of the (code, version) key of :data:`LAYOUTS`."""


class Request:
    """Base of the request messages. ``CODE`` is the command code; ``LAYOUT`` (and
    ``LAYOUT_V06`` where the 0.6 dialect differs) declares the payload."""

    CODE: ClassVar[int]
    LAYOUT: ClassVar[Fields] = ()
    LAYOUT_V06: ClassVar[Fields | None] = None

    @classmethod
    def layout(cls, dialect: Dialect) -> Layout:
        return LAYOUTS.get(cls.CODE, DIALECT_VERSION[dialect])

    def encode_payload(self, dialect: Dialect) -> bytes:
        return self.layout(dialect).encode(self)

    @classmethod
    def decode_payload(cls, buf: Buffer, dialect: Dialect) -> Request:
        return cls.layout(dialect).decode(buf, exact=True)

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
    # iggy-py 0.2.0 (crate 0.4.x) sends only the two strings
    LAYOUT = (
        ("username", STR8),
        ("password", STR8),
        ("version", Optional(STR32, "")),
        ("context", Optional(STR32, "")),
    )


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
        ("kind", POLLING_KIND),
        ("value", U64),
        ("count", U32),
        ("auto_commit", BOOL8),
    )
    LAYOUT_V06 = (("consumer", CONSUMER_V06),) + LAYOUT[1:]

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
        parts: list[Buffer] = []
        self.layout(dialect).write(self, parts)
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
    def decode_payload(cls, buf: Buffer, dialect: Dialect) -> Request:
        stream, pos = IDENT.read(buf, 0)
        topic, pos = IDENT.read(buf, pos)
        partitioning, pos = PARTITIONING.read(buf, pos)
        end = len(buf)
        out: list[tuple[Buffer, Buffer, Buffer]] = []
        append = out.append
        unpack_u32 = _U32.unpack_from
        total = total_headers = 0
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


LAYOUTS = Table(
    (cls.CODE, DIALECT_VERSION[dialect], DIALECT_VERSION[dialect], lay)
    for cls in REQUESTS.values()
    for dialect, lay in (
        (Dialect.OLD, Layout(cls.__name__, cls.LAYOUT, cls, wire=WIRE)),
        (Dialect.V06, Layout(cls.__name__, cls.LAYOUT_V06 or cls.LAYOUT, cls, wire=WIRE)),
    )
)
"""Each request's payload layout by (code, dialect version)."""


def encode_request(req: Request, dialect: Dialect = Dialect.OLD) -> bytes:
    """One request frame."""
    if req.CODE == Code.LOGIN_USER:
        dialect = Dialect.V06
    payload = req.encode_payload(dialect)
    return _II.pack(len(payload) + 4, req.CODE) + payload


def decode_request(code: int, payload: Buffer, dialect: Dialect) -> Request:
    """A request from its code and payload. Raises RemoteProtocolError for an unknown code (and
    for LOGIN_USER under a reference-only server, see ``ServerConnection``) or a bad payload."""
    cls = REQUESTS.get(code)
    if cls is None:
        raise RemoteProtocolError(f"unknown command code {code}", "unknown_code")
    return cls.decode_payload(payload, dialect)
