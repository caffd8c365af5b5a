"""TANK bundles: the message-set encoding used on the wire and in TANK's segment files.

Hand-written because no library implements TANK's encoding. Sans-IO and pure: bytes in, messages
out. See ``docs/protocols/tank.md`` (wire notes).

A bundle is ``flags u8 · [extra_flags u8 · [leader_epoch u32 · producer_id u64 ·
producer_epoch u16]] · [count varint] · [first_seq u64 · [last-first-1 varint]] · message set``,
the message set optionally compressed as one raw Snappy block. Sequence numbers of non-sparse
bundles are not in the bundle: the reader derives them from a base it knows.

:data:`TANK_BUNDLE` is the :class:`gateway.model.BatchCodec` that lets a backend keep a produced
bundle as it came, so a TANK consumer reading TANK-produced data gets the bytes back without any
per-record object being built (the same-format path, docs/protocols/tank.md).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import cramjam

from gateway.model import Record

CODEC_NONE = 0
CODEC_SNAPPY = 1

F_SPARSE = 0x40
F_EXTRA = 0x80
EXTRA_RICH_PRODUCER = 0x01

M_HAVE_KEY = 0x01
M_USE_LAST_TS = 0x02
M_SEQ_PREV_PLUS_ONE = 0x04

U64 = struct.Struct("<Q")
U32 = struct.Struct("<I")
RICH = struct.Struct("<IQH")

COMPRESS_MIN_MESSAGES = 512
COMPRESS_MIN_BYTES = 1024


class BundleError(ValueError):
    """The bytes are not a valid TANK bundle (or varint)."""


# ----------------------------------------------------------------------------- varints


def read_varint(buf: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int]:
    """(value, new position) of the u32 varint at ``pos``; BundleError when malformed or cut."""
    if pos >= end:
        raise BundleError("varint cut short")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    pos += 1
    while True:
        if pos >= end:
            raise BundleError("varint cut short")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            raise BundleError("varint longer than 5 bytes")
    if value > 0xFFFFFFFF:
        raise BundleError("varint exceeds u32")
    return value, pos


def varint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL_VARINTS[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [bytes([i]) for i in range(0x80)]


# ----------------------------------------------------------------------------- messages


class TankMessage(NamedTuple):
    """One decoded message. ``seq`` is 0 when the reader had no base to count from."""

    seq: int
    timestamp_ms: int
    key: bytes | None
    content: bytes


class BundleHeader(NamedTuple):
    codec: int
    message_count: int
    sparse: bool
    first_seq: int  # sparse only, else 0
    last_seq: int  # sparse only, else 0
    producer: tuple[int, int, int] | None  # (leader_epoch, producer_id, producer_epoch)
    body: int  # position of the message set


def parse_header(buf: bytes | memoryview, pos: int, end: int) -> BundleHeader:
    if pos >= end:
        raise BundleError("empty bundle")
    flags = buf[pos]
    pos += 1
    codec = flags & 0x03
    if codec > CODEC_SNAPPY:
        raise BundleError(f"unknown bundle codec {codec}")
    producer = None
    if flags & F_EXTRA:
        if pos >= end:
            raise BundleError("bundle cut in its extra flags")
        extra = buf[pos]
        pos += 1
        if extra & EXTRA_RICH_PRODUCER:
            if pos + RICH.size > end:
                raise BundleError("bundle cut in its producer info")
            producer = RICH.unpack_from(buf, pos)
            pos += RICH.size
    count = (flags >> 2) & 0x0F
    if count == 0:
        count, pos = read_varint(buf, pos, end)
        if count == 0:
            raise BundleError("bundle with no messages")
    sparse = bool(flags & F_SPARSE)
    first_seq = last_seq = 0
    if sparse:
        if pos + 8 > end:
            raise BundleError("sparse bundle cut in its first sequence number")
        first_seq = U64.unpack_from(buf, pos)[0]
        pos += 8
        if count > 1:
            delta, pos = read_varint(buf, pos, end)
            last_seq = first_seq + delta + 1
        else:
            last_seq = first_seq
    return BundleHeader(codec, count, sparse, first_seq, last_seq, producer, pos)


def message_set(buf: bytes | memoryview, header: BundleHeader, end: int) -> bytes | memoryview:
    """The (decompressed) message set of a bundle."""
    # a bytes copy, not a memoryview: indexing and unpack_from on bytes are ~2x faster, and the
    # per-message loop of walk() is the produce path's main cost
    raw = bytes(buf[header.body : end])
    if header.codec == CODEC_SNAPPY:
        try:
            return bytes(cramjam.snappy.decompress_raw(raw))
        except Exception as exc:  # cramjam.DecompressionError
            raise BundleError(f"bad snappy block: {exc}") from exc
    return raw


def walk(
    data: bytes | memoryview,
    header: BundleHeader,
    out: list[tuple[int, int, bytes | None, bytes]] | None = None,
) -> tuple[int, int, bool]:
    """Validate a message set of ``header.message_count`` messages; append (seq, ts_ms, key,
    content) to ``out`` when given (seq is the explicit one of sparse bundles, else 0). Returns
    (min_ts_ms, max_ts_ms, contiguous) where ``contiguous`` says the sparse sequence numbers are
    first_seq, first_seq+1, ... (always True for non-sparse bundles)."""
    if out is None and not header.sparse:
        return _validate_plain(data, header.message_count)
    pos = 0
    end = len(data)
    count = header.message_count
    sparse = header.sparse
    seq = header.first_seq
    last_seq = header.last_seq
    contiguous = not sparse or last_seq == seq + count - 1
    ts = -1
    min_ts = max_ts = -1
    u64 = U64.unpack_from
    for i in range(count):
        if pos >= end:
            raise BundleError(f"message set cut after {i} of {count} messages")
        mflags = data[pos]
        pos += 1
        if sparse:
            if i == 0:
                pass
            elif i == count - 1:
                seq = last_seq
            elif mflags & M_SEQ_PREV_PLUS_ONE:
                seq += 1
            else:
                delta, pos = read_varint(data, pos, end)
                if delta:
                    contiguous = False
                seq += delta + 1
        if mflags & M_USE_LAST_TS:
            if ts < 0:
                raise BundleError("first message reuses a timestamp it does not have")
        else:
            if pos + 8 > end:
                raise BundleError("message cut in its timestamp")
            ts = u64(data, pos)[0]
            pos += 8
            if ts > max_ts:
                max_ts = ts
            if min_ts < 0 or ts < min_ts:
                min_ts = ts
        key = None
        if mflags & M_HAVE_KEY:
            if pos >= end:
                raise BundleError("message cut in its key")
            klen = data[pos]
            pos += 1
            if pos + klen > end:
                raise BundleError("message cut in its key")
            if out is not None:
                key = bytes(data[pos : pos + klen])
            pos += klen
        b = data[pos] if pos < end else 0x80
        if b < 0x80:
            clen = b
            pos += 1
        else:
            clen, pos = read_varint(data, pos, end)
        if pos + clen > end:
            raise BundleError("message cut in its content")
        if out is not None:
            out.append((seq, ts, key, bytes(data[pos : pos + clen])))
        pos += clen
    if pos != end:
        raise BundleError(f"{end - pos} bytes after the last of {count} messages")
    if sparse and count > 1 and seq > last_seq:
        raise BundleError("sparse sequence numbers run past the bundle's last one")
    return min_ts, max_ts, contiguous


def _validate_plain(data: bytes | memoryview, count: int) -> tuple[int, int, bool]:
    """walk() for the produce hot path: a non-sparse message set checked without building
    anything. Overruns surface as IndexError/struct.error (or a final position past the end)
    instead of a comparison per field."""
    pos = 0
    ts = min_ts = max_ts = -1
    u64 = U64.unpack_from
    try:
        for _ in range(count):
            mflags = data[pos]
            pos += 1
            if mflags & M_USE_LAST_TS:
                if ts < 0:
                    raise BundleError("first message reuses a timestamp it does not have")
            else:
                ts = u64(data, pos)[0]
                pos += 8
                if ts > max_ts:
                    max_ts = ts
                if min_ts < 0 or ts < min_ts:
                    min_ts = ts
            if mflags & M_HAVE_KEY:
                pos += 1 + data[pos]
            b = data[pos]
            if b < 0x80:
                pos += 1 + b
            else:
                clen, pos = read_varint(data, pos, len(data))
                pos += clen
    except (IndexError, struct.error):
        raise BundleError(f"message set of {count} messages cut short") from None
    if pos != len(data):
        if pos > len(data):
            raise BundleError(f"message set of {count} messages cut short")
        raise BundleError(f"{len(data) - pos} bytes after the last of {count} messages")
    return min_ts, max_ts, True


class BundleInfo(NamedTuple):
    """What a produce needs to know about a bundle without decoding its messages."""

    header: BundleHeader
    min_ts_ms: int
    max_ts_ms: int
    contiguous: bool


def scan_bundle(bundle: bytes | memoryview) -> BundleInfo:
    """Validate a whole bundle (decompressing it if needed) without building message objects."""
    end = len(bundle)
    header = parse_header(bundle, 0, end)
    mn, mx, contiguous = walk(message_set(bundle, header, end), header)
    return BundleInfo(header, mn, mx, contiguous)


def decode_bundle(
    buf: bytes | memoryview, pos: int = 0, end: int | None = None, base_seq: int = 0
) -> tuple[BundleHeader, list[TankMessage]]:
    """Decode the bundle ``buf[pos:end]``. Non-sparse bundles number their messages from
    ``base_seq``; sparse ones carry their own sequence numbers."""
    if end is None:
        end = len(buf)
    header = parse_header(buf, pos, end)
    rows: list[tuple[int, int, bytes | None, bytes]] = []
    walk(message_set(buf, header, end), header, rows)
    if header.sparse:
        return header, [TankMessage(*r) for r in rows]
    return header, [
        TankMessage(base_seq + i, ts, key, content) for i, (_, ts, key, content) in enumerate(rows)
    ]


# ----------------------------------------------------------------------------- encoding


def encode_bundle(
    messages: Sequence[tuple[bytes | None, bytes | None, int]],
    *,
    compress: bool | None = None,
    first_seq: int | None = None,
) -> bytes:
    """A bundle of ``(key, content, timestamp_ms)`` messages. ``compress=None`` follows the TANK
    client library (Snappy above 512 messages or 1 KiB of keys and contents). ``first_seq`` makes
    a SPARSE bundle with consecutive sequence numbers from it."""
    count = len(messages)
    if count == 0:
        raise ValueError("a bundle holds at least one message")
    parts: list[bytes] = []
    append = parts.append
    pack_ts = U64.pack
    last_ts = -1
    total = 0
    sparse = first_seq is not None
    for i, (key, content, ts) in enumerate(messages):
        mflags = 0
        if key is not None:
            if len(key) > 255:
                raise ValueError("TANK keys are at most 255 bytes")
            mflags |= M_HAVE_KEY
        same_ts = ts == last_ts
        if same_ts:
            mflags |= M_USE_LAST_TS
        if sparse and 0 < i < count - 1:
            mflags |= M_SEQ_PREV_PLUS_ONE
        append(_SMALL_VARINTS[mflags])
        if not same_ts:
            append(pack_ts(ts))
            last_ts = ts
        if key is not None:
            append(_SMALL_VARINTS[len(key)] if len(key) < 0x80 else bytes((len(key),)))
            append(key)
            total += len(key)
        content = content or b""
        append(varint(len(content)))
        append(content)
        total += len(content)
    body = b"".join(parts)
    if compress is None:
        compress = count > COMPRESS_MIN_MESSAGES or total > COMPRESS_MIN_BYTES
    codec = CODEC_SNAPPY if compress else CODEC_NONE
    if compress:
        body = bytes(cramjam.snappy.compress_raw(body))
    flags = codec | (F_SPARSE if sparse else 0)
    head = bytearray()
    if count <= 15:
        head.append(flags | (count << 2))
    else:
        head.append(flags)
        head += varint(count)
    if sparse:
        assert first_seq is not None
        head += U64.pack(first_seq)
        if count > 1:
            head += varint(count - 2)  # last - first - 1 with consecutive numbers
    return bytes(head) + body


def encode_records(records: Sequence[Record], first_seq: int | None = None) -> bytes:
    """An uncompressed bundle of model records (keys cut to TANK's 255 bytes, timestamps in
    ms); SPARSE from ``first_seq`` when given (records after a gap in the offsets)."""
    return encode_bundle(
        [(_key(r.key), r.value, _ms(r.timestamp_us)) for r in records],
        compress=False,
        first_seq=first_seq,
    )


# ----------------------------------------------------------------------------- BatchCodec


class TankBundleCodec:
    """A stored TANK bundle as a :class:`gateway.model.RecordBatch` block (same-format path)."""

    name = "tank-bundle"

    def encode(self, records: Sequence[Record]) -> bytes:
        return encode_records(records)

    def decode(self, data: bytes | memoryview, base_offset: int) -> list[Record]:
        end = len(data)
        header = parse_header(data, 0, end)
        rows: list[tuple[int, int, bytes | None, bytes]] = []
        walk(message_set(data, header, end), header, rows)
        if base_offset < 0:
            return [Record(key, content, (), ts * 1000) for _, ts, key, content in rows]
        return [
            Record(key, content, (), ts * 1000, base_offset + i)
            for i, (_, ts, key, content) in enumerate(rows)
        ]


def _ms(timestamp_us: int) -> int:
    return timestamp_us // 1000 if timestamp_us >= 0 else 0


def _key(key: bytes | None) -> bytes | None:
    # TANK keys carry a u8 length; a longer key from another protocol keeps its first 255 bytes
    # (docs/interop.md).
    return key if key is None or len(key) <= 255 else key[:255]


TANK_BUNDLE = TankBundleCodec()


def records_to_bundle(records: Sequence[Record]) -> bytes:
    """Any records as one uncompressed TANK bundle (timestamps in ms, headers dropped)."""
    return TANK_BUNDLE.encode(records)
