"""What a stored frame's payload holds: a canonical block, or a protocol's own block.

A batch that arrives as a canonical block, or as plain records, is stored canonical
(``gateway.canonical``: payload version 3 since 2026-11-25, with its record start table; logs
written before hold version 1, read the same way). A batch that arrives whole in a *native*
format, one of :data:`NATIVE_FORMATS` (a Cursus batch, a TANK bundle, a Kafka record batch v2),
is stored as received behind a small prefix (payload version 2), so a consumer of the same
protocol gets it back with no per-record work, as from the memory backend; other readers decode
it with its codec::

    version u8 (=2) | count u32 | min_timestamp_us i64 (-1: unknown) | max_timestamp_us i64
    | name_len u8 | codec name (ascii) | block

The first 21 bytes have the layout of the canonical header, so frame checks read the version
and count of either kind the same way (which is why the canonical versions skip 2). A native
block's layout is then an on-disk format: a change to it needs a new codec name.
"""

from __future__ import annotations

import importlib

from gateway.canonical import CANONICAL, VERSION_STARTS, VERSIONS, CanonicalCodecError, peek_header
from gateway.canonical import HEADER as PREFIX
from gateway.model import BatchCodec, ErrorCode, GatewayError, RecordBatch

NATIVE_VERSION = 2
# codec name -> "module:attribute", imported on first use (a reader may open a log written by
# a listener this process does not run)
NATIVE_FORMATS: dict[str, str] = {
    "cursus": "gateway.protocols.cursus.block:CURSUS_BLOCK",
    "tank-bundle": "gateway.protocols.tank.bundle:TANK_BUNDLE",
    "kafka-v2": "gateway.protocols.kafka.native:KAFKA_V2",
}
_codecs: dict[str, BatchCodec] = {}
_prefixes: dict[str, bytes] = {}


def codec_named(name: str) -> BatchCodec:
    """The codec stored under ``name``; GatewayError(CORRUPT_MESSAGE) for an unknown name."""
    codec = _codecs.get(name)
    if codec is None:
        where = NATIVE_FORMATS.get(name)
        if where is None:
            raise GatewayError(
                ErrorCode.CORRUPT_MESSAGE, f"stored block in unknown format {name!r}"
            )
        module, attr = where.split(":")
        codec = _codecs[name] = getattr(importlib.import_module(module), attr)
    return codec


def _name_field(name: str) -> bytes:
    field = _prefixes.get(name)
    if field is None:
        raw = name.encode("ascii")
        field = _prefixes[name] = bytes((len(raw),)) + raw
    return field


def encode_payload(batch: RecordBatch) -> tuple[bytes | memoryview, int, int]:
    """(payload, count, max_timestamp_us) to store for ``batch``."""
    codec = batch.codec
    if codec is not None and codec is not CANONICAL and codec.name in NATIVE_FORMATS:
        block = batch.encoded_as(codec)
        if block is not None and batch.max_timestamp_us >= 0:
            max_ts = batch.max_timestamp_us
            prefix = PREFIX.pack(NATIVE_VERSION, batch.count, -1, max_ts) + _name_field(codec.name)
            return prefix + block, batch.count, max_ts
    payload = batch.encode(CANONICAL)
    try:
        count, _, max_ts = peek_header(payload)
    except (CanonicalCodecError, ValueError) as exc:
        raise GatewayError(ErrorCode.CORRUPT_MESSAGE, f"bad canonical batch: {exc}") from None
    if count != batch.count:
        raise GatewayError(
            ErrorCode.CORRUPT_MESSAGE,
            f"canonical block holds {count} records, the batch says {batch.count}",
        )
    return payload, count, max_ts


def payload_count(payload: bytes | memoryview) -> tuple[int, int] | None:
    """(version, count) from a payload's prefix, or None when the version is unknown."""
    version, count = PREFIX.unpack_from(payload, 0)[:2]
    if version not in VERSIONS and version != NATIVE_VERSION:
        return None
    return version, count


def payload_problem(payload: bytes | memoryview, count: int) -> str:
    """Why a stored payload whose frame says ``count`` records cannot be served ("" when its
    prefix is sound): unknown version, another count, or a canonical start table that does not
    fit the payload (its first entry must be 0, its last inside the records). O(1): the frame's
    CRC-32C already covers every byte; this catches a frame written wrong, not a torn one."""
    header = payload_count(payload)
    if header is None:
        return "unknown version"
    version, found = header
    if found != count:
        return f"count {count}/{found}"
    if version == VERSION_STARTS:
        first = PREFIX.size + 4 * count
        if count < 1 or first + 18 > len(payload):  # 18: the smallest record
            return f"start table of {count} records does not fit {len(payload)} bytes"
        head = int.from_bytes(payload[PREFIX.size : PREFIX.size + 4], "little")
        last = int.from_bytes(payload[first - 4 : first], "little")
        if head != 0 or last > len(payload) - first - 18:
            return f"start table entries {head}..{last} do not fit {len(payload) - first} bytes"
    return ""


def decode_payload(payload: memoryview) -> tuple[BatchCodec, memoryview]:
    """(codec, block) of a stored payload."""
    if payload[0] != NATIVE_VERSION:
        return CANONICAL, payload
    start = PREFIX.size + 1
    end = start + payload[PREFIX.size]
    return codec_named(bytes(payload[start:end]).decode("ascii", "replace")), payload[end:]
