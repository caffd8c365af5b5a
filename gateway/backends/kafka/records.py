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
            _length, rpos = read(rbuf, rpos)
            rpos += 1  # attributes
            ts_delta, rpos = read(rbuf, rpos)
            off_delta, rpos = read(rbuf, rpos)
            klen, rpos = read(rbuf, rpos)
            if klen < 0:
                key = None
            else:
                key = rbuf[rpos : rpos + klen]
                rpos += klen
            vlen, rpos = read(rbuf, rpos)
            if vlen < 0:
                value = None
            else:
                value = rbuf[rpos : rpos + vlen]
                rpos += vlen
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
