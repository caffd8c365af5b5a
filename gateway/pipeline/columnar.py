"""A ``format=binary`` fetch answer decoded straight into a pyarrow RecordBatch.

What the Spark reader's Python workers run for every page, so it keeps per-record Python work
out. It needs where each record starts: a block in canonical version 3 (``&starts=1``, every
block stored since 2026-11-25) carries a table of them, read with one ``numpy.frombuffer``; a
version-1 block (stored before) is walked by one short loop (the canonical layout is a chain of
length-prefixed fields, so positions are sequential). Everything else is done per column by
numpy and Arrow: the fixed record heads (timestamp, key/value lengths, header count) are gathered
at those positions through a sliding window view, header fields with one numpy pass per header
index, and keys, values, header names and header values are cut out of the answer by ``take`` on
a binary array whose offsets point into the answer itself (the key, value and the gap after it of
each record are consecutive elements; ``take`` copies every other one into a fresh contiguous
array). Tables are checked against the records they index (:func:`_located`). See
bench/README.md for what this gained.

Layouts: ``gateway/pipeline/client.py`` (the answer) and ``gateway/canonical.py`` (a block).
"""

from __future__ import annotations

import struct
from typing import Any

from gateway.canonical import FIELD, HEADER, RECORD, VERSION_STARTS, CanonicalCodecError, records_at
from gateway.pipeline.client import BLOCK_HEAD, FETCH_HEAD

# klen i32 | vlen i32 | header_count u16, 8 bytes into a record head (after the timestamp).
_LENGTHS = struct.Struct("<iiH")
_HEAD_DTYPE = [("ts", "<i8"), ("klen", "<i4"), ("vlen", "<i4"), ("nh", "<u2")]
_FIELD_DTYPE = [("nlen", "<u2"), ("vlen", "<u4")]


class FetchPage:
    """One decoded page: ``batch`` (None when the answer held no record below ``end``), the
    offset of its first record, and the partition's high watermark and log start."""

    __slots__ = ("batch", "first_offset", "last_offset", "high_watermark", "log_start_offset")

    def __init__(
        self,
        batch: Any,
        first_offset: int,
        last_offset: int,
        high_watermark: int,
        log_start_offset: int,
    ) -> None:
        self.batch = batch
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset


Blocks = list[tuple[int, int, int]]  # per block: base offset, records taken, index of the first


def _walk(data: bytes, pos: int, take: int, starts: list[int], ends: list[int]) -> int:
    """Append where each of ``take`` records from ``pos`` starts and ends; returns the end of the
    last. The reader's only per-record Python, for blocks without a start table (version 1)."""
    add, add_end = starts.append, ends.append
    lengths = _LENGTHS.unpack_from
    field = FIELD.unpack_from
    rsize, fsize = RECORD.size, FIELD.size
    for _ in range(take):
        add(pos)
        klen, vlen, nh = lengths(data, pos + 8)
        pos += rsize
        if klen > 0:
            pos += klen
        if vlen > 0:
            pos += vlen
        while nh:
            nlen, hvlen = field(data, pos)
            pos += fsize + nlen + hvlen
            nh -= 1
        add_end(pos)
    return pos


def _scan(data: bytes, end_offset: int) -> tuple[Any, Any, Blocks, int, int, int]:
    """Where the answer's records are: (record starts, where each record must end, per block
    (base offset, records taken, index of its first record), hw, lso, first offset). Stops at
    ``end_offset`` (records from it on are not wanted). A version-3 block's starts come from its
    table (numpy, no per-record Python); a version-1 block is walked. The ends are what
    :func:`_located` checks the records against."""
    import numpy as np

    hw, lso, nblocks = FETCH_HEAD.unpack_from(data, 0)
    pos = FETCH_HEAD.size
    starts: list[Any] = []
    ends: list[Any] = []
    blocks: Blocks = []
    first = -1
    n = 0
    for _ in range(nblocks):
        base, length = BLOCK_HEAD.unpack_from(data, pos)
        pos += BLOCK_HEAD.size
        block_end = pos + length
        if block_end > len(data):
            raise ValueError("the fetch answer is truncated")
        try:
            version, count, rstart = records_at(data, pos)
        except CanonicalCodecError as exc:
            raise ValueError(f"canonical block at offset {base}: {exc}") from None
        if rstart > block_end:
            raise ValueError(f"canonical block at offset {base} overruns its {length} bytes")
        if first < 0:
            first = base
        take = min(count, end_offset - base)
        if take <= 0:
            break
        blocks.append((base, take, n))
        n += take
        if version == VERSION_STARTS:
            table = np.frombuffer(data, "<u4", count, pos + HEADER.size).astype(np.int64)
            table += rstart
            last = table[take] if take < count else block_end
            if table[0] != rstart or last > block_end:
                raise ValueError(_mismatch(base, 0 if table[0] != rstart else take - 1))
            starts.append(table[:take])
            ends.extend((table[1:take], np.array([last], np.int64)))
        else:
            walked: list[int] = []
            walked_ends: list[int] = []
            at = _walk(data, rstart, take, walked, walked_ends)
            if take == count and at != block_end:
                raise ValueError(
                    f"canonical block at offset {base} is {length} bytes, decoded {at - pos}"
                )
            if at > block_end:
                raise ValueError(f"canonical block at offset {base} overruns its {length} bytes")
            starts.append(np.asarray(walked, np.int64))
            ends.append(np.asarray(walked_ends, np.int64))
        pos = block_end
    if not starts:
        return np.empty(0, np.int64), np.empty(0, np.int64), blocks, hw, lso, first
    return np.concatenate(starts), np.concatenate(ends), blocks, hw, lso, first


def _mismatch(base: int, record: int) -> str:
    return (
        f"canonical block at offset {base}: its record start table does not match its records"
        f" (at record {record})"
    )


class _Fields:
    """Where every field of the records at ``pos`` is, gathered with numpy (arrays)."""

    __slots__ = (
        "heads",
        "klen",
        "vlen",
        "kstart",
        "vstart",
        "vend",
        "nh",
        "list_offsets",
        "hstart",
        "hnlen",
        "hvlen",
        "ends",
    )

    heads: Any
    klen: Any
    vlen: Any
    kstart: Any
    vstart: Any
    vend: Any
    nh: Any
    list_offsets: Any
    hstart: Any
    hnlen: Any
    hvlen: Any
    ends: Any


def _fields(raw: Any, pos: Any) -> _Fields:
    """The record heads at ``pos`` and their header fields (header j of a record starts where
    header j - 1, or the value, ends: one numpy pass per header index, not per record).
    IndexError when a position (or a length read there) points outside ``raw``."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    n = len(pos)
    f = _Fields()
    # Row k of a sliding window view is the RECORD.size bytes from byte k: indexing it with the
    # positions copies one head per row (twice as fast as a fancy index of every byte).
    heads = sliding_window_view(raw, RECORD.size)[pos]
    f.heads = heads.view(np.dtype(_HEAD_DTYPE)).reshape(n)
    f.klen = f.heads["klen"].astype(np.int64)
    f.vlen = f.heads["vlen"].astype(np.int64)
    f.nh = f.heads["nh"].astype(np.int64)
    f.kstart = pos + RECORD.size
    f.vstart = f.kstart + np.maximum(f.klen, 0)
    f.vend = f.vstart + np.maximum(f.vlen, 0)
    f.list_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(f.nh, out=f.list_offsets[1:])
    total = int(f.list_offsets[-1])
    f.hstart = np.empty(total, np.int64)
    f.hnlen = np.empty(total, np.int64)
    f.hvlen = np.empty(total, np.int64)
    cur = f.vend.copy()
    field_view = sliding_window_view(raw, FIELD.size)
    which = np.flatnonzero(f.nh)
    j = 0
    while len(which):
        at = cur[which]
        slot = f.list_offsets[which] + j
        head = field_view[at].view(np.dtype(_FIELD_DTYPE)).reshape(len(which))
        f.hstart[slot] = at
        f.hnlen[slot] = head["nlen"]
        f.hvlen[slot] = head["vlen"]
        cur[which] = at + FIELD.size + f.hnlen[slot] + f.hvlen[slot]
        j += 1
        which = which[f.nh[which] > j]
    f.ends = cur
    return f


def _located(raw: Any, pos: Any, ends: Any, blocks: Blocks) -> _Fields:
    """:func:`_fields` at ``pos``, checked: every record must end where :func:`_scan` says (the
    next record's start by its block's table, or the block's end). Together with the first
    record's position this proves a table equals what a walk would find; a table that does not
    is refused (ValueError naming the block), never trusted."""
    import numpy as np

    try:
        fields = _fields(raw, pos)
        if np.array_equal(fields.ends, ends):
            return fields
    except IndexError:  # a table entry, or a length read there, pointing outside the answer
        pass
    # Refused: find the first record that does not fit, one at a time (the error path only).
    for base, take, at in blocks:
        for i in range(at, at + take):
            try:
                fits = int(_fields(raw, pos[i : i + 1]).ends[0]) == int(ends[i])
            except IndexError:
                fits = False
            if not fits:
                raise ValueError(_mismatch(base, i - at))
    raise ValueError(_mismatch(blocks[0][0], 0))  # pragma: no cover (some record did not fit)


def _cut(buf: Any, bounds: tuple[Any, ...], valid: tuple[Any, ...], n: int) -> list[Any]:
    """Binary arrays cut out of ``buf``. ``bounds`` holds m + 1 arrays of increasing byte
    positions per item: where field 0 starts, field 1 starts, ..., where field m - 1 ends; items
    follow each other in ``buf``. Returns m arrays (field k of every item, null where
    ``valid[k]``, a bool mask or None, is false)."""
    import numpy as np
    import pyarrow as pa

    stride = len(bounds)
    # Element i*stride+k is field k of item i; the last one of an item, from its last field's
    # end to the next item's start, is the gap in between, never taken.
    offsets: Any = np.empty(n * stride, dtype=np.int64)
    for k, b in enumerate(bounds):
        offsets[k::stride] = b
    big = len(buf) >= 2**31
    typ = pa.large_binary() if big else pa.binary()
    raw_offsets = offsets if big else offsets.astype(np.int32)
    whole = pa.Array.from_buffers(typ, n * stride - 1, [None, pa.py_buffer(raw_offsets), buf])
    out = []
    for k, mask in enumerate(valid):
        col = whole.take(pa.array(np.arange(k, n * stride - 1, stride, dtype=np.int64)))
        if big:
            col = col.cast(pa.binary())
        if mask is not None and not mask.all():
            bitmap = pa.py_buffer(np.packbits(mask, bitorder="little"))
            col = pa.Array.from_buffers(
                pa.binary(), n, [bitmap, *col.buffers()[1:]], null_count=int(n - mask.sum())
            )
        out.append(col)
    return out


def decode_fetch_arrow(
    data: bytes, topic: str, partition: int, end_offset: int, schema: Any
) -> FetchPage:
    """Decode a ``format=binary`` fetch answer into one RecordBatch of ``schema``
    (``gateway.pipeline.source.arrow_schema``), keeping only records below ``end_offset``.
    Blocks with record start tables (canonical version 3, ``&starts=1``) are decoded without a
    per-record walk; their tables are checked against the records (see :func:`_located`)."""
    import numpy as np
    import pyarrow as pa

    pos, ends, blocks, hw, lso, first = _scan(data, end_offset)
    n = len(pos)
    if n == 0:
        return FetchPage(None, first, first - 1, hw, lso)
    raw = np.frombuffer(data, dtype=np.uint8)
    f = _located(raw, pos, ends, blocks)
    buf = pa.py_buffer(data)
    keys, values = _cut(buf, (f.kstart, f.vstart, f.vend), (f.klen >= 0, f.vlen >= 0), n)

    header_type = schema.field("headers").type
    nhdr = len(f.hstart)
    if nhdr:
        nstart = f.hstart + FIELD.size
        hvstart = nstart + f.hnlen
        hvend = hvstart + f.hvlen
        names, hvalues = _cut(buf, (nstart, hvstart, hvend), (None, None), nhdr)
        names = names.cast(pa.string())  # validates UTF-8
    else:
        names, hvalues = pa.array([], pa.string()), pa.array([], pa.binary())
    structs = pa.StructArray.from_arrays([names, hvalues], fields=list(header_type.value_type))
    list_offsets = f.list_offsets.astype(np.int32)
    headers = pa.ListArray.from_arrays(pa.array(list_offsets), structs, type=header_type)

    offsets = np.concatenate([np.arange(b, b + c, dtype=np.int64) for b, c, _ in blocks])
    batch = pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(offsets),
            pa.array(np.ascontiguousarray(f.heads["ts"])).cast(pa.timestamp("us", tz="UTC")),
            keys,
            values,
            headers,
        ],
        schema=schema,
    )
    return FetchPage(batch, first, int(offsets[-1]), hw, lso)
