"""Iggy responses, sans-IO: the records a server answers with, each declared once as a layout
(:mod:`gateway.protocols.layout`), and :data:`RESPONSES`, the payload type of every command's OK
answer by (code, dialect version). POLL_MESSAGES keeps its hand-tuned writer and reader.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from gateway.protocols.iggy.requests import DIALECT_VERSION
from gateway.protocols.iggy.wire import (
    F32,
    STR8,
    STR32,
    U8,
    U32,
    U64,
    U64_MAX,
    Code,
    Dialect,
    LocalProtocolError,
    Reader,
    RemoteProtocolError,
)
from gateway.protocols.layout import Array, Buffer, Layout, Repeat, Table, Type, layout

_U32 = struct.Struct("<I")
Fields = tuple[tuple[str, Type], ...]


@dataclass(frozen=True, slots=True)
class StreamRecord:
    id: int
    created_at: int
    topics_count: int
    size_bytes: int
    messages_count: int
    name: str
    LAYOUT: ClassVar[Fields] = (
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
    LAYOUT: ClassVar[Fields] = (
        ("id", U32),
        ("created_at", U64),
        ("partitions_count", U32),
        ("message_expiry", U32),
        ("size_bytes", U64),
        ("messages_count", U64),
        ("name", STR8),
    )
    LAYOUT_V06: ClassVar[Fields] = (
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
    LAYOUT: ClassVar[Fields] = (
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
    LAYOUT: ClassVar[Fields] = (
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


def decode_polled(payload: bytes | bytearray | memoryview) -> PolledMessages:
    r = Reader(payload)
    partition_id, current_offset, _count = r.unpack(_POLL_HEAD)
    msgs = []
    while r.remaining() > 0:
        offset, state, ts, lo, hi, checksum, hlen = r.unpack(_POLL_MSG)
        headers = r.take(hlen)
        data = r.take(r.u32())
        msgs.append(PolledMessage(offset, state, ts, lo | (hi << 64), checksum, headers, data))
    return PolledMessages(partition_id, current_offset, tuple(msgs))


# ------------------------------------------------------------------------------ layouts


class AsTuple(Type):
    """``item`` (a list-valued type) read as a tuple."""

    __slots__ = ("item",)

    def __init__(self, item: Type) -> None:
        self.item = item

    def read(self, buf: Buffer, pos: int) -> tuple[tuple[Any, ...], int]:
        value, pos = self.item.read(buf, pos)
        return tuple(value), pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        self.item.write(value, out)


STREAM = Layout("StreamRecord", StreamRecord.LAYOUT, StreamRecord)
TOPIC = {
    Dialect.OLD: Layout("TopicRecord", TopicRecord.LAYOUT, TopicRecord),
    Dialect.V06: Layout("TopicRecord", TopicRecord.LAYOUT_V06, TopicRecord),
}
PARTITION = Layout("PartitionRecord", PartitionRecord.LAYOUT, PartitionRecord)
STATS = Layout("StatsRecord", StatsRecord.LAYOUT, StatsRecord)
GROUP = Layout(
    "GroupRecord",
    [("id", U32), ("partitions_count", U32), ("members_count", U32)],
    GroupRecord,
)
GROUP_MEMBER = layout("GroupMember", ("member_id", U32), ("partitions", AsTuple(Array(U32, U32))))
GROUP_DETAILS = Layout(
    "GroupDetails", [("group", GROUP), ("members", AsTuple(Repeat(GROUP_MEMBER)))], GroupDetails
)
CONSUMER_OFFSET = Layout(
    "ConsumerOffsetRecord",
    [("partition_id", U32), ("current_offset", U64), ("stored_offset", U64)],
    ConsumerOffsetRecord,
)
LOGIN = Layout("LoginResult", [("user_id", U32)], LoginResult)


class LoginAnswer(Type):
    """LOGIN_USER's answer: the user id; what a newer server sends after it (tokens) is
    ignored, as the SDK does."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[LoginResult, int]:
        value, _ = LOGIN.read(buf, pos)
        return value, len(buf)

    def write(self, value: LoginResult, out: list[Buffer]) -> None:
        LOGIN.write(value, out)


CLIENT_GROUP = layout("ClientGroup", ("group_id", U32), ("topic_id", U32), ("stream_id", U32))
CLIENT_BRIEF = Layout(
    "ClientRecord",
    [("client_id", U32), ("transport", U8), ("address", STR32), ("groups_count", U32)],
    ClientRecord,
)
"""A client as GET_CLIENTS lists it: the count of its groups, not the groups."""
_CLIENT_FULL = layout(
    "Client",
    ("client_id", U32),
    ("transport", U8),
    ("address", STR32),
    ("groups", Array(CLIENT_GROUP, U32)),
)


class ClientWithGroups(Type):
    """A client as GET_ME / GET_CLIENT show it: its groups after the count."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[ClientRecord, int]:
        c, pos = _CLIENT_FULL.read(buf, pos)
        groups = tuple(tuple(g) for g in c.groups)
        return ClientRecord(c.client_id, c.transport, c.address, len(groups), groups), pos

    def write(self, value: ClientRecord, out: list[Buffer]) -> None:
        if value.groups_count != len(value.groups):
            raise LocalProtocolError(f"{value.groups_count} groups counted, {value.groups} sent")
        _CLIENT_FULL.write((value.client_id, value.transport, value.address, value.groups), out)


class Polled(Type):
    """A POLL_MESSAGES answer, through the hand-tuned :func:`encode_polled` /
    :func:`decode_polled` (the poll hot path)."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[PolledMessages, int]:
        return decode_polled(buf[pos:]), len(buf)

    def write(self, value: PolledMessages, out: list[Buffer]) -> None:
        out.append(
            encode_polled(
                value.partition_id,
                value.current_offset,
                ((m.offset, m.timestamp, m.id, m.headers, m.payload) for m in value.messages),
            )
        )


def _answers(dialect: Dialect) -> dict[int, Type]:
    topic = TOPIC[dialect]
    stream_details = Layout(
        "StreamDetails", [("stream", STREAM), ("topics", AsTuple(Repeat(topic)))], StreamDetails
    )
    topic_details = Layout(
        "TopicDetails", [("topic", topic), ("partitions", AsTuple(Repeat(PARTITION)))], TopicDetails
    )
    return {
        Code.LOGIN_USER: LoginAnswer(),
        Code.GET_STATS: STATS,
        Code.GET_ME: ClientWithGroups(),
        Code.GET_CLIENT: ClientWithGroups(),
        Code.GET_CLIENTS: Repeat(CLIENT_BRIEF),
        Code.POLL_MESSAGES: Polled(),
        Code.GET_CONSUMER_OFFSET: CONSUMER_OFFSET,
        Code.GET_STREAM: stream_details,
        Code.CREATE_STREAM: stream_details,
        Code.GET_STREAMS: Repeat(STREAM),
        Code.GET_TOPIC: topic_details,
        Code.CREATE_TOPIC: topic_details,
        Code.GET_TOPICS: Repeat(topic),
        Code.GET_CONSUMER_GROUP: GROUP_DETAILS,
        Code.GET_CONSUMER_GROUPS: Repeat(GROUP),
    }


RESPONSES = Table(
    (code, DIALECT_VERSION[dialect], DIALECT_VERSION[dialect], answer)
    for dialect in Dialect
    for code, answer in _answers(dialect).items()
)
"""The payload type of each command's OK answer by (code, dialect version); commands not in
it answer with an empty payload."""


def topic_layout(dialect: Dialect) -> Layout:
    return TOPIC[dialect]


def encode_response_payload(code: int, result: Any, dialect: Dialect) -> bytes:
    """The OK payload for ``code`` from a response object (server role). ``None`` -> empty."""
    if result is None:
        return b""
    if isinstance(result, bytes | bytearray | memoryview):
        return bytes(result)
    answer = RESPONSES.get(code, DIALECT_VERSION[dialect])
    if answer is None:
        raise LocalProtocolError(f"command {code} has no response payload, got {result!r}")
    out: list[Buffer] = []
    answer.write(result, out)
    return b"".join(out)


def decode_response_payload(code: int, payload: Buffer, dialect: Dialect) -> Any:
    """The response object for ``code`` (client role); ``None`` for an empty payload."""
    if len(payload) <= 1:  # the Rust SDK's rule: length <= 1 is empty
        return None
    answer = RESPONSES.get(code, DIALECT_VERSION[dialect])
    if answer is None:
        raise RemoteProtocolError(f"command {code} answered with data", "unexpected_payload")
    value, end = answer.read(payload, 0)
    if end != len(payload):
        raise RemoteProtocolError(
            f"{len(payload) - end} unexpected bytes after the payload", "trailing_bytes"
        )
    return value
