"""Kafka record batches (magic v2), sans-IO: records -> bytes (Produce), bytes -> records (Fetch).

Hand-written with precompiled ``struct.Struct`` objects instead of kio's record helpers: kio
builds a frozen dataclass and a timezone-aware datetime per record and writes each record through
its own ``BytesIO``, about 10x slower than this on the hot path (see ``docs/decisions.md``); kio is
used for every request and response around the batches.

Layout (big endian)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 (=2) |
    crc u32 (CRC-32C of everything after it) | attributes i16 | lastOffsetDelta i32 |
    baseTimestamp i64 | maxTimestamp i64 | producerId i64 | producerEpoch i16 | baseSequence i32 |
    count i32 | records
    record: length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
            keyLength varint (-1 null) | key | valueLength varint | value |
            headerCount varint | (keyLength varint | key utf-8 | valueLength varint | value)*

Timestamps: Kafka has milliseconds, the model microseconds. The sub-millisecond remainder of a
record's timestamp travels in the reserved header ``_gw.us`` (1..999, ASCII digits), only when it
is not zero, so the round trip is exact and Kafka clients see the right millisecond timestamp.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import crc32c

from gateway.canonical import FIELD as CANON_FIELD
from gateway.canonical import HEADER as CANON_HEADER
from gateway.canonical import RECORD as CANON_RECORD
from gateway.model import RESERVED_HEADER_PREFIX, Record

US_HEADER = RESERVED_HEADER_PREFIX + "us"
BATCH_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, leaderEpoch, magic, crc
BATCH_BODY = struct.Struct(">hiqqqhii")  # attributes .. count
HEAD_SIZE = BATCH_HEAD.size  # 21
BODY_SIZE = BATCH_BODY.size  # 40
OVERHEAD = 12  # baseOffset + batchLength: not counted in batchLength

COMPRESSION_MASK = 0x07
CONTROL_FLAG = 0x20


class KafkaRecordError(ValueError):
    """A record batch is malformed, fails its CRC, or uses an unsupported compression."""


def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return bytes((z,))
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = [_varint(i) for i in range(-1, 64)]
_US_KEY = _varint(len(US_HEADER)) + US_HEADER.encode()


def varint(n: int) -> bytes:
    if -1 <= n < 63:
        return _SMALL[n + 1]
    return _varint(n)


def encode_batch(records: Sequence[Record], now_ms: int, base_offset: int = 0) -> bytes:
    """One uncompressed v2 batch holding ``records`` (timestamps < 0 get ``now_ms``)."""
    parts: list[bytes] = []
    append = parts.append
    stamps = [r.timestamp_us for r in records]
    ms = [t // 1000 if t >= 0 else now_ms for t in stamps]
    base_ts = min(ms)
    max_ts = max(ms)
    for i, r in enumerate(records):
        key, value, headers = r.key, r.value, r.headers
        t = stamps[i]
        rem = t % 1000 if t >= 0 else 0
        body = [
            b"\x00",
            varint(ms[i] - base_ts),
            varint(i),
            b"\x01" if key is None else varint(len(key)) + key,
            b"\x01" if value is None else varint(len(value)) + value,
        ]
        nh = len(headers) + (1 if rem else 0)
        body.append(varint(nh))
        for name, hval in headers:
            raw = name.encode()
            body.append(varint(len(raw)) + raw)
            body.append(b"\x01" if hval is None else varint(len(hval)) + hval)
        if rem:
            raw_rem = str(rem).encode()
            body.append(_US_KEY + varint(len(raw_rem)) + raw_rem)
        rec = b"".join(body)
        append(varint(len(rec)))
        append(rec)
    records_bytes = b"".join(parts)
    after_crc = (
        BATCH_BODY.pack(0, len(records) - 1, base_ts, max_ts, -1, -1, -1, len(records))
        + records_bytes
    )
    crc = crc32c.crc32c(after_crc)
    length = 4 + 1 + 4 + len(after_crc)  # leaderEpoch + magic + crc + rest
    return BATCH_HEAD.pack(base_offset, length, -1, 2, crc) + after_crc


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    shift = 0
    z = 0
    while True:
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise KafkaRecordError("varint too long")
    return (z >> 1) ^ -(z & 1), pos


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    raise KafkaRecordError(f"compression codec {codec} is not supported (only none and gzip are)")


def decode_batches(
    data: bytes | memoryview, min_offset: int = 0, max_records: int = 1 << 62
) -> list[Record]:
    """The records with offset >= ``min_offset`` in a Fetch response's record set, at most
    ``max_records``. A trailing partial batch (the broker cuts at max bytes) is ignored;
    control batches are skipped."""
    buf = bytes(data)
    out: list[Record] = []
    pos = 0
    end = len(buf)
    read = _read_varint
    while pos + OVERHEAD + 9 <= end and len(out) < max_records:
        base_offset, length, _epoch, magic, crc = BATCH_HEAD.unpack_from(buf, pos)
        stop = pos + OVERHEAD + length
        if stop > end:
            break
        if magic != 2:
            raise KafkaRecordError(f"record batch magic {magic} is not supported")
        body_start = pos + HEAD_SIZE
        if crc32c.crc32c(buf[body_start:stop]) != crc:
            raise KafkaRecordError(f"CRC mismatch in the batch at offset {base_offset}")
        attrs, _last_delta, base_ts, _max_ts, _pid, _pepoch, _bseq, count = BATCH_BODY.unpack_from(
            buf, body_start
        )
        pos = stop
        if attrs & CONTROL_FLAG or base_offset + _last_delta < min_offset:
            continue
        rpos = body_start + BODY_SIZE
        rbuf = buf
        codec = attrs & COMPRESSION_MASK
        if codec:
            rbuf = _decompress(codec, buf[rpos:stop])
            rpos = 0
        for _ in range(count):
            # varints inlined for their one-byte case (zigzag: (b >> 1) ^ -(b & 1))
            # the record length is not needed: skip its bytes, and the attributes byte
            while rbuf[rpos] >= 0x80:
                rpos += 1
            rpos += 2
            b = rbuf[rpos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                rpos += 1
            else:
                ts_delta, rpos = read(rbuf, rpos)
            b = rbuf[rpos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                rpos += 1
            elif rbuf[rpos + 1] < 0x80:
                z = (b & 0x7F) | (rbuf[rpos + 1] << 7)
                off_delta = (z >> 1) ^ -(z & 1)
                rpos += 2
            else:
                off_delta, rpos = read(rbuf, rpos)
            b = rbuf[rpos]
            if b == 1:
                key = None
                rpos += 1
            elif b < 0x80:
                klen = b >> 1
                key = rbuf[rpos + 1 : rpos + 1 + klen]
                rpos += 1 + klen
            else:
                klen, rpos = read(rbuf, rpos)
                key = rbuf[rpos : rpos + klen]
                rpos += klen
            b = rbuf[rpos]
            if b == 1:
                value = None
                rpos += 1
            elif b < 0x80:
                vlen = b >> 1
                value = rbuf[rpos + 1 : rpos + 1 + vlen]
                rpos += 1 + vlen
            elif rbuf[rpos + 1] < 0x80:  # non-negative two-byte length
                vlen = ((b & 0x7F) | (rbuf[rpos + 1] << 7)) >> 1
                value = rbuf[rpos + 2 : rpos + 2 + vlen]
                rpos += 2 + vlen
            else:
                vlen, rpos = read(rbuf, rpos)
                value = rbuf[rpos : rpos + vlen]
                rpos += vlen
            b = rbuf[rpos]
            if b < 0x80:
                nh = b >> 1
                rpos += 1
            else:
                nh, rpos = read(rbuf, rpos)
            ts = (base_ts + ts_delta) * 1000
            headers: tuple[tuple[str, bytes], ...] = ()
            if nh:
                hl = []
                for _ in range(nh):
                    hk, rpos = read(rbuf, rpos)
                    name = rbuf[rpos : rpos + hk].decode("utf-8", "replace")
                    rpos += hk
                    hv, rpos = read(rbuf, rpos)
                    if hv < 0:
                        hval = b""
                    else:
                        hval = rbuf[rpos : rpos + hv]
                        rpos += hv
                    if name == US_HEADER:
                        ts += int(hval or b"0")
                    else:
                        hl.append((name, hval))
                headers = tuple(hl)
            offset = base_offset + off_delta
            if offset >= min_offset:
                out.append(Record(key, value, headers, ts, offset))
                if len(out) >= max_records:
                    break
    return out


# ------------------------------------------------------------------ canonical <-> v2 transcoding
# The Kafka 0.8 listener (and other sessions) hand over canonical blocks and serve canonical
# windows without per-record objects; these two functions keep that true through this backend.


def canonical_to_batch(block: bytes | memoryview, now_ms: int) -> tuple[bytes, int]:
    """(one v2 batch, record count) from a canonical block, building no Record objects."""
    buf = bytes(block)
    _version, count, _min_ts, _max_ts = CANON_HEADER.unpack_from(buf, 0)
    pos = CANON_HEADER.size
    unpack = CANON_RECORD.unpack_from
    rsize = CANON_RECORD.size
    items = []
    ms_list = []
    for _ in range(count):
        ts, klen, vlen, nh = unpack(buf, pos)
        pos += rsize
        ms = ts // 1000 if ts >= 0 else now_ms
        rem = ts % 1000 if ts >= 0 else 0
        kstart = pos
        if klen > 0:
            pos += klen
        vstart = pos
        if vlen > 0:
            pos += vlen
        hstart = pos
        for _ in range(nh):
            nlen, hvlen = CANON_FIELD.unpack_from(buf, pos)
            pos += 6 + nlen + hvlen
        items.append((ms, rem, klen, kstart, vlen, vstart, nh, hstart))
        ms_list.append(ms)
    base_ts = min(ms_list) if ms_list else now_ms
    max_ts = max(ms_list) if ms_list else now_ms
    parts: list[bytes] = []
    append = parts.append
    for i, (ms, rem, klen, kstart, vlen, vstart, nh, hstart) in enumerate(items):
        body = [
            b"\x00",
            varint(ms - base_ts),
            varint(i),
            b"\x01" if klen < 0 else varint(klen) + buf[kstart : kstart + klen],
            b"\x01" if vlen < 0 else varint(vlen) + buf[vstart : vstart + vlen],
            varint(nh + (1 if rem else 0)),
        ]
        hp = hstart
        for _ in range(nh):
            nlen, hvlen = CANON_FIELD.unpack_from(buf, hp)
            hp += 6
            body.append(varint(nlen) + buf[hp : hp + nlen])
            hp += nlen
            body.append(varint(hvlen) + buf[hp : hp + hvlen])
            hp += hvlen
        if rem:
            raw_rem = str(rem).encode()
            body.append(_US_KEY + varint(len(raw_rem)) + raw_rem)
        rec = b"".join(body)
        append(varint(len(rec)))
        append(rec)
    after_crc = BATCH_BODY.pack(0, count - 1, base_ts, max_ts, -1, -1, -1, count) + b"".join(parts)
    length = 4 + 1 + 4 + len(after_crc)
    return BATCH_HEAD.pack(0, length, -1, 2, crc32c.crc32c(after_crc)) + after_crc, count


def batches_to_canonical(
    data: bytes | memoryview, min_offset: int, max_records: int
) -> tuple[bytes, int, int] | None:
    """(canonical block, record count, max timestamp µs) of the records from ``min_offset`` on
    (at most ``max_records``) of a Fetch record set, building no Record objects. None when the
    records there are not dense from ``min_offset`` (compacted topics, transaction markers,
    compression): the caller then decodes records the ordinary way."""
    buf = bytes(data)
    pos = 0
    end = len(buf)
    read = _read_varint
    parts: list[bytes] = [b""]
    append = parts.append
    pack = CANON_RECORD.pack
    fpack = CANON_FIELD.pack
    expect = min_offset
    count = 0
    min_ts = max_ts = -1
    while pos + OVERHEAD + 9 <= end and count < max_records:
        base_offset, length, _epoch, magic, crc = BATCH_HEAD.unpack_from(buf, pos)
        stop = pos + OVERHEAD + length
        if stop > end:
            break
        if magic != 2:
            return None
        body_start = pos + HEAD_SIZE
        if crc32c.crc32c(buf[body_start:stop]) != crc:
            raise KafkaRecordError(f"CRC mismatch in the batch at offset {base_offset}")
        attrs, last_delta, base_ts, _max, _pid, _pe, _bs, n = BATCH_BODY.unpack_from(
            buf, body_start
        )
        pos = stop
        if base_offset + last_delta < min_offset:
            continue
        if attrs & (CONTROL_FLAG | COMPRESSION_MASK):
            return None
        rpos = body_start + BODY_SIZE
        for _ in range(n):
            # varints inlined for their one- and two-byte non-negative cases
            while buf[rpos] >= 0x80:  # the record length: not needed
                rpos += 1
            rpos += 2  # its last byte and the attributes
            b = buf[rpos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                rpos += 1
            else:
                ts_delta, rpos = read(buf, rpos)
            b = buf[rpos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                rpos += 1
            elif buf[rpos + 1] < 0x80:
                z = (b & 0x7F) | (buf[rpos + 1] << 7)
                off_delta = (z >> 1) ^ -(z & 1)
                rpos += 2
            else:
                off_delta, rpos = read(buf, rpos)
            b = buf[rpos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                rpos += 1
            else:
                klen, rpos = read(buf, rpos)
            kstart = rpos
            if klen > 0:
                rpos += klen
            b = buf[rpos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                rpos += 1
            elif buf[rpos + 1] < 0x80 and not b & 1:
                vlen = ((b & 0x7F) | (buf[rpos + 1] << 7)) >> 1
                rpos += 2
            else:
                vlen, rpos = read(buf, rpos)
            vstart = rpos
            if vlen > 0:
                rpos += vlen
            b = buf[rpos]
            if b < 0x80:
                nh = b >> 1
                rpos += 1
            else:
                nh, rpos = read(buf, rpos)
            ts = (base_ts + ts_delta) * 1000
            offset = base_offset + off_delta
            if nh:
                hparts = []
                kept = 0
                for _ in range(nh):
                    hk, rpos = read(buf, rpos)
                    name = buf[rpos : rpos + hk]
                    rpos += hk
                    hv, rpos = read(buf, rpos)
                    hval = buf[rpos : rpos + hv] if hv > 0 else b""
                    if hv > 0:
                        rpos += hv
                    if name == b"_gw.us":
                        ts += int(hval or b"0")
                        continue
                    hparts.append(fpack(hk, len(hval)) + name + hval)
                    kept += 1
                if offset < min_offset:
                    continue
                if offset != expect:
                    return None
                append(pack(ts, klen, vlen, kept))
                if klen > 0:
                    append(buf[kstart : kstart + klen])
                if vlen > 0:
                    append(buf[vstart : vstart + vlen])
                parts.extend(hparts)
            else:
                if offset < min_offset:
                    continue
                if offset != expect:
                    return None
                if klen > 0:
                    append(pack(ts, klen, vlen, 0) + buf[kstart : kstart + klen])
                else:
                    append(pack(ts, klen, vlen, 0))
                if vlen > 0:
                    append(buf[vstart : vstart + vlen])
            expect += 1
            if ts > max_ts:
                max_ts = ts
            if min_ts < 0 or ts < min_ts:
                min_ts = ts
            count += 1
            if count >= max_records:
                break
    parts[0] = CANON_HEADER.pack(1, count, min_ts, max_ts)
    return b"".join(parts), count, max_ts
