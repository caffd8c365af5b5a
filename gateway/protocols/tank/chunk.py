"""A TANK consume chunk from fetched batch windows, never much larger than its byte budget.

Sans-IO. A stored TANK bundle goes out untouched (the chunk may then start before the sequence
number asked for, which TANK consumers skip, and its last bundle may be cut, which they drop).
Records stored in another format are re-encoded into bundles that fit what is left of the
budget, so a consumer always gets whole messages it can use, and a window of a huge stored batch
costs only the records that fit: a canonical block with a start table is cut by the table
before any record is decoded.
"""

from __future__ import annotations

from gateway.canonical import (
    CANONICAL,
    FIELD,
    RECORD,
    VERSION_STARTS,
    record_position,
    records_at,
)
from gateway.model import FetchResult, RecordBatch
from gateway.protocols.tank.bundle import (
    M_HAVE_KEY,
    M_USE_LAST_TS,
    TANK_BUNDLE,
    U64,
    encode_records,
    varint,
)
from gateway.protocols.tank.codec import C_OK, ConsumePartitionResult

BUNDLE_OVERHEAD = 6 + 5  # bundle flags and count varint, then the chunk's length varint


def first_available(log_start: int, high_watermark: int) -> int:
    """TANK's first available sequence number: 0 while the partition holds nothing."""
    return log_start + 1 if high_watermark > log_start else 0


def _fitting(block: bytes | memoryview, start: int, stop: int, room: int) -> int:
    """How many records from ``start`` (at least one) of a version-3 canonical block take at
    most ``room`` bytes there; a record's TANK form is never larger than its canonical form."""
    base = record_position(block, start)
    if record_position(block, stop) - base <= room:
        return stop - start
    lo, hi = 1, stop - start  # the answer is in [lo, hi): hi records do not fit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if record_position(block, start + mid) - base <= room:
            lo = mid
        else:
            hi = mid
    return lo


def bundle_from_canonical(block: bytes | memoryview, start: int, count: int) -> bytes:
    """An uncompressed TANK bundle of records ``start .. start+count`` of a canonical block,
    written straight from the block (no per-record objects; keys and values are slices until
    the one join). The same bytes as ``TANK_BUNDLE.encode`` of the decoded records: timestamps
    in ms, headers dropped, keys cut to TANK's 255 bytes."""
    view = memoryview(block)
    unpack = RECORD.unpack_from
    funpack = FIELD.unpack_from
    rsize = RECORD.size
    fsize = FIELD.size
    pack_ts = U64.pack
    small = [bytes((i,)) for i in range(4)]
    parts: list[bytes | memoryview] = [b""]
    append = parts.append
    last_ts = -1
    pos = record_position(block, start)
    for _ in range(count):
        ts_us, klen, vlen, nh = unpack(view, pos)
        pos += rsize
        ts = ts_us // 1000 if ts_us >= 0 else 0
        flags = M_HAVE_KEY if klen >= 0 else 0
        if ts == last_ts:
            flags |= M_USE_LAST_TS
        append(small[flags])
        if ts != last_ts:
            append(pack_ts(ts))
            last_ts = ts
        if klen >= 0:
            key = view[pos : pos + min(klen, 255)]
            append(bytes((len(key),)))
            append(key)
            pos += klen
        if vlen > 0:
            append(varint(vlen))
            append(view[pos : pos + vlen])
            pos += vlen
        else:
            append(b"\x00")
        for _ in range(nh):
            nlen, hvlen = funpack(view, pos)
            pos += fsize + nlen + hvlen
    parts[0] = bytes((count << 2,)) if count <= 15 else b"\x00" + varint(count)
    return b"".join(parts)


def bundle_within(
    window: RecordBatch, room: int, at_least_one: bool, sparse: bool = False
) -> tuple[bytes, int]:
    """(an uncompressed TANK bundle of the first records of ``window``, how many): as many as
    fit ``room`` bytes with their length prefix. When not even one fits: one anyway if
    ``at_least_one`` (a record larger than the fetch size is the client's to ask for with a
    bigger one, as with the real broker), else nothing. ``sparse``: a SPARSE bundle carrying
    its sequence numbers (the window follows a gap in the offsets)."""
    count = window.count
    room = max(0, room - BUNDLE_OVERHEAD - (9 + 5 if sparse else 0))
    found = None if sparse else window.encoded_window(CANONICAL)
    if found is not None:
        block, start, stop = found
        if records_at(block)[0] == VERSION_STARTS:
            n = _fitting(block, start, stop, room)
            if n == 1 and not at_least_one:
                base = record_position(block, start)
                if record_position(block, start + 1) - base > room:
                    return b"", 0
            return bundle_from_canonical(block, start, n), n
    per = max(1, window.size_bytes // max(1, count))
    n = max(1, min(count, room // per))
    while True:
        records = window.slice(window.first_offset, n).records
        if sparse:
            bundle = encode_records(records, first_seq=window.first_offset + 1)
        else:
            bundle = TANK_BUNDLE.encode(records)
        if len(bundle) <= room:
            return bundle, n
        if n == 1:
            return (bundle, 1) if at_least_one else (b"", 0)
        n = max(1, n // 2)


def _add(pieces: list[bytes | memoryview], block: bytes | memoryview) -> int:
    head = varint(len(block))
    pieces.append(head)
    pieces.append(block)
    return len(head) + len(block)


def fill_chunk(
    res: ConsumePartitionResult, result: FetchResult, fetch_size: int, at_least_one: bool = True
) -> tuple[int, int]:
    """Fill ``res`` with a chunk of at most ``fetch_size`` bytes of ``result``: (the records
    that went out, whole or in a cut stored bundle, for the metrics; the offset after them).
    Without ``at_least_one`` a re-encoded record that does not fit is left out rather than
    sent cut (the answer's budget, not the client's fetch size, is what ran out)."""
    res.err = C_OK
    res.hwmark = result.high_watermark
    pieces: list[bytes | memoryview] = []
    size = 0
    records = 0
    base = -1
    end = -1
    for window in result.batches:
        if window.count == 0:
            continue
        left = fetch_size - size
        if left <= 0:
            break
        whole = window.whole()
        block = whole.encoded_as(TANK_BUNDLE)
        if block is not None and whole.last_offset == window.last_offset:
            if base < 0:
                base = whole.base_offset
            records += whole.count
            end = whole.last_offset + 1
            size += _add(pieces, block)
            if size >= fetch_size:
                break
            continue
        # re-encoded: bundles of the window's records while whole ones fit (each round fills
        # most of what is left: a record's TANK form is a little smaller than its estimate)
        at = window.first_offset
        found = window.encoded_window(CANONICAL)
        if found is None or records_at(found[0])[0] != VERSION_STARTS:
            window.records  # noqa: B018 - decoded once here, shared by the slices below
        while at <= window.last_offset and size < fetch_size:
            part = window.slice(at)
            # after a gap in the offsets (a Kafka cluster's transaction markers, say) the
            # sequence numbers must be carried: consumers count on from the previous bundle
            sparse = end >= 0 and at != end
            block, n = bundle_within(part, fetch_size - size, at_least_one and not pieces, sparse)
            if not n:
                break
            if base < 0:
                base = at
            records += n
            at += n
            end = at
            size += _add(pieces, block)
        if at <= window.last_offset:
            break  # the budget ended inside this window
    if size > fetch_size:
        over = size - fetch_size
        while over:
            last = pieces[-1]
            if len(last) <= over:
                pieces.pop()
                over -= len(last)
            else:
                pieces[-1] = memoryview(last)[: len(last) - over]
                over = 0
    if base >= 0 and pieces:
        res.base_seq = base + 1
    else:
        res.base_seq = first_available(result.log_start_offset, result.high_watermark)
    res.chunk = pieces
    return records, end
