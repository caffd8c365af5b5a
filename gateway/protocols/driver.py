"""The one connection loop every protocol listener runs (in the manner of hypercorn's trio TCP
server: the server owns the socket, the loop and the drain; a protocol only turns requests into
answers).

What a protocol implements: a session object (see :class:`Session`) with

- ``framing``: its sans-IO codec's framing, with ``receive_data(bytes)``, ``next_request()`` (the
  next whole decoded request, None while more bytes are needed; raises
  :class:`~gateway.protocols.errors.RemoteProtocolError` for bytes that are not the protocol)
  and ``buffered`` (bytes received and not yet part of a returned request, 0 when no request
  is partly read). The codecs cut their
  frames from the shared :class:`~gateway.protocols.buffer.ReceiveBuffer`.
- ``receive_bytes``: how much one read asks the stream for.
- ``async handle(request, io)``: answer one request, in order, through ``io``
  (:class:`Connection`): ``io.answer(bytes)`` queues an answer that goes out with the next
  flush (answers to pipelined requests leave together), ``await io.send(bytes)`` /
  ``await io.send_pieces([...])`` write now (after what is queued). Return False to close the
  connection (after a flush). A session that answers concurrently (Kafka 0.8's pipelined
  produces, TANK's parked consumes, Liftbridge's HTTP/2 calls) starts tasks with
  ``io.start_soon``; they send through the same ``io`` (sends are serialised), and a task that
  fails ends the connection with ``io.fail(exc)``.
- optional hooks, each a no-op when absent: ``async start(io)`` before the first read (TANK's
  greeting, Liftbridge's writer task); ``drain(io)`` once, when the gateway starts draining (wake
  what waits long: a long poll, a stream); ``async settle(io)`` before the connection's last
  flush, while the peer may still read (wait for answers still being made; ``io.stop()`` ends
  the tasks that never end by themselves); ``async closing(exc, io)`` for a RemoteProtocolError
  (send the protocol's error answer, e.g. an HTTP/2 GOAWAY); ``async close()`` at the very end,
  shielded from cancellation (release what the session holds).
- optional ``multiplexed = True`` (HTTP/2): many calls share the byte stream, so a read holds
  no request boundary. On drain the driver keeps reading until the server's stream ends (calls
  in progress still receive) instead of reading no request after the one in hand, and it never
  moves the read timeout's start with ``request_done``.

What :func:`drive` does, in order: ``start``; then reads (``receive_bytes`` at a time), feeds
``framing``, and hands every whole request to ``handle`` until the peer closes, a handler returns
False, a RemoteProtocolError arrives, or the gateway drains. Between reads it flushes queued
answers and tells the server's stream whether a request is partly read
(``between_requests`` / ``request_done``: the idle timeout applies between requests, the read
timeout inside one). Drain is one mechanism: the server sets ``ctx.shutdown`` and makes a wait
for the next request end (``GuardedStream.drain``); the driver finishes the request in hand,
reads no new one, calls ``drain()`` once, and lets the tasks a session started finish (within
the server's grace). When the peer is gone or the connection failed those tasks are
cancelled. A RemoteProtocolError is counted and logged once (``gateway_protocol_errors_total``,
or ``limit_hit`` when it names a budget) and closes the connection after ``closing``. Bytes in
and out are counted in ``gateway_bytes_in_total`` / ``gateway_bytes_out_total``. Every write goes
through the server's stream, which ends the connection when the client takes no byte of it for
the listener's ``send_timeout_s`` (gateway/streams.py): a send here fails as if the peer had
gone, and what the answer held (its share of ``max_answer_memory``, see answers.py) is given
back as the handler unwinds. A failure other
than the peer going away (a timeout of the server's stream, a bug) is re-raised bare, out of the
driver's nursery, for the server to log and count.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import trio

from gateway.observability import BYTES_IN, BYTES_OUT, labelled, limit_hit, protocol_error
from gateway.protocols.answers import send_pieces
from gateway.protocols.buffer import Buffer
from gateway.protocols.errors import RemoteProtocolError
from gateway.protocols.steps import Steps

if TYPE_CHECKING:
    from gateway.protocols.base import ConnectionContext

_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


class Framing(Protocol):
    """A codec's server side as the driver uses it."""

    @property
    def buffered(self) -> int: ...

    def receive_data(self, data: bytes | bytearray) -> None: ...

    def next_request(self) -> Any: ...


class Session(Protocol):
    """What a protocol gives the driver for one connection (see the module docstring)."""

    @property
    def framing(self) -> Framing: ...

    @property
    def receive_bytes(self) -> int: ...

    async def handle(self, request: Any, io: Connection) -> bool | None: ...


class Connection:
    """One connection's output and tasks, as a session sees them."""

    __slots__ = (
        "stream",
        "ctx",
        "protocol",
        "log",
        "out",
        "failure",
        "draining",
        "_nursery",
        "_send_lock",
        "_tasks",
        "_bytes_out",
    )

    def __init__(self, stream: trio.abc.Stream, ctx: ConnectionContext, protocol: str) -> None:
        self.stream = stream
        self.ctx = ctx
        self.protocol = protocol
        self.log = ctx.log
        self.out: list[Buffer] = []
        self.failure: BaseException | None = None
        self.draining = False
        self._nursery: trio.Nursery | None = None
        self._send_lock = trio.Lock()
        self._tasks = 0  # tasks started with start_soon and still running
        self._bytes_out = labelled(BYTES_OUT, protocol)

    # ------------------------------------------------------------------ output
    def answer(self, data: Buffer) -> None:
        """Queue ``data``: it goes out with the next flush, after what was queued before."""
        self.out.append(data)

    async def flush(self) -> None:
        out = self.out
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            await self._send(data)

    async def send(self, data: Buffer) -> None:
        """Write queued answers and ``data`` now."""
        if self.out:
            self.out.append(data)
            await self.flush()
        else:
            await self._send(data)

    async def _send(self, data: Buffer) -> None:
        if not self._tasks:
            # only the reading task sends (it started no task that is still running): no lock
            # (a lock per answer costs a few us of an in-order request)
            await self.stream.send_all(data)
            self._bytes_out.inc(len(data))
            return
        lock = self._send_lock
        try:
            lock.acquire_nowait()  # no schedule point when nobody else is sending (the usual)
        except trio.WouldBlock:
            await lock.acquire()
        try:
            await self.stream.send_all(data)
        finally:
            lock.release()
        self._bytes_out.inc(len(data))

    async def send_pieces(self, pieces: list[Any]) -> None:
        """Write queued answers, then an answer built as pieces (stored data is not copied)."""
        await self.flush()
        async with self._send_lock:
            sent = await send_pieces(self.stream, pieces)
        self._bytes_out.inc(sent)

    def count_out(self, n: int) -> None:
        """Count ``n`` bytes a session wrote itself (``try_send``)."""
        self._bytes_out.inc(n)

    # ------------------------------------------------------------------ tasks
    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``fn(*args)`` beside the reading: it may outlive the request (a parked consume,
        a pipelined produce, a call). It is waited for on drain, cancelled when the peer is
        gone or the connection failed; if it raises, the connection fails with that."""
        assert self._nursery is not None
        self._nursery.start_soon(self._task, fn, args)

    async def _task(self, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        self._tasks += 1
        try:
            await fn(*args)
        except Exception as exc:
            self.fail(exc)
        finally:
            self._tasks -= 1

    def stop(self) -> None:
        """End the connection's tasks now, nothing having failed (a session whose service
        tasks, a writer say, never end by themselves, once its answers are out)."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    def begin_drain(self, session: Session) -> None:
        """Once: mark the connection draining and call the session's ``drain`` hook."""
        if not self.draining:
            self.draining = True
            drain = getattr(session, "drain", None)
            if drain is not None:
                drain(self)

    def fail(self, exc: BaseException) -> None:
        """End the connection now because of ``exc`` (the first failure wins; the driver
        re-raises it unless the peer simply went away)."""
        if self.failure is None:
            self.failure = exc
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    @property
    def nursery(self) -> trio.Nursery:
        assert self._nursery is not None
        return self._nursery


async def drive(stream: trio.abc.Stream, ctx: ConnectionContext, session: Session) -> None:
    """Serve one connection with ``session`` until it ends (see the module docstring)."""
    io = Connection(stream, ctx, ctx.protocol)
    try:
        async with trio.open_nursery() as nursery:
            io._nursery = nursery
            watcher = trio.CancelScope()
            nursery.start_soon(_watch_shutdown, io, session, watcher)
            try:
                await _serve(io, session)
            except _GONE:
                pass
            except Exception as exc:
                io.fail(exc)
            watcher.cancel()
            if io.failure is not None or not ctx.shutdown.is_set():
                # the peer is gone, sent garbage or timed out: nobody is left to answer
                nursery.cancel_scope.cancel()
    finally:
        close = getattr(session, "close", None)
        if close is not None:
            with trio.CancelScope(shield=True):
                await close()
    if io.failure is not None and not isinstance(io.failure, _GONE):
        raise io.failure  # bare, not in an exception group: the server names the reason


async def _watch_shutdown(io: Connection, session: Session, scope: trio.CancelScope) -> None:
    with scope:
        await io.ctx.shutdown.wait()
        io.begin_drain(session)


async def _serve(io: Connection, session: Session) -> None:
    conn = session.framing
    stream = io.stream
    ctx = io.ctx
    shutdown = ctx.shutdown
    handle = session.handle
    receive_bytes = session.receive_bytes
    between_requests = getattr(stream, "between_requests", None)
    request_done = getattr(stream, "request_done", None)
    bytes_in = labelled(BYTES_IN, io.protocol)
    multiplexed = getattr(session, "multiplexed", False)
    stop_on_drain = not multiplexed
    if multiplexed:
        request_done = None
    start = getattr(session, "start", None)
    if start is not None:
        await start(io)
    try:
        while True:
            served = False
            while (request := conn.next_request()) is not None:
                served = True
                if await handle(request, io) is False:
                    await _settle(io, session)
                    return
                if stop_on_drain and shutdown.is_set():  # finish the request in hand only
                    break
            if io.out:
                await io.flush()
            if stop_on_drain and shutdown.is_set():
                await _settle(io, session)
                return
            if not conn.buffered:
                if between_requests is not None:
                    between_requests()  # answers may be pending, but no request is half read
            elif served and request_done is not None:
                request_done()  # whole requests taken, part of the next one kept unanswered
            # the idle timeout and the drain are the server's GuardedStream's: a wait between
            # requests ends with ConnectionTimeout or, on shutdown, end of stream (a cancel
            # scope of our own per wait costs ~20 us of a ~300 us request)
            data = await stream.receive_some(receive_bytes)
            if not data:
                if conn.buffered:
                    protocol_error(
                        io.log, io.protocol, "truncated", error="peer closed inside a frame"
                    )
                await _settle(io, session)
                return
            bytes_in.inc(len(data))
            conn.receive_data(data)
    except RemoteProtocolError as exc:
        if exc.limit is not None:
            limit_hit(exc.limit, io.protocol, io.log, peer=ctx.peer, error=str(exc))
        else:
            protocol_error(io.log, io.protocol, exc.kind, error=str(exc))
        await _settle(io, session)
        closing = getattr(session, "closing", None)
        if closing is not None:
            await closing(exc, io)
        await io.flush()


async def _settle(io: Connection, session: Session) -> None:
    if io.ctx.shutdown.is_set():
        io.begin_drain(session)  # the watcher may not have run yet
    settle = getattr(session, "settle", None)
    if settle is not None:
        await settle(io)
    await io.flush()


T = TypeVar("T")


async def run_steps(steps: Steps[T], stepped: Callable[[], None]) -> T:
    """The result of a codec's stepwise work (``gateway.protocols.steps``), every other task
    of the event loop let run between two steps; ``stepped()`` is called once, at the first
    step boundary (work small enough for one step never calls it, nor checkpoints)."""
    try:
        next(steps)
    except StopIteration as done:
        return done.value
    stepped()
    while True:
        await trio.lowlevel.checkpoint()
        try:
            next(steps)
        except StopIteration as done:
            return done.value
