"""The canonical batch encoding: how the embedded log (and the memory backend) store records.

Hand-written because no library has this shape: a small header and length-prefixed fields, packed
and unpacked with precompiled ``struct.Struct`` objects.

Layout (little endian)::

    header:  version u8 (=1) | count u32 | min_timestamp_us i64 | max_timestamp_us i64
    record:  timestamp_us i64 | key_len i32 (-1 = null) | value_len i32 (-1 = null)
             | header_count u16 | key | value
             | header_count x (name_len u16 | value_len u32 | name utf-8 | value)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from gateway.model import Record

VERSION = 1
HEADER = struct.Struct("<BIqq")
RECORD = struct.Struct("<qiiH")
FIELD = struct.Struct("<HI")


class CanonicalCodecError(ValueError):
    """The block is not a valid canonical batch."""


class CanonicalCodec:
    name = "canonical"

    def encode(self, records: Sequence[Record]) -> bytes:
        parts: list[bytes] = [b""]
        append = parts.append
        pack = RECORD.pack
        min_ts = max_ts = -1
        for r in records:
            ts = r.timestamp_us
            if min_ts < 0 or ts < min_ts:
                min_ts = ts
            if ts > max_ts:
                max_ts = ts
            key, value, headers = r.key, r.value, r.headers
            append(
                pack(
                    ts,
                    -1 if key is None else len(key),
                    -1 if value is None else len(value),
                    len(headers),
                )
            )
            if key:
                append(key)
            if value:
                append(value)
            for name, hval in headers:
                raw = name.encode()
                append(FIELD.pack(len(raw), len(hval)))
                append(raw)
                append(hval)
        parts[0] = HEADER.pack(VERSION, len(records), min_ts, max_ts)
        return b"".join(parts)

    def decode(self, data: bytes | memoryview, base_offset: int) -> list[Record]:
        buf = bytes(data)
        try:
            version, count, _, _ = HEADER.unpack_from(buf, 0)
            if version != VERSION:
                raise CanonicalCodecError(f"unknown canonical batch version {version}")
            pos = HEADER.size
            unpack = RECORD.unpack_from
            funpack = FIELD.unpack_from
            rsize = RECORD.size
            out: list[Record] = []
            offset = base_offset
            for _ in range(count):
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
            return out
        except struct.error as exc:
            raise CanonicalCodecError(f"truncated canonical batch: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise CanonicalCodecError(f"header name is not UTF-8: {exc}") from exc


def peek_header(data: bytes | memoryview) -> tuple[int, int, int]:
    """(count, min_timestamp_us, max_timestamp_us) of an encoded block, without decoding it."""
    version, count, min_ts, max_ts = HEADER.unpack_from(data, 0)
    if version != VERSION:
        raise CanonicalCodecError(f"unknown canonical batch version {version}")
    return count, min_ts, max_ts


CANONICAL = CanonicalCodec()
