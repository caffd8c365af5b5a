"""Declared layouts: a table of fields and types from which decode and encode both follow.

Kafka's request and response structures (everything but the message sets, which have their own
hand-tuned path in ``messageset.py``) are declared once as :class:`Layout` objects; ``read`` turns
bytes into a NamedTuple of the layout's fields and ``write`` turns such a tuple back into bytes.
Sans-IO: no sockets, no trio. Truncated or inconsistent input raises :class:`RemoteProtocolError`.
"""

from __future__ import annotations

import struct
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError

Buffer = bytes | bytearray | memoryview


class Type:
    """One wire type: ``read(buf, pos) -> (value, new_pos)`` and ``write(value, out)``."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        raise NotImplementedError

    def write(self, value: Any, out: list[Buffer]) -> None:
        raise NotImplementedError


class Fixed(Type):
    __slots__ = ("st", "size", "name")

    def __init__(self, fmt: str, name: str) -> None:
        self.st = struct.Struct(fmt)
        self.size = self.st.size
        self.name = name

    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        end = pos + self.size
        if end > len(buf):
            raise RemoteProtocolError(f"truncated {self.name} at byte {pos}", "truncated")
        return self.st.unpack_from(buf, pos)[0], end

    def write(self, value: Any, out: list[Buffer]) -> None:
        try:
            out.append(self.st.pack(value))
        except struct.error as exc:
            raise LocalProtocolError(f"{self.name}: {value!r}: {exc}") from None


INT8 = Fixed(">b", "int8")
INT16 = Fixed(">h", "int16")
INT32 = Fixed(">i", "int32")
INT64 = Fixed(">q", "int64")

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _need(buf: Buffer, pos: int, n: int, what: str) -> None:
    if n < 0 or pos + n > len(buf):
        raise RemoteProtocolError(
            f"{what} of {n} bytes at byte {pos} runs past the end ({len(buf)} bytes)", "truncated"
        )


class String(Type):
    """int16 length + UTF-8; -1 is null."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[str | None, int]:
        _need(buf, pos, 2, "string length")
        (n,) = _I16.unpack_from(buf, pos)
        pos += 2
        if n == -1:
            return None, pos
        if n < -1:
            raise RemoteProtocolError(f"negative string length {n}", "malformed")
        _need(buf, pos, n, "string")
        try:
            return bytes(buf[pos : pos + n]).decode(), pos + n
        except UnicodeDecodeError:
            raise RemoteProtocolError("string is not UTF-8", "malformed") from None

    def write(self, value: str | None, out: list[Buffer]) -> None:
        if value is None:
            out.append(b"\xff\xff")
            return
        raw = value.encode()
        if len(raw) > 32767:
            raise LocalProtocolError(f"string of {len(raw)} bytes is too long")
        out.append(_I16.pack(len(raw)))
        out.append(raw)


class Bytes(Type):
    """int32 length + bytes; -1 is null."""

    __slots__ = ()

    def read(self, buf: Buffer, pos: int) -> tuple[bytes | None, int]:
        _need(buf, pos, 4, "bytes length")
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
        if n == -1:
            return None, pos
        if n < -1:
            raise RemoteProtocolError(f"negative bytes length {n}", "malformed")
        _need(buf, pos, n, "bytes")
        return bytes(buf[pos : pos + n]), pos + n

    def write(self, value: Buffer | None, out: list[Buffer]) -> None:
        if value is None:
            out.append(b"\xff\xff\xff\xff")
            return
        out.append(_I32.pack(len(value)))
        out.append(value)


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


class Array(Type):
    """int32 count + elements. A negative count reads as empty, like the 0.8 readers."""

    __slots__ = ("item",)

    def __init__(self, item: Type) -> None:
        self.item = item

    def read(self, buf: Buffer, pos: int) -> tuple[list[Any], int]:
        _need(buf, pos, 4, "array count")
        (n,) = _I32.unpack_from(buf, pos)
        pos += 4
        out = []
        read = self.item.read
        for _ in range(max(0, n)):
            v, pos = read(buf, pos)
            out.append(v)
        return out, pos

    def write(self, value: Sequence[Any], out: list[Buffer]) -> None:
        out.append(_I32.pack(len(value)))
        write = self.item.write
        for v in value:
            write(v, out)


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


STRING = String()
BYTES = Bytes()
MESSAGE_SET = MessageSetBytes()
COMPACT_STRING = CompactString()
TAGS = TaggedFields()


class Layout(Type):
    """A structure: fields in wire order. ``cls`` is the NamedTuple its values decode into.
    Fields whose type is :data:`TAGS` default to None so callers need not pass them."""

    __slots__ = ("name", "fields", "types", "cls")

    def __init__(self, name: str, fields: Sequence[tuple[str, Type]]) -> None:
        self.name = name
        self.fields = tuple(fields)
        self.types = tuple(t for _, t in self.fields)
        trailing = 0
        for t in reversed(self.types):
            if t is not TAGS:
                break
            trailing += 1
        self.cls = namedtuple(name, [n for n, _ in self.fields], defaults=[None] * trailing)

    def read(self, buf: Buffer, pos: int) -> tuple[Any, int]:
        values = []
        for t in self.types:
            v, pos = t.read(buf, pos)
            values.append(v)
        return self.cls(*values), pos

    def write(self, value: Any, out: list[Buffer]) -> None:
        if len(value) != len(self.types):
            raise LocalProtocolError(f"{self.name}: expected {len(self.types)} fields")
        for t, v in zip(self.types, value, strict=True):
            t.write(v, out)

    def decode(self, buf: Buffer, pos: int = 0) -> Any:
        """The whole of ``buf`` from ``pos`` as this layout (trailing bytes are ignored, as the
        0.8 broker's readers do)."""
        try:
            return self.read(buf, pos)[0]
        except struct.error as exc:  # pragma: no cover - every read checks its bounds first
            raise RemoteProtocolError(f"{self.name}: {exc}", "truncated") from None

    def encode(self, value: Any) -> bytes:
        out: list[Buffer] = []
        self.write(value, out)
        return b"".join(out)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.cls(*args, **kwargs)


def layout(name: str, *fields: tuple[str, Type]) -> Layout:
    return Layout(name, fields)
