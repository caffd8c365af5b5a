"""Iggy message sets <-> the model: the hot paths of send and poll (pure, no I/O).

SEND_MESSAGES becomes one canonical block in one pass (no per-message objects), which the
embedded log stores as it is; POLL_MESSAGES is written straight from stored canonical windows.
Records in other shapes (another protocol's batches) go through :class:`gateway.model.Record`.

How Iggy fields map (see also session.py): the message id is the reserved header ``_gw.iggy.id``
(16 bytes, u128 LE), stored only when non-zero; otherwise the polled id is derived from
(topic, partition, offset). Typed headers are plain headers plus ``_gw.iggy.kinds`` (one kind
byte per user header) when any is not raw.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from gateway.canonical import CANONICAL, FIELD, RECORD, block_head, new_starts, record_position
from gateway.model import RESERVED_HEADER_PREFIX, Record, RecordBatch
from gateway.protocols.iggy import codec as c

ID_HEADER = RESERVED_HEADER_PREFIX + "iggy.id"
KINDS_HEADER = RESERVED_HEADER_PREFIX + "iggy.kinds"
ZERO_ID = bytes(16)
_IID = struct.Struct("<QQ")
_U32 = struct.Struct("<I")
_POLL_MSG = struct.Struct("<QBQQQII")
_U64_MAX = (1 << 64) - 1
_ID_NAME = ID_HEADER.encode()
_ID_FIELD = FIELD.pack(len(_ID_NAME), 16) + _ID_NAME


def derived_id(topic: str, partition: int, offset: int) -> int:
    """The id of a message stored without one (sent with id 0, or by another protocol): unique
    per topic, partition and offset, stable across polls, never 0."""
    high = 0x80000000 | (zlib.crc32(topic.encode()) & 0x7FFFFFFF)
    return (high << 96) | ((partition & 0xFFFFFFFF) << 64) | offset


# ----------------------------------------------------------------------------- headers


def headers_to_model(block: bytes, raw_id: bytes) -> tuple[tuple[str, bytes], ...]:
    """An Iggy headers block and message id (omitted when 0) as model headers. Raises
    ValidationError (4018/4019) for a bad header."""
    entries = c.decode_headers(block)
    out = [(key, bytes(value)) for key, _, value in entries]
    if any(kind != c.HeaderKind.RAW for _, kind, _ in entries):
        out.append((KINDS_HEADER, bytes(kind for _, kind, _ in entries)))
    if raw_id != ZERO_ID:
        out.append((ID_HEADER, bytes(raw_id)))
    return tuple(out)


def headers_from_model(headers: Iterable[tuple[str, Any]]) -> tuple[int, bytes]:
    """(message id or 0, Iggy headers block) of a stored record's model headers. Reserved
    headers of other protocols are left out; without ``_gw.iggy.kinds`` headers are raw."""
    mid = 0
    kinds = b""
    user = []
    for name, value in headers:
        if name.startswith(RESERVED_HEADER_PREFIX):
            if name == ID_HEADER and len(value) == 16:
                lo, hi = _IID.unpack(value)
                mid = lo | (hi << 64)
            elif name == KINDS_HEADER:
                kinds = bytes(value)
            continue
        raw = name.encode()
        if raw and len(raw) <= 255:
            user.append((raw, bytes(value)))
    if not user:
        return mid, b""
    if len(kinds) != len(user):
        kinds = bytes([c.HeaderKind.RAW]) * len(user)
    u32 = _U32.pack
    block = b"".join(
        u32(len(k)) + k + bytes((kind,)) + u32(len(v)) + v
        for (k, v), kind in zip(user, kinds, strict=True)
    )
    return mid, block


# ----------------------------------------------------------------------------- send


def send_batch(messages: Sequence[tuple[Any, Any, Any]], key: bytes | None, ts: int) -> RecordBatch:
    """The messages of a decoded SEND_MESSAGES as one canonical block (all stamped ``ts``)."""
    parts: list[Any] = [b""]
    append = parts.append
    pack = RECORD.pack
    fpack = FIELD.pack
    klen = -1 if key is None else len(key)
    zero = ZERO_ID
    id_field = _ID_FIELD
    starts = new_starts()  # the block's start table, written on the way (canonical version 3)
    start = starts.append
    at = 0  # where the next record starts
    fixed = RECORD.size + (klen if klen > 0 else 0)  # of every record: head and key
    id_size = len(id_field) + 16
    for raw_id, headers, payload in messages:
        start(at)
        if headers:
            hdrs = headers_to_model(headers, raw_id)
            append(pack(ts, klen, len(payload), len(hdrs)))
            if key:
                append(key)
            append(payload)
            at += fixed + len(payload)
            for name, value in hdrs:
                raw = name.encode()
                append(fpack(len(raw), len(value)))
                append(raw)
                append(value)
                at += FIELD.size + len(raw) + len(value)
        elif raw_id == zero:
            append(pack(ts, klen, len(payload), 0))
            if key:
                append(key)
            append(payload)
            at += fixed + len(payload)
        else:
            append(pack(ts, klen, len(payload), 1))
            if key:
                append(key)
            append(payload)
            append(id_field)
            append(raw_id)
            at += fixed + len(payload) + id_size
    parts[0] = block_head(starts, len(messages), ts, ts)
    return RecordBatch(
        encoded=b"".join(parts), codec=CANONICAL, count=len(messages), max_timestamp_us=ts
    )


# ----------------------------------------------------------------------------- poll


_ENTRY = _POLL_MSG.size + 4  # an entry's fixed part: message header, then the value's length


def _from_canonical(
    block: Any, start: int, stop: int, base_offset: int, id_base: int, parts: list[Any], room: int
) -> tuple[int, int]:
    """Append the Iggy poll entries of records ``start..stop`` of a canonical block while they
    fit ``room`` bytes (at least one when ``parts`` holds none yet): (entries, bytes)."""
    append = parts.append
    taken = 0
    size = 0
    unpack = RECORD.unpack_from
    funpack = FIELD.unpack_from
    pack = _POLL_MSG.pack
    u32 = _U32.pack
    crc = zlib.crc32
    rsize = RECORD.size
    pos = record_position(block, start)  # version 3: from the start table, no walk
    for i in range(start, stop):
        ts, klen, vlen, nh = unpack(block, pos)
        pos += rsize
        if klen > 0:
            pos += klen
        vstart = pos
        if vlen > 0:
            pos += vlen
        hstart = pos
        for _ in range(nh):
            nlen, hvlen = funpack(block, pos)
            pos += 6 + nlen + hvlen
        value = block[vstart:hstart] if vlen > 0 else b""
        offset = base_offset + i
        if size + _ENTRY + len(value) + 8 * nh > room and (taken or len(parts) > 1):
            break  # (its typed headers only add to that estimate)
        if nh:
            hdrs = []
            hp = hstart
            for _ in range(nh):
                nlen, hvlen = funpack(block, hp)
                hp += 6
                name = bytes(block[hp : hp + nlen]).decode()
                hp += nlen
                hdrs.append((name, bytes(block[hp : hp + hvlen])))
                hp += hvlen
            mid, hblock = headers_from_model(hdrs)
            if not mid:
                mid = id_base | offset
        else:
            mid, hblock = id_base | offset, b""
        append(
            pack(
                offset, 1, ts if ts >= 0 else 0, mid & _U64_MAX, mid >> 64, crc(value), len(hblock)
            )
        )
        if hblock:
            append(hblock)
        append(u32(len(value)))
        append(value)
        taken += 1
        size += _ENTRY + len(hblock) + len(value)
    return taken, size


def _from_records(
    records: Sequence[Record], id_base: int, parts: list[Any], room: int
) -> tuple[int, int]:
    append = parts.append
    pack = _POLL_MSG.pack
    u32 = _U32.pack
    crc = zlib.crc32
    taken = 0
    size = 0
    for r in records:
        offset = r.offset
        if r.headers:
            mid, hblock = headers_from_model(r.headers)
            if not mid:
                mid = id_base | offset
        else:
            mid, hblock = id_base | offset, b""
        value = r.value or b""
        entry = _ENTRY + len(hblock) + len(value)
        if size + entry > room and (taken or len(parts) > 1):
            break
        ts = r.timestamp_us if r.timestamp_us >= 0 else 0
        append(pack(offset, 1, ts, mid & _U64_MAX, mid >> 64, crc(value), len(hblock)))
        if hblock:
            append(hblock)
        append(u32(len(value)))
        append(value)
        taken += 1
        size += entry
    return taken, size


_POLL_HEAD = struct.Struct("<IQI")


def poll_reply(
    topic: str,
    partition: int,
    current_offset: int,
    batches: Sequence[RecordBatch],
    max_bytes: int = 1 << 62,
) -> tuple[bytes, int, int]:
    """(POLL_MESSAGES reply payload, message count, last offset) for fetched batch windows of
    ``topic``'s 0-based ``partition``; the reply names partition id ``partition + 1``. The
    messages stop before the one that would take the reply past ``max_bytes`` (the first one
    goes out whatever its size)."""
    id_base = derived_id(topic, partition, 0)
    parts: list[Any] = [b""]
    count = 0
    last = -1
    room = max_bytes - _POLL_HEAD.size
    for b in batches:
        if not b.count:
            continue
        window = b.encoded_window(CANONICAL)
        if window is not None:
            block, start, stop = window
            n, size = _from_canonical(block, start, stop, b.base_offset, id_base, parts, room)
        else:
            n, size = _from_records(b.records, id_base, parts, room)
        count += n
        room -= size
        if n:
            last = b.first_offset + n - 1
        if n < b.count:
            break
    parts[0] = _POLL_HEAD.pack(partition + 1, current_offset, count)
    return b"".join(parts), count, last
