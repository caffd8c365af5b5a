"""The hand-tuned message-set path (docs/protocols/kafka08.md: magic 0 and 1).

Hot paths build no per-record Python objects; they transcode between Kafka's magic-0 message sets
and the canonical batch encoding (``gateway.canonical``) that the embedded log stores as it is and
every other protocol can read:

- **Produce**: :func:`parse_produce` walks the entries with precompiled ``struct`` readers over a
  ``memoryview``, checks every CRC-32 (zlib) and the key/value lengths, and when the set is plain
  (magic 0, uncompressed: what librdkafka sends) writes the canonical block in the same pass
  (record headers packed, keys and values as zero-copy slices, one join); so does the inner set
  of a set that is one magic-0 compressed wrapper (what librdkafka sends). Anything else (magic
  1, several wrappers) is unpacked into records, one offset per inner message. Long sets are
  read in steps (:func:`produce_steps`), so a session serves other connections meanwhile.
- **Fetch**: :func:`encode_fetch` turns a stored canonical window straight into magic-0 entries
  with absolute offsets; batches of other formats are encoded from their records. The set is cut
  at MaxBytes exactly like Kafka (the last entry may be partial), or wrapped in one compressed
  message when the listener is configured to.

Client role: :func:`encode_message_set` (magic 0 or 1, any codec) and :func:`decode_message_set`
(trailing partial entry ignored, compressed wrappers unpacked, magic-1 relative inner offsets).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from gateway.canonical import CANONICAL, FIELD, RECORD, block_head, new_starts, record_position
from gateway.model import Record, RecordBatch
from gateway.protocols.kafka08 import compression
from gateway.protocols.kafka08.compression import CompressionError
from gateway.protocols.steps import Steps, finish

Buffer = bytes | bytearray | memoryview

ENTRY = struct.Struct(">qiIbb")  # offset, message size, crc, magic, attributes
ENTRY_KEY = struct.Struct(">qiIbbi")  # ... and the key length of a magic-0 message
ENTRY_KV = struct.Struct(">qiIHii")  # magic and attributes as one u16, key and value lengths
OFFSET_SIZE = struct.Struct(">qi")
ENTRY_HEAD = struct.Struct(">qiI")  # offset, message size, crc
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
M0_HEAD = struct.Struct(">bbi")  # magic, attributes, key length
WRAPPER_HEAD = struct.Struct(">Hi")  # magic and attributes as one u16, key length
M1_HEAD = struct.Struct(">bbqi")  # magic, attributes, timestamp, key length
M0_NULL_KEY_VLEN = struct.Struct(">bbii")  # magic, attributes, key length -1, value length
LOG_OVERHEAD = 12
MIN_MESSAGE = 14  # magic 0
MIN_MESSAGE_V1 = 22
MIN_ENTRY = LOG_OVERHEAD + MIN_MESSAGE
STEP_MESSAGES = 10_000  # the listener's max_records_per_step
NULL = b"\xff\xff\xff\xff"
M0_NULL_KEY = b"\x00\x00\xff\xff\xff\xff"  # magic 0, attributes 0, key null

# Kafka error codes raised by the produce path
INVALID_MESSAGE = 2
MESSAGE_TOO_LARGE = 10


class InvalidMessageSet(ValueError):
    """A produced set the broker refuses for one partition; ``code`` is the Kafka error code."""

    def __init__(self, message: str, code: int = INVALID_MESSAGE) -> None:
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------- produce


def parse_produce(buf: Buffer, now_us: int, max_message_bytes: int = 1_000_012) -> RecordBatch:
    """:func:`produce_steps` in one go (tests, tools: nothing else to serve meanwhile)."""
    return finish(produce_steps(buf, now_us, max_message_bytes))


def produce_steps(
    buf: Buffer,
    now_us: int,
    max_message_bytes: int = 1_000_012,
    step: int = STEP_MESSAGES,
    inner: bool = False,
) -> Steps[RecordBatch]:
    """The records of one partition's produced MessageSet, CRCs checked, stamped ``now_us`` (magic
    0 has no timestamp), read in steps (``gateway.protocols.steps``): a yield after every
    ``step`` messages (inner messages of compressed wrappers too), so a session serves other
    connections meanwhile; a set of ``step`` messages or fewer (a compressed one: inflating to
    at most ``step`` times 26 bytes, the smallest message) is read without yielding. A plain
    set comes back as a canonical block; a trailing partial entry is dropped
    (``Log.trimInvalidBytes``). Raises :class:`InvalidMessageSet` (code 2 for a bad CRC, size,
    magic or compressed payload; 10 for an entry above ``max_message_bytes``); nothing of the
    partition is then stored. ``inner``: ``buf`` is a compressed wrapper's inner set (a
    compressed message in it is refused)."""
    view = memoryview(buf)
    n = len(view)
    pos = count = 0
    plain = True
    unpack = ENTRY_KV.unpack_from
    i32 = I32.unpack_from
    crc32 = zlib.crc32
    rpack = RECORD.pack
    limit = max_message_bytes
    parts: list[Buffer] = [b""]
    append = parts.append
    joined: list[bytes] = []  # the records of the steps before, each step's joined at its end
    starts = new_starts()  # the block's start table, written on the way (canonical version 3)
    start = starts.append
    at = 0  # where the next canonical record starts
    crsize = RECORD.size
    last_klen = last_vlen = -2
    header = b""
    mark = step  # the message count of the next yield
    # the hot loop: one unpack (offset, size, crc, magic, attributes, key length and, for a null
    # key, value length), one CRC, one canonical record header; keys and values are slices
    while pos + 26 <= n:
        if count >= mark:
            # a step's slices joined now: a million of them joined at the end would be a long
            # step, and held that long they make the garbage collector's passes long
            joined.append(b"".join(parts))
            parts.clear()
            yield
            mark = count + step
        _, size, crc, magic_attrs, klen, vlen = unpack(view, pos)
        end = pos + LOG_OVERHEAD + size
        if size < MIN_MESSAGE or size > limit or end > n:
            if size < MIN_MESSAGE:
                raise InvalidMessageSet(f"message size {size} below the minimum {MIN_MESSAGE}")
            if end > n:
                break  # a trailing partial entry: dropped, like Log.trimInvalidBytes
            raise InvalidMessageSet(
                f"message of {size} bytes above message_max_bytes {limit}", MESSAGE_TOO_LARGE
            )
        if crc32(view[pos + 16 : end]) != crc and not inner:  # inner CRCs: unchecked, as 0.8.2
            raise InvalidMessageSet(f"CRC mismatch in the message at byte {pos}")
        if not magic_attrs and klen == -1 and vlen == end - pos - 26 and plain:
            # the common case (magic 0, uncompressed, no key, a value that fills the message)
            if vlen != last_vlen or last_klen != -1:
                header = rpack(now_us, -1, vlen, 0)
                last_klen, last_vlen = -1, vlen
            append(header)
            start(at)
            at += crsize + vlen
            if vlen:
                append(view[pos + 26 : end])
            count += 1
            pos = end
            continue
        magic = magic_attrs >> 8
        attrs = magic_attrs & 0xFF
        if magic == 0:
            p = pos + 22 + (klen if klen > 0 else 0)
            if klen >= 0:  # with a key, the value length follows it (else it came unpacked)
                if p + 4 > end:
                    raise InvalidMessageSet(f"bad key length {klen} in the message at byte {pos}")
                (vlen,) = i32(view, p)
            elif klen < -1:
                raise InvalidMessageSet(f"bad key length {klen} in the message at byte {pos}")
            if p + 4 + (vlen if vlen > 0 else 0) != end or vlen < -1:
                raise InvalidMessageSet(f"bad value length {vlen} in the message at byte {pos}")
            if plain:
                if klen != last_klen or vlen != last_vlen:  # uniform records: one pack
                    header = rpack(now_us, klen, vlen, 0)
                    last_klen, last_vlen = klen, vlen
                append(header)
                start(at)
                at += crsize + (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0)
                if klen > 0:
                    append(view[pos + 22 : pos + 22 + klen])
                if vlen > 0:
                    append(view[p + 4 : end])
        elif magic == 1:
            if size < MIN_MESSAGE_V1:
                raise InvalidMessageSet(f"magic-1 message size {size} below {MIN_MESSAGE_V1}")
            plain = False
        else:
            raise InvalidMessageSet(f"unknown magic byte {magic}")
        if attrs & 0x07:
            plain = False
        count += 1
        pos = end
    if pos + LOG_OVERHEAD <= n and i32(view, pos + 8)[0] < MIN_MESSAGE:
        raise InvalidMessageSet(f"message size {i32(view, pos + 8)[0]} below {MIN_MESSAGE}")
    if plain:
        if not count:
            return RecordBatch([])
        head = block_head(starts, count, now_us, now_us)
        if joined:
            block = b"".join([head, *joined, *parts])
        else:
            parts[0] = head
            block = b"".join(parts)
        return RecordBatch(encoded=block, codec=CANONICAL, count=count, max_timestamp_us=now_us)
    if count == 1 and not inner:
        batch = yield from _one_wrapper(view, now_us, max_message_bytes, step)
        if batch is not None:
            return batch
    records: list[Record] = []
    yield from _entries(view[:pos], now_us, records, inner, False, max_message_bytes, step=step)
    max_ts = max((r.timestamp_us for r in records), default=now_us)
    return RecordBatch(records, max_timestamp_us=max_ts)


def _one_wrapper(
    view: memoryview, now_us: int, max_message_bytes: int, step: int
) -> Steps[RecordBatch | None]:
    """The set of one magic-0 compressed wrapper (what librdkafka and the 0.8 producers send):
    its inner set read like a plain set, into a canonical block without an object per record
    (a million of them would take seconds and hold the garbage collector up to a fifth of a
    second a pass). As before (and as the 0.8.2 broker), inner messages' CRCs are not checked.
    None for any other wrapper (magic 1: timestamps of their own; a null value), read record by
    record."""
    magic_attrs, klen = WRAPPER_HEAD.unpack_from(view, 16)
    codec = magic_attrs & 0x07
    if magic_attrs >> 8 or not codec:
        return None
    p = 22 + max(klen, 0)
    (vlen,) = I32.unpack_from(view, p)
    if vlen < 0:
        return None
    try:
        data = yield from compression.decompress_steps(codec, bytes(view[p + 4 : p + 4 + vlen]))
    except CompressionError as exc:
        raise InvalidMessageSet(str(exc)) from None
    if len(data) > step * MIN_ENTRY:
        yield  # the decompression was a step of its own
    batch = yield from produce_steps(data, now_us, max_message_bytes, step, inner=True)
    return batch if batch.count else None


def _entries(
    buf: Buffer,
    default_ts_us: int,
    out: list[Record],
    inner: bool,
    check_crc: bool,
    max_bytes: int = 1 << 62,
    with_offsets: bool = False,
    step: int = 1 << 62,
) -> Steps[None]:
    """Append the records of a message set to ``out`` (compressed wrappers unpacked, one level),
    yielding after every ``step`` records and after each decompression of a wrapper holding
    more. ``with_offsets`` keeps the entries' offsets (client role; magic-1 inner offsets made
    absolute). A trailing partial entry is ignored."""
    view = memoryview(buf)
    n = len(view)
    pos = 0
    i32 = I32.unpack_from
    mark = len(out) + step  # the record count of the next yield
    while pos + LOG_OVERHEAD <= n:
        if len(out) >= mark:
            yield
            mark = len(out) + step
        offset, size = OFFSET_SIZE.unpack_from(view, pos)
        end = pos + LOG_OVERHEAD + size
        if size < MIN_MESSAGE:
            raise InvalidMessageSet(f"message size {size} below the minimum {MIN_MESSAGE}")
        if end > n:
            break
        _, _, crc, magic, attrs = ENTRY.unpack_from(view, pos)
        if check_crc and zlib.crc32(view[pos + 16 : end]) != crc:
            raise InvalidMessageSet(f"CRC mismatch in the message at byte {pos}")
        if magic == 0:
            ts = default_ts_us
            p = pos + 18
        elif magic == 1:
            if size < MIN_MESSAGE_V1:
                raise InvalidMessageSet(f"magic-1 message size {size} below {MIN_MESSAGE_V1}")
            (ts_ms,) = I64.unpack_from(view, pos + 18)
            ts = ts_ms * 1000 if ts_ms >= 0 and not attrs & 0x08 else default_ts_us
            p = pos + 26
        else:
            raise InvalidMessageSet(f"unknown magic byte {magic}")
        (klen,) = i32(view, p)
        p += 4
        if klen < -1 or p + max(klen, 0) + 4 > end:
            raise InvalidMessageSet(f"bad key length {klen} in the message at byte {pos}")
        key = None if klen < 0 else bytes(view[p : p + klen])
        p += max(klen, 0)
        (vlen,) = i32(view, p)
        p += 4
        if vlen < -1 or p + max(vlen, 0) != end:
            raise InvalidMessageSet(f"bad value length {vlen} in the message at byte {pos}")
        value = None if vlen < 0 else bytes(view[p : p + vlen])
        codec = attrs & 0x07
        if codec:
            if inner:
                raise InvalidMessageSet("nested compressed message")
            if value is None:
                raise InvalidMessageSet("compressed wrapper without a value")
            try:
                data = yield from compression.decompress_steps(codec, value)
            except CompressionError as exc:
                raise InvalidMessageSet(str(exc)) from None
            if len(data) > step * MIN_ENTRY:
                yield  # the decompression was a step of its own
            start = len(out)
            yield from _entries(data, ts, out, True, check_crc, max_bytes, with_offsets, step)
            if with_offsets and magic == 1 and len(out) > start:
                # KIP-31: inner offsets are relative; the wrapper carries the last absolute one
                last_rel = out[-1].offset
                base = offset - last_rel
                for i in range(start, len(out)):
                    out[i] = out[i]._replace(offset=base + out[i].offset)
        else:
            if size > max_bytes:
                raise InvalidMessageSet(
                    f"message of {size} bytes above the limit {max_bytes}", MESSAGE_TOO_LARGE
                )
            out.append(Record(key, value, (), ts, offset if with_offsets else -1))
        pos = end


def decode_message_set(
    buf: Buffer, check_crc: bool = True, default_ts_us: int = -1
) -> list[Record]:
    """Client role: the records of a fetched MessageSet with their offsets (a trailing partial
    entry, as Kafka's fetch cut leaves it, is ignored)."""
    out: list[Record] = []
    finish(_entries(buf, default_ts_us, out, False, check_crc, with_offsets=True))
    return out


# ----------------------------------------------------------------------------- encode


def encode_records(
    records: Sequence[Record], first_offset: int, limit: int = 1 << 62
) -> tuple[bytes, int]:
    """(magic-0 entries with consecutive offsets from ``first_offset``, their count); stops
    after the entry that reaches ``limit`` bytes (the caller cuts)."""
    parts: list[bytes] = []
    append = parts.append
    head = ENTRY_HEAD.pack
    m0 = M0_HEAD.pack
    i32 = I32.pack
    crc32 = zlib.crc32
    size = 0
    offset = first_offset
    for r in records:
        k = r.key
        v = r.value
        body = (M0_NULL_KEY if k is None else m0(0, 0, len(k)) + k) + (
            NULL if v is None else i32(len(v)) + v
        )
        append(head(offset, len(body) + 4, crc32(body)))
        append(body)
        offset += 1
        size += len(body) + 16
        if size >= limit:
            break
    return b"".join(parts), offset - first_offset


def encode_message(
    key: bytes | None,
    value: bytes | None,
    offset: int = 0,
    magic: int = 0,
    attributes: int = 0,
    timestamp_ms: int = -1,
) -> bytes:
    """One MessageSet entry (offset, size, crc, message)."""
    if magic == 0:
        head = M0_HEAD.pack(0, attributes, -1 if key is None else len(key))
    else:
        head = M1_HEAD.pack(1, attributes, timestamp_ms, -1 if key is None else len(key))
    body = b"".join(
        (head, key or b"", NULL if value is None else I32.pack(len(value)), value or b"")
    )
    return ENTRY_HEAD.pack(offset, len(body) + 4, zlib.crc32(body)) + body


def encode_message_set(
    records: Sequence[Record],
    base_offset: int = 0,
    magic: int = 0,
    codec: int = compression.NONE,
) -> bytes:
    """Client role (and tests): records as a MessageSet; with a codec, one wrapper holding them
    (magic 0: absolute inner offsets; magic 1: relative, wrapper = last absolute offset)."""
    entries = []
    for i, r in enumerate(records):
        off = base_offset + i if magic == 0 or not codec else i
        ts = r.timestamp_us // 1000 if r.timestamp_us >= 0 else -1
        entries.append(encode_message(r.key, r.value, off, magic, 0, ts))
    inner = b"".join(entries)
    if not codec:
        return inner
    ts = max((r.timestamp_us // 1000 for r in records), default=-1)
    return encode_message(
        None,
        compression.compress(codec, inner),
        base_offset + len(records) - 1,
        magic,
        codec,
        ts,
    )


# ----------------------------------------------------------------------------- fetch


def _skip_headers(buf: Buffer, pos: int, count: int) -> int:
    for _ in range(count):
        nlen, hlen = FIELD.unpack_from(buf, pos)
        pos += FIELD.size + nlen + hlen
    return pos


def _from_canonical(
    block: Buffer, start: int, count: int, first_offset: int, limit: int
) -> tuple[bytes, int]:
    """(magic-0 entries for records ``start .. start+count`` of a canonical block, with offsets
    from ``first_offset``, their count); stops after the entry that reaches ``limit`` bytes.
    Headers are dropped: magic 0 has none."""
    buf = block  # a memoryview stays one: slices of it are views, joined once at the end
    unpack = RECORD.unpack_from
    rsize = RECORD.size
    pos = record_position(buf, start)  # version 3: from the start table, no walk
    parts: list[Buffer] = []
    append = parts.append
    head = ENTRY_HEAD.pack
    nkv = M0_NULL_KEY_VLEN.pack
    m0 = M0_HEAD.pack
    i32 = I32.pack
    crc32 = zlib.crc32
    size = 0
    offset = first_offset
    last_vlen = last_klen = last_kvlen = -2
    prefix = key_prefix = value_prefix = b""
    prefix_crc = 0
    for _ in range(count):
        _, klen, vlen, nh = unpack(buf, pos)
        p = pos + rsize
        if klen < 0 and vlen >= 0 and not nh:
            # the common case (no key): the 10-byte message prefix and its CRC are reused while
            # the value length stays the same; the value itself is the only per-record copy
            if vlen != last_vlen:
                prefix = nkv(0, 0, -1, vlen)
                prefix_crc = crc32(prefix)
                last_vlen = vlen
            q = p + vlen
            value = buf[p:q]
            append(head(offset, vlen + 14, crc32(value, prefix_crc)))
            append(prefix)
            append(value)
            pos = q
            offset += 1
            size += vlen + 26
            if size >= limit:
                break
            continue
        if klen < 0:
            if vlen < 0:
                body = M0_NULL_KEY + NULL
            else:
                body = nkv(0, 0, -1, vlen) + buf[p : p + vlen]
                p += vlen
        else:
            if klen != last_klen:  # keyed records: length prefixes reused while lengths repeat
                key_prefix = m0(0, 0, klen)
                last_klen = klen
            if vlen != last_kvlen:
                value_prefix = NULL if vlen < 0 else i32(vlen)
                last_kvlen = vlen
            q = p + klen
            if vlen < 0:
                body = b"".join((key_prefix, buf[p:q], NULL))
                p = q
            else:
                p = q + vlen
                body = b"".join((key_prefix, buf[q - klen : q], value_prefix, buf[q:p]))
        if nh:
            p = _skip_headers(buf, p, nh)
        pos = p
        append(head(offset, len(body) + 4, crc32(body)))
        append(body)
        offset += 1
        size += len(body) + 16
        if size >= limit:
            break
    return b"".join(parts), offset - first_offset


def encode_fetch(
    batches: Sequence[RecordBatch], max_bytes: int, codec: int = 0
) -> tuple[Buffer, int]:
    """(the MessageSet a Fetch v0 answer carries for these batch windows: magic 0, absolute
    offsets, cut at ``max_bytes`` like Kafka (the last entry may be partial); with a ``codec``,
    the complete entries that fit are wrapped into one compressed message; the number of
    complete records in it)."""
    if max_bytes <= 0:
        return b"", 0
    parts: list[bytes] = []
    size = count = 0
    for b in batches:
        if size >= max_bytes or not b.count:
            break
        window = b.encoded_window(CANONICAL)
        if window is not None:
            block, start, stop = window
            chunk, n = _from_canonical(block, start, stop - start, b.first_offset, max_bytes - size)
        else:
            chunk, n = encode_records(b.records, b.first_offset, max_bytes - size)
        parts.append(chunk)
        size += len(chunk)
        count += n
    if not parts:
        return b"", 0
    data: Buffer = parts[0] if len(parts) == 1 else b"".join(parts)
    if codec:
        return _wrap(data, max_bytes, codec)
    if len(data) > max_bytes:
        return memoryview(data)[:max_bytes], count - 1
    return data, count


def _wrap(data: Buffer, max_bytes: int, codec: int) -> tuple[Buffer, int]:
    """One compressed wrapper holding the complete entries of ``data`` that fit ``max_bytes``
    (at least one); its offset is the last inner offset (magic 0, absolute inner offsets)."""
    i32 = I32.unpack_from
    pos = count = 0
    n = len(data)
    last = -1
    while pos + LOG_OVERHEAD <= n:
        end = pos + LOG_OVERHEAD + i32(data, pos + 8)[0]
        if end > n or (end > max_bytes and last >= 0):
            break
        last = pos
        pos = end
        count += 1
    if last < 0:
        return memoryview(data)[:max_bytes], 0
    (last_offset,) = I64.unpack_from(data, last)
    wrapped = encode_message(
        None, compression.compress(codec, bytes(memoryview(data)[:pos])), last_offset, 0, codec
    )
    if len(wrapped) > max_bytes:
        return memoryview(wrapped)[:max_bytes], 0
    return wrapped, count
