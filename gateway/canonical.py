"""The canonical batch encoding: how the embedded log (and the memory backend) store records.

Hand-written because no library has this shape: a small header and length-prefixed fields, packed
and unpacked with precompiled ``struct.Struct`` objects.

Layout (little endian)::

    header:  version u8 (1 or 3) | count u32 | min_timestamp_us i64 | max_timestamp_us i64
    starts:  (version 3 only) count x u32, record i's position from the first record's byte
    record:  timestamp_us i64 | key_len i32 (-1 = null) | value_len i32 (-1 = null)
             | header_count u16 | key | value
             | header_count x (name_len u16 | value_len u32 | name utf-8 | value)

Version 3 carries a table of where each record starts (entry 0 is always 0; the records begin
right after the table, at ``HEADER.size + 4 * count``). The layout is a chain of length-prefixed
fields, so without it a reader must walk records 0..i-1 to find record i; the Spark reader's
workers (``gateway/pipeline/columnar.py``) decode a block with numpy alone when it has one, and
readers of a window jump straight to its first record. Every writer of blocks knows each
record's length as it writes it, so it records the starts on the way (:class:`StartsWriter`);
nothing walks a block to make a table. 4 bytes more per record. Version 2 is not used: it is
the embedded log's prefix of a stored native block (``backends/embedded/payload.py``), whose
first bytes share this header's layout. Readers accept both 1 (blocks stored before
2026-11-25, and what a reader that asked for no tables gets) and 3.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

from gateway.model import Record

VERSION = 1  # no start table
VERSION_STARTS = 3  # with the record start table (see the module docstring: 2 is taken)
VERSIONS = (VERSION, VERSION_STARTS)
HEADER = struct.Struct("<BIqq")
RECORD = struct.Struct("<qiiH")
FIELD = struct.Struct("<HI")
_LITTLE = sys.byteorder == "little"


class CanonicalCodecError(ValueError):
    """The block is not a valid canonical batch."""


def new_starts() -> array[int]:
    """An empty start table for a writer to append record positions to (u32, any platform)."""
    return array("I")


def block_head(starts: array[int], count: int, min_ts: int, max_ts: int) -> bytes:
    """The header and start table of a version-3 block whose records' positions (from the
    first record's byte) are ``starts``: what a writer puts before the records it wrote."""
    if len(starts) != count:
        raise ValueError(f"{len(starts)} record starts for {count} records")
    return HEADER.pack(VERSION_STARTS, count, min_ts, max_ts) + table_bytes(starts)


def table_bytes(starts: array[int]) -> bytes:
    """``starts`` as the little-endian u32s of a start table."""
    if _LITTLE:
        return starts.tobytes()
    swapped = array("I", starts)
    swapped.byteswap()
    return swapped.tobytes()


def records_at(data: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """(version, count, where the first record starts) of the block at ``pos`` of ``data``.
    Refuses an unknown version and a start table that does not fit in ``data``."""
    try:
        version, count, _, _ = HEADER.unpack_from(data, pos)
    except struct.error as exc:
        raise CanonicalCodecError(f"truncated canonical batch: {exc}") from exc
    if version == VERSION:
        return version, count, pos + HEADER.size
    if version == VERSION_STARTS:
        first = pos + HEADER.size + 4 * count
        if first > len(data):
            raise CanonicalCodecError(
                f"start table of {count} records overruns the {len(data) - pos}-byte block"
            )
        return version, count, first
    raise CanonicalCodecError(f"unknown canonical batch version {version}")


def starts_of(block: bytes | memoryview) -> array[int] | None:
    """The start table of a version-3 ``block`` (positions from its first record's byte), None
    for version 1. Not checked against the records (:func:`check_block` does that)."""
    version, count, _ = records_at(block)
    if version != VERSION_STARTS:
        return None
    table = array("I")
    table.frombytes(bytes(block[HEADER.size : HEADER.size + 4 * count]))
    if not _LITTLE:
        table.byteswap()
    return table


def record_position(block: bytes | bytearray | memoryview, index: int) -> int:
    """Where record ``index`` of ``block`` starts (from the block's first byte): a table lookup
    in version 3, a walk over the records before it in version 1."""
    version, count, first = records_at(block)
    if index <= 0:
        return first
    if version == VERSION_STARTS:
        if index >= count:
            return len(block)
        at = HEADER.size + 4 * index
        return first + int.from_bytes(block[at : at + 4], "little")
    pos = first
    unpack = RECORD.unpack_from
    funpack = FIELD.unpack_from
    for _ in range(index):
        _, klen, vlen, nh = unpack(block, pos)
        pos += RECORD.size + (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0)
        for _ in range(nh):
            nlen, hvlen = funpack(block, pos)
            pos += FIELD.size + nlen + hvlen
    return pos


def without_starts(block: bytes | memoryview) -> bytes | memoryview:
    """``block`` as version 1 (its table dropped; no per-record work): what a reader that did
    not ask for tables gets. A version-1 block comes back as it is."""
    version, count, first = records_at(block)
    if version == VERSION:
        return block
    _, _, min_ts, max_ts = HEADER.unpack_from(block, 0)
    return HEADER.pack(VERSION, count, min_ts, max_ts) + bytes(block[first:])


def cut(block: bytes | memoryview, start: int, stop: int) -> bytes | None:
    """Records ``start..stop`` of a version-3 ``block`` as a version-1 block, cut out by its
    start table (no per-record work); None for a version-1 block (it has no table to cut by).
    The header keeps the whole block's timestamps: bounds of the records in the cut."""
    version, count, _ = records_at(block)
    if version != VERSION_STARTS:
        return None
    stop = min(stop, count)
    start = min(start, stop)
    _, _, min_ts, max_ts = HEADER.unpack_from(block, 0)
    head = HEADER.pack(VERSION, stop - start, min_ts, max_ts)
    return head + bytes(block[record_position(block, start) : record_position(block, stop)])


def check_block(block: bytes | memoryview) -> tuple[bytes | memoryview, int]:
    """(the block as version 3, its record count) after checking every record of a block that
    came from outside the gateway (``POST ...?format=binary``): the fields fit the block
    exactly, header names are UTF-8, and a version-3 table matches the records (then the block
    comes back as it is; a version-1 block gets the table made by this same walk). Raises
    :class:`CanonicalCodecError`. Cheaper than :meth:`CanonicalCodec.decode` (no Record)."""
    version, count, first = records_at(block)
    buf = bytes(block)
    starts = new_starts()
    add = starts.append
    unpack = RECORD.unpack_from
    funpack = FIELD.unpack_from
    rsize, fsize = RECORD.size, FIELD.size
    pos = first
    try:
        for _ in range(count):
            add(pos - first)
            _, klen, vlen, nh = unpack(buf, pos)
            pos += rsize + (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0)
            for _ in range(nh):
                nlen, hvlen = funpack(buf, pos)
                pos += fsize
                buf[pos : pos + nlen].decode()
                pos += nlen + hvlen
    except struct.error as exc:
        raise CanonicalCodecError(f"truncated canonical batch: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise CanonicalCodecError(f"header name is not UTF-8: {exc}") from exc
    except OverflowError as exc:  # a block of more than 4 GiB of records
        raise CanonicalCodecError(f"canonical batch too large: {exc}") from exc
    if pos != len(buf):
        raise CanonicalCodecError(
            f"{len(buf) - pos} trailing bytes after {count} records"
            if pos < len(buf)
            else f"truncated canonical batch: its records need {pos} bytes, it has {len(buf)}"
        )
    table = table_bytes(starts)
    if version == VERSION_STARTS:
        if buf[HEADER.size : first] != table:
            raise CanonicalCodecError(_table_mismatch(buf[HEADER.size : first], starts))
        return block, count
    return HEADER.pack(VERSION_STARTS, *HEADER.unpack_from(buf, 0)[1:]) + table + buf[first:], count


def _table_mismatch(raw: bytes, starts: array[int]) -> str:
    """Which entry of a start table ``raw`` differs from the records' real ``starts``."""
    given = array("I")
    given.frombytes(raw)
    if not _LITTLE:
        given.byteswap()
    for i, (a, b) in enumerate(zip(given, starts, strict=True)):
        if a != b:
            return f"record start table says record {i} starts at {a}, it starts at {b}"
    return "record start table does not match the records"  # pragma: no cover


class CanonicalCodec:
    name = "canonical"

    def encode(self, records: Sequence[Record], starts: bool = True) -> bytes:
        """The records as one block: version 3 (with its start table), or version 1 with
        ``starts=False`` (a block that is only read once, record by record: Kafka's Produce)."""
        parts: list[bytes] = [b""]
        append = parts.append
        pack = RECORD.pack
        table = new_starts()
        add = table.append if starts else None
        pos = 0
        rsize, fsize = RECORD.size, FIELD.size
        min_ts = max_ts = -1
        for r in records:
            ts = r.timestamp_us
            if min_ts < 0 or ts < min_ts:
                min_ts = ts
            if ts > max_ts:
                max_ts = ts
            key, value, headers = r.key, r.value, r.headers
            klen = -1 if key is None else len(key)
            vlen = -1 if value is None else len(value)
            append(pack(ts, klen, vlen, len(headers)))
            if add is not None:
                add(pos)
                pos += rsize + (klen if klen > 0 else 0) + (vlen if vlen > 0 else 0)
            if key:
                append(key)
            if value:
                append(value)
            for name, hval in headers:
                raw = name.encode()
                append(FIELD.pack(len(raw), len(hval)))
                append(raw)
                append(hval)
                pos += fsize + len(raw) + len(hval)
        if add is None:
            parts[0] = HEADER.pack(VERSION, len(records), min_ts, max_ts)
        else:
            parts[0] = block_head(table, len(records), min_ts, max_ts)
        return b"".join(parts)

    def decode(self, data: bytes | memoryview, base_offset: int) -> list[Record]:
        buf = bytes(data)
        version, count, first = records_at(buf)
        # version 3: the records' real starts, compared with the table at the end
        seen = new_starts() if version == VERSION_STARTS else None
        see = seen.append if seen is not None else None
        try:
            pos = first
            unpack = RECORD.unpack_from
            funpack = FIELD.unpack_from
            rsize = RECORD.size
            out: list[Record] = []
            offset = base_offset
            for _ in range(count):
                if see is not None:
                    see(pos - first)
                ts, klen, vlen, nh = unpack(buf, pos)
                pos += rsize
                if klen < 0:
                    key = None
                else:
                    key = buf[pos : pos + klen]
                    pos += klen
                if vlen < 0:
                    value = None
                else:
                    value = buf[pos : pos + vlen]
                    pos += vlen
                headers: tuple[tuple[str, bytes], ...] = ()
                if nh:
                    hl = []
                    for _ in range(nh):
                        nlen, hvlen = funpack(buf, pos)
                        pos += 6
                        name = buf[pos : pos + nlen].decode()
                        pos += nlen
                        hl.append((name, buf[pos : pos + hvlen]))
                        pos += hvlen
                    headers = tuple(hl)
                out.append(Record(key, value, headers, ts, offset if base_offset >= 0 else -1))
                if base_offset >= 0:
                    offset += 1
            if pos != len(buf):
                raise CanonicalCodecError(f"{len(buf) - pos} trailing bytes after {count} records")
            if seen is not None and table_bytes(seen) != buf[HEADER.size : first]:
                raise CanonicalCodecError(_table_mismatch(buf[HEADER.size : first], seen))
            return out
        except struct.error as exc:
            raise CanonicalCodecError(f"truncated canonical batch: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise CanonicalCodecError(f"header name is not UTF-8: {exc}") from exc


def peek_header(data: bytes | memoryview) -> tuple[int, int, int]:
    """(count, min_timestamp_us, max_timestamp_us) of an encoded block, without decoding it."""
    version, count, min_ts, max_ts = HEADER.unpack_from(data, 0)
    if version not in VERSIONS:
        raise CanonicalCodecError(f"unknown canonical batch version {version}")
    return count, min_ts, max_ts


CANONICAL = CanonicalCodec()
