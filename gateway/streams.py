"""Stream wrappers the server puts between a socket and a protocol handler.

:class:`GuardedStream` enforces the listener's timeouts without the handler knowing:

- **idle timeout**: no byte in either direction for ``idle_timeout_s`` closes the connection;
- **read timeout** (slowloris): a request must be whole within ``read_timeout_s`` of its first
  byte, however its bytes trickle in. A request begins with the first byte received while the
  handler holds no partial request (after an answer, or after it said so with
  :meth:`GuardedStream.between_requests`), and ends when the handler answers or says it holds
  whole requests only; a handler that takes whole requests out of a buffer and keeps part of
  the next one without answering (Kafka ``acks=0``) says so with
  :meth:`GuardedStream.request_done`.

- **send timeout**: a write the client takes no byte of for ``send_timeout_s`` (it stopped
  reading and the socket buffers are full) ends the connection: the write fails as if the peer
  had gone, and :attr:`GuardedStream.send_timed_out` tells the owner why. A write that is
  merely slow (the client reads, slowly) is not cut; on a connection that is not plain TCP
  (TLS) the whole write must be taken within the time. Being quiet is not a blocked write: a
  long-lived stream with nothing to send is never closed by it.

It also replays bytes read ahead of the handler (after a PROXY protocol header).

Over a plain TCP connection (a :class:`trio.SocketStream`) it reads and writes the socket itself
(:class:`FastSocketStream`) instead of going through ``SocketStream``: same results and errors,
but a request/response exchange costs one trip through trio's scheduler (the wait for the next
request) instead of two or three. ``SocketStream`` yields after every successful ``recv`` and
``send`` even when nothing had to wait; here a ``recv`` that finds data already there still
checkpoints, while a ``send`` that completes at once yields only if the task has not waited for
input since its previous send (a task that only sends, a long subscription say, still yields on
every send).
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable
from typing import Any

import trio

DEFAULT_RECEIVE_SIZE = 65536
_CLOSED_ERRNOS = frozenset({errno.EBADF, errno.ENOTSOCK})


def _stream_error(exc: OSError) -> Exception:
    """What ``trio.SocketStream`` raises for a failed socket call."""
    if exc.errno in _CLOSED_ERRNOS:
        return trio.ClosedResourceError("this socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {exc}")


class FastSocketStream(trio.abc.Stream):
    """A plain ``trio.SocketStream`` read and written through its socket directly (see the
    module docstring): the same bytes, results and errors, fewer trips through the scheduler.
    Also used by the benchmarks' load generator (bench/latency.py)."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner
        raw = inner.socket._sock  # type: ignore[attr-defined]  # trio's stdlib socket
        assert isinstance(raw, socket.socket)
        self.raw = raw
        self._sending = False
        self._yield_owed = False  # a send completed without yielding since the last receive
        self.stalled_since: float | None = None  # a send waits for the socket since then

    @staticmethod
    def wrap(inner: trio.abc.Stream) -> FastSocketStream | None:
        """A FastSocketStream over ``inner`` when it is a plain SocketStream, else None."""
        if type(inner) is not trio.SocketStream:
            return None
        if not isinstance(getattr(inner.socket, "_sock", None), socket.socket):
            return None
        return FastSocketStream(inner)

    def try_receive(self, max_bytes: int) -> bytes | None:
        """What ``recv`` returns now, None when nothing is there yet (never blocks)."""
        self._yield_owed = False
        try:
            return self.raw.recv(max_bytes)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise _stream_error(exc) from (None if exc.errno in _CLOSED_ERRNOS else exc)

    async def wait_readable(self) -> None:
        try:
            await trio.lowlevel.wait_readable(self.raw)
        except trio.ClosedResourceError:
            raise trio.ClosedResourceError("this socket was already closed") from None

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is None:
            max_bytes = DEFAULT_RECEIVE_SIZE
        elif max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        data = self.try_receive(max_bytes)
        if data is not None:
            await trio.lowlevel.checkpoint()
            return data
        while True:
            await self.wait_readable()
            data = self.try_receive(max_bytes)
            if data is not None:
                return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        raw = self.raw
        if self._sending:
            raise trio.BusyResourceError("another task is already sending on this stream")
        if self.inner.socket.did_shutdown_SHUT_WR:
            raise trio.ClosedResourceError("can't send data after sending EOF")
        await trio.lowlevel.checkpoint_if_cancelled()
        self._sending = True
        try:
            yielded = False
            with memoryview(data) as view:
                total, size = 0, len(view)
                if not size and raw.fileno() == -1:
                    raise trio.ClosedResourceError("socket was already closed")
                while total < size:
                    try:
                        total += raw.send(view[total:] if total else view)
                        self.stalled_since = None
                        continue
                    except BlockingIOError:
                        pass
                    except OSError as exc:
                        raise _stream_error(exc) from (None if exc.errno in _CLOSED_ERRNOS else exc)
                    if self.stalled_since is None:
                        self.stalled_since = trio.current_time()
                    try:
                        await trio.lowlevel.wait_writable(raw)
                    except trio.ClosedResourceError:
                        raise trio.ClosedResourceError("socket was already closed") from None
                    yielded = True
            if not yielded:
                if self._yield_owed:
                    await trio.lowlevel.cancel_shielded_checkpoint()
                else:
                    self._yield_owed = True
        finally:
            self._sending = False
            self.stalled_since = None

    def try_send(self, data: bytes | bytearray | memoryview) -> int:
        """How many bytes of ``data`` the socket took now (never blocks, never yields; 0 while
        another task is in ``send_all``). The caller keeps the rest."""
        if self._sending:
            return 0
        if self.inner.socket.did_shutdown_SHUT_WR:
            raise trio.ClosedResourceError("can't send data after sending EOF")
        try:
            return self.raw.send(data)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise _stream_error(exc) from (None if exc.errno in _CLOSED_ERRNOS else exc)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class ConnectionTimeout(Exception):
    """The peer went quiet: ``kind`` is "idle" or "read"."""

    def __init__(self, kind: str, seconds: float) -> None:
        super().__init__(f"{kind} timeout after {seconds:g} s")
        self.kind = kind
        self.seconds = seconds


class GuardedStream(trio.abc.Stream):
    """See the module docstring. ``swept=True``: the owner calls :meth:`expire_if_due` for
    every stream at least every :func:`sweep_interval` seconds (the server does, from one
    task), and a wait for bytes on a plain TCP connection runs without a cancel scope of its
    own. A scope per wait costs more than the rest of the wait: entering and leaving it, and
    the deadline it adds to trio's timer heap, took gateway CPU per one-record request from
    ~180 to ~250 us in bench/latency.py (TANK, Iggy). The timeout then fires up to one sweep
    interval late."""

    def __init__(
        self,
        inner: trio.abc.Stream,
        *,
        prefix: bytes = b"",
        idle_timeout_s: float = 600.0,
        read_timeout_s: float = 60.0,
        send_timeout_s: float = 60.0,
        swept: bool = False,
    ) -> None:
        self.inner = inner
        self._prefix = prefix
        self.idle_timeout_s = idle_timeout_s
        self.read_timeout_s = read_timeout_s
        self.send_timeout_s = send_timeout_s
        self.send_timed_out = False
        self._last_activity = trio.current_time()
        self._last_received = self._last_activity
        self._request_started = self._last_activity  # first byte of the request being read
        self._mid_request = False
        self._draining = False
        self._idle_wait: trio.CancelScope | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self._fast = FastSocketStream.wrap(inner)
        self._swept = swept and self._fast is not None
        self._swept_wait: tuple[str, float] | None = None  # the unscoped wait now under way
        self._swept_woken = False  # the sweeper woke that wait
        self._woken_at = 0.0  # the sweeper's clock when it woke it

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._fast is not None and not self._prefix:
            return await self._receive_fast(self._fast, max_bytes)
        if self._prefix:
            n = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:n], self._prefix[n:]
            self._note_received(data)
            return data
        while True:
            wait = self._wait_limit()
            if wait is None:
                return b""  # between requests while draining: end of stream for the handler
            with trio.move_on_at(self._deadline(wait)) as scope:
                if not self._mid_request:
                    self._idle_wait = scope
                try:
                    chunk = await self.inner.receive_some(max_bytes)
                finally:
                    self._idle_wait = None
            if not scope.cancelled_caught:
                self._note_received(chunk)
                return bytes(chunk)
            if self._timed_out(wait):
                return b""

    async def _receive_fast(self, fast: FastSocketStream, max_bytes: int | None) -> bytes:
        """``receive_some`` over a FastSocketStream, with the same timeouts."""
        if max_bytes is None:
            max_bytes = DEFAULT_RECEIVE_SIZE
        elif max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        waited = False
        while True:
            data = fast.try_receive(max_bytes)
            if data is not None:
                if not waited:
                    await trio.lowlevel.checkpoint()
                self._note_received(data)
                return data
            wait = self._wait_limit()
            if wait is None:
                return b""
            waited = True
            if self._swept:
                woken = await self._swept_wait_readable(fast, wait)
                if woken and self._timed_out(wait, self._woken_at):
                    return b""
                continue
            with trio.move_on_at(self._deadline(wait)) as scope:
                if not self._mid_request:
                    self._idle_wait = scope
                try:
                    await fast.wait_readable()
                finally:
                    self._idle_wait = None
            if scope.cancelled_caught and self._timed_out(wait):
                return b""

    async def _swept_wait_readable(self, fast: FastSocketStream, wait: tuple[str, float]) -> bool:
        """Wait for bytes with no cancel scope; True when the sweeper (or a drain) woke the
        wait instead of the bytes."""
        self._swept_wait = wait
        try:
            await fast.wait_readable()
        except trio.ClosedResourceError:
            if not self._swept_woken:
                raise
            return True
        finally:
            self._swept_wait = None
            self._swept_woken = False
        return False

    def expire_if_due(self, now: float) -> None:
        """For the owner of a ``swept`` stream: end its wait for bytes if that wait's timeout
        ran out by ``now`` (the handler then sees ConnectionTimeout, as with a scoped wait).
        The wait is woken with trio's ``notify_closing`` on the socket (the one way to end
        another task's ``wait_readable`` without a cancel scope); a timed-out connection is
        closed after it anyway. Likewise a send the client took no byte of for
        ``send_timeout_s`` (``send_timed_out`` is then set)."""
        wait = self._swept_wait
        if wait is not None and now >= self._deadline(wait):
            self._woken_at = now
            self._wake_swept_wait()
        fast = self._fast
        if (
            self._swept
            and fast is not None
            and fast.stalled_since is not None
            and now - fast.stalled_since >= self.send_timeout_s
            and not self.send_timed_out
        ):
            # the blocked send (and any wait for bytes) ends with ClosedResourceError
            self.send_timed_out = True
            trio.lowlevel.notify_closing(fast.raw)

    def _wake_swept_wait(self) -> None:
        assert self._fast is not None
        self._swept_woken = True
        trio.lowlevel.notify_closing(self._fast.raw)

    def _wait_limit(self) -> tuple[str, float] | None:
        """The timeout of the next wait for bytes, (kind, seconds): a read timeout inside a
        request, an idle timeout between requests; None when draining between requests (the
        handler sees end of stream)."""
        if self._mid_request:
            return "read", self.read_timeout_s
        if self._draining:
            return None
        return "idle", self.idle_timeout_s

    def _deadline(self, wait: tuple[str, float]) -> float:
        """When a wait of this kind runs out: an idle wait ``idle_timeout_s`` after the last
        byte either way, a read wait ``read_timeout_s`` after the request's first byte."""
        if wait[0] == "read":
            return self._request_started + wait[1]
        return self._last_activity + wait[1]

    def _timed_out(self, wait: tuple[str, float], now: float | None = None) -> bool:
        """After a wait that ran out: True when the stream ends now (a drain began while idle);
        raises ConnectionTimeout when its deadline still stands (a send meanwhile would move an
        idle deadline, an answer ends the request); False: wait again."""
        if self._draining and not self._mid_request:
            return True
        now = trio.current_time() if now is None else max(now, trio.current_time())
        if self._wait_limit() == wait and now >= self._deadline(wait):
            raise ConnectionTimeout(*wait)
        return False

    def between_requests(self) -> None:
        """The handler holds no partly received request (it has whole requests only, some
        perhaps still being answered, like a parked long poll): its next wait for bytes is an
        idle wait, not a read timeout."""
        self._mid_request = False

    def request_done(self) -> None:
        """The handler took whole requests out of what it received and keeps part of the next
        one, with nothing to answer (Kafka ``acks=0``): that next request began no earlier than
        the last receive, so its read timeout counts from there."""
        if self._mid_request:
            self._request_started = self._last_received

    def drain(self) -> None:
        """The gateway is stopping: a handler waiting for its next request sees end of stream
        now; one in the middle of a request finishes it and sees end of stream after."""
        self._draining = True
        if self._idle_wait is not None:
            self._idle_wait.cancel()
        if self._swept_wait is not None and not self._mid_request:
            self._wake_swept_wait()

    def _note_received(self, data: bytes | bytearray) -> None:
        now = trio.current_time()
        self._last_activity = self._last_received = now
        self.bytes_in += len(data)
        if not data:
            self._mid_request = False
        elif not self._mid_request:
            self._mid_request = True
            self._request_started = now

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._mid_request = False
        if self.send_timed_out:
            raise trio.BrokenResourceError("send timeout: the client stopped reading")
        if self._swept:
            assert self._fast is not None
            await self._fast.send_all(data)  # the owner's sweep ends a stalled one
        else:
            with trio.move_on_after(self.send_timeout_s) as scope:
                await (self._fast or self.inner).send_all(data)
            if scope.cancelled_caught:
                self.send_timed_out = True
                raise trio.BrokenResourceError("send timeout: the client stopped reading")
        self.bytes_out += len(data)
        self._last_activity = trio.current_time()

    def try_send(self, data: bytes | bytearray | memoryview) -> int:
        """:meth:`FastSocketStream.try_send` on a plain TCP connection; 0 on any other (the
        caller then sends with ``send_all``)."""
        if self._fast is None or not data:
            return 0
        sent = self._fast.try_send(data)
        if sent:
            self._mid_request = False
            self.bytes_out += sent
            self._last_activity = trio.current_time()
        return sent

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def accept_connection(
    sock: trio.abc.Listener[trio.SocketStream], protocol: str, log: Any
) -> trio.SocketStream:
    """The next connection on ``sock``. A failed accept (out of file descriptors, EMFILE, and
    the like) is logged and tried again a little later: the listener keeps serving."""
    while True:
        try:
            return await sock.accept()
        except OSError as exc:
            log.error("accept_failed", protocol=protocol, error=str(exc))
            await trio.sleep(0.1)


def sweep_interval(timeouts: Iterable[float]) -> float:
    """How often the owner of ``swept`` streams with these timeouts checks them: a tenth of
    the shortest, between 10 ms and 1 s (a timeout fires up to this much late)."""
    return min(1.0, max(0.01, min(timeouts, default=10.0) / 10))


class PrefixedStream(trio.abc.Stream):
    """Replays ``prefix`` before reading ``inner`` (bytes read while looking for a PROXY header,
    handed to the TLS layer or the handler)."""

    def __init__(self, inner: trio.abc.Stream, prefix: bytes) -> None:
        self.inner = inner
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
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
