"""Record batches v2 in Produce requests and Fetch answers, sans-IO, over the Kafka backend's
record codec (``gateway.backends.kafka.records``): a produced batch becomes a canonical block
without per-record objects, stored records go out as one v2 batch per stored batch at its true
backend offsets."""

from __future__ import annotations

from dataclasses import dataclass

import crc32c

from gateway.backends.kafka.records import (
    BATCH_BODY,
    BATCH_HEAD,
    COMPRESSION_MASK,
    CONTROL_FLAG,
    HEAD_SIZE,
    OVERHEAD,
    TRANSACTIONAL_FLAG,
    US_HEADER,
    canonical_to_batch,
    encode_batch,
)
from gateway.canonical import CANONICAL, peek_header
from gateway.model import RESERVED_HEADER_PREFIX, Record, RecordBatch
from gateway.protocols.kafka.inflate import Corrupt, TooLarge, inflate_steps
from gateway.protocols.kafka.native import KAFKA_V2, at_offset
from gateway.protocols.steps import Steps, finish

NO_PRODUCER = -1


class InvalidBatch(ValueError):
    """A produced record set the gateway refuses; ``code`` is the Kafka error code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class KeylessRecord(InvalidBatch):
    """A record without a key (null, not empty) in a batch for a compacted topic: Kafka's
    INVALID_RECORD. ``index`` is the first such record's place in its batch."""

    def __init__(self, index: int) -> None:
        super().__init__(f"record {index} has no key (the topic is compacted)", INVALID_RECORD)
        self.index = index


CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_RECORD = 87
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_TIMESTAMP = 32

# What the gateway's records hold (every protocol reads a stored Kafka batch): timestamps whose
# nanoseconds fit 64 bits (up to the year 2262; -1 is Kafka's "no timestamp"), at most 65535
# headers a record, header names up to 16 KiB (read as UTF-8 with replacement characters, at
# most 3 bytes for each, they stay within the 65535 bytes the gateway's records hold).
MIN_TIMESTAMP_MS = -1
MAX_TIMESTAMP_MS = (2**63 - 1) // 1_000_000
MAX_HEADERS = 0xFFFF
MAX_HEADER_NAME = 16 * 1024
_US_NAME = US_HEADER.encode()
_US_LEN = len(_US_NAME)
_US_BYTE = 2 * _US_LEN  # the one-byte varint of its length
_TS_FAST = 8192  # the largest magnitude of a one- or two-byte varint, plus one
STEP_RECORDS = 10_000
"""Records checked in one step (the listener's ``max_records_per_step``): about 5 ms of the
event loop's time for tiny records (the fast walk: at most 63 headers a record)."""
STEP_BYTES = 1 << 20
"""Bytes the careful walk (:func:`_walk`) checks in one step, whatever the records: a record
may have 65535 headers, so a count alone does not bound a step's time there."""


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    batch: RecordBatch
    producer_id: int
    producer_epoch: int
    base_sequence: int


def _zigzag(buf: bytes, p: int) -> tuple[int, int]:
    """(value, position after) of the zigzag varint at ``p``."""
    b = buf[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    raw = b & 0x7F
    shift = 7
    while True:
        p += 1
        b = buf[p]
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), p + 1
        shift += 7
        if shift > 63:
            raise InvalidBatch("a varint runs past 10 bytes", CORRUPT_MESSAGE)


def _varint_at(buf: bytes, p: int) -> tuple[int, int]:
    """(value, position after) of the zigzag varint at ``p``, one- and two-byte ones first."""
    b = buf[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    if buf[p + 1] < 0x80:
        raw = (b & 0x7F) | (buf[p + 1] << 7)
        return (raw >> 1) ^ -(raw & 1), p + 2
    return _zigzag(buf, p)


def _headers(buf: bytes, p: int, stop: int, i: int) -> int:
    """The position after record ``i``'s headers (count at ``p``), each checked: a key of 0 or
    more bytes (at most ``MAX_HEADER_NAME``), a value of -1 (null) or more, and
    the gateway's own ``_gw.us`` header (the microseconds of a timestamp) 1 to 3 digits."""
    nh, p = _varint_at(buf, p)
    if nh < 0 or nh > MAX_HEADERS or nh > (stop - p) // 2:  # each header takes 2 bytes or more
        raise InvalidBatch(f"record {i} has a header count of {nh}", CORRUPT_MESSAGE)
    for _ in range(nh):
        hk, p = _varint_at(buf, p)
        if hk < 0 or hk > MAX_HEADER_NAME:
            raise InvalidBatch(f"record {i} has a header key of length {hk}", CORRUPT_MESSAGE)
        name = p
        p += hk
        hv, p = _varint_at(buf, p)
        if hv < -1:
            raise InvalidBatch(f"record {i} has a header value of length {hv}", CORRUPT_MESSAGE)
        if hv > 0:
            if hk == _US_LEN and buf[name : name + hk] == _US_NAME and not _us_ok(buf[p : p + hv]):
                raise InvalidBatch(f"record {i} has a malformed {US_HEADER} header", INVALID_RECORD)
            p += hv
        elif hk == _US_LEN and buf[name : name + hk] == _US_NAME:
            raise InvalidBatch(f"record {i} has an empty {US_HEADER} header", INVALID_RECORD)
        if p > stop:
            raise InvalidBatch(f"record {i}'s headers run past the record", CORRUPT_MESSAGE)
    return p


def _zz(raw: int) -> int:
    return (raw >> 1) ^ -(raw & 1)


# Tables of the one-byte varints (indexed by the byte) and the two-byte ones (indexed by
# ``b + (c << 7)``, b the first byte, c the second): their value, and how far a key or value
# with that length prefix reaches (prefix and bytes; a negative length other than -1 reaches
# far past any batch, so the record's length check refuses it).
_FAR = 1 << 62
_Z1 = tuple(_zz(b) for b in range(128))
_Z2 = [0] * (128 + (128 << 7))
_A1 = tuple(1 + max(n, 0) if n >= -1 else _FAR for n in _Z1)
_A2 = [_FAR] * len(_Z2)
_K1 = tuple(1 + n if n >= 0 else _FAR for n in _Z1)  # a header key: not null
_A1_KEYED = tuple(_FAR if n == -1 else a for n, a in zip(_Z1, _A1, strict=True))
"""``_A1`` for the key of a record of a compacted topic: a null key stops the fast walk (at no
cost per record), and :func:`_walk` notes it."""
for _b in range(128, 256):
    for _c in range(128):
        _n = _zz((_b & 0x7F) | (_c << 7))
        _Z2[_b + (_c << 7)] = _n
        _A2[_b + (_c << 7)] = 2 + _n if _n >= 0 else _FAR
del _b, _c, _n


def _fast_walk(
    buf: bytes, pos: int, count: int, first: int = 0, keyed: bool = False
) -> tuple[int, int]:
    """(i, position of record i): records ``first``..i-1 from ``pos`` are well formed (see
    :func:`_walk`); record i is the first this walk does not vouch for (i == count: none), well
    formed or not: it takes records whose varints are one or two bytes, header names below 64
    bytes and timestamp deltas within +-8191 (the caller checks these fit), and leaves the rest
    to :func:`_walk`, which goes on from record i. Table look-ups instead of arithmetic: the
    common case at about the cost of walking the lengths alone. ``keyed``: a record with a
    null key is left to :func:`_walk` too (a compacted topic's)."""
    z1, z2, a1, a2, k1 = _Z1, _Z2, _A1, _A2, _K1
    ka1 = _A1_KEYED if keyed else _A1
    i = first
    try:
        for i in range(first, count):
            b = buf[pos]
            if b < 0x80:
                p = pos + 1
                stop = p + z1[b]
            else:
                c = buf[pos + 1]
                if c >= 0x80:
                    return i, pos
                p = pos + 2
                stop = p + z2[b + (c << 7)]
            if buf[p + 1] < 0x80:  # after the attributes: the timestamp delta
                p += 2
            elif buf[p + 2] < 0x80:
                p += 3
            else:
                return i, pos
            b = buf[p]  # the offset delta
            if b < 0x80:
                if z1[b] != i:
                    return i, pos
                p += 1
            else:
                c = buf[p + 1]
                if c >= 0x80 or z2[b + (c << 7)] != i:
                    return i, pos
                p += 2
            b = buf[p]  # the key
            if b < 0x80:
                p += ka1[b]
            else:
                c = buf[p + 1]
                if c >= 0x80:
                    return i, pos
                p += a2[b + (c << 7)]
            b = buf[p]  # the value
            if b < 0x80:
                p += a1[b]
            else:
                c = buf[p + 1]
                if c >= 0x80:
                    return i, pos
                p += a2[b + (c << 7)]
            b = buf[p]  # the header count
            p += 1
            if b:
                if b & 0x81:  # negative, or 64 headers or more
                    return i, pos
                for _ in range(b >> 1):
                    b = buf[p]  # the header key: 0..63 bytes
                    if b == _US_BYTE and buf[p + 1 : p + 1 + _US_LEN] == _US_NAME:
                        return i, pos  # the gateway's own header: its value is checked by _walk
                    p += k1[b]
                    b = buf[p]
                    if b < 0x80:
                        p += a1[b]
                    else:
                        c = buf[p + 1]
                        if c >= 0x80:
                            return i, pos
                        p += a2[b + (c << 7)]
            if p != stop:
                return i, pos
            pos = stop
    except IndexError:  # a length past the end: _walk names it
        return i, pos
    return count, pos


def _us_ok(value: bytes) -> bool:
    """The ``_gw.us`` header's value as the gateway writes it: 1 to 3 ASCII digits."""
    return len(value) <= 3 and value.isdigit() and value.isascii()


def _walk(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    ts_lo: int,
    ts_hi: int,
    first: int = 0,
    max_bytes: int = _FAR,
    keyless: list[int] | None = None,
) -> tuple[int, int]:
    """Check every record of a batch as a broker does, without building objects: its length
    prefix; its timestamp delta within ``ts_lo``..``ts_hi``; its offset delta (record i has
    i); its key and value lengths (-1 for null, else bytes within the record); its header count
    and each header's lengths; its fields ending exactly where the length prefix says; and the
    records filling the batch. A batch that passes decodes for every reader: other protocols
    decode stored Kafka batches, and one malformed record would make the whole batch unreadable
    for them. The one- and two-byte varints (lengths below 8 KiB, deltas below 8192) are read
    in line and headers (rare) in a function. ``pos`` is where record ``first`` starts (the
    records before it checked by :func:`_fast_walk`). Walks records ``first``..``count``-1,
    or stops early at the first record starting ``max_bytes`` or more past ``pos`` (a step:
    with up to 65535 headers a record, bytes bound this walk's time where a record count does
    not); returns (the first record not walked, its position). Whether the records fill the
    batch is the caller's check (:func:`_trailing`). ``keyless`` (a compacted topic's batch):
    the index of the first record with a null key is appended to it; the walk goes on, as a
    broker's does, so a malformed record or a bad timestamp further on still answers first."""
    start = pos
    for i in range(first, count):
        if pos - start >= max_bytes:
            return i, pos
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            p = pos + 1
        elif buf[pos + 1] < 0x80:
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            length = (raw >> 1) ^ -(raw & 1)
            p = pos + 2
        else:
            length, p = _zigzag(buf, pos)
        stop = p + length
        if length < 6 or stop > end:  # attributes and five varints take 6 bytes or more
            raise InvalidBatch(f"record {i} of {length} bytes runs past its batch", CORRUPT_MESSAGE)
        b = buf[p + 1]  # after the attributes (unused by Kafka): the timestamp delta
        if b < 0x80:
            ts = (b >> 1) ^ -(b & 1)
            p += 2
        else:
            ts, p = _zigzag(buf, p + 1)
        if ts < ts_lo or ts > ts_hi:
            raise InvalidBatch(f"record {i}'s timestamp is out of range", INVALID_TIMESTAMP)
        b = buf[p]
        if b < 0x80:
            delta = (b >> 1) ^ -(b & 1)
            p += 1
        elif buf[p + 1] < 0x80:
            raw = (b & 0x7F) | (buf[p + 1] << 7)
            delta = (raw >> 1) ^ -(raw & 1)
            p += 2
        else:
            delta, p = _zigzag(buf, p)
        if delta != i:
            raise InvalidBatch(f"record {i} has offset delta {delta}", INVALID_RECORD)
        b = buf[p]  # the key's length (-1: null) and bytes
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        elif buf[p + 1] < 0x80:
            raw = (b & 0x7F) | (buf[p + 1] << 7)
            n = (raw >> 1) ^ -(raw & 1)
            p += 2
        else:
            n, p = _zigzag(buf, p)
        if n > 0:
            p += n
        elif n < -1:
            raise InvalidBatch(f"record {i} has a key of length {n}", CORRUPT_MESSAGE)
        elif n < 0 and keyless is not None:
            keyless.append(i)
            keyless = None  # the first is the one named
        b = buf[p]  # the value's
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            p += 1
        elif buf[p + 1] < 0x80:
            raw = (b & 0x7F) | (buf[p + 1] << 7)
            n = (raw >> 1) ^ -(raw & 1)
            p += 2
        else:
            n, p = _zigzag(buf, p)
        if n > 0:
            p += n
        elif n < -1:
            raise InvalidBatch(f"record {i} has a value of length {n}", CORRUPT_MESSAGE)
        if p >= stop:
            raise InvalidBatch(f"record {i}'s fields run past its length", CORRUPT_MESSAGE)
        if buf[p]:
            p = _headers(buf, p, stop, i)
        else:
            p += 1  # no headers
        if p != stop:
            raise InvalidBatch(
                f"record {i}: its fields take {p - pos} bytes, its length says {stop - pos}",
                CORRUPT_MESSAGE,
            )
        pos = stop
    return count, pos


def _trailing(pos: int, end: int, count: int) -> None:
    if pos != end:
        raise InvalidBatch(f"{end - pos} bytes after the batch's {count} records", CORRUPT_MESSAGE)


def _check_span(
    buf: bytes,
    pos: int,
    end: int,
    first: int,
    upto: int,
    ts_lo: int,
    ts_hi: int,
    max_bytes: int,
    keyless: list[int] | None = None,
) -> tuple[int, int]:
    """Records ``first``..``upto``-1 (or fewer, see :func:`_walk`'s ``max_bytes``):
    :func:`_fast_walk` for the common case, :func:`_walk` (which names what is wrong) from the
    first record it leaves, so no record is walked twice. (first record not checked, its
    position). ``keyless``: see :func:`_walk`."""
    if ts_lo <= -_TS_FAST and ts_hi >= _TS_FAST:  # any two-byte delta gives a good timestamp
        first, pos = _fast_walk(buf, pos, upto, first, keyless is not None)
        if first == upto:
            return first, pos
    return _walk(buf, pos, end, upto, ts_lo, ts_hi, first, max_bytes, keyless)


def _check_steps(
    buf: bytes,
    pos: int,
    end: int,
    count: int,
    ts_lo: int,
    ts_hi: int,
    step: int,
    keyless: list[int] | None = None,
) -> Steps[None]:
    """Every record checked in steps of at most ``step`` records (and, past the fast walk,
    :data:`STEP_BYTES`), yielding between two: a batch of ``step`` records or fewer (within
    those bytes) is checked in one step, without yielding. ``keyless``: see :func:`_walk`
    (looked for until one is found)."""
    i = 0
    while True:
        look = keyless if keyless is not None and not keyless else None
        upto = min(count, i + step)
        i, pos = _check_span(buf, pos, end, i, upto, ts_lo, ts_hi, STEP_BYTES, look)
        if i >= count:
            break
        yield
    _trailing(pos, end, count)


def read_produced(data: bytes | memoryview, max_bytes: int, keyed: bool = False) -> ProducedBatch:
    """:func:`produced_steps` in one go (tests, tools: nothing else to serve meanwhile)."""
    return finish(produced_steps(data, max_bytes, keyed=keyed))


def produced_steps(
    data: bytes | memoryview, max_bytes: int, step_records: int = STEP_RECORDS, keyed: bool = False
) -> Steps[ProducedBatch]:
    """The one v2 batch of a Produce (v3+) partition, kept as sent (``native.KAFKA_V2``), read
    in steps (``gateway.protocols.steps``): a batch of ``step_records`` records or fewer is read
    in one (unless gzip inflates it to more than 16 MiB), a larger one yields after its
    decompression and every ``step_records`` records checked, so its session can serve other
    connections meanwhile (a megabyte of zstd can hold a million records: about half a second
    of checking in one go).
    Raises InvalidBatch: not exactly one batch, not magic 2, a CRC mismatch, a control or
    transactional batch, records that do not fill it as its header says, above ``max_bytes``
    (the listener's message_max_bytes, as a broker's message.max.bytes: per batch); with
    ``keyed`` (the batch of a compacted topic), KeylessRecord for a record with a null key,
    once every record was checked (any other fault of the batch answers first, as Kafka's)."""
    buf = bytes(data)
    if len(buf) > max_bytes:
        raise InvalidBatch(
            f"record batch of {len(buf)} bytes is above message_max_bytes {max_bytes}",
            MESSAGE_TOO_LARGE,
        )
    if len(buf) < HEAD_SIZE + BATCH_BODY.size:
        raise InvalidBatch(f"record set of {len(buf)} bytes holds no batch", CORRUPT_MESSAGE)
    _base, length, _epoch, magic, crc = BATCH_HEAD.unpack_from(buf, 0)
    if magic != 2:
        raise InvalidBatch(
            f"message format magic {magic}: v3+ Produce carries record batches v2",
            UNSUPPORTED_FOR_MESSAGE_FORMAT,
        )
    if OVERHEAD + length != len(buf):
        raise InvalidBatch("a Produce partition must hold exactly one record batch", INVALID_RECORD)
    if crc32c.crc32c(buf[HEAD_SIZE:]) != crc:
        raise InvalidBatch("CRC mismatch in the record batch", CORRUPT_MESSAGE)
    attrs, last_delta, base_ts, max_ts, pid, pepoch, bseq, count = BATCH_BODY.unpack_from(
        buf, HEAD_SIZE
    )
    if attrs & (CONTROL_FLAG | TRANSACTIONAL_FLAG):
        raise InvalidBatch(
            "transactional and control batches are refused (no transactions)",
            TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        )
    if count <= 0 or last_delta != count - 1:
        raise InvalidBatch(
            f"batch of {count} records with last offset delta {last_delta}", INVALID_RECORD
        )
    start = HEAD_SIZE + BATCH_BODY.size
    ts_lo, ts_hi = MIN_TIMESTAMP_MS - base_ts, MAX_TIMESTAMP_MS - base_ts
    try:
        codec = attrs & COMPRESSION_MASK
        if codec:
            records = yield from inflate_steps(codec, buf[start:])
            pos = 0
            if count > step_records:
                yield  # the decompression was a step of its own
        else:
            records, pos = buf, start
        keyless: list[int] | None = [] if keyed else None
        yield from _check_steps(
            records, pos, len(records), count, ts_lo, ts_hi, step_records, keyless
        )
    except IndexError as exc:
        raise InvalidBatch(f"truncated records: {exc}", CORRUPT_MESSAGE) from None
    except TooLarge as exc:
        raise InvalidBatch(str(exc), MESSAGE_TOO_LARGE) from None
    except Corrupt as exc:
        raise InvalidBatch(f"the batch does not decompress: {exc}", CORRUPT_MESSAGE) from None
    if keyless:
        raise KeylessRecord(keyless[0])
    batch = RecordBatch(
        encoded=buf,
        codec=KAFKA_V2,
        count=count,
        max_timestamp_us=max_ts * 1000 if max_ts >= 0 else -1,
    )
    return ProducedBatch(batch, pid, pepoch, bseq)


_RESERVED = RESERVED_HEADER_PREFIX.encode()


def _for_kafka(r: Record) -> Record:
    """A stored record as a Kafka client gets it: timestamp to the millisecond, no header of
    another protocol's own fields."""
    if r.timestamp_us > 0 and r.timestamp_us % 1000:
        r = r._replace(timestamp_us=r.timestamp_us - r.timestamp_us % 1000)
    if any(name.startswith(RESERVED_HEADER_PREFIX) for name, _ in r.headers):
        r = r._replace(
            headers=tuple(h for h in r.headers if not h[0].startswith(RESERVED_HEADER_PREFIX))
        )
    return r


def fetch_records(
    batches: tuple[RecordBatch, ...] | list[RecordBatch], now_ms: int
) -> list[bytes | memoryview]:
    """Stored batches as v2 batches, each at its backend offset: a whole batch a Kafka client
    produced goes back as it came; part of one (a read from inside it) and records stored by
    other protocols are written uncompressed, so the answer holds exactly what the backend gave
    (and its size what the answer's budget counted). Timestamps go out in milliseconds, as
    Kafka has them (without the Kafka backend's ``_gw.us`` header for the microseconds)."""
    out: list[bytes | memoryview] = []
    for batch in batches:
        if not batch.count:
            continue
        block = batch.encoded_as(KAFKA_V2)
        if block is not None:
            out += at_offset(block, batch.base_offset)
            continue
        block = batch.encode(CANONICAL)
        _count, min_ts, max_ts = peek_header(block)
        # another protocol's own fields (``_gw.iggy.id``, ``_gw.cursus.seq``, ...) stay with it
        reserved = _RESERVED in block
        if not reserved and min_ts % 1000 == 0 and max_ts % 1000 == 0:
            data, _n = canonical_to_batch(block, now_ms, batch.first_offset)
        else:  # microseconds (another protocol's records): cut to the millisecond a client has
            data = encode_batch([_for_kafka(r) for r in batch.records], now_ms, batch.first_offset)
        out.append(data)
    return out
