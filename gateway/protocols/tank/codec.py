"""The TANK wire protocol, sans-IO, in both roles (server: decode requests, encode responses;
client: encode requests, decode responses). Hand-written because no Python TANK library exists.

Reference: ``docs/protocols/tank.md``. Frames are ``msg_id u8 · payload_size u32 · payload``,
little endian. :class:`TankConnection` is the one public object, in the style of h11:
``receive_data(bytes)``, ``next_event()`` (an event or :data:`NEED_DATA`), ``send(event) -> bytes``.
:class:`RemoteProtocolError` means the peer sent something bad (the server closes, as the real
broker does); :class:`LocalProtocolError` means we tried to send something invalid (a bug).

Every message is declared once below as a layout (:mod:`gateway.protocols.layout`), looked up by
message id in :data:`REQUESTS` / :data:`RESPONSES`; the few irregular pieces (a bundle whose
length comes before its sequence number, variants chosen by an error code) are small types
with their read and write side by side. The consume answer keeps its hand-written writer and
reader (the hot path). The messages themselves are the dataclasses of ``events.py``.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass, field
from typing import Any

from gateway.protocols import layout as engine
from gateway.protocols.buffer import ReceiveBuffer
from gateway.protocols.layout import Buffer, Layout
from gateway.protocols.tank.bundle import BundleError, read_varint, scan_bundle, varint
from gateway.protocols.tank.events import (  # noqa: F401 - re-exported
    C_BOUNDARY,
    C_NO_LEADER,
    C_OK,
    C_OTHER_LEADER,
    C_SPARSE,
    C_SYSTEM_ERROR,
    C_UNKNOWN_PARTITION,
    CT_BAD_CONFIG,
    CT_EXISTS,
    CT_INVALID,
    CT_OK,
    CT_READ_ONLY,
    CT_SYSTEM_ERROR,
    CT_UNSUPPORTED,
    DEFAULT_MAX_FRAME,
    DP_NO_LEADER,
    DP_OTHER_LEADER,
    DP_SYSTEM_ERROR,
    MAX_FETCH_SIZE,
    NEED_DATA,
    P_INSUFFICIENT_REPLICAS,
    P_INVALID_SEQNUMS,
    P_IO_FAULT,
    P_NO_LEADER,
    P_OK,
    P_OTHER_LEADER,
    P_PENDING,
    P_READ_ONLY,
    P_UNKNOWN_PARTITION,
    P_UNKNOWN_TOPIC,
    RC_BAD_PARTITION,
    RC_CLUSTER_MODE,
    RC_NO_CONFIG,
    RC_OK,
    RC_PARSE_ERROR,
    RC_UNKNOWN_TOPIC,
    TANK_VERSION,
    U64_MAX,
    ConsumePartitionRequest,
    ConsumePartitionResult,
    ConsumeRequest,
    ConsumeResponse,
    ConsumeTopic,
    ConsumeTopicResult,
    CreateTopicRequest,
    CreateTopicResponse,
    DiscoverPartitionsRequest,
    DiscoverPartitionsResponse,
    DiscoverTopicsRequest,
    DiscoverTopicsResponse,
    DiscoverTopologyRequest,
    DiscoverTopologyResponse,
    LocalProtocolError,
    MsgId,
    PartitionWatermarks,
    Ping,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
    ProduceTopicResult,
    ReloadConfRequest,
    ReloadConfResponse,
    RemoteProtocolError,
    Request,
    Response,
    Role,
    StatusRequest,
    StatusResponse,
    TopicEntry,
    decode_chunk,
)

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
FRAME = struct.Struct("<BI")

# ----------------------------------------------------------------------------- wire types

WIRE = engine.Wire("<")
UINT8 = WIRE.int("B", "u8")
UINT16 = WIRE.int("H", "u16")
UINT32 = WIRE.int("I", "u32")
UINT64 = WIRE.int("Q", "u64")
FLAG = engine.Bool(UINT8)
STR8 = engine.Text(UINT8, errors="surrogateescape")
BYTES8 = engine.Blob(UINT8, what="str8")


def _str8(name: str) -> bytes:
    """:data:`STR8` for one name, as bytes (the consume answer's hand-written header)."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > 255:
        raise LocalProtocolError(f"name {name[:40]!r}... is longer than 255 bytes")
    return bytes((len(raw),)) + raw


def _read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    try:
        return read_varint(buf, pos, len(buf))
    except BundleError as exc:
        raise RemoteProtocolError(f"varint at byte {pos}: {exc}", "bad_varint") from None


class VarBytes(engine.Type):
    """varint length + bytes (CreateTopic's configuration)."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[bytes, int]:
        n, pos = _read_varint(buf, pos)
        if pos + n > len(buf):
            raise WIRE.short("config", pos, n, len(buf))
        return bytes(buf[pos : pos + n]), pos + n

    def write(self, value: bytes, out: list[Buffer]) -> None:
        out.append(varint(len(value)))
        out.append(value)


class PartitionIds(engine.Type):
    """The rest of the payload as u16 partition ids; nothing left reads as None (all)."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[list[int] | None, int]:
        rest = len(buf) - pos
        if not rest:
            return None, pos
        if rest % 2:
            raise RemoteProtocolError("discover_partitions: odd partition list", "truncated")
        return [U16.unpack_from(buf, p)[0] for p in range(pos, len(buf), 2)], len(buf)

    def write(self, value: list[int] | None, out: list[Buffer]) -> None:
        for p in value or ():
            UINT16.write(p, out)


class PartitionBundle(engine.Type):
    """``partition u16 · bundle length varint · [base seqnum u64] · bundle``; read validates
    the bundle (:func:`scan_bundle`), as the broker does before appending it."""

    __slots__ = ("with_seqnum",)

    def __init__(self, with_seqnum: bool) -> None:
        self.with_seqnum = with_seqnum

    def read(self, buf: Buffer, pos: int) -> tuple[ProducePartition, int]:
        end = len(buf)
        if pos + 2 > end:
            raise WIRE.short("produce partition", pos, 2, end)
        (partition,) = U16.unpack_from(buf, pos)
        blen, pos = _read_varint(buf, pos + 2)
        base = 0
        if self.with_seqnum:
            base, pos = UINT64.read(buf, pos)
        if blen > end - pos:
            raise RemoteProtocolError(
                f"produce: bundle of {blen} bytes but {end - pos} left in the frame",
                "bundle_too_long",
            )
        bundle = bytes(buf[pos : pos + blen])  # the frame is bytes: the same object, no copy
        try:
            info = scan_bundle(bundle)
        except BundleError as exc:
            raise RemoteProtocolError(
                f"produce partition {partition}: {exc}", "bad_bundle"
            ) from None
        return ProducePartition(partition, bundle, base, info), pos + blen

    def write(self, value: ProducePartition, out: list[Buffer]) -> None:
        try:
            out.append(U16.pack(value.partition))
        except struct.error as exc:
            raise LocalProtocolError(f"partition {value.partition!r}: {exc}") from None
        out.append(varint(len(value.bundle)))
        if self.with_seqnum:
            UINT64.write(value.base_seqnum, out)
        out.append(value.bundle)


class Watermarks(engine.Type):
    """A DiscoverPartitions entry: ``first_available u64 · hwmark u64``, or both U64_MAX then
    an error code (and the leader's ``addr u32 · port u16`` for DP_OTHER_LEADER)."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[PartitionWatermarks, int]:
        first, pos = UINT64.read(buf, pos)
        hwmark, pos = UINT64.read(buf, pos)
        if first != U64_MAX or hwmark != U64_MAX:
            return PartitionWatermarks(first, hwmark), pos
        err, pos = UINT8.read(buf, pos)
        leader = None
        if err == DP_OTHER_LEADER:
            addr, pos = UINT32.read(buf, pos)
            port, pos = UINT16.read(buf, pos)
            leader = (addr, port)
        return PartitionWatermarks(first, hwmark, err, leader), pos

    def write(self, value: PartitionWatermarks, out: list[Buffer]) -> None:
        if not value.err:
            out.append(U64.pack(value.first_available) + U64.pack(value.hwmark))
            return
        out.append(U64.pack(U64_MAX) + U64.pack(U64_MAX) + U8.pack(value.err))
        if value.err == DP_OTHER_LEADER:
            addr, port = value.leader or (0, 0)
            out.append(U32.pack(addr) + U16.pack(port))


class Status(engine.Type):
    """The Status answer: ``request_id u32 · flags u8 · cluster_aware u8 · topics u32 ·
    partitions u32 · [cluster flags u8 · name str8 · nodes u32] · open_partitions u32 ·
    open_time u32 · startup_ts u32 · version u32``."""

    __slots__ = ()

    HEAD = engine.layout(
        "StatusHead",
        ("request_id", UINT32),
        ("flags", UINT8),
        ("cluster_aware", FLAG),
        ("topics", UINT32),
        ("partitions", UINT32),
        (
            "cluster",
            engine.When(
                lambda v: v["cluster_aware"],
                engine.layout("Cluster", ("flags", UINT8), ("name", STR8), ("nodes", UINT32)),
                None,
            ),
        ),
        ("open_partitions", UINT32),
        ("open_time", UINT32),
        ("startup_ts", UINT32),
        ("version", UINT32),
    )

    def read(self, buf: Buffer, pos: int) -> tuple[StatusResponse, int]:
        h, pos = self.HEAD.read(buf, pos)
        cluster = tuple(h.cluster) if h.cluster is not None else None
        return StatusResponse(
            h.request_id,
            h.topics,
            h.partitions,
            h.open_partitions,
            h.open_time,
            h.startup_ts,
            h.version,
            h.flags,
            cluster,
        ), pos

    def write(self, value: StatusResponse, out: list[Buffer]) -> None:
        self.HEAD.write(
            (
                value.request_id,
                value.flags,
                bool(value.cluster),
                value.topics,
                value.partitions,
                value.cluster,
                value.open_partitions,
                value.open_time,
                value.startup_ts & 0xFFFFFFFF,
                value.version,
            ),
            out,
        )


class TopicList(engine.Type):
    """DiscoverTopics' answer after the request id: ``count u32 · cluster_aware u8`` then the
    entries, ``name str8 · enabled u8 · partitions u16 · [rf u8 when cluster-aware]``."""

    __slots__ = ()

    ENTRY = Layout(
        "TopicEntry", [("name", STR8), ("enabled", FLAG), ("partitions", UINT16)], TopicEntry
    )
    ENTRY_RF = Layout("TopicEntry", [*ENTRY.fields, ("rf", UINT8)], TopicEntry)

    def read(self, buf: Buffer, pos: int) -> tuple[tuple[list[TopicEntry], bool], int]:
        count, pos = UINT32.read(buf, pos)
        aware, pos = FLAG.read(buf, pos)
        entry = self.ENTRY_RF if aware else self.ENTRY
        out = []
        for _ in range(count):
            e, pos = entry.read(buf, pos)
            out.append(e)
        return (out, aware), pos

    def write(self, value: tuple[list[TopicEntry], bool], out: list[Buffer]) -> None:
        entries, aware = value
        UINT32.write(len(entries), out)
        FLAG.write(aware, out)
        entry = self.ENTRY_RF if aware else self.ENTRY
        for e in entries:
            if aware and e.rf is None:
                e = TopicEntry(e.name, e.enabled, e.partitions, 0)
            entry.write(e, out)


class Topology(engine.Type):
    """The rest of the payload: ``ff ff`` (standalone, None) or a cluster description."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[bytes | None, int]:
        rest = bytes(buf[pos:])
        return (None if rest == b"\xff\xff" else rest), len(buf)

    def write(self, value: bytes | None, out: list[Buffer]) -> None:
        out.append(b"\xff\xff" if value is None else value)


# ----------------------------------------------------------------------------- layouts


def _msg(name: str, cls: Any, *fields: tuple[str, Any]) -> Layout:
    return Layout(name, fields, cls, wire=WIRE)


def _produce(with_seqnum: bool) -> Layout:
    partitions = engine.Array(PartitionBundle(with_seqnum), UINT8)
    topic = _msg("ProduceTopic", ProduceTopic, ("name", STR8), ("partitions", partitions))
    return _msg(
        "ProduceRequest",
        functools.partial(ProduceRequest, with_seqnum=with_seqnum),
        ("client_version", UINT16),
        ("request_id", UINT32),
        ("client_id", BYTES8),
        ("required_acks", UINT8),
        ("ack_timeout_ms", UINT32),
        ("topics", engine.Array(topic, UINT8)),
    )


CONSUME_PARTITION = _msg(
    "ConsumePartitionRequest",
    ConsumePartitionRequest,
    ("partition", UINT16),
    ("seq", UINT64),
    ("fetch_size", UINT32),
)
CONSUME_TOPIC = _msg(
    "ConsumeTopic",
    ConsumeTopic,
    ("name", STR8),
    ("partitions", engine.Array(CONSUME_PARTITION, UINT8)),
)
_TOPIC_ONLY = (("request_id", UINT32), ("topic", STR8))

REQUESTS = engine.Table(
    (msg_id, 0, 0, lay)
    for msg_id, lay in {
        MsgId.PRODUCE: _produce(with_seqnum=False),
        MsgId.PRODUCE_WITH_SEQNUM: _produce(with_seqnum=True),
        MsgId.CONSUME: _msg(
            "ConsumeRequest",
            ConsumeRequest,
            ("client_version", UINT16),
            ("request_id", UINT32),
            ("client_id", BYTES8),
            ("max_wait_ms", UINT64),
            ("min_bytes", UINT32),
            ("flags", engine.When(lambda v: v["client_version"] >= 3, UINT8, 0)),
            ("topics", engine.Array(CONSUME_TOPIC, UINT8)),
        ),
        MsgId.DISCOVER_PARTITIONS: _msg(
            "DiscoverPartitionsRequest",
            DiscoverPartitionsRequest,
            *_TOPIC_ONLY,
            ("partitions", PartitionIds()),
        ),
        MsgId.CREATE_TOPIC: _msg(
            "CreateTopicRequest",
            CreateTopicRequest,
            *_TOPIC_ONLY,
            ("partitions", UINT16),
            ("config", VarBytes()),
        ),
        MsgId.RELOAD_CONF: _msg(
            "ReloadConfRequest", ReloadConfRequest, *_TOPIC_ONLY, ("partition", UINT16)
        ),
        MsgId.STATUS: _msg("StatusRequest", StatusRequest, ("request_id", UINT32)),
        MsgId.DISCOVER_TOPICS: _msg(
            "DiscoverTopicsRequest",
            DiscoverTopicsRequest,
            ("request_id", UINT32),
            ("flags", engine.Optional(UINT8, 0)),
        ),
        MsgId.DISCOVER_TOPOLOGY: _msg(
            "DiscoverTopologyRequest",
            DiscoverTopologyRequest,
            ("request_id", UINT32),
            ("flags", engine.Optional(UINT8, 0)),
        ),
    }.items()
)
"""Each request's payload by message id (TANK has no versions: version 0)."""

_REQUEST_IDS: dict[type, int] = {
    ConsumeRequest: MsgId.CONSUME,
    DiscoverPartitionsRequest: MsgId.DISCOVER_PARTITIONS,
    CreateTopicRequest: MsgId.CREATE_TOPIC,
    ReloadConfRequest: MsgId.RELOAD_CONF,
    StatusRequest: MsgId.STATUS,
    DiscoverTopicsRequest: MsgId.DISCOVER_TOPICS,
    DiscoverTopologyRequest: MsgId.DISCOVER_TOPOLOGY,
}


class _Answer:
    """A response whose wire shape does not map field by field: ``to_wire`` / ``from_wire``
    convert between the event and the values of ``layout``."""

    __slots__ = ("layout", "to_wire", "from_wire")

    def __init__(self, layout: Layout, to_wire: Any, from_wire: Any) -> None:
        self.layout = layout
        self.to_wire = to_wire
        self.from_wire = from_wire

    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        value, pos = self.layout.read(buf, pos)
        return self.from_wire(value), pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        self.layout.write(self.to_wire(value), out)


RESPONSES = engine.Table(
    (msg_id, 0, 0, lay)
    for msg_id, lay in {
        MsgId.DISCOVER_PARTITIONS: _msg(
            "DiscoverPartitionsResponse",
            DiscoverPartitionsResponse,
            *_TOPIC_ONLY,
            ("partitions", engine.Array(Watermarks(), UINT16)),
        ),
        MsgId.CREATE_TOPIC: _msg(
            "CreateTopicResponse", CreateTopicResponse, *_TOPIC_ONLY, ("err", UINT8)
        ),
        MsgId.RELOAD_CONF: _msg(
            "ReloadConfResponse",
            ReloadConfResponse,
            *_TOPIC_ONLY,
            ("partition", UINT16),
            ("err", UINT8),
        ),
        MsgId.STATUS: Status(),
        MsgId.DISCOVER_TOPICS: _Answer(
            engine.layout("DiscoverTopics", ("request_id", UINT32), ("topics", TopicList())),
            lambda r: (r.request_id, (r.topics, r.cluster_aware)),
            lambda v: DiscoverTopicsResponse(v.request_id, v.topics[0], v.topics[1]),
        ),
        MsgId.DISCOVER_TOPOLOGY: _msg(
            "DiscoverTopologyResponse",
            DiscoverTopologyResponse,
            ("request_id", UINT32),
            ("cluster", Topology()),
        ),
    }.items()
)
"""Each response's payload by message id, but for Produce and Consume (below)."""

_RESPONSE_IDS: dict[type, int] = {
    DiscoverPartitionsResponse: MsgId.DISCOVER_PARTITIONS,
    CreateTopicResponse: MsgId.CREATE_TOPIC,
    ReloadConfResponse: MsgId.RELOAD_CONF,
    StatusResponse: MsgId.STATUS,
    DiscoverTopicsResponse: MsgId.DISCOVER_TOPICS,
    DiscoverTopologyResponse: MsgId.DISCOVER_TOPOLOGY,
}


def frame(msg_id: int, payload: bytes | bytearray | memoryview) -> bytes:
    return FRAME.pack(msg_id, len(payload)) + payload


# ----------------------------------------------------------------------------- requests


def decode_request(msg_id: int, payload: bytes) -> Request:
    """A request from a client frame (server role). Produce bundles are validated here."""
    body = REQUESTS.get(msg_id)
    if body is None:
        raise RemoteProtocolError(f"unknown message id {msg_id:#04x}", "unknown_msg")
    return body.decode(payload, exact=True)


def encode_request(req: Request) -> bytes:
    """Client role."""
    msg_id = req.msg_id if isinstance(req, ProduceRequest) else _REQUEST_IDS.get(type(req))
    if msg_id is None:
        raise LocalProtocolError(f"not a TANK request: {req!r}")
    return frame(msg_id, REQUESTS.get(msg_id).encode(req))


# ----------------------------------------------------------------------------- responses
#
# A Produce answer is positional (a status per partition of the request, or one 0xff for an
# unknown topic, plus the leader's address after P_OTHER_LEADER), so decoding it needs the
# request; both directions are written here, side by side.


def _encode_produce_response(resp: ProduceResponse) -> bytes:
    out = bytearray(U32.pack(resp.request_id))
    for t in resp.topics:
        if t.statuses is None:
            out.append(P_UNKNOWN_TOPIC)
        else:
            out += bytes(t.statuses)
    return frame(MsgId.PRODUCE, out)


def _decode_produce_response(payload: bytes, request: ProduceRequest) -> ProduceResponse:
    request_id, pos = UINT32.read(payload, 0)
    results = []
    for t in request.topics:
        statuses: list[int] | None = []
        for i in range(len(t.partitions)):
            status, pos = UINT8.read(payload, pos)
            if status == P_UNKNOWN_TOPIC and i == 0:
                statuses = None
                break
            if status == P_OTHER_LEADER:
                _, pos = UINT32.read(payload, pos)
                _, pos = UINT16.read(payload, pos)
            assert statuses is not None
            statuses.append(status)
        results.append(ProduceTopicResult(t.name, statuses))
    if pos != len(payload):
        raise RemoteProtocolError(
            f"produce response: {len(payload) - pos} bytes after it", "trailing_bytes"
        )
    return ProduceResponse(request_id, results, request.with_seqnum)


def encode_response(resp: Response) -> bytes:
    """Server role."""
    if isinstance(resp, ProduceResponse):
        return _encode_produce_response(resp)
    if isinstance(resp, ConsumeResponse):
        return encode_consume_response(resp)
    msg_id = _RESPONSE_IDS.get(type(resp))
    if msg_id is None:
        raise LocalProtocolError(f"not a TANK response: {resp!r}")
    out: list[Buffer] = []
    RESPONSES.get(msg_id).write(resp, out)
    return frame(msg_id, b"".join(out))


def decode_response(msg_id: int, payload: bytes, request: Request | None = None) -> Response:
    """A response from a broker frame (client role). A produce response needs its request
    (the statuses are positional)."""
    if msg_id in (MsgId.PRODUCE, MsgId.PRODUCE_WITH_SEQNUM):
        if not isinstance(request, ProduceRequest):
            raise LocalProtocolError("decoding a produce response needs its request")
        return _decode_produce_response(payload, request)
    if msg_id == MsgId.CONSUME:
        return decode_consume_response(payload)
    body = RESPONSES.get(msg_id)
    if body is None:
        raise RemoteProtocolError(f"unknown message id {msg_id:#04x}", "unknown_msg")
    value, end = body.read(payload, 0)
    if end != len(payload):
        raise RemoteProtocolError(f"response {msg_id:#04x}: bytes after it", "trailing_bytes")
    return value


# ----------------------------------------------------------------------------- consume (hot path)


def decode_consume_response(payload: bytes) -> ConsumeResponse:
    """The hand-written reader of :func:`consume_response_pieces`' output (client role):
    ``header_len u32 · header · chunks``, each partition's chunk after the header in order."""
    header_len, _ = UINT32.read(payload, 0)
    chunk_pos = 4 + header_len
    if chunk_pos > len(payload):
        raise RemoteProtocolError("consume response: header longer than the frame", "truncated")
    h = payload[:chunk_pos]
    whole = memoryview(payload)  # chunks are views of the frame: no copy of the record data
    request_id, pos = UINT32.read(h, 4)
    count_topics, pos = UINT8.read(h, pos)
    topics = []
    for _ in range(count_topics):
        name, pos = STR8.read(h, pos)
        assert name is not None  # STR8 is not nullable
        count, pos = UINT8.read(h, pos)
        if count and len(h) - pos >= 2 and h[pos : pos + 2] == b"\xff\xff":
            pos += 2
            topics.append(ConsumeTopicResult(name, None, count))
            continue
        parts = []
        for _ in range(count):
            pid, pos = UINT16.read(h, pos)
            err, pos = UINT8.read(h, pos)
            p = ConsumePartitionResult(pid, err)
            if err in (C_OK, C_SPARSE):
                if err == C_OK:
                    p.base_seq, pos = UINT64.read(h, pos)
                p.hwmark, pos = UINT64.read(h, pos)
                clen, pos = UINT32.read(h, pos)
                if chunk_pos + clen > len(payload):
                    raise RemoteProtocolError("consume response: chunk past the end", "truncated")
                p.chunk = whole[chunk_pos : chunk_pos + clen]
                chunk_pos += clen
            elif err == C_BOUNDARY:
                _, pos = UINT64.read(h, pos)
                p.hwmark, pos = UINT64.read(h, pos)
                _, pos = UINT32.read(h, pos)
                p.first_available, pos = UINT64.read(h, pos)
            elif err == C_OTHER_LEADER:
                addr, pos = UINT32.read(h, pos)
                port, pos = UINT16.read(h, pos)
                p.leader = (addr, port)
            parts.append(p)
        topics.append(ConsumeTopicResult(name, parts, count))
    if pos != len(h):
        raise RemoteProtocolError(
            f"consume response header: {len(h) - pos} bytes after the message", "trailing_bytes"
        )
    return ConsumeResponse(request_id, topics)


def encode_consume_response(resp: ConsumeResponse) -> bytes:
    return b"".join(consume_response_pieces(resp))


def consume_response_pieces(resp: ConsumeResponse) -> list[bytes | memoryview]:
    """A consume answer as the pieces it is made of: frame head, header, then the chunks as
    they are (stored data, not copied into one frame)."""
    header = bytearray(U32.pack(resp.request_id))
    header.append(len(resp.topics))
    chunks: list[bytes | memoryview] = []
    for t in resp.topics:
        header += _str8(t.name)
        if t.partitions is None:
            header.append(t.requested & 0xFF)
            header += b"\xff\xff"
            continue
        header.append(len(t.partitions))
        for p in t.partitions:
            header += U16.pack(p.partition)
            header.append(p.err)
            if p.err in (C_OK, C_SPARSE):
                pieces = p.chunk if isinstance(p.chunk, list) else [p.chunk]
                size = sum(len(c) for c in pieces)
                if p.err == C_OK:
                    header += U64.pack(p.base_seq)
                header += U64.pack(p.hwmark) + U32.pack(size)
                chunks.extend(pieces)
            elif p.err == C_BOUNDARY:
                header += U64.pack(0) + U64.pack(p.hwmark) + U32.pack(0)
                header += U64.pack(p.first_available)
            elif p.err == C_OTHER_LEADER:
                addr, port = p.leader or (0, 0)
                header += U32.pack(addr) + U16.pack(port)
    size = 4 + len(header) + sum(len(c) for c in chunks)
    return [FRAME.pack(MsgId.CONSUME, size), U32.pack(len(header)), bytes(header), *chunks]


# ----------------------------------------------------------------------------- connection

SERVER_MSG_IDS = frozenset(int(m) for m in MsgId)
GREETING = frame(MsgId.PING, b"")


@dataclass
class TankConnection:
    """Framing plus message decoding for one connection, in either role.

    Server role: ``next_event()`` yields requests (and :class:`Ping`); ``send(response)``.
    Client role: ``send(request)`` records produce requests so their positional responses can be
    decoded; ``next_event()`` yields responses (and the broker's greeting :class:`Ping`).
    """

    role: Role = Role.SERVER
    max_frame_bytes: int = DEFAULT_MAX_FRAME
    _buf: ReceiveBuffer = field(default_factory=ReceiveBuffer)
    _produce: dict[int, ProduceRequest] = field(default_factory=dict)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        self._buf.feed(data)

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next whole frame as (msg_id, payload), or None when more bytes are needed."""
        buf = self._buf
        if len(buf.data) - buf.pos < 5:
            return None
        msg_id, size = FRAME.unpack_from(buf.data, buf.pos)
        if self.role is Role.SERVER and msg_id not in SERVER_MSG_IDS:
            raise RemoteProtocolError(f"unknown message id {msg_id:#04x}", "unknown_msg")
        if size > self.max_frame_bytes:
            raise RemoteProtocolError(
                f"frame of {size} bytes exceeds {self.max_frame_bytes}", "frame_too_large"
            )
        if len(buf.data) - buf.pos < 5 + size:
            return None
        buf.skip(5)
        return msg_id, buf.take(size)

    def next_request(self) -> Any:
        """:meth:`next_event` with None instead of NEED_DATA (the connection driver's framing)."""
        event = self.next_event()
        return None if event is NEED_DATA else event

    def next_event(self) -> Any:
        got = self.next_frame()
        if got is None:
            return NEED_DATA
        msg_id, payload = got
        if msg_id == MsgId.PING:
            return Ping()
        if self.role is Role.SERVER:
            return decode_request(msg_id, payload)
        request: Request | None = None
        if msg_id in (MsgId.PRODUCE, MsgId.PRODUCE_WITH_SEQNUM) and len(payload) >= 4:
            request = self._produce.pop(U32.unpack_from(payload, 0)[0], None)
        return decode_response(msg_id, payload, request)

    def send(self, event: Any) -> bytes:
        if isinstance(event, Ping):
            return GREETING
        if self.role is Role.SERVER:
            return encode_response(event)
        if isinstance(event, ProduceRequest):
            self._produce[event.request_id] = event
        return encode_request(event)
