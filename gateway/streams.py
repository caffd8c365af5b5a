"""Stream wrappers the server puts between a socket and a protocol handler.

:class:`GuardedStream` enforces the listener's timeouts without the handler knowing:

- **idle timeout**: no byte in either direction for ``idle_timeout_s`` closes the connection;
- **read timeout** (slowloris): once some bytes of a request arrived and the handler asks for more
  before it has answered, the rest must arrive within ``read_timeout_s``.

It also replays bytes read ahead of the handler (after a PROXY protocol header).
"""

from __future__ import annotations

import trio


class ConnectionTimeout(Exception):
    """The peer went quiet: ``kind`` is "idle" or "read"."""

    def __init__(self, kind: str, seconds: float) -> None:
        super().__init__(f"{kind} timeout after {seconds:g} s")
        self.kind = kind
        self.seconds = seconds


class GuardedStream(trio.abc.Stream):
    def __init__(
        self,
        inner: trio.abc.Stream,
        *,
        prefix: bytes = b"",
        idle_timeout_s: float = 600.0,
        read_timeout_s: float = 60.0,
    ) -> None:
        self.inner = inner
        self._prefix = prefix
        self.idle_timeout_s = idle_timeout_s
        self.read_timeout_s = read_timeout_s
        self._last_activity = trio.current_time()
        self._mid_request = False
        self._draining = False
        self._idle_wait: trio.CancelScope | None = None
        self.bytes_in = 0
        self.bytes_out = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            n = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:n], self._prefix[n:]
            self._note_received(data)
            return data
        while True:
            if self._mid_request:
                kind, limit = "read", self.read_timeout_s
            else:
                if self._draining:
                    return b""  # between requests while draining: end of stream for the handler
                kind, limit = "idle", self.idle_timeout_s
            started = self._last_activity
            with trio.move_on_at(started + limit) as scope:
                if not self._mid_request:
                    self._idle_wait = scope
                try:
                    data = await self.inner.receive_some(max_bytes)
                finally:
                    self._idle_wait = None
            if not scope.cancelled_caught:
                self._note_received(data)
                return bytes(data)
            if self._draining and not self._mid_request:
                return b""
            if self._last_activity == started:  # nothing moved meanwhile (a send would count)
                raise ConnectionTimeout(kind, limit)

    def between_requests(self) -> None:
        """The handler holds no partly received request (it has whole requests only, some
        perhaps still being answered, like a parked long poll): its next wait for bytes is an
        idle wait, not a read timeout."""
        self._mid_request = False

    def drain(self) -> None:
        """The gateway is stopping: a handler waiting for its next request sees end of stream
        now; one in the middle of a request finishes it and sees end of stream after."""
        self._draining = True
        if self._idle_wait is not None:
            self._idle_wait.cancel()

    def _note_received(self, data: bytes | bytearray) -> None:
        self._last_activity = trio.current_time()
        self.bytes_in += len(data)
        self._mid_request = bool(data)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._mid_request = False
        await self.inner.send_all(data)
        self.bytes_out += len(data)
        self._last_activity = trio.current_time()

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class PrefixedStream(trio.abc.Stream):
    """Replays ``prefix`` before reading ``inner`` (bytes read while looking for a PROXY header,
    handed to the TLS layer or the handler)."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self.inner = inner
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            n = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:n], self._prefix[n:]
            return data
        return await self.inner.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()
