"""Decompressing a produced batch's records within a bound, sans-IO: a few kilobytes of zstd or
gzip can claim gigabytes, and the gateway must not allocate what a client claims. At most
:data:`MAX_DECOMPRESSED` bytes (the 0.8 path's bound, 64 MiB) come out of one batch; more is
refused as :class:`TooLarge`. gzip goes through the 0.8 path's bounded reader; snappy's declared
lengths are checked before anything is allocated; zstd and lz4 frames (linked blocks, as
librdkafka writes them) are decompressed into a buffer of the frame's declared content size, or
of growing guesses up to the bound when it declares none (librdkafka's lz4, the Java client's
streaming zstd)."""

from __future__ import annotations

import struct
from typing import Any

import cramjam

from gateway.protocols.kafka08 import compression as legacy
from gateway.protocols.steps import Steps, finish

MAX_DECOMPRESSED = legacy.MAX_DECOMPRESSED
GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class TooLarge(ValueError):
    """The records would decompress to more than the bound."""


class Corrupt(ValueError):
    """The records do not decompress."""


def inflate(codec: int, data: bytes, limit: int | None = None) -> bytes:
    """:func:`inflate_steps` in one go."""
    return finish(inflate_steps(codec, data, limit))


def inflate_steps(codec: int, data: bytes, limit: int | None = None) -> Steps[bytes]:
    """The records of a batch compressed with ``codec``, at most ``limit`` bytes (default
    :data:`MAX_DECOMPRESSED`), in steps (``gateway.protocols.steps``) where it takes long:
    gzip inflates 16 MiB a step (a megabyte of it can claim a gigabyte). The others go in one
    call: their worst case within the bound, 64 MiB of zeros from about 300 KB (lz4) or 2 KB
    (zstd), takes about 60 ms (lz4) and 30 ms (zstd), and snappy cannot claim more than about
    21 times its size."""
    limit = MAX_DECOMPRESSED if limit is None else limit
    try:
        if codec == GZIP:
            out = yield from legacy.gzip_steps(data, limit)
        elif codec == LZ4:
            return _grow(cramjam.lz4.decompress_into, data, _lz4_content_size(data), limit)
        elif codec == SNAPPY:
            if _snappy_declared(data) > limit:
                raise TooLarge(f"snappy records claim more than {limit} bytes")
            out = legacy.snappy_decompress(data)
        elif codec == ZSTD:
            return _grow(cramjam.zstd.decompress_into, data, _zstd_content_size(data), limit)
        else:
            raise Corrupt(f"compression codec {codec} is not a Kafka codec")
    except legacy.CompressionError as exc:
        if "beyond the limit" in str(exc):
            raise TooLarge(str(exc)) from None
        raise Corrupt(str(exc)) from None
    if len(out) > limit:
        raise TooLarge(f"records decompress to {len(out)} bytes, above {limit}")
    return out


def _uvarint(data: bytes, pos: int) -> int:
    value = shift = 0
    while pos < len(data) and shift < 35:
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value
        pos += 1
        shift += 7
    raise Corrupt("snappy length varint truncated")


def _snappy_declared(data: bytes) -> int:
    """The decompressed size a raw snappy block or xerial framing declares."""
    if len(data) >= 16 and data[:8] == legacy.XERIAL_MAGIC:
        total, pos = 0, 16
        while pos + 4 <= len(data):
            (size,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if size < 0 or pos + size > len(data):
                raise Corrupt("xerial snappy block runs past the payload")
            total += _uvarint(data, pos)
            pos += size
        return total
    return _uvarint(data, 0)


def _zstd_content_size(data: bytes) -> int | None:
    """The Frame_Content_Size of the first zstd frame, None when it declares none."""
    if len(data) < 6 or data[:4] != _ZSTD_MAGIC:
        raise Corrupt("not a zstd frame")
    fhd = data[4]
    fcs_flag, single, dict_flag = fhd >> 6, (fhd >> 5) & 1, fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    width = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if width == 0:
        return None
    if pos + width > len(data):
        raise Corrupt("zstd frame header truncated")
    size = int.from_bytes(data[pos : pos + width], "little")
    return size + 256 if width == 2 else size


def _lz4_content_size(data: bytes) -> int | None:
    """The content size an LZ4 frame declares (FLG bit 3), None when it declares none."""
    if len(data) < 7 or data[:4] != legacy.LZ4_MAGIC:
        raise Corrupt("not an LZ4 frame")
    if not data[4] & 0x08:
        return None
    if len(data) < 14:
        raise Corrupt("LZ4 frame header truncated")
    return int.from_bytes(data[6:14], "little")


def _grow(decompress_into: Any, data: bytes, declared: int | None, limit: int) -> bytes:
    """Decompress into a buffer of the declared size, or of guesses growing 4x from 4x the
    input, never larger than ``limit``."""
    if declared is not None and declared > limit:
        raise TooLarge(f"records claim {declared} bytes, above {limit}")
    size = declared if declared is not None else max(4 * len(data), 64 << 10)
    while True:
        size = min(size, limit)
        buf = bytearray(size)
        try:
            n = decompress_into(data, buf)
            return bytes(memoryview(buf)[:n])
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise Corrupt(f"bad compressed records: {exc}") from None
            if size >= limit:
                raise TooLarge(f"records decompress to more than {limit} bytes") from None
        size *= 4  # no size declared (or several frames): a larger buffer
