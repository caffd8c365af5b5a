"""Kafka 0.8's wire types on the shared layout engine (:mod:`gateway.protocols.layout`).

Kafka's request and response structures (everything but the message sets, which have their own
hand-tuned path in ``messageset.py``) are declared once as layouts in ``codec.py``; ``read``
turns bytes into a NamedTuple of the layout's fields and ``write`` turns such a tuple back into
bytes. Big-endian; strings and byte strings carry an int16 / int32 length where -1 is null;
arrays an int32 count. Sans-IO. Truncated or inconsistent input raises
:class:`RemoteProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from gateway.protocols import layout as engine
from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError
from gateway.protocols.layout import Buffer, Layout, Type

__all__ = [
    "BYTES",
    "COMPACT_STRING",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "MESSAGE_SET",
    "STRING",
    "TAGS",
    "Array",
    "Buffer",
    "CompactArray",
    "Layout",
    "LocalProtocolError",
    "RemoteProtocolError",
    "Type",
    "layout",
]


WIRE = engine.Wire(">")

INT8 = WIRE.int("b", "int8")
INT16 = WIRE.int("h", "int16")
INT32 = WIRE.int("i", "int32")
INT64 = WIRE.int("q", "int64")

_I32 = struct.Struct(">i")


def _need(buf: Buffer, pos: int, n: int, what: str) -> None:
    if n < 0 or pos + n > len(buf):
        raise WIRE.short(what, pos, n, len(buf))


STRING = engine.Text(INT16, nullable=True, bad_utf8_kind="malformed")
"""int16 length + UTF-8; -1 is null."""
BYTES = engine.Blob(INT32, nullable=True)
"""int32 length + bytes; -1 is null."""


def Array(item: Type) -> engine.Array:  # noqa: N802 - reads as the type it builds
    """int32 count + elements. A negative count reads as empty, like the 0.8 readers."""
    return engine.Array(item, INT32)


class MessageSetBytes(Type):
    """int32 size + a MessageSet, kept as a zero-copy memoryview (decoded by ``messageset``)."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[memoryview, int]:
        _need(buf, pos, 4, "message set size")
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
        if n < 0:
            raise RemoteProtocolError(f"negative message set size {n}", "wrong_size")
        _need(buf, pos, n, "message set")
        return memoryview(buf)[pos : pos + n], pos + n

    def write(self, value: Buffer, out: list[Buffer]) -> None:
        out.append(_I32.pack(len(value)))
        out.append(value)


# ------------------------------------------------------------------ flexible (ApiVersions v3+)


def read_uvarint(buf: Buffer, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        _need(buf, pos, 1, "varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise RemoteProtocolError("varint longer than 5 bytes", "malformed")


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class CompactString(Type):
    """uvarint (length + 1) + UTF-8; 0 is null."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[str | None, int]:
        n, pos = read_uvarint(buf, pos)
        if n == 0:
            return None, pos
        _need(buf, pos, n - 1, "compact string")
        try:
            return bytes(buf[pos : pos + n - 1]).decode(), pos + n - 1
        except UnicodeDecodeError:
            raise RemoteProtocolError("string is not UTF-8", "malformed") from None

    def write(self, value: str | None, out: list[Buffer]) -> None:
        if value is None:
            out.append(b"\x00")
            return
        raw = value.encode()
        out.append(uvarint(len(raw) + 1))
        out.append(raw)


class CompactArray(Type):
    __slots__ = ("item",)

    def __init__(self, item: Type) -> None:
        self.item = item

    def read(self, buf: Buffer, pos: int) -> tuple[list[Any], int]:
        n, pos = read_uvarint(buf, pos)
        out = []
        for _ in range(max(0, n - 1)):
            v, pos = self.item.read(buf, pos)
            out.append(v)
        return out, pos

    def write(self, value: Sequence[Any], out: list[Buffer]) -> None:
        out.append(uvarint(len(value) + 1))
        for v in value:
            self.item.write(v, out)


class TaggedFields(Type):
    """A tagged-fields section; read skips every tag, write emits none."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[None, int]:
        n, pos = read_uvarint(buf, pos)
        for _ in range(n):
            _, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            _need(buf, pos, size, "tagged field")
            pos += size
        return None, pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        out.append(b"\x00")


MESSAGE_SET = MessageSetBytes()
COMPACT_STRING = CompactString()
TAGS = TaggedFields()


def layout(name: str, *fields: tuple[str, Type]) -> Layout:
    """A Kafka structure; fields of type :data:`TAGS` at the end default to None so callers
    need not pass them."""
    defaults: dict[str, None] = {}
    for field_name, t in reversed(fields):
        if t is not TAGS:
            break
        defaults[field_name] = None
    return Layout(name, fields, defaults=defaults, wire=WIRE)
