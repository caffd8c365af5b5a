"""Sans-IO codec for the Cursus broker protocol (docs/protocols/cursus.md), in both roles.

Hand-written: the wire mixes free-form ``KEY key=value`` text with a binary batch whose length
prefixes are u8, u16 and u32 in one record, which no declarative schema library decodes at speed.

Frames are ``length u32 BE`` + body. A body starting ``BA 7C`` with a topic length > 0 is a binary
batch (wire notes); anything else is text, usually inside the envelope ``topic_len u16 + topic``.
Nothing here does I/O: :class:`FrameBuffer` cuts frames out of received bytes, the functions below
turn bodies into messages and messages into bytes. :class:`RemoteProtocolError` means the peer sent
something bad; :class:`LocalProtocolError` means we tried to build something invalid.
"""

from __future__ import annotations

import gzip
import json
import operator
import struct
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

from gateway.model import RESERVED_HEADER_PREFIX, Record
from gateway.protocols.buffer import SizePrefixedFrames
from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError

MAGIC = 0xBA7C
MAGIC_BYTES = b"\xba\x7c"
MAX_FRAME_BYTES = 64 << 20
MAX_BATCH_MESSAGES = 100_000
KEEPALIVE = b"\x00\x00\x00\x00"

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_SEQS = struct.Struct(">QQi")  # seq_start, seq_end, count
_MSG_HEAD = struct.Struct(">QQH")  # offset, seq, producer_id length
_U16_AT = _U16.unpack_from
_U32_AT = _U32.unpack_from


# ----------------------------------------------------------------------------------- framing


def frame(body: bytes | bytearray | memoryview | str) -> bytes:
    """One length-prefixed frame."""
    if isinstance(body, str):
        body = body.encode()
    if len(body) > 0xFFFFFFFF:
        raise LocalProtocolError(f"frame body of {len(body)} bytes does not fit a u32 length")
    return _U32.pack(len(body)) + bytes(body)


class FrameBuffer(SizePrefixedFrames):
    """Cuts Cursus frames (a uint32 size, then the body) out of received bytes; a size over
    ``max_frame_bytes`` is ``frame_too_large``."""

    __slots__ = ()

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        super().__init__(max_frame_bytes)


# ----------------------------------------------------------------------------- compression

COMPRESSIONS = ("none", "gzip", "snappy", "lz4")
XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _unsnappy(body: bytes) -> bytes:
    """eapache/go-xerial-snappy ``Decode`` (the broker's): the xerial framing (16-byte header,
    then u32 BE length + raw snappy block, repeated) when the magic is there, else one raw block."""
    import cramjam

    if body[:8] != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(body))
    out, pos = [], 16
    while pos < len(body):
        if pos + 4 > len(body):
            raise ValueError("truncated xerial chunk length")
        (size,) = _U32_AT(body, pos)
        pos += 4
        if pos + size > len(body):
            raise ValueError("truncated xerial chunk")
        out.append(bytes(cramjam.snappy.decompress_raw(body[pos : pos + size])))
        pos += size
    return b"".join(out)


def decompress(body: bytes, compression: str) -> bytes:
    """Undo the broker-wide incoming compression (the wire notes): gzip; snappy as the broker's
    go-xerial-snappy reads it (xerial framing or a raw block); lz4 as pierrec/lz4 v4 writes it
    (the LZ4 frame format). Raises RemoteProtocolError."""
    if compression in ("none", ""):
        return body
    try:
        if compression == "gzip":
            return gzip.decompress(body)
        if compression == "snappy":
            return _unsnappy(body)
        if compression == "lz4":
            import cramjam

            return bytes(cramjam.lz4.decompress(body))
    except Exception as exc:  # every library has its own error types
        raise RemoteProtocolError(
            f"{compression} decompression failed: {exc}", "bad_compression"
        ) from exc
    raise LocalProtocolError(f"unsupported compression {compression!r}")


def compress(body: bytes, compression: str) -> bytes:
    """Client role: what the broker's ``CompressMessage`` produces (snappy: a raw block)."""
    if compression in ("none", ""):
        return body
    if compression == "gzip":
        return gzip.compress(body)
    import cramjam

    if compression == "snappy":
        return bytes(cramjam.snappy.compress_raw(body))
    if compression == "lz4":
        return bytes(cramjam.lz4.compress(body))
    raise LocalProtocolError(f"unsupported compression {compression!r}")


# ------------------------------------------------------------------------------ text commands


@dataclass(frozen=True, slots=True)
class TextCommand:
    """A text command. ``envelope`` is the envelope topic, or None for a bare command."""

    text: str
    envelope: str | None = ""


def is_batch(body: bytes | memoryview) -> bool:
    """The broker's test (``isBatchMessage``): magic, topic length > 0 that fits the body."""
    if len(body) < 6 or body[0] != 0xBA or body[1] != 0x7C:
        return False
    (topic_len,) = _U16_AT(body, 2)
    return topic_len != 0 and topic_len + 2 <= len(body)


def decode_text(body: bytes) -> TextCommand:
    """A text body as the broker reads it: the envelope when its topic length fits, else the bare
    body. The command is stripped of NULs and whitespace at both ends."""
    if len(body) >= 2:
        (topic_len,) = _U16_AT(body, 0)
        if topic_len + 2 <= len(body):
            topic = body[2 : 2 + topic_len].decode("utf-8", "replace")
            text = body[2 + topic_len :].decode("utf-8", "replace")
            return TextCommand(text.strip("\x00 \t\n\r"), topic)
    return TextCommand(body.decode("utf-8", "replace").strip("\x00 \t\n\r"), None)


def encode_text(command: str, envelope: str = "") -> bytes:
    """The body of a text command in the envelope (client role)."""
    topic = envelope.encode()
    if len(topic) > 0xFFFF:
        raise LocalProtocolError("envelope topic longer than 65535 bytes")
    return _U16.pack(len(topic)) + topic + command.encode()


def parse_params(args: str) -> dict[str, str]:
    """The broker's ``parseKeyValueArgs``: ``key=value`` tokens in any order; ``message=``
    swallows the rest of the line (trimmed)."""
    out: dict[str, str] = {}
    idx = args.find("message=")
    head = args if idx < 0 else args[:idx]
    for part in head.split():
        key, sep, value = part.partition("=")
        if sep:
            out[key] = value
    if idx >= 0:
        out["message"] = args[idx + 8 :].strip()
    return out


# ---------------------------------------------------------------------------------- batches


class Message(NamedTuple):
    """One message of a binary batch (strings as UTF-8 bytes)."""

    offset: int = 0
    seq: int = 0
    producer_id: bytes = b""
    key: bytes = b""
    epoch: int = 0
    payload: bytes = b""
    event_type: bytes = b""
    schema_version: int = 0
    aggregate_version: int = 0
    metadata: bytes = b""


@dataclass(slots=True)
class Batch:
    """A binary batch. ``body`` holds exactly ``count`` encoded messages (the wire notes, from the
    first message's offset field); ``starts`` the byte position of each message in ``body``."""

    topic: str
    partition: int
    acks: str
    idempotent: bool
    seq_start: int
    seq_end: int
    count: int
    body: bytes
    starts: Starts | None = None

    def messages(self) -> list[Message]:
        return decode_messages(self.body, self.count)


class BatchDecodeError(RemoteProtocolError):
    """A malformed batch. ``str(exc)`` is the Go broker's error text (after ``ERROR: ``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "malformed_batch")


def _eof(buf_len: int, pos: int) -> str:
    # io.ReadFull / binary.Read: EOF when nothing was read, "unexpected EOF" for a partial read
    return "EOF" if pos >= buf_len else "unexpected EOF"


_STEPS = (
    (8, "offset", None),
    (8, "seqNum", None),
    (2, "producerID length", "producerID bytes"),
    (2, "key length", "key bytes"),
    (8, "epoch", None),
    (4, "payload length", "payload bytes"),
    (2, "event type length", "event type"),
    (4, "schema version", None),
    (8, "aggregate version", None),
    (2, "metadata length", "metadata"),
)


def _strict_walk(buf: bytes, pos: int, count: int) -> None:
    """Re-walk a batch that failed the fast walk, raising the Go decoder's exact error."""
    n = len(buf)
    for i in range(count):
        for size, what, what_bytes in _STEPS:
            if pos + size > n:
                raise BatchDecodeError(f"failed to read message[{i}] {what}: {_eof(n, pos)}")
            if what_bytes is None:
                pos += size
                continue
            length = (_U16_AT if size == 2 else _U32_AT)(buf, pos)[0]
            pos += size
            if length and pos + length > n:
                raise BatchDecodeError(f"failed to read message[{i}] {what_bytes}: {_eof(n, pos)}")
            pos += length


Starts: TypeAlias = "array[int] | range"  # a string: array is not subscriptable before 3.12
"""Message positions in a block: a table, or a ``range`` when every message has the same size."""

# offset and width of each length field in a message whose earlier fields have lengths
# (producer id, key, payload, event type): see _uniform_stride
_LENGTH_FIELDS = ((16, 2), (18, 2), (28, 4), (32, 2), (46, 2))


def _uniform_stride(buf: bytes, pos: int, count: int) -> int:
    """The size of every message when all ``count`` messages have message 0's field lengths (so
    message i starts at i * size), else 0. Checked with strided slices, no per-message loop:
    uniform batches are what producers usually send."""
    if count < 2:
        return 0
    try:
        plen = _U16_AT(buf, pos + 16)[0]
        klen = _U16_AT(buf, pos + 18 + plen)[0]
        vlen = _U32_AT(buf, pos + 28 + plen + klen)[0]
        elen = _U16_AT(buf, pos + 32 + plen + klen + vlen)[0]
        mlen = _U16_AT(buf, pos + 46 + plen + klen + vlen + elen)[0]
    except struct.error:
        return 0
    size = 48 + plen + klen + vlen + elen + mlen
    region = buf[pos : pos + size * count]
    if len(region) != size * count:
        return 0
    shifts = (0, plen, plen + klen, plen + klen + vlen, plen + klen + vlen + elen)
    for (field, width), shift in zip(_LENGTH_FIELDS, shifts, strict=True):
        for k in range(field + shift, field + shift + width):
            column = region[k::size]
            if column.count(column[:1]) != count:
                return 0
    return size


def walk_messages(buf: bytes, pos: int, count: int) -> tuple[Starts, int]:
    """Positions (relative to ``pos``) of ``count`` messages starting at ``pos``, and the end
    position. Raises BatchDecodeError with the Go decoder's message when the data is short."""
    stride = _uniform_stride(buf, pos, count)
    if stride:
        return range(0, stride * count, stride), pos + stride * count
    starts = array("I", bytes(4 * count)) if count else array("I")
    u16, u32 = _U16_AT, _U32_AT
    p = pos
    try:
        for i in range(count):
            starts[i] = p - pos
            p += 18 + u16(buf, p + 16)[0]  # offset, seq, producer id
            p += 10 + u16(buf, p)[0]  # key, epoch
            p += 4 + u32(buf, p)[0]  # payload
            p += 14 + u16(buf, p)[0]  # event type, schema version, aggregate version
            p += 2 + u16(buf, p)[0]  # metadata
    except struct.error:
        p = len(buf) + 1
    if p > len(buf):
        _strict_walk(buf, pos, count)
        raise BatchDecodeError("truncated batch")  # pragma: no cover - strict walk raises
    return starts, p


def decode_batch(body: bytes) -> Batch:
    """Parse a binary batch (produce request, or a CONSUME/STREAM reply in the client role).
    Errors carry the Go broker's ``DecodeBatchMessages`` texts. Trailing bytes are ignored, as
    the broker does."""
    n = len(body)
    if n < 2:
        raise BatchDecodeError("data too short")
    if _U16_AT(body, 0)[0] != MAGIC:
        raise BatchDecodeError(f"invalid magic number: {_U16_AT(body, 0)[0]:x}")
    pos = 2
    if pos + 2 > n:
        raise BatchDecodeError(f"failed to read topic length: {_eof(n, pos)}")
    (tlen,) = _U16_AT(body, pos)
    pos += 2
    if tlen and pos + tlen > n:
        raise BatchDecodeError(f"failed to read topic bytes: {_eof(n, pos)}")
    topic = body[pos : pos + tlen].decode("utf-8", "replace")
    pos += tlen
    if pos + 4 > n:
        raise BatchDecodeError(f"failed to read partition: {_eof(n, pos)}")
    (partition,) = _I32.unpack_from(body, pos)
    pos += 4
    if pos + 1 > n:
        raise BatchDecodeError(f"failed to read acks length: {_eof(n, pos)}")
    alen = body[pos]
    pos += 1
    if alen and pos + alen > n:
        raise BatchDecodeError(f"failed to read acks bytes: {_eof(n, pos)}")
    acks = body[pos : pos + alen].decode("utf-8", "replace")
    pos += alen
    if pos + 1 > n:
        raise BatchDecodeError(f"failed to read isIdempotent: {_eof(n, pos)}")
    idempotent = body[pos] != 0
    pos += 1
    if pos + 8 > n:
        raise BatchDecodeError(f"failed to read batch start: {_eof(n, pos)}")
    if pos + 16 > n:
        raise BatchDecodeError(f"failed to read batch end: {_eof(n, pos + 8)}")
    if pos + 20 > n:
        raise BatchDecodeError(f"failed to read message count: {_eof(n, pos + 16)}")
    seq_start, seq_end, count = _SEQS.unpack_from(body, pos)
    pos += 20
    if count < 0:
        raise BatchDecodeError(f"invalid negative message count: {count}")
    if count > MAX_BATCH_MESSAGES:
        raise BatchDecodeError(f"message count too high: {count} (max: {MAX_BATCH_MESSAGES})")
    starts, end = walk_messages(body, pos, count)
    return Batch(
        topic, partition, acks, idempotent, seq_start, seq_end, count, body[pos:end], starts
    )


def batch_header(
    topic: str,
    partition: int,
    acks: str,
    idempotent: bool,
    seq_start: int,
    seq_end: int,
    count: int,
) -> bytes:
    t = topic.encode()
    a = acks.encode()
    if len(t) > 0xFFFF or len(a) > 0xFF:
        raise LocalProtocolError("topic or acks too long for a batch header")
    return b"".join(
        (
            MAGIC_BYTES,
            _U16.pack(len(t)),
            t,
            _I32.pack(partition),
            _U8.pack(len(a)),
            a,
            b"\x01" if idempotent else b"\x00",
            _SEQS.pack(seq_start, seq_end, count),
        )
    )


def encode_batch(batch: Batch) -> bytes:
    """A batch's frame body (header + messages)."""
    return (
        batch_header(
            batch.topic,
            batch.partition,
            batch.acks,
            batch.idempotent,
            batch.seq_start,
            batch.seq_end,
            batch.count,
        )
        + batch.body
    )


_PREFIXES: dict[tuple[int, int], struct.Struct] = {}
_SUFFIXES: dict[tuple[int, int], struct.Struct] = {}


def _layout(cache: dict[tuple[int, int], struct.Struct], key: tuple[int, int], fmt: str
            ) -> struct.Struct:  # fmt: skip
    layout = cache.get(key)
    if layout is None:
        if max(key) > 0xFFFF:
            raise LocalProtocolError("a message string field is longer than 65535 bytes")
        if len(cache) > 256:
            cache.clear()
        layout = cache[key] = struct.Struct(fmt)
    return layout


def encode_messages(messages: Iterable[Message]) -> bytes:
    """Messages as a block: per message one packed prefix (offset .. payload length, keyed by the
    producer id and key lengths), the payload, one packed suffix (event type .. metadata)."""
    parts: list[bytes] = []
    append = parts.append
    prefixes, suffixes = _PREFIXES, _SUFFIXES
    for m in messages:
        pid, key, et, md = m.producer_id, m.key, m.event_type, m.metadata
        lp, lk, le, lm = len(pid), len(key), len(et), len(md)
        pre = prefixes.get((lp, lk)) or _layout(prefixes, (lp, lk), f">QQH{lp}sH{lk}sqI")
        suf = suffixes.get((le, lm)) or _layout(suffixes, (le, lm), f">H{le}sIQH{lm}s")
        payload = m.payload
        append(pre.pack(m.offset, m.seq, lp, pid, lk, key, m.epoch, len(payload)))
        append(payload)
        append(suf.pack(le, et, m.schema_version, m.aggregate_version, lm, md))
    return b"".join(parts)


def make_batch(
    topic: str,
    partition: int,
    messages: Sequence[Message],
    acks: str = "1",
    idempotent: bool = False,
) -> Batch:
    """A batch from messages (client role, and replies); seq_start/seq_end from the messages."""
    body = encode_messages(messages)
    seq_start = messages[0].seq if messages else 0
    seq_end = messages[-1].seq if messages else 0
    return Batch(topic, partition, acks, idempotent, seq_start, seq_end, len(messages), body)


_PICK = operator.itemgetter(0, 1, 3, 5, 6, 8, 10, 11, 12, 14)


def _decode_uniform(buf: bytes, count: int, size: int) -> list[Message]:
    """Messages of equal field lengths, unpacked by one struct in C (``iter_unpack``)."""
    plen = _U16_AT(buf, 16)[0]
    klen = _U16_AT(buf, 18 + plen)[0]
    vlen = _U32_AT(buf, 28 + plen + klen)[0]
    elen = _U16_AT(buf, 32 + plen + klen + vlen)[0]
    mlen = _U16_AT(buf, 46 + plen + klen + vlen + elen)[0]
    layout = struct.Struct(f">QQH{plen}sH{klen}sqI{vlen}sH{elen}sIQH{mlen}s")
    assert layout.size == size
    make = Message._make
    return [make(_PICK(t)) for t in layout.iter_unpack(buf[: size * count])]


def decode_messages(body: bytes | memoryview, count: int, stride: int = -1) -> list[Message]:
    """``count`` messages of a message block. ``stride``: their common size when known (0: not
    uniform; -1: find out)."""
    buf = bytes(body)
    if stride < 0:
        stride = _uniform_stride(buf, 0, count)
    if stride > 0:
        return _decode_uniform(buf, count, stride)
    out: list[Message] = []
    u16, u32 = _U16_AT, _U32_AT
    head = _MSG_HEAD.unpack_from
    i64 = _I64.unpack_from
    tail = struct.Struct(">IQH").unpack_from
    p = 0
    try:
        for _ in range(count):
            offset, seq, plen = head(buf, p)
            p += 18
            pid = buf[p : p + plen]
            p += plen
            (klen,) = u16(buf, p)
            key = buf[p + 2 : p + 2 + klen]
            p += 2 + klen
            (epoch,) = i64(buf, p)
            (vlen,) = u32(buf, p + 8)
            p += 12
            payload = buf[p : p + vlen]
            p += vlen
            (elen,) = u16(buf, p)
            event_type = buf[p + 2 : p + 2 + elen]
            p += 2 + elen
            schema, aggregate, mlen = tail(buf, p)
            p += 14
            metadata = buf[p : p + mlen]
            p += mlen
            out.append(
                Message(
                    offset, seq, pid, key, epoch, payload, event_type, schema, aggregate, metadata
                )
            )
    except struct.error as exc:
        raise BatchDecodeError(f"truncated message block: {exc}") from exc
    if p > len(buf):
        raise BatchDecodeError("truncated message block")
    return out


# ---------------------------------------------------------------------------------- acks


@dataclass(frozen=True, slots=True)
class Ack:
    """The JSON produce acknowledgement (5.2), fields in the Go struct's order."""

    status: str = "OK"
    last_offset: int = 0
    producer_epoch: int = 0
    producer_id: str = ""
    seq_start: int = 0
    seq_end: int = 0
    leader: str = ""
    error: str = ""


def encode_ack(ack: Ack) -> bytes:
    """Compact JSON, written field by field (one ack per produce: a dict through json.dumps
    cost ~8 us of the gateway's ~250 per one-record produce)."""
    text = (
        f'{{"status":{_json_str(ack.status)},"last_offset":{int(ack.last_offset)},'
        f'"producer_epoch":{int(ack.producer_epoch)},'
        f'"producer_id":{_json_str(ack.producer_id)},'
        f'"seq_start":{int(ack.seq_start)},"seq_end":{int(ack.seq_end)}'
    )
    if ack.leader:
        text += f',"leader":{_json_str(ack.leader)}'
    if ack.error:
        text += f',"error":{_json_str(ack.error)}'
    return (text + "}").encode()


def _json_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def decode_ack(body: bytes) -> Ack:
    """Parse a JSON ack (client role). Raises RemoteProtocolError when it is not one."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"not a JSON ack: {body[:80]!r}", "bad_ack") from exc
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"not a JSON ack: {body[:80]!r}", "bad_ack")
    return Ack(
        str(obj.get("status", "")),
        int(obj.get("last_offset", 0)),
        int(obj.get("producer_epoch", 0)),
        str(obj.get("producer_id", "")),
        int(obj.get("seq_start", 0)),
        int(obj.get("seq_end", 0)),
        str(obj.get("leader", "")),
        str(obj.get("error", "")),
    )


# ------------------------------------------------------------------------- replies (client)


@dataclass(frozen=True, slots=True)
class Keepalive:
    """The empty frame a STREAM sends every 5 s."""


def decode_reply(body: bytes) -> Keepalive | Batch | str:
    """A reply frame as a client sees it: keepalive, batch, or text."""
    if not body:
        return Keepalive()
    if body[:2] == MAGIC_BYTES:
        return decode_batch(body)
    return body.decode("utf-8", "replace")


# --------------------------------------------------------- records <-> messages (the model)

H_PRODUCER_ID = RESERVED_HEADER_PREFIX + "cursus.producer_id"
H_SEQ = RESERVED_HEADER_PREFIX + "cursus.seq"
H_EPOCH = RESERVED_HEADER_PREFIX + "cursus.epoch"
H_EVENT_TYPE = RESERVED_HEADER_PREFIX + "cursus.event_type"
H_SCHEMA_VERSION = RESERVED_HEADER_PREFIX + "cursus.schema_version"
H_AGGREGATE_VERSION = RESERVED_HEADER_PREFIX + "cursus.aggregate_version"
H_METADATA = RESERVED_HEADER_PREFIX + "cursus.metadata"


def message_to_record(m: Message, timestamp_us: int, offset: int = -1) -> Record:
    """The model's record for a message; the Cursus-only fields become reserved headers (only
    the ones that are set)."""
    headers: list[tuple[str, bytes]] = []
    if m.producer_id:
        headers.append((H_PRODUCER_ID, m.producer_id))
    if m.seq:
        headers.append((H_SEQ, b"%d" % m.seq))
    if m.epoch:
        headers.append((H_EPOCH, b"%d" % m.epoch))
    if m.event_type or m.schema_version or m.aggregate_version or m.metadata:
        if m.event_type:
            headers.append((H_EVENT_TYPE, m.event_type))
        if m.schema_version:
            headers.append((H_SCHEMA_VERSION, b"%d" % m.schema_version))
        if m.aggregate_version:
            headers.append((H_AGGREGATE_VERSION, b"%d" % m.aggregate_version))
        if m.metadata:
            headers.append((H_METADATA, m.metadata))
    return Record(m.key or None, m.payload, tuple(headers), timestamp_us, offset)


# reserved header -> (Message field index, integer mask or None for a string field)
_FROM_HEADER: dict[str, tuple[int, int | None]] = {
    H_SEQ: (1, 0xFFFFFFFFFFFFFFFF),
    H_PRODUCER_ID: (2, None),
    H_EPOCH: (4, -1),
    H_EVENT_TYPE: (6, None),
    H_SCHEMA_VERSION: (7, 0xFFFFFFFF),
    H_AGGREGATE_VERSION: (8, 0xFFFFFFFFFFFFFFFF),
    H_METADATA: (9, None),
}


def record_to_message(r: Record) -> Message:
    """A stored record as a Cursus message (offset = the record's offset). Headers that are not
    Cursus reserved headers have no place in the format and are dropped."""
    key = bytes(r.key or b"")
    fields: list[object] = [
        max(r.offset, 0),
        0,
        b"",
        key[:0xFFFF],
        0,
        bytes(r.value or b""),
        b"",
        0,
        0,
        b"",
    ]
    for name, value in r.headers:
        spec = _FROM_HEADER.get(name)
        if spec is None:
            continue
        index, mask = spec
        if mask is None:
            fields[index] = bytes(value)[:0xFFFF]
            continue
        try:
            number = int(value)
        except ValueError:
            continue
        if mask == -1:  # epoch: i64
            if -(2**63) <= number < 2**63:
                fields[index] = number
        else:
            fields[index] = number & mask
    return Message._make(fields)


def message_ids(body: bytes | memoryview, start: int) -> tuple[int, bytes, int]:
    """(seq, producer_id, epoch) of the message at ``start`` in a message block."""
    _, seq, plen = _MSG_HEAD.unpack_from(body, start)
    p = start + 18
    pid = bytes(body[p : p + plen])
    p += plen
    (klen,) = _U16_AT(body, p)
    (epoch,) = _I64.unpack_from(body, p + 2 + klen)
    return seq, pid, epoch
