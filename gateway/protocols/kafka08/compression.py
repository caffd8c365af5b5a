"""Kafka 0.8 message compression (docs/protocols/kafka08.md): gzip (zlib), snappy (raw and xerial
snappy-java framing) and lz4 in the 0.8.2 framing (LZ4 frame with Kafka's faulty header
checksum), through cramjam. Sans-IO; errors raise :class:`CompressionError`."""

from __future__ import annotations

import struct
import zlib

import cramjam

from gateway.protocols.steps import Steps, finish

NONE, GZIP, SNAPPY, LZ4 = 0, 1, 2, 3
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
XERIAL_BLOCK = 32 * 1024
LZ4_MAGIC = b"\x04\x22\x4d\x18"
_BE32 = struct.Struct(">i")
_LE32 = struct.Struct("<I")
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
MAX_DECOMPRESSED = 64 << 20
"""The most one compressed batch (or wrapper) may inflate to. Real batches inflate a few times
their size (at most ``message_max_bytes``, 1 MB); a hostile one of zeros claims it all. Why not
more: zstd and lz4 decompress in one call (cramjam has no bounded-output stream), and at 256
MiB (this bound before) that call held the event loop 230 ms (zstd) and 460 ms (lz4), mostly
the page faults of the buffer and its copy; at 64 MiB about a quarter of that."""
INFLATE_STEP = 16 << 20
"""gzip output inflated in one step (see :func:`gzip_steps`)."""


class CompressionError(ValueError):
    """A compressed wrapper that cannot be decompressed (the broker answers InvalidMessage)."""


# ------------------------------------------------------------------------------- gzip


def gzip_compress(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: a gzip file, as GZIPOutputStream
    return c.compress(data) + c.flush()


def gzip_decompress(data: bytes, limit: int | None = None) -> bytes:
    """:func:`gzip_steps` in one go."""
    return finish(gzip_steps(data, limit))


def gzip_steps(data: bytes, limit: int | None = None) -> Steps[bytes]:
    """A gzip (or zlib) payload inflated :data:`INFLATE_STEP` bytes at a time, yielding
    between two (``gateway.protocols.steps``), at most ``limit`` bytes (default
    :data:`MAX_DECOMPRESSED`). A megabyte of gzip can inflate to a gigabyte; zlib inflates
    such runs at about 400 MB a second (256 MiB of zeros: 0.7 s), so the whole bound in one
    call would hold the event loop for 0.2 s; 16 MiB takes about 40 ms."""
    limit = MAX_DECOMPRESSED if limit is None else limit
    d = zlib.decompressobj(47)  # gzip or zlib header, auto-detected
    parts = []
    total = 0
    tail = data
    try:
        while True:
            room = min(INFLATE_STEP, limit - total + 1)  # a byte more tells it is beyond
            chunk = d.decompress(tail, room)
            total += len(chunk)
            if total > limit:
                raise CompressionError("gzip payload inflates beyond the limit")
            parts.append(chunk)
            tail = d.unconsumed_tail
            if d.eof or (not tail and len(chunk) < room):
                break  # the end of the stream, or of the input (a truncated one: what came)
            yield
    except zlib.error as exc:
        raise CompressionError(f"bad gzip payload: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)


# ------------------------------------------------------------------------------- snappy


def snappy_compress(data: bytes, xerial: bool = True) -> bytes:
    """xerial framing (what the JVM writes and every reader accepts) or one raw block."""
    if not xerial:
        return bytes(cramjam.snappy.compress_raw(data))
    parts = [XERIAL_HEADER]
    view = memoryview(data)
    for i in range(0, len(data), XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[i : i + XERIAL_BLOCK]))
        parts.append(_BE32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def snappy_decompress(data: bytes) -> bytes:
    """xerial framing when the payload starts with its 8-byte magic, else one raw block."""
    try:
        if len(data) >= 16 and data[:8] == XERIAL_MAGIC:
            out = []
            pos, n = 16, len(data)
            while pos < n:
                if pos + 4 > n:
                    raise CompressionError("truncated xerial snappy block length")
                (size,) = _BE32.unpack_from(data, pos)
                pos += 4
                if size < 0 or pos + size > n:
                    raise CompressionError("xerial snappy block runs past the payload")
                out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + size])))
                pos += size
            return b"".join(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"bad snappy payload: {exc}") from None


# ------------------------------------------------------------------------------- lz4

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (only ever used on a few header bytes, so plain Python is fine)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed
        v4 = (seed - _P1) & _M32
        while pos + 16 <= n:
            a, b, c, d = struct.unpack_from("<IIII", data, pos)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (k,) = _LE32.unpack_from(data, pos)
        h = (_rotl((h + k * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def lz4_compress(data: bytes) -> bytes:
    """An LZ4 frame as Kafka 0.8.2 writes it: 64 KiB independent blocks, no content size, no
    checksums, and the header checksum computed over magic + descriptor (the 0.8.2 bug)."""
    descriptor = bytes([0x60, 0x40])  # version 01, independent blocks; 64 KiB max block
    hc = (xxh32(LZ4_MAGIC + descriptor) >> 8) & 0xFF
    parts = [LZ4_MAGIC, descriptor, bytes([hc])]
    view = memoryview(data)
    for i in range(0, len(data), 64 << 10):
        chunk = view[i : i + (64 << 10)]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) >= len(chunk):
            parts.append(_LE32.pack(len(chunk) | 0x80000000))
            parts.append(bytes(chunk))
        else:
            parts.append(_LE32.pack(len(block)))
            parts.append(block)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)


def lz4_decompress(data: bytes) -> bytes:
    """An LZ4 frame with either header checksum (the 0.8.2 one or the correct one: the
    checksum is not verified, so both framings are read)."""
    n = len(data)
    if n < 7 or data[:4] != LZ4_MAGIC:
        raise CompressionError("not an LZ4 frame")
    flg, bd = data[4], data[5]
    if flg >> 6 != 1:
        raise CompressionError(f"unsupported LZ4 frame version {flg >> 6}")
    max_block = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
    if max_block is None:
        raise CompressionError("bad LZ4 block maximum size")
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1  # content size, dict id, HC
    block_checksum = bool(flg & 0x10)
    out = []
    scratch = bytearray(max_block)
    total = 0
    try:
        while True:
            if pos + 4 > n:
                raise CompressionError("truncated LZ4 frame")
            (size,) = _LE32.unpack_from(data, pos)
            pos += 4
            if size == 0:
                break
            raw = size & 0x80000000
            size &= 0x7FFFFFFF
            if pos + size > n or size > max_block + 16:
                raise CompressionError("LZ4 block runs past the frame")
            if raw:
                out.append(data[pos : pos + size])
            else:
                got = cramjam.lz4.decompress_block_into(
                    data[pos : pos + size], scratch, output_len=max_block
                )
                out.append(bytes(scratch[:got]))
            total += len(out[-1])
            if total > MAX_DECOMPRESSED:
                raise CompressionError("LZ4 payload inflates beyond the limit")
            pos += size + (4 if block_checksum else 0)
    except cramjam.DecompressionError as exc:
        raise CompressionError(f"bad LZ4 block: {exc}") from None
    return b"".join(out)


def compress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return gzip_compress(data)
    if codec == SNAPPY:
        return snappy_compress(data)
    if codec == LZ4:
        return lz4_compress(data)
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes) -> bytes:
    return finish(decompress_steps(codec, data))


def decompress_steps(codec: int, data: bytes) -> Steps[bytes]:
    """gzip in steps (:func:`gzip_steps`), the others in one call (snappy claims at most
    about 21 times its size, lz4 decompresses at memory speed)."""
    if codec == GZIP:
        return (yield from gzip_steps(data))
    if codec == SNAPPY:
        return snappy_decompress(data)
    if codec == LZ4:
        return lz4_decompress(data)
    raise CompressionError(f"unknown compression codec {codec}")
