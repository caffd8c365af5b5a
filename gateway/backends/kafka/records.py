"""Kafka record batches (magic v2), sans-IO: records or canonical blocks -> bytes (Produce),
bytes -> records or canonical blocks (Fetch).

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

One walk over a fetched record set (:func:`_batches`: CRC, control batches, compression) and one
record parser (:func:`_read_record`) serve both readers, :func:`decode_batches` (records) and
:func:`~gateway.backends.kafka.to_canonical.batches_to_canonical` (in ``to_canonical.py``: a
canonical block, no per-record objects). One writer,
:func:`canonical_to_batch`, serves Produce (:func:`encode_batch` goes through a canonical block).

Uniform runs: what a Kafka 0.8 producer sends, and therefore what comes back from the broker, is
long runs of records of one shape (same key and value lengths, same timestamp, same headers),
whose only per-record differences are the offset delta, the key and the value. Both transcoders
find such runs and move them with C-level operations: ``struct`` formats repeated over a chunk of
records pull out every key and value in one call, strided slices (``buf[a:b:stride]``) check that
every other byte of every record in the run is the same as in the run's first record (and that the
offset deltas count up from it), and ``bytes.join`` over interleaved lists writes the result.
A run that fails any check is transcoded record by record, the same as a non-uniform batch.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence

import cramjam
import crc32c

from gateway.canonical import CANONICAL, records_at
from gateway.canonical import FIELD as CANON_FIELD
from gateway.canonical import RECORD as CANON_RECORD
from gateway.model import RESERVED_HEADER_PREFIX, Record, RecordBatch

US_HEADER = RESERVED_HEADER_PREFIX + "us"
_US_NAME = US_HEADER.encode()
BATCH_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, leaderEpoch, magic, crc
BATCH_BODY = struct.Struct(">hiqqqhii")  # attributes .. count
HEAD_SIZE = BATCH_HEAD.size  # 21
BODY_SIZE = BATCH_BODY.size  # 40
OVERHEAD = 12  # baseOffset + batchLength: not counted in batchLength

COMPRESSION_MASK = 0x07
CONTROL_FLAG = 0x20

MIN_RUN = 16  # shorter uniform runs are not worth the set-up of the C-level path
CHUNK = 256  # records per repeated struct format
_CANON_RSIZE = CANON_RECORD.size  # 18


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
_US_KEY = _varint(len(US_HEADER)) + _US_NAME


def varint(n: int) -> bytes:
    if -1 <= n < 63:
        return _SMALL[n + 1]
    return _varint(n)


def _width(n: int) -> int:
    """Bytes of the zigzag varint of ``n`` >= 0."""
    z = n << 1
    w = 1
    while z >= 0x80:
        z >>= 7
        w += 1
    return w


_STRUCTS: dict[tuple[str, int], struct.Struct] = {}


def _repeated(fmt: str, n: int) -> struct.Struct:
    """A struct of ``fmt`` repeated ``n`` times (cached: the shapes of a workload repeat)."""
    st = _STRUCTS.get((fmt, n))
    if st is None:
        if len(_STRUCTS) > 256:
            _STRUCTS.clear()
        st = _STRUCTS[(fmt, n)] = struct.Struct(">" + fmt * n)
    return st


def _unpack_run(buf: bytes, pos: int, fmt: str, stride: int, n: int) -> list[bytes]:
    """The ``s`` fields of ``n`` records of ``stride`` bytes from ``pos``, ``fmt`` per record."""
    out: list[bytes] = []
    full, rest = divmod(n, CHUNK)
    if full:
        st = _repeated(fmt, CHUNK)
        step = CHUNK * stride
        for _ in range(full):
            out.extend(st.unpack_from(buf, pos))
            pos += step
    if rest:
        out.extend(_repeated(fmt, rest).unpack_from(buf, pos))
    return out


# ------------------------------------------------------------------------------------ writing


def encode_batch(
    records: Sequence[Record], now_ms: int, base_offset: int = 0, codec: int = 0
) -> bytes:
    """One v2 batch holding ``records`` (timestamps < 0 get ``now_ms``), compressed with
    ``codec`` (0: none)."""
    block = CANONICAL.encode(records, starts=False)
    return canonical_to_batch(block, now_ms, base_offset, codec)[0]


_VARINTS: list[bytes] = []


def _offset_varints(start: int, stop: int) -> list[bytes]:
    """varint(i) for start <= i < stop (the first 64Ki kept: offset deltas of batches)."""
    if len(_VARINTS) < min(stop, 1 << 16):
        _VARINTS.extend(_varint(i) for i in range(len(_VARINTS), min(stop, 1 << 16)))
    if stop <= len(_VARINTS):
        return _VARINTS[start:stop]
    return _VARINTS[start:] + [_varint(i) for i in range(max(start, len(_VARINTS)), stop)]


_HEADS: dict[tuple[int, bytes], list[bytes]] = {}
_HEADS_MAX = 1 << 16


def _heads(fixed: int, mid: bytes, n: int) -> list[bytes]:
    """For records 0..n-1 of one shape: ``length | attributes | tsDelta 0 | offsetDelta i`` and
    ``mid``, where ``fixed`` is the record's length without its offset delta. Cached per shape."""
    key = (fixed, mid)
    heads = _HEADS.get(key)
    if heads is None:
        if len(_HEADS) > 32:
            _HEADS.clear()
        heads = _HEADS[key] = []
    if len(heads) < n:
        lengths = [b""] + [varint(fixed + w) for w in range(1, 6)]
        new = [lengths[len(vi)] + b"\x00\x00" + vi + mid for vi in _offset_varints(len(heads), n)]
        if n <= _HEADS_MAX:
            heads.extend(new)
        else:
            return heads + new
    return heads if len(heads) == n else heads[:n]


def _uniform_canonical(buf: bytes, pos: int, count: int, now_ms: int) -> tuple[bytes, int] | None:
    """(the v2 records, their millisecond timestamp) of a canonical block whose records (from
    ``pos``) all have one shape and timestamp and no headers (a Kafka 0.8 produce); None
    otherwise."""
    ts, klen, vlen, nh = CANON_RECORD.unpack_from(buf, pos)
    k = klen if klen > 0 else 0
    v = vlen if vlen > 0 else 0
    stride = _CANON_RSIZE + k + v
    if nh or len(buf) != pos + count * stride:
        return None
    # every record header equals the first: together with the total length, this proves the
    # records sit at a fixed stride
    for j in range(_CANON_RSIZE):
        if buf[pos + j :: stride] != buf[pos + j : pos + j + 1] * count:
            return None
    ms, rem = (ts // 1000, ts % 1000) if ts >= 0 else (now_ms, 0)
    if rem:
        raw_rem = str(rem).encode()
        tail = varint(1) + _US_KEY + varint(len(raw_rem)) + raw_rem
    else:
        tail = b"\x00"
    kprefix = b"\x01" if klen < 0 else varint(klen)
    vprefix = b"\x01" if vlen < 0 else varint(vlen)
    fixed = 2 + len(kprefix) + k + len(vprefix) + v + len(tail)  # attributes, tsDelta, ...
    fmt = f"{_CANON_RSIZE}x" + (f"{k}s" if k else "") + (f"{v}s" if v else "")
    fields = _unpack_run(buf, pos, fmt, stride, count) if k or v else []
    if k:
        heads = _heads(fixed, kprefix, count)
        slots = 5 if v else 4
        parts: list[bytes] = [b""] * (count * slots)
        parts[0::slots] = heads
        parts[1::slots] = fields[0::2] if v else fields
        parts[2::slots] = [vprefix] * count
        if v:
            parts[3::slots] = fields[1::2]
        parts[slots - 1 :: slots] = [tail] * count
    else:
        heads = _heads(fixed, kprefix + vprefix, count)
        slots = 3 if v else 2
        parts = [b""] * (count * slots)
        parts[0::slots] = heads
        if v:
            parts[1::slots] = fields
        parts[slots - 1 :: slots] = [tail] * count
    return b"".join(parts), ms


def compress(codec: int, data: bytes) -> bytes:
    """``data`` (a batch's records) compressed with ``codec``, as Kafka clients write it:
    gzip, raw snappy (as librdkafka writes; Kafka's Java client reads it too), an LZ4 frame,
    a zstd frame."""
    if codec == 1:
        gz = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
        return gz.compress(data) + gz.flush()
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    return data


def canonical_to_batch(
    block: bytes | memoryview, now_ms: int, base_offset: int = 0, codec: int = 0
) -> tuple[bytes, int]:
    """(one v2 batch, record count) from a canonical block, building no Record objects
    (timestamps < 0 get ``now_ms``); its records compressed with ``codec`` (0: none)."""
    buf = bytes(block)
    _version, count, first = records_at(buf)  # version 1 or 3 (its start table not needed)
    uniform = _uniform_canonical(buf, first, count, now_ms) if count >= MIN_RUN else None
    if uniform is not None:
        records_bytes, base_ts = uniform
        max_ts = base_ts
    else:
        records_bytes, base_ts, max_ts = _canonical_records(buf, first, count, now_ms)
    if codec:
        records_bytes = compress(codec, records_bytes)
    body = BATCH_BODY.pack(codec, count - 1, base_ts, max_ts, -1, -1, -1, count)
    after_crc = body + records_bytes
    length = 4 + 1 + 4 + len(after_crc)  # leaderEpoch + magic + crc + rest
    head = BATCH_HEAD.pack(base_offset, length, -1, 2, crc32c.crc32c(after_crc))
    return head + after_crc, count


def _canonical_records(buf: bytes, pos: int, count: int, now_ms: int) -> tuple[bytes, int, int]:
    """(v2 records, base and max timestamp ms) of a canonical block's records from ``pos``,
    record by record."""
    unpack = CANON_RECORD.unpack_from
    rsize = _CANON_RSIZE
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
    return b"".join(parts), base_ts, max_ts


# ------------------------------------------------------------------------------------ reading


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


CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TRANSACTIONAL_FLAG = 0x10
_XERIAL_MAGIC = b"\x82SNAPPY\x00"  # the Java client's snappy-java framing
_XERIAL_BLOCK = struct.Struct(">i")
CONTROL_KEY = struct.Struct(">hh")  # version, type (0 abort, 1 commit)


def _unsnappy(data: bytes) -> bytes:
    """Raw snappy (librdkafka), or snappy-java's framing (the Java client): a 16-byte header,
    then blocks of a 4-byte length and raw snappy."""
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = []
    pos = 16
    while pos + 4 <= len(data):
        (n,) = _XERIAL_BLOCK.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise KafkaRecordError(f"snappy block of {n} bytes runs past its batch")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(out)


def decompress(codec: int, data: bytes) -> bytes:
    """The records of a batch compressed with ``codec`` (the attributes' low 3 bits)."""
    if codec == 1:
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    if codec == 2:
        return _unsnappy(data)
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise KafkaRecordError(f"compression codec {codec} is not a Kafka codec")


def _decompress(codec: int, data: bytes, base_offset: int) -> bytes:
    try:
        return decompress(codec, data)
    except KafkaRecordError:
        raise
    except Exception as exc:  # each codec library raises its own error type
        name = CODEC_NAMES.get(codec, str(codec))
        raise KafkaRecordError(
            f"the {name} batch at offset {base_offset} does not decompress: {exc}"
        ) from None


class _Aborted:
    """Read-committed filtering (what a Kafka consumer does with a Fetch answer): a
    transactional batch is dropped when its producer's transaction was aborted, known from the
    answer's aborted-transactions list (from the aborted transaction's first offset until that
    producer's abort marker) or from the producer's next marker in the same answer being an
    abort (brokers that leave the list empty, such as Tansu, still write the markers)."""

    def __init__(self, aborted: Sequence[tuple[int, int]], buf: bytes) -> None:
        self.pending = sorted(aborted, key=lambda a: a[1])  # (producer id, first offset)
        self.active: set[int] = set()
        self.buf = buf
        self._markers: dict[int, list[tuple[int, int]]] | None = None

    @property
    def markers(self) -> dict[int, list[tuple[int, int]]]:
        """pid -> [(offset, type)] of the answer's markers, in order; indexed on the first
        transactional batch (an answer without transactions is never walked for it)."""
        if self._markers is None:
            self._markers = {}
            for base_offset, _last, attrs, pid, rpos in _headers(self.buf):
                if attrs & CONTROL_FLAG:
                    marker = (base_offset, _control_type(self.buf, rpos))
                    self._markers.setdefault(pid, []).append(marker)
        return self._markers

    def drops(self, attrs: int, pid: int, last_offset: int, buf: bytes, rpos: int) -> bool:
        while self.pending and self.pending[0][1] <= last_offset:
            self.active.add(self.pending.pop(0)[0])
        if attrs & CONTROL_FLAG:
            if pid in self.active and _control_type(buf, rpos) == 0:
                self.active.discard(pid)
            return True
        if not attrs & TRANSACTIONAL_FLAG:
            return False
        if pid in self.active:
            return True
        following = next((t for o, t in self.markers.get(pid, ()) if o > last_offset), None)
        return following == 0


def _headers(buf: bytes) -> Iterator[tuple[int, int, int, int, int]]:
    """(base offset, last offset, attributes, producer id, records start) of each complete
    batch; headers only (nothing decompressed or CRC-checked)."""
    pos = 0
    end = len(buf)
    while pos + HEAD_SIZE + BODY_SIZE <= end:
        base_offset, length, _epoch, _magic, _crc = BATCH_HEAD.unpack_from(buf, pos)
        stop = pos + OVERHEAD + length
        if stop > end or length < HEAD_SIZE - OVERHEAD + BODY_SIZE:
            return
        attrs, last_delta, _ts, _mts, pid, _pe, _bs, _n = BATCH_BODY.unpack_from(
            buf, pos + HEAD_SIZE
        )
        yield base_offset, base_offset + last_delta, attrs, pid, pos + HEAD_SIZE + BODY_SIZE
        pos = stop


def _control_type(buf: bytes, rpos: int) -> int:
    """The type of a control batch's (first) record: 0 abort, 1 commit, -1 unreadable."""
    try:
        _end, _ts, _off, klen, kstart, _vl, _vs, _h = _read_record(buf, rpos)
    except (IndexError, struct.error, KafkaRecordError):
        return -1
    if klen < CONTROL_KEY.size:
        return -1
    return CONTROL_KEY.unpack_from(buf, kstart)[1]


def only_markers_from(
    buf: bytes, min_offset: int, aborted: Sequence[tuple[int, int]] | None = None
) -> int:
    """The offset after the last complete batch of a Fetch record set when nothing from
    ``min_offset`` on is a record a reader gets (only transaction markers, or records of
    aborted transactions under read-committed); -1 when there is such a record or no batch."""
    filt = None if aborted is None else _Aborted(aborted, buf)
    last = -1
    for _base, last, attrs, pid, rpos in _headers(buf):
        if last < min_offset:
            continue
        dropped = filt is not None and filt.drops(attrs, pid, last, buf, rpos)
        if not (dropped or attrs & CONTROL_FLAG):
            return -1
    return last + 1 if last >= 0 else -1


def _batches(
    buf: bytes, min_offset: int, aborted: Sequence[tuple[int, int]] | None = None
) -> Iterator[tuple[int, int, int, bytes, int, int]]:
    """The walk over a Fetch record set: ``(base offset, base timestamp, record count, buffer,
    start, end)`` of each data batch holding offsets >= ``min_offset``, CRC checked, decompressed.
    Control batches are skipped; with ``aborted`` (the Fetch answer's aborted transactions, as
    (producer id, first offset), for read-committed) the batches of aborted transactions too.
    A trailing partial batch (the broker cuts at max bytes) ends the walk."""
    pos = 0
    end = len(buf)
    filt = None if aborted is None else _Aborted(aborted, buf)
    while pos + HEAD_SIZE <= end:
        base_offset, length, _epoch, magic, crc = BATCH_HEAD.unpack_from(buf, pos)
        stop = pos + OVERHEAD + length
        if stop > end:
            return
        if magic != 2:
            raise KafkaRecordError(
                f"record batch magic {magic} at offset {base_offset} is not supported"
            )
        body_start = pos + HEAD_SIZE
        if stop < body_start + BODY_SIZE:
            raise KafkaRecordError(
                f"record batch of {length} bytes at offset {base_offset} is too short"
            )
        if crc32c.crc32c(buf[body_start:stop]) != crc:
            raise KafkaRecordError(f"CRC mismatch in the batch at offset {base_offset}")
        attrs, last_delta, base_ts, _max_ts, pid, _pepoch, _bseq, count = BATCH_BODY.unpack_from(
            buf, body_start
        )
        pos = stop
        rpos = body_start + BODY_SIZE
        if filt is not None and filt.drops(attrs, pid, base_offset + last_delta, buf, rpos):
            continue
        if attrs & CONTROL_FLAG or base_offset + last_delta < min_offset:
            continue
        codec = attrs & COMPRESSION_MASK
        if codec:
            data = _decompress(codec, buf[rpos:stop], base_offset)
            yield base_offset, base_ts, count, data, 0, len(data)
        else:
            yield base_offset, base_ts, count, buf, rpos, stop


def _skip_record(buf: bytes, pos: int) -> tuple[int, int]:
    """(where the record at ``pos`` ends, its offset delta), reading only the varints before
    the offset delta: records before a read's first offset are passed over this way."""
    read = _read_varint
    length, body = read(buf, pos)
    _ts_delta, at = read(buf, body + 1)  # after the attributes byte
    off_delta, _ = read(buf, at)
    return body + length, off_delta


def _read_record(
    buf: bytes, pos: int
) -> tuple[int, int, int, int, int, int, int, list[tuple[bytes, bytes]]]:
    """One record at ``pos``: (end, timestamp delta, offset delta, key length, key start, value
    length, value start, headers as (name, value) bytes; a null header value is b"")."""
    read = _read_varint
    b = buf[pos]
    if b < 0x80:
        length = b >> 1
        pos += 1
    else:
        length, pos = read(buf, pos)
    end = pos + length
    pos += 1  # attributes
    ts_delta, pos = read(buf, pos)
    off_delta, pos = read(buf, pos)
    klen, pos = read(buf, pos)
    kstart = pos
    if klen > 0:
        pos += klen
    vlen, pos = read(buf, pos)
    vstart = pos
    if vlen > 0:
        pos += vlen
    nh, pos = read(buf, pos)
    headers = []
    for _ in range(nh):
        hk, pos = read(buf, pos)
        name = buf[pos : pos + hk]
        pos += hk
        hv, pos = read(buf, pos)
        if hv > 0:
            headers.append((name, buf[pos : pos + hv]))
            pos += hv
        else:
            headers.append((name, b""))
    if pos != end or klen < -1 or vlen < -1:
        raise KafkaRecordError(f"malformed record (its fields end at {pos}, its length at {end})")
    return end, ts_delta, off_delta, klen, kstart, vlen, vstart, headers


def decode_batches(
    data: bytes | memoryview,
    min_offset: int = 0,
    max_records: int = 1 << 62,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> list[Record]:
    """The records with offset >= ``min_offset`` in a Fetch response's record set, at most
    ``max_records``. A trailing partial batch (the broker cuts at max bytes) is ignored;
    control batches are skipped, and with ``aborted`` aborted transactions (see _batches)."""
    out: list[Record] = []
    if max_records <= 0:
        return out
    try:
        for base_offset, base_ts, count, rbuf, rpos, _rend in _batches(
            bytes(data), min_offset, aborted
        ):
            for _ in range(count):
                rpos, ts_delta, off_delta, klen, kstart, vlen, vstart, raw = _read_record(
                    rbuf, rpos
                )
                offset = base_offset + off_delta
                if offset < min_offset:
                    continue
                ts = (base_ts + ts_delta) * 1000
                headers: tuple[tuple[str, bytes], ...] = ()
                if raw:
                    hl = []
                    for name, hval in raw:
                        if name == _US_NAME:
                            ts += int(hval or b"0")
                        else:
                            hl.append((name.decode("utf-8", "replace"), hval))
                    headers = tuple(hl)
                out.append(
                    Record(
                        None if klen < 0 else rbuf[kstart : kstart + klen],
                        None if vlen < 0 else rbuf[vstart : vstart + vlen],
                        headers,
                        ts,
                        offset,
                    )
                )
                if len(out) >= max_records:
                    return out
    except (IndexError, struct.error) as exc:
        raise KafkaRecordError(f"truncated record: {exc}") from None
    return out


def dense_batches(records: Sequence[Record]) -> list[RecordBatch]:
    """Decoded records (offsets increasing, with gaps) as batches of consecutive offsets, each
    keeping its records' own offsets: the model's batches are dense windows."""
    out: list[RecordBatch] = []
    run: list[Record] = []
    for r in records:
        if run and r.offset != run[-1].offset + 1:
            if r.offset <= run[-1].offset:
                raise KafkaRecordError(
                    f"offset {r.offset} follows offset {run[-1].offset}: offsets must increase"
                )
            out.append(_run_batch(run))
            run = []
        run.append(r)
    if run:
        out.append(_run_batch(run))
    return out


def _run_batch(run: list[Record]) -> RecordBatch:
    batch = RecordBatch(run, base_offset=run[0].offset)
    batch.max_timestamp_us = max(r.timestamp_us for r in run)
    return batch


_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence
_PRODUCER_AT = HEAD_SIZE + 22  # after attributes, lastOffsetDelta and both timestamps


def stamp_producer(batch: bytes, producer_id: int, epoch: int, sequence: int) -> bytes:
    """``batch`` (one v2 batch as :func:`canonical_to_batch` writes it) with its producer id,
    epoch and first sequence set, and its CRC computed again."""
    out = bytearray(batch)
    _PRODUCER.pack_into(out, _PRODUCER_AT, producer_id, epoch, sequence)
    struct.pack_into(">I", out, HEAD_SIZE - 4, crc32c.crc32c(memoryview(out)[HEAD_SIZE:]))
    return bytes(out)
