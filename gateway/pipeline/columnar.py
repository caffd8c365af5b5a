"""A ``format=binary`` fetch answer decoded straight into a pyarrow RecordBatch.

What the Spark reader's Python workers run for every page, so it keeps per-record Python work to
one short loop that only finds where each record starts (the canonical layout is a chain of
length-prefixed fields, so positions are sequential). Everything else is done per column by
numpy and Arrow: the fixed record heads (timestamp, key/value lengths, header count) are gathered
at those positions in one fancy index, and keys, values, header names and header values are cut
out of the answer by ``take`` on a binary array whose offsets point into the answer itself (the
key, value and the gap after it of each record are consecutive elements; ``take`` copies every
other one into a fresh contiguous array). See bench/README.md for what this gained.

Layouts: ``gateway/pipeline/client.py`` (the answer) and ``gateway/canonical.py`` (a block).
"""

from __future__ import annotations

import struct
from typing import Any

from gateway.canonical import FIELD, HEADER, RECORD
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


def _scan(
    data: bytes, end_offset: int
) -> tuple[list[int], list[int], list[tuple[int, int]], int, int, int]:
    """Walk the answer's blocks: (record starts, header starts, per block (base offset, records
    taken), hw, lso, first offset). Stops at ``end_offset`` (records from it on are not wanted).
    The only per-record Python work of the reader."""
    hw, lso, nblocks = FETCH_HEAD.unpack_from(data, 0)
    pos = FETCH_HEAD.size
    starts: list[int] = []
    hstarts: list[int] = []
    blocks: list[tuple[int, int]] = []
    first = -1
    add, hadd = starts.append, hstarts.append
    lengths = _LENGTHS.unpack_from
    field = FIELD.unpack_from
    rsize, fsize = RECORD.size, FIELD.size
    for _ in range(nblocks):
        base, length = BLOCK_HEAD.unpack_from(data, pos)
        pos += BLOCK_HEAD.size
        block_end = pos + length
        version, count, _, _ = HEADER.unpack_from(data, pos)
        if version != 1:
            raise ValueError(f"unknown canonical batch version {version}")
        if first < 0:
            first = base
        take = min(count, end_offset - base)
        if take <= 0:
            break
        blocks.append((base, take))
        pos += HEADER.size
        for _ in range(take):
            add(pos)
            klen, vlen, nh = lengths(data, pos + 8)
            pos += rsize
            if klen > 0:
                pos += klen
            if vlen > 0:
                pos += vlen
            while nh:
                hadd(pos)
                nlen, hvlen = field(data, pos)
                pos += fsize + nlen + hvlen
                nh -= 1
        if take == count and pos != block_end:
            raise ValueError(f"canonical block at offset {base} is {length} bytes, decoded {pos}")
        if pos > block_end:
            raise ValueError(f"canonical block at offset {base} overruns its {length} bytes")
        pos = block_end
    if pos > len(data):
        raise ValueError("the fetch answer is truncated")
    return starts, hstarts, blocks, hw, lso, first


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
    offsets = np.empty(n * stride, dtype=np.int64)
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
    (``gateway.pipeline.source.arrow_schema``), keeping only records below ``end_offset``."""
    import numpy as np
    import pyarrow as pa

    starts, hstarts, blocks, hw, lso, first = _scan(data, end_offset)
    n = len(starts)
    if n == 0:
        return FetchPage(None, first, first - 1, hw, lso)
    raw = np.frombuffer(data, dtype=np.uint8)
    buf = pa.py_buffer(data)
    pos = np.asarray(starts, dtype=np.int64)
    heads = raw[pos[:, None] + np.arange(RECORD.size)].view(np.dtype(_HEAD_DTYPE)).reshape(n)
    klen = heads["klen"].astype(np.int64)
    vlen = heads["vlen"].astype(np.int64)
    nh = heads["nh"].astype(np.int64)
    kstart = pos + RECORD.size
    vstart = kstart + np.maximum(klen, 0)
    vend = vstart + np.maximum(vlen, 0)
    keys, values = _cut(buf, (kstart, vstart, vend), (klen >= 0, vlen >= 0), n)

    header_type = schema.field("headers").type
    nhdr = len(hstarts)
    if nhdr:
        hpos = np.asarray(hstarts, dtype=np.int64)
        fields = raw[hpos[:, None] + np.arange(FIELD.size)].view(np.dtype(_FIELD_DTYPE))
        fields = fields.reshape(nhdr)
        nstart = hpos + FIELD.size
        hvstart = nstart + fields["nlen"].astype(np.int64)
        hvend = hvstart + fields["vlen"].astype(np.int64)
        names, hvalues = _cut(buf, (nstart, hvstart, hvend), (None, None), nhdr)
        names = names.cast(pa.string())  # validates UTF-8
    else:
        names, hvalues = pa.array([], pa.string()), pa.array([], pa.binary())
    structs = pa.StructArray.from_arrays([names, hvalues], fields=list(header_type.value_type))
    list_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(nh, out=list_offsets[1:])
    headers = pa.ListArray.from_arrays(pa.array(list_offsets), structs, type=header_type)

    offsets = np.concatenate([np.arange(b, b + c, dtype=np.int64) for b, c in blocks])
    batch = pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(offsets),
            pa.array(np.ascontiguousarray(heads["ts"])).cast(pa.timestamp("us", tz="UTC")),
            keys,
            values,
            headers,
        ],
        schema=schema,
    )
    return FetchPage(batch, first, int(offsets[-1]), hw, lso)
