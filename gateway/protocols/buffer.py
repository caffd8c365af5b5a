"""The one receive buffer every protocol's codec cuts its frames from.

Bytes are appended to a ``bytearray``; what a codec has taken is skipped with a read offset
(``pos``) instead of being deleted, and the consumed head is dropped only when it exceeds half of
the buffer (or all of it was consumed, then the buffer is simply cleared). So cutting a frame
costs one copy of the frame and no memmove of the rest per frame, and a buffer of many small
frames (a pipelined produce burst) is compacted at most once per refill.

A codec peeks at a frame's header with :meth:`ReceiveBuffer.peek` (``struct.unpack_from`` at the
read offset), checks the size against its budget and takes the body with :meth:`take` once
:func:`len` says it is all there; text protocols cut up to a delimiter with :meth:`take_until`.
Sans-IO: no trio, no sockets.
"""

from __future__ import annotations

import struct
from typing import Any

from gateway.protocols.errors import RemoteProtocolError

Buffer = bytes | bytearray | memoryview


class ReceiveBuffer:
    """Received bytes not yet taken. ``data[pos:]`` is what is left; ``data`` and ``pos`` are
    public so a codec can ``unpack_from(buf.data, buf.pos)`` without a method call."""

    __slots__ = ("data", "pos")

    def __init__(self) -> None:
        self.data = bytearray()
        self.pos = 0

    def feed(self, data: Buffer) -> None:
        """Append ``data``, first dropping the consumed head when it is more than half."""
        pos = self.pos
        if pos:
            if pos >= len(self.data):
                self.data.clear()
                self.pos = 0
            elif pos * 2 > len(self.data):
                del self.data[:pos]
                self.pos = 0
        self.data += data

    def __len__(self) -> int:
        return len(self.data) - self.pos

    def peek(self, header: struct.Struct) -> tuple[Any, ...] | None:
        """``header`` unpacked at the read offset (nothing taken), None while it is not whole."""
        if len(self.data) - self.pos < header.size:
            return None
        return header.unpack_from(self.data, self.pos)

    def skip(self, n: int) -> None:
        """Drop ``n`` bytes (a header already read with :meth:`peek`)."""
        self.pos += n

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (the caller checked they are there), copied once."""
        pos = self.pos
        end = pos + n
        with memoryview(self.data) as view:
            out = bytes(view[pos:end])  # one copy (a bytearray slice would copy twice)
        if end >= len(self.data):
            self.data.clear()
            self.pos = 0
        else:
            self.pos = end
        return out

    def take_until(self, delimiter: bytes, max_bytes: int) -> bytes | None:
        """The bytes before the next ``delimiter`` (which is dropped), None while there is none.
        Raises ValueError when ``max_bytes`` pass without one (the codec turns that into its
        protocol error)."""
        at = self.data.find(delimiter, self.pos)
        if at < 0:
            if len(self) > max_bytes:
                raise ValueError(f"no {delimiter!r} within {max_bytes} bytes")
            return None
        if at - self.pos > max_bytes:
            raise ValueError(f"no {delimiter!r} within {max_bytes} bytes")
        out = self.take(at - self.pos)
        self.skip(len(delimiter))
        return out


class SizePrefixedFrames:
    """Frames that start with their body's size (Kafka's int32, Cursus's uint32; big-endian):
    ``next_frame()`` cuts one complete body (without the size) or returns None while more bytes
    are needed. A size outside ``min_size..max_frame_bytes`` raises RemoteProtocolError with
    ``kind`` before any of the body is buffered for it (a peer cannot make the gateway wait for a
    frame it will refuse)."""

    __slots__ = ("_buf", "_size_at", "kind", "max_frame_bytes", "min_size")

    def __init__(
        self,
        max_frame_bytes: int,
        *,
        signed: bool = False,
        min_size: int = 0,
        kind: str = "frame_too_large",
    ) -> None:
        self._buf = ReceiveBuffer()
        self._size_at = struct.Struct(">i" if signed else ">I").unpack_from
        self.max_frame_bytes = max_frame_bytes
        self.min_size = min_size
        self.kind = kind

    def feed(self, data: Buffer) -> None:
        self._buf.feed(data)

    def __len__(self) -> int:
        return len(self._buf)

    def next_frame(self) -> bytes | None:
        buf = self._buf
        data, pos = buf.data, buf.pos
        if len(data) - pos < 4:
            return None
        (size,) = self._size_at(data, pos)
        if size < self.min_size or size > self.max_frame_bytes:
            raise RemoteProtocolError(
                f"frame size {size} outside {self.min_size}..{self.max_frame_bytes}", self.kind
            )
        if len(data) - pos < 4 + size:
            return None
        buf.skip(4)
        return buf.take(size)
