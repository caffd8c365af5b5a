"""The TANK wire protocol, sans-IO, in both roles (server: decode requests, encode responses;
client: encode requests, decode responses). Hand-written because no Python TANK library exists.

Reference: ``docs/protocols/tank.md``. Frames are ``msg_id u8 · payload_size u32 · payload``,
little endian. :class:`TankConnection` is the one public object, in the style of h11:
``receive_data(bytes)``, ``next_event()`` (an event or :data:`NEED_DATA`), ``send(event) -> bytes``.
:class:`RemoteProtocolError` means the peer sent something bad (the server closes, as the real
broker does); :class:`LocalProtocolError` means we tried to send something invalid (a bug).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field
from typing import Any

from gateway.protocols.buffer import ReceiveBuffer
from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError
from gateway.protocols.tank.bundle import (
    BundleError,
    BundleInfo,
    TankMessage,
    decode_bundle,
    read_varint,
    scan_bundle,
    varint,
)

U8 = struct.Struct("<B")
U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
FRAME = struct.Struct("<BI")
U64_MAX = 0xFFFFFFFFFFFFFFFF
DEFAULT_MAX_FRAME = 100 << 20


class MsgId(enum.IntEnum):
    PRODUCE = 0x01
    CONSUME = 0x02
    PING = 0x03
    PRODUCE_WITH_SEQNUM = 0x05
    DISCOVER_PARTITIONS = 0x06
    CREATE_TOPIC = 0x07
    RELOAD_CONF = 0x08
    STATUS = 0x0A
    DISCOVER_TOPICS = 0x0B
    DISCOVER_TOPOLOGY = 0x0C


# Produce status bytes (docs/protocols/tank.md)
P_OK = 0x00
P_UNKNOWN_PARTITION = 0x01
P_IO_FAULT = 0x02
P_PENDING = 0x03
P_INSUFFICIENT_REPLICAS = 0x04
P_INVALID_SEQNUMS = 0x0A
P_OTHER_LEADER = 0xFC
P_NO_LEADER = 0xFD
P_READ_ONLY = 0xFE
P_UNKNOWN_TOPIC = 0xFF

# Consume partition err_or_flags (docs/protocols/tank.md)
C_OK = 0x00
C_BOUNDARY = 0x01
C_OTHER_LEADER = 0xFC
C_NO_LEADER = 0xFD
C_SPARSE = 0xFE
C_SYSTEM_ERROR = 0xFB
C_UNKNOWN_PARTITION = 0xFF

# CreateTopic err (docs/protocols/tank.md)
CT_OK = 0
CT_EXISTS = 1
CT_SYSTEM_ERROR = 2
CT_BAD_CONFIG = 4
CT_READ_ONLY = 5
CT_INVALID = 10
CT_UNSUPPORTED = 11

# ReloadConf err
RC_OK = 0
RC_NO_CONFIG = 2
RC_PARSE_ERROR = 3
RC_BAD_PARTITION = 10
RC_UNKNOWN_TOPIC = 11
RC_CLUSTER_MODE = 12

# DiscoverPartitions per-partition failure codes
DP_SYSTEM_ERROR = 0xFB
DP_NO_LEADER = 0xFD
DP_OTHER_LEADER = 0xFC

MAX_FETCH_SIZE = 64 << 20  # the broker caps a partition's fetch_size here
TANK_VERSION = 400


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Any = _NeedData()


class Role(enum.Enum):
    SERVER = "server"
    CLIENT = "client"


# ----------------------------------------------------------------------------- events


@dataclass(slots=True)
class Ping:
    pass


@dataclass(slots=True)
class ProducePartition:
    partition: int
    bundle: bytes
    base_seqnum: int = 0  # ProduceWithSeqnum only
    info: BundleInfo | None = None  # filled in by the server-role decoder (validated bundle)


@dataclass(slots=True)
class ProduceTopic:
    name: str
    partitions: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequest:
    request_id: int
    topics: list[ProduceTopic]
    with_seqnum: bool = False
    client_version: int = 2
    client_id: bytes = b""
    required_acks: int = 0
    ack_timeout_ms: int = 0

    @property
    def msg_id(self) -> int:
        return MsgId.PRODUCE_WITH_SEQNUM if self.with_seqnum else MsgId.PRODUCE


@dataclass(slots=True)
class ProduceTopicResult:
    name: str
    statuses: list[int] | None  # None: unknown topic (one 0xff on the wire)


@dataclass(slots=True)
class ProduceResponse:
    """The answer to a Produce or a ProduceWithSeqnum request: both go out with message id 0x01,
    as the real broker frames them (tank-cli takes any other id for a network fault);
    ``with_seqnum`` only says which request it answers."""

    request_id: int
    topics: list[ProduceTopicResult]
    with_seqnum: bool = False


@dataclass(slots=True)
class ConsumePartitionRequest:
    partition: int
    seq: int  # 0: earliest; U64_MAX: tail
    fetch_size: int


@dataclass(slots=True)
class ConsumeTopic:
    name: str
    partitions: list[ConsumePartitionRequest]


@dataclass(slots=True)
class ConsumeRequest:
    request_id: int
    topics: list[ConsumeTopic]
    max_wait_ms: int = 0
    min_bytes: int = 0
    client_version: int = 2
    client_id: bytes = b""
    flags: int = 0  # only on the wire for client_version >= 3


@dataclass(slots=True)
class ConsumePartitionResult:
    partition: int
    err: int = C_OK
    base_seq: int = 0
    hwmark: int = 0
    chunk: bytes | memoryview | list[bytes | memoryview] = b""
    first_available: int = 0  # boundary fault only
    leader: tuple[int, int] | None = None  # (addr4, port) for C_OTHER_LEADER

    def messages(self) -> list[TankMessage]:
        """The complete messages of the chunk (client role)."""
        chunk = self.chunk if not isinstance(self.chunk, list) else b"".join(self.chunk)
        return decode_chunk(chunk, self.base_seq)


@dataclass(slots=True)
class ConsumeTopicResult:
    name: str
    partitions: list[ConsumePartitionResult] | None  # None: unknown topic
    requested: int = 0  # partition count echoed for an unknown topic


@dataclass(slots=True)
class ConsumeResponse:
    request_id: int
    topics: list[ConsumeTopicResult]


@dataclass(slots=True)
class DiscoverPartitionsRequest:
    request_id: int
    topic: str
    partitions: list[int] | None = None


@dataclass(slots=True)
class PartitionWatermarks:
    first_available: int
    hwmark: int
    err: int = 0  # nonzero: both u64 are U64_MAX on the wire, then this code
    leader: tuple[int, int] | None = None


@dataclass(slots=True)
class DiscoverPartitionsResponse:
    request_id: int
    topic: str
    partitions: list[PartitionWatermarks]  # empty: unknown topic


@dataclass(slots=True)
class CreateTopicRequest:
    request_id: int
    topic: str
    partitions: int
    config: bytes = b""


@dataclass(slots=True)
class CreateTopicResponse:
    request_id: int
    topic: str
    err: int = CT_OK


@dataclass(slots=True)
class ReloadConfRequest:
    request_id: int
    topic: str
    partition: int


@dataclass(slots=True)
class ReloadConfResponse:
    request_id: int
    topic: str
    partition: int
    err: int = RC_OK


@dataclass(slots=True)
class StatusRequest:
    request_id: int


@dataclass(slots=True)
class StatusResponse:
    request_id: int
    topics: int
    partitions: int
    open_partitions: int
    open_time: int = 0
    startup_ts: int = 0
    version: int = TANK_VERSION
    flags: int = 0
    cluster: tuple[int, str, int] | None = None  # (flags, name, nodes) in cluster mode


@dataclass(slots=True)
class DiscoverTopicsRequest:
    request_id: int
    flags: int = 0


@dataclass(slots=True)
class TopicEntry:
    name: str
    enabled: bool
    partitions: int
    rf: int | None = None  # cluster mode only


@dataclass(slots=True)
class DiscoverTopicsResponse:
    request_id: int
    topics: list[TopicEntry]
    cluster_aware: bool = False


@dataclass(slots=True)
class DiscoverTopologyRequest:
    request_id: int
    flags: int = 0


@dataclass(slots=True)
class DiscoverTopologyResponse:
    request_id: int
    cluster: bytes | None = None  # None: standalone (`ff ff`); else the raw cluster description


Request = (
    ProduceRequest
    | ConsumeRequest
    | DiscoverPartitionsRequest
    | CreateTopicRequest
    | ReloadConfRequest
    | StatusRequest
    | DiscoverTopicsRequest
    | DiscoverTopologyRequest
)
Response = (
    ProduceResponse
    | ConsumeResponse
    | DiscoverPartitionsResponse
    | CreateTopicResponse
    | ReloadConfResponse
    | StatusResponse
    | DiscoverTopicsResponse
    | DiscoverTopologyResponse
)


# ----------------------------------------------------------------------------- reading


class _Reader:
    """Cursor over one frame's payload; every overrun is a RemoteProtocolError."""

    __slots__ = ("buf", "pos", "end", "what")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)
        self.what = what

    def _need(self, n: int) -> int:
        pos = self.pos
        if pos + n > self.end:
            raise RemoteProtocolError(
                f"{self.what}: needs {n} more bytes at {pos} of {self.end}", "truncated"
            )
        self.pos = pos + n
        return pos

    def u8(self) -> int:
        return self.buf[self._need(1)]

    def u16(self) -> int:
        return U16.unpack_from(self.buf, self._need(2))[0]

    def u32(self) -> int:
        return U32.unpack_from(self.buf, self._need(4))[0]

    def u64(self) -> int:
        return U64.unpack_from(self.buf, self._need(8))[0]

    def raw(self, n: int) -> bytes:
        pos = self._need(n)
        return self.buf[pos : pos + n]

    def str8(self) -> str:
        return self.raw(self.u8()).decode("utf-8", "surrogateescape")

    def bytes8(self) -> bytes:
        return self.raw(self.u8())

    def varint(self) -> int:
        try:
            value, self.pos = read_varint(self.buf, self.pos, self.end)
        except BundleError as exc:
            raise RemoteProtocolError(f"{self.what}: {exc}", "bad_varint") from None
        return value

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def done(self) -> None:
        if self.pos != self.end:
            raise RemoteProtocolError(
                f"{self.what}: {self.end - self.pos} bytes after the message", "trailing_bytes"
            )


def _str8(name: str) -> bytes:
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > 255:
        raise LocalProtocolError(f"name {name[:40]!r}... is longer than 255 bytes")
    return bytes((len(raw),)) + raw


def _bytes8(raw: bytes) -> bytes:
    if len(raw) > 255:
        raise LocalProtocolError("str8 longer than 255 bytes")
    return bytes((len(raw),)) + raw


def frame(msg_id: int, payload: bytes | bytearray | memoryview) -> bytes:
    return FRAME.pack(msg_id, len(payload)) + payload


# ----------------------------------------------------------------------------- requests


def decode_request(msg_id: int, payload: bytes) -> Request:
    """A request from a client frame (server role). Produce bundles are validated here."""
    if msg_id in (MsgId.PRODUCE, MsgId.PRODUCE_WITH_SEQNUM):
        return _decode_produce(payload, msg_id == MsgId.PRODUCE_WITH_SEQNUM)
    r = _Reader(payload, f"request {msg_id:#04x}")
    req: Request
    if msg_id == MsgId.CONSUME:
        version = r.u16()
        request_id = r.u32()
        client_id = r.bytes8()
        max_wait = r.u64()
        min_bytes = r.u32()
        flags = r.u8() if version >= 3 else 0
        topics = []
        for _ in range(r.u8()):
            name = r.str8()
            parts = [ConsumePartitionRequest(r.u16(), r.u64(), r.u32()) for _ in range(r.u8())]
            topics.append(ConsumeTopic(name, parts))
        req = ConsumeRequest(request_id, topics, max_wait, min_bytes, version, client_id, flags)
    elif msg_id == MsgId.DISCOVER_PARTITIONS:
        request_id = r.u32()
        topic = r.str8()
        ids = None
        if r.remaining:
            if r.remaining % 2:
                raise RemoteProtocolError("discover_partitions: odd partition list", "truncated")
            ids = [r.u16() for _ in range(r.remaining // 2)]
        req = DiscoverPartitionsRequest(request_id, topic, ids)
    elif msg_id == MsgId.CREATE_TOPIC:
        request_id = r.u32()
        topic = r.str8()
        partitions = r.u16()
        config = r.raw(r.varint())
        req = CreateTopicRequest(request_id, topic, partitions, config)
    elif msg_id == MsgId.RELOAD_CONF:
        req = ReloadConfRequest(r.u32(), r.str8(), r.u16())
    elif msg_id == MsgId.STATUS:
        req = StatusRequest(r.u32())
    elif msg_id == MsgId.DISCOVER_TOPICS:
        request_id = r.u32()
        req = DiscoverTopicsRequest(request_id, r.u8() if r.remaining else 0)
    elif msg_id == MsgId.DISCOVER_TOPOLOGY:
        request_id = r.u32()
        req = DiscoverTopologyRequest(request_id, r.u8() if r.remaining else 0)
    else:
        raise RemoteProtocolError(f"unknown message id {msg_id:#04x}", "unknown_msg")
    r.done()
    return req


def _decode_produce(payload: bytes, with_seqnum: bool) -> ProduceRequest:
    r = _Reader(payload, "produce")
    version = r.u16()
    request_id = r.u32()
    client_id = r.bytes8()
    acks = r.u8()
    timeout = r.u32()
    topics = []
    for _ in range(r.u8()):
        name = r.str8()
        parts = []
        for _ in range(r.u8()):
            partition = r.u16()
            blen = r.varint()
            base = r.u64() if with_seqnum else 0
            if blen > r.remaining:
                raise RemoteProtocolError(
                    f"produce: bundle of {blen} bytes but {r.remaining} left in the frame",
                    "bundle_too_long",
                )
            bundle = r.raw(blen)
            try:
                info = scan_bundle(bundle)
            except BundleError as exc:
                raise RemoteProtocolError(
                    f"produce {name}/{partition}: {exc}", "bad_bundle"
                ) from None
            parts.append(ProducePartition(partition, bundle, base, info))
        topics.append(ProduceTopic(name, parts))
    r.done()
    return ProduceRequest(request_id, topics, with_seqnum, version, client_id, acks, timeout)


def encode_request(req: Request) -> bytes:
    """Client role."""
    if isinstance(req, ProduceRequest):
        out = [
            U16.pack(req.client_version),
            U32.pack(req.request_id),
            _bytes8(req.client_id),
            U8.pack(req.required_acks),
            U32.pack(req.ack_timeout_ms),
            U8.pack(len(req.topics)),
        ]
        for t in req.topics:
            out += [_str8(t.name), U8.pack(len(t.partitions))]
            for p in t.partitions:
                out += [U16.pack(p.partition), varint(len(p.bundle))]
                if req.with_seqnum:
                    out.append(U64.pack(p.base_seqnum))
                out.append(p.bundle)
        return frame(req.msg_id, b"".join(out))
    if isinstance(req, ConsumeRequest):
        out = [
            U16.pack(req.client_version),
            U32.pack(req.request_id),
            _bytes8(req.client_id),
            U64.pack(req.max_wait_ms),
            U32.pack(req.min_bytes),
        ]
        if req.client_version >= 3:
            out.append(U8.pack(req.flags))
        out.append(U8.pack(len(req.topics)))
        for ct in req.topics:
            out += [_str8(ct.name), U8.pack(len(ct.partitions))]
            for cp in ct.partitions:
                out += [U16.pack(cp.partition), U64.pack(cp.seq), U32.pack(cp.fetch_size)]
        return frame(MsgId.CONSUME, b"".join(out))
    if isinstance(req, DiscoverPartitionsRequest):
        body = U32.pack(req.request_id) + _str8(req.topic)
        if req.partitions:
            body += b"".join(U16.pack(p) for p in req.partitions)
        return frame(MsgId.DISCOVER_PARTITIONS, body)
    if isinstance(req, CreateTopicRequest):
        body = (
            U32.pack(req.request_id)
            + _str8(req.topic)
            + U16.pack(req.partitions)
            + varint(len(req.config))
            + req.config
        )
        return frame(MsgId.CREATE_TOPIC, body)
    if isinstance(req, ReloadConfRequest):
        body = U32.pack(req.request_id) + _str8(req.topic) + U16.pack(req.partition)
        return frame(MsgId.RELOAD_CONF, body)
    if isinstance(req, StatusRequest):
        return frame(MsgId.STATUS, U32.pack(req.request_id))
    if isinstance(req, DiscoverTopicsRequest):
        return frame(MsgId.DISCOVER_TOPICS, U32.pack(req.request_id) + U8.pack(req.flags))
    if isinstance(req, DiscoverTopologyRequest):
        return frame(MsgId.DISCOVER_TOPOLOGY, U32.pack(req.request_id) + U8.pack(req.flags))
    raise LocalProtocolError(f"not a TANK request: {req!r}")


# ----------------------------------------------------------------------------- responses


def encode_response(resp: Response) -> bytes:
    """Server role."""
    if isinstance(resp, ProduceResponse):
        out = bytearray(U32.pack(resp.request_id))
        for t in resp.topics:
            if t.statuses is None:
                out.append(P_UNKNOWN_TOPIC)
            else:
                out += bytes(t.statuses)
        return frame(MsgId.PRODUCE, out)
    if isinstance(resp, ConsumeResponse):
        return encode_consume_response(resp)
    if isinstance(resp, DiscoverPartitionsResponse):
        out = bytearray(U32.pack(resp.request_id))
        out += _str8(resp.topic)
        out += U16.pack(len(resp.partitions))
        for w in resp.partitions:
            if w.err:
                out += U64.pack(U64_MAX) + U64.pack(U64_MAX) + U8.pack(w.err)
                if w.err == DP_OTHER_LEADER:
                    addr, port = w.leader or (0, 0)
                    out += U32.pack(addr) + U16.pack(port)
            else:
                out += U64.pack(w.first_available) + U64.pack(w.hwmark)
        return frame(MsgId.DISCOVER_PARTITIONS, out)
    if isinstance(resp, CreateTopicResponse):
        body = U32.pack(resp.request_id) + _str8(resp.topic) + U8.pack(resp.err)
        return frame(MsgId.CREATE_TOPIC, body)
    if isinstance(resp, ReloadConfResponse):
        body = (
            U32.pack(resp.request_id)
            + _str8(resp.topic)
            + U16.pack(resp.partition)
            + U8.pack(resp.err)
        )
        return frame(MsgId.RELOAD_CONF, body)
    if isinstance(resp, StatusResponse):
        out = bytearray(U32.pack(resp.request_id))
        out += U8.pack(resp.flags) + U8.pack(1 if resp.cluster else 0)
        out += U32.pack(resp.topics) + U32.pack(resp.partitions)
        if resp.cluster:
            cflags, cname, nodes = resp.cluster
            out += U8.pack(cflags) + _str8(cname) + U32.pack(nodes)
        out += U32.pack(resp.open_partitions) + U32.pack(resp.open_time)
        out += U32.pack(resp.startup_ts & 0xFFFFFFFF) + U32.pack(resp.version)
        return frame(MsgId.STATUS, out)
    if isinstance(resp, DiscoverTopicsResponse):
        out = bytearray(U32.pack(resp.request_id))
        out += U32.pack(len(resp.topics)) + U8.pack(1 if resp.cluster_aware else 0)
        for e in resp.topics:
            out += _str8(e.name) + U8.pack(1 if e.enabled else 0) + U16.pack(e.partitions)
            if resp.cluster_aware:
                out += U8.pack(e.rf or 0)
        return frame(MsgId.DISCOVER_TOPICS, out)
    if isinstance(resp, DiscoverTopologyResponse):
        body = U32.pack(resp.request_id) + (b"\xff\xff" if resp.cluster is None else resp.cluster)
        return frame(MsgId.DISCOVER_TOPOLOGY, body)
    raise LocalProtocolError(f"not a TANK response: {resp!r}")


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


def decode_response(msg_id: int, payload: bytes, request: Request | None = None) -> Response:
    """A response from a broker frame (client role). A produce response needs its request
    (the statuses are positional)."""
    r = _Reader(payload, f"response {msg_id:#04x}")
    resp: Response
    if msg_id in (MsgId.PRODUCE, MsgId.PRODUCE_WITH_SEQNUM):
        if not isinstance(request, ProduceRequest):
            raise LocalProtocolError("decoding a produce response needs its request")
        request_id = r.u32()
        results = []
        for t in request.topics:
            statuses: list[int] | None = []
            for i in range(len(t.partitions)):
                status = r.u8()
                if status == P_UNKNOWN_TOPIC and i == 0:
                    statuses = None
                    break
                if status == P_OTHER_LEADER:
                    r.u32(), r.u16()
                assert statuses is not None
                statuses.append(status)
            results.append(ProduceTopicResult(t.name, statuses))
        resp = ProduceResponse(request_id, results, request.with_seqnum)
    elif msg_id == MsgId.CONSUME:
        return decode_consume_response(payload)
    elif msg_id == MsgId.DISCOVER_PARTITIONS:
        request_id = r.u32()
        topic = r.str8()
        parts = []
        for _ in range(r.u16()):
            first, hw = r.u64(), r.u64()
            if first == U64_MAX and hw == U64_MAX:
                err = r.u8()
                leader = (r.u32(), r.u16()) if err == DP_OTHER_LEADER else None
                parts.append(PartitionWatermarks(first, hw, err, leader))
            else:
                parts.append(PartitionWatermarks(first, hw))
        resp = DiscoverPartitionsResponse(request_id, topic, parts)
    elif msg_id == MsgId.CREATE_TOPIC:
        resp = CreateTopicResponse(r.u32(), r.str8(), r.u8())
    elif msg_id == MsgId.RELOAD_CONF:
        resp = ReloadConfResponse(r.u32(), r.str8(), r.u16(), r.u8())
    elif msg_id == MsgId.STATUS:
        request_id = r.u32()
        flags = r.u8()
        cluster_aware = r.u8()
        topics, partitions = r.u32(), r.u32()
        cluster = (r.u8(), r.str8(), r.u32()) if cluster_aware else None
        resp = StatusResponse(
            request_id, topics, partitions, r.u32(), r.u32(), r.u32(), r.u32(), flags, cluster
        )
    elif msg_id == MsgId.DISCOVER_TOPICS:
        request_id = r.u32()
        count = r.u32()
        aware = bool(r.u8())
        entries = []
        for _ in range(count):
            name = r.str8()
            enabled = bool(r.u8())
            nparts = r.u16()
            entries.append(TopicEntry(name, enabled, nparts, r.u8() if aware else None))
        resp = DiscoverTopicsResponse(request_id, entries, aware)
    elif msg_id == MsgId.DISCOVER_TOPOLOGY:
        request_id = r.u32()
        rest = r.raw(r.remaining)
        resp = DiscoverTopologyResponse(request_id, None if rest == b"\xff\xff" else rest)
    else:
        raise RemoteProtocolError(f"unknown message id {msg_id:#04x}", "unknown_msg")
    r.done()
    return resp


def decode_consume_response(payload: bytes) -> ConsumeResponse:
    r = _Reader(payload, "consume response")
    header_len = r.u32()
    chunk_pos = 4 + header_len
    if chunk_pos > len(payload):
        raise RemoteProtocolError("consume response: header longer than the frame", "truncated")
    h = _Reader(payload[:chunk_pos], "consume response header")
    h.pos = 4
    request_id = h.u32()
    topics = []
    for _ in range(h.u8()):
        name = h.str8()
        count = h.u8()
        if count and h.remaining >= 2 and payload[h.pos : h.pos + 2] == b"\xff\xff":
            h.pos += 2
            topics.append(ConsumeTopicResult(name, None, count))
            continue
        parts = []
        for _ in range(count):
            pid = h.u16()
            err = h.u8()
            p = ConsumePartitionResult(pid, err)
            if err in (C_OK, C_SPARSE):
                if err == C_OK:
                    p.base_seq = h.u64()
                p.hwmark = h.u64()
                clen = h.u32()
                if chunk_pos + clen > len(payload):
                    raise RemoteProtocolError("consume response: chunk past the end", "truncated")
                p.chunk = payload[chunk_pos : chunk_pos + clen]
                chunk_pos += clen
            elif err == C_BOUNDARY:
                h.u64()
                p.hwmark = h.u64()
                h.u32()
                p.first_available = h.u64()
            elif err == C_OTHER_LEADER:
                p.leader = (h.u32(), h.u16())
            parts.append(p)
        topics.append(ConsumeTopicResult(name, parts, count))
    h.done()
    return ConsumeResponse(request_id, topics)


def decode_chunk(chunk: bytes | memoryview, base_seq: int) -> list[TankMessage]:
    """The complete messages of a consume chunk (``bundle_len varint · bundle`` repeated); a
    partial last bundle, which the broker may send, is dropped (TankClient::process_consume)."""
    out: list[TankMessage] = []
    pos = 0
    end = len(chunk)
    seq = base_seq
    while pos < end:
        try:
            blen, body = read_varint(chunk, pos, end)
        except BundleError:
            break  # cut inside the length
        if body + blen > end:
            break
        try:
            header, msgs = decode_bundle(chunk, body, body + blen, seq)
        except BundleError as exc:
            raise RemoteProtocolError(f"consume chunk: {exc}", "bad_bundle") from None
        out.extend(msgs)
        seq = (header.last_seq if header.sparse else seq + header.count - 1) + 1
        pos = body + blen
    return out


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
