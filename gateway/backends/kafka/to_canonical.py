"""Fetched Kafka record batches (magic v2) -> one canonical block, sans-IO, without per-record
objects: the Kafka 0.8 listener (and other sessions) read canonical windows, and
:func:`batches_to_canonical` keeps that true through the Kafka backend. The batch walk and the
record parser are the ones of ``records.py``; uniform runs (see there) are moved with C-level
operations here too."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from gateway.backends.kafka.records import (
    _CANON_RSIZE,
    _US_NAME,
    MIN_RUN,
    KafkaRecordError,
    _batches,
    _read_record,
    _skip_record,
    _unpack_run,
    _width,
    varint,
)
from gateway.canonical import FIELD as CANON_FIELD
from gateway.canonical import HEADER as CANON_HEADER
from gateway.canonical import RECORD as CANON_RECORD
from gateway.canonical import block_head, new_starts

# The Kafka 0.8 listener (and other sessions) read canonical windows without per-record objects;
# batches_to_canonical keeps that true through this backend.

_LOW_BYTES = bytes(range(0, 128, 2))  # byte 0 of the zigzag varints of 0..63, repeating


def _offset_column(t: int, w: int, start: int, n: int) -> bytes:
    """Byte ``t`` of the zigzag varints (all ``w`` bytes wide) of ``start .. start+n-1``: the
    column a strided slice over a run's offset deltas must equal. Built from repeated patterns,
    not per index: byte 0 cycles every 64 indexes, byte t >= 1 holds each value for 2**(7t-1)."""
    cont = 0x80 if t < w - 1 else 0
    if t == 0:
        pattern = bytes(b | cont for b in _LOW_BYTES) if cont else _LOW_BYTES
        first = start % 64
        return (pattern * ((first + n) // 64 + 1))[first : first + n]
    shift = 7 * t - 1
    out = []
    i = start
    stop = start + n
    while i < stop:
        block_end = min(stop, ((i >> shift) + 1) << shift)
        out.append(bytes((((i >> shift) & 0x7F) | cont,)) * (block_end - i))
        i = block_end
    return b"".join(out)


class _Run:
    """The shape of a uniform run, from its first record (see the module docstring)."""

    __slots__ = ("stride", "fmt", "k", "v", "pre", "post", "ts", "checks", "offpos", "w", "size")

    def __init__(self, buf: bytes, pos: int, index: int, base_ts: int) -> None:
        end, ts_delta, off_delta, klen, kstart, vlen, vstart, raw = _read_record(buf, pos)
        if off_delta != index:
            raise ValueError("not dense")
        self.stride = end - pos
        self.w = _width(index)
        # the offset delta's varint ends where the key length's starts
        self.offpos = kstart - pos - len(varint(klen)) - self.w
        self.k = k = klen if klen > 0 else 0
        self.v = v = vlen if vlen > 0 else 0
        ko, vo = kstart - pos, vstart - pos
        ts = (base_ts + ts_delta) * 1000
        fields = []
        for name, hval in raw:
            if name == _US_NAME:
                ts += int(hval or b"0")
            else:
                fields.append(CANON_FIELD.pack(len(name), len(hval)) + name + hval)
        self.ts = ts
        self.pre = CANON_RECORD.pack(ts, klen, vlen, len(fields))
        self.post = b"".join(fields)
        self.size = len(self.pre) + k + v + len(self.post)  # of one canonical record
        # the byte positions that must be equal in every record of the run: all but the offset
        # delta, the key and the value (listed span by span: values may be megabytes)
        self.checks = [
            *range(0, self.offpos),
            *range(self.offpos + self.w, ko),
            *range(ko + k, vo),
            *range(vo + v, self.stride),
        ]
        fmt = ""
        at = 0
        for start, n in ((ko, k), (vo, v)):
            if n:
                fmt += f"{start - at}x{n}s" if start > at else f"{n}s"
                at = start + n
        if fmt and at < self.stride:
            fmt += f"{self.stride - at}x"
        self.fmt = fmt

    def length(self, buf: bytes, pos: int, end: int, index: int, limit: int) -> int:
        """How many records from ``pos`` (the first being record ``index`` of its batch, at most
        ``limit``) follow this shape, checked at C speed; 0 when not all of them do."""
        stride = self.stride
        w = self.w
        hi = 64 << (7 * (w - 1))  # the first index whose varint is wider
        n = min(limit, hi - index, (end - pos) // stride)
        if n < MIN_RUN:
            return 0
        stop = pos + n * stride
        for j in self.checks:
            if buf[pos + j : stop : stride] != buf[pos + j : pos + j + 1] * n:
                return 0
        at = pos + self.offpos
        for t in range(w):
            if buf[at + t : stop : stride] != _offset_column(t, w, index, n):
                return 0
        return n

    def canonical(self, buf: bytes, pos: int, n: int) -> list[bytes]:
        """The canonical encoding of ``n`` records of this shape from ``pos``, as parts."""
        pre, post = self.pre, self.post
        k, v = self.k, self.v
        fields = _unpack_run(buf, pos, self.fmt, self.stride, n) if self.fmt else []
        slots = 1 + (k > 0) + (v > 0) + (len(post) > 0)
        parts: list[bytes] = [b""] * (n * slots)
        parts[0::slots] = [pre] * n
        if k and v:
            parts[1::slots] = fields[0::2]
            parts[2::slots] = fields[1::2]
        elif k or v:
            parts[1::slots] = fields
        if post:
            parts[slots - 1 :: slots] = [post] * n
        return parts


def batches_to_canonical(
    data: bytes | memoryview,
    min_offset: int,
    max_records: int,
    max_bytes: int = 1 << 62,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> tuple[bytes, int, int] | None:
    """(canonical block, record count, max timestamp µs) of the records from ``min_offset`` on
    (at most ``max_records``, and records only until the block reaches ``max_bytes``: brokers
    answer whole batches past the Fetch's max bytes, which a reader would not take) of a Fetch
    record set, building no Record objects. None when the records there are not dense from
    ``min_offset`` (compacted topics, transaction markers): the caller then decodes records the
    ordinary way."""
    parts: list[bytes] = [b""]
    append = parts.append
    pack = CANON_RECORD.pack
    fpack = CANON_FIELD.pack
    # the start table (canonical version 3): a run's entries are a range, made at C speed
    starts = new_starts()
    start = starts.append
    expect = min_offset
    count = 0
    size = 0  # of the records so far, so where the next one starts
    max_bytes = max(max_bytes - CANON_HEADER.size, 1)  # of the records: at least one
    min_ts = max_ts = -1
    try:
        for base_offset, base_ts, n, rbuf, rpos, rend in _batches(bytes(data), min_offset, aborted):
            if count >= max_records or size >= max_bytes:
                break
            i = 0
            fast = n >= MIN_RUN
            while i < n and count < max_records and size < max_bytes:
                if fast:
                    # a uniform run from record i (then records i.. of the run are skipped or
                    # taken without a per-record loop)
                    try:
                        run = _Run(rbuf, rpos, i, base_ts)
                    except ValueError:
                        run = None
                    m = 0
                    if run is not None:
                        # check only as far as this read can take
                        skip = max(0, min_offset - base_offset - i)
                        want = min(max_records - count, -(-(max_bytes - size) // run.size))
                        m = run.length(rbuf, rpos, rend, i, min(n - i, skip + max(want, 1)))
                    if run is None or not m:
                        fast = False  # the rest of this batch record by record
                        continue
                    first = base_offset + i
                    skip = min_offset - first if first < min_offset else 0
                    if skip >= m:
                        rpos += m * run.stride
                        i += m
                        continue
                    if first + skip != expect:
                        return None
                    take = min(m - skip, max_records - count)
                    starts.extend(range(size, size + take * run.size, run.size))
                    size += take * run.size
                    parts += run.canonical(rbuf, rpos + skip * run.stride, take)
                    ts = run.ts
                    if ts > max_ts:
                        max_ts = ts
                    if min_ts < 0 or ts < min_ts:
                        min_ts = ts
                    count += take
                    expect += take
                    rpos += m * run.stride
                    i += m
                    continue
                if base_offset + i < min_offset:  # offset deltas are >= the record's index
                    end, off_delta = _skip_record(rbuf, rpos)
                    if base_offset + off_delta < min_offset:
                        rpos = end
                        i += 1
                        continue
                rpos, ts_delta, off_delta, klen, kstart, vlen, vstart, raw = _read_record(
                    rbuf, rpos
                )
                i += 1
                offset = base_offset + off_delta
                if offset < min_offset:
                    continue
                if offset != expect:
                    return None
                ts = (base_ts + ts_delta) * 1000
                hparts = []
                for name, hval in raw:
                    if name == _US_NAME:
                        ts += int(hval or b"0")
                    else:
                        hparts.append(fpack(len(name), len(hval)) + name + hval)
                append(pack(ts, klen, vlen, len(hparts)))
                start(size)
                if klen > 0:
                    append(rbuf[kstart : kstart + klen])
                if vlen > 0:
                    append(rbuf[vstart : vstart + vlen])
                parts.extend(hparts)
                size += (
                    _CANON_RSIZE
                    + (klen if klen > 0 else 0)
                    + (vlen if vlen > 0 else 0)
                    + sum(len(h) for h in hparts)
                )
                expect += 1
                count += 1
                if ts > max_ts:
                    max_ts = ts
                if min_ts < 0 or ts < min_ts:
                    min_ts = ts
    except (IndexError, struct.error) as exc:
        raise KafkaRecordError(f"truncated record: {exc}") from None
    parts[0] = block_head(starts, count, min_ts, max_ts)
    return b"".join(parts), count, max_ts
