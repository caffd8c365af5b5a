"""One Liftbridge (gRPC over HTTP/2) connection on trio: the I/O around the sans-IO codec.

Tasks per connection (one nursery): the reader (socket -> codec events -> calls), the writer
(codec bytes -> socket; woken by ``kick``, so bursts coalesce into few writes), a drain watcher,
and one task per call. Unary and server-streaming calls start once the request is complete (the
client half-closed); PublishAsync starts at once and reads its requests from a queue whose bytes the
codec keeps unacknowledged until the call takes them, so a client that publishes faster than the
core appends (or than it reads its acks) is slowed by HTTP/2 flow control, not buffered.
Subscriptions stop producing while their stream's flow-control queue is full.

Bad input: a broken HTTP/2 connection gets GOAWAY and is closed; a bad call or message gets its
gRPC status on that stream only; both are logged once and counted.
"""

from __future__ import annotations

import math
import time
from typing import Any

import trio

from gateway.model import GatewayError
from gateway.observability import (
    BYTES_OUT,
    REQUEST_LATENCY,
    REQUESTS,
    labelled,
    protocol_error,
    snake_case,
)
from gateway.protocols.base import ConnectionContext
from gateway.protocols.driver import Connection, drive
from gateway.protocols.liftbridge import LiftbridgeListenerConfig
from gateway.protocols.liftbridge.codec import (
    CallError,
    CallReset,
    CallStarted,
    GrpcConnection,
    HalfClosed,
    MessageReceived,
    MethodSpec,
    RemoteProtocolError,
    Status,
)
from gateway.protocols.liftbridge.service import (
    PROTOCOL,
    RpcError,
    Service,
    new_inbox,
    rpc_error,
)
from gateway.protocols.liftbridge.state import state_for

RECEIVE_BYTES = 256 * 1024
STREAM_QUEUE_BYTES = 1 << 20  # a subscription waits while more than this is queued
PUBLISH_RUN = 2048  # requests handed to the core in one go


class _Call:
    __slots__ = (
        "stream_id",
        "spec",
        "timeout_s",
        "request",
        "extra",
        "send_channel",
        "recv_channel",
        "scope",
        "end_status",
        "reset",
        "idle_scope",
        "held",
    )

    def __init__(self, stream_id: int, spec: MethodSpec, timeout_s: float | None) -> None:
        self.stream_id = stream_id
        self.spec = spec
        self.timeout_s = timeout_s
        self.request: Any = None
        self.extra = False  # more than one message on a unary request
        self.send_channel: trio.MemorySendChannel[Any] | None = None
        self.recv_channel: trio.MemoryReceiveChannel[Any] | None = None
        self.scope: trio.CancelScope | None = None
        self.end_status: tuple[int, str] | None = None
        self.reset = False
        self.idle_scope: trio.CancelScope | None = None
        # request bytes received for this call and not yet taken by it (Session.held)
        self.held = 0

    def end(self, status: int, message: str) -> None:
        """End the call from outside (pause, delete, drain) with this status."""
        if self.end_status is None:
            self.end_status = (status, message)
        if self.scope is not None:
            self.scope.cancel()


class _Sender:
    """What a streaming RPC uses to send on its call."""

    __slots__ = ("session", "call", "timeout_s")

    def __init__(self, session: Session, call: _Call) -> None:
        self.session = session
        self.call = call
        self.timeout_s = call.timeout_s

    def send_nowait(self, messages: list[Any]) -> None:
        self.session.conn.send_messages(self.call.stream_id, messages)
        self.session.kick()

    async def send(self, message: Any) -> None:
        session = self.session
        sid = self.call.stream_id
        if isinstance(message, list):
            session.conn.send_messages(sid, message)
        else:
            session.conn.send_message(sid, message)
        session.kick()
        while session.conn.pending_bytes(sid) > STREAM_QUEUE_BYTES:
            await session.progress.wait()
        await trio.lowlevel.checkpoint()


class Session:
    def __init__(self, stream: trio.abc.Stream, ctx: ConnectionContext) -> None:
        self.stream = stream
        self.ctx = ctx
        self.log = ctx.log
        cfg = ctx.listener
        assert isinstance(cfg, LiftbridgeListenerConfig)
        self.max_buffered = cfg.max_buffered_request_bytes
        self.conn = GrpcConnection(
            max_message_bytes=cfg.max_frame_bytes,
            max_buffered_bytes=self.max_buffered,
            max_resets_per_s=cfg.max_resets_per_s,
        )
        # Unary requests waiting for their half-close (the codec reopened the windows for
        # them): with the codec's unfinished messages they must stay within
        # max_buffered_request_bytes, or the connection ends. (PublishAsync requests not taken
        # yet are bounded by the windows: the codec lends them until ``release``.)
        self.held = 0
        broker_id = cfg.broker_id or f"{ctx.advertised_host}:{ctx.advertised_port}"
        self.service = Service(
            ctx.core,
            state_for(ctx.core),
            broker_id,
            ctx.advertised_host,
            ctx.advertised_port,
            cfg.max_frame_bytes,
            cfg.max_answer_bytes,
        )
        self.calls: dict[int, _Call] = {}
        self.draining = False
        self._wake = trio.Event()
        self.progress = trio.Event()
        self._idle = trio.Event()
        self._send_lock = trio.Lock()
        self._events: list[Any] | None = None
        self.framing = self
        self.receive_bytes = RECEIVE_BYTES
        self.multiplexed = True  # HTTP/2: calls in progress still receive while draining
        self._received_since_send = False
        self._last_send = trio.current_time()
        self._bytes_out = labelled(BYTES_OUT, PROTOCOL)
        self._try_send = getattr(stream, "try_send", None)

    # ------------------------------------------------------------------ I/O
    def kick(self) -> None:
        self._wake.set()

    def _notify_progress(self) -> None:
        self.progress.set()
        self.progress = trio.Event()

    async def _send_pending(self) -> None:
        async with self._send_lock:
            data = self.conn.data_to_send()
            if data:
                self._received_since_send = False
                await self.stream.send_all(data)
                self._last_send = trio.current_time()
                self._bytes_out.inc(len(data))

    def _send_now(self) -> None:
        """Write what is queued from the calling task when the socket takes it at once; what
        it does not take (or everything, while the writer task is sending) is left to the
        writer. Why: handing every answer to the writer task cost a 1-record publish two more
        trips through trio's scheduler than TANK's one (strace: 3 epoll_waits per call), and
        the reader must never block on a send (a client that writes before it reads would
        then deadlock with us), so it only takes what fits now."""
        try_send = self._try_send
        if try_send is None or self._send_lock.locked():
            self.kick()
            return
        data = self.conn.data_to_send()
        if not data:
            return
        try:
            sent = try_send(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            sent = 0  # the writer meets it too and ends the connection, from one task as before
        if sent:
            self._received_since_send = False
            self._last_send = trio.current_time()
            self._bytes_out.inc(sent)
        if sent < len(data):
            self.conn.unsend(memoryview(data)[sent:])
            self.kick()

    async def _keepalive(self) -> None:
        """PING the client while calls are open (a quiet subscription is not an idle
        connection) and once after the client sent something we had nothing to answer (window
        updates, acks), so the listener's read and idle timeouts see a live connection."""
        cfg = self.ctx.listener
        interval = max(0.05, min(cfg.idle_timeout_s, cfg.read_timeout_s) / 3)
        while True:
            await trio.sleep(interval)
            if (self.calls or self._received_since_send) and (
                trio.current_time() - self._last_send >= interval
            ):
                self.conn.ping()
                self.kick()

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await self._send_pending()
            self._notify_progress()

    # ------------------------------------------------------------------ the driver's calls
    # The driver's framing is the session itself: one "request" is the list of events one read
    # decoded (HTTP/2 frames of many calls, interleaved), handled in order by ``handle``.
    async def start(self, io: Connection) -> None:
        self.conn.initiate()
        io.start_soon(self._writer)
        io.start_soon(self._keepalive)
        self.kick()

    def receive_data(self, data: bytes | bytearray) -> None:
        self._received_since_send = True
        self._events = self.conn.receive_data(data)

    def next_request(self) -> list[Any] | None:
        events, self._events = self._events, None
        return events

    @property
    def buffered(self) -> int:
        return self.conn.buffered_bytes

    async def handle(self, events: list[Any], io: Connection) -> bool:
        nursery = io.nursery
        i = 0
        n = len(events)
        while i < n:
            ev = events[i]
            i += 1
            t = type(ev)
            if t is MessageReceived:
                self._on_message(ev)
            elif t is CallStarted:
                if (
                    not self.calls
                    and not self.draining
                    and ev.timeout_s is None
                    and ev.method.name == "PublishAsync"
                ):
                    done = _whole_call(events, i, ev.stream_id)
                    if done >= 0:
                        await self._publish_inline(ev, events, i, done)
                        i = done + 1
                        continue
                self._on_call(ev, nursery)
            elif t is HalfClosed:
                self._on_half_closed(ev.stream_id, nursery)
            elif t is CallReset:
                call = self.calls.pop(ev.stream_id, None)
                if call is not None:
                    if not call.spec.client_streaming:
                        self._take(call, call.held)
                    call.reset = True
                    if call.scope is not None:
                        call.scope.cancel()
                    self._call_done()
            elif t is CallError:
                self._on_call_error(ev)
        if self.conn.buffered_bytes + self.held > self.max_buffered:
            raise self.conn.enhance_your_calm(
                "max_buffered_request_bytes",
                f"{self.conn.buffered_bytes + self.held} bytes of requests held "
                f"(max_buffered_request_bytes {self.max_buffered})",
            )
        self._send_now()
        self._notify_progress()
        return True

    async def settle(self, io: Connection) -> None:
        if io.draining and self.calls:
            # draining (the server ended our reads): _finish_calls ends the connection
            await trio.sleep_forever()

    async def closing(self, exc: RemoteProtocolError, io: Connection) -> None:
        """The connection is over (a protocol error or a budget, counted by the driver): send
        the GOAWAY waiting in the codec."""
        try:
            await self._send_pending()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _take(self, call: _Call, nbytes: int) -> None:
        """``nbytes`` of the requests held for ``call`` are taken (or dropped with it)."""
        if not nbytes:
            return
        call.held -= nbytes
        if call.spec.client_streaming:
            self.conn.release(call.stream_id, nbytes)
        else:
            self.held -= nbytes

    # ------------------------------------------------------------------ events
    def _on_call(self, ev: CallStarted, nursery: trio.Nursery) -> None:
        if self.draining:
            self.conn.send_trailers(ev.stream_id, Status.UNAVAILABLE, "server is shutting down")
            return
        call = _Call(ev.stream_id, ev.method, ev.timeout_s)
        self.calls[ev.stream_id] = call
        if ev.method.client_streaming:
            call.send_channel, call.recv_channel = trio.open_memory_channel(math.inf)
            nursery.start_soon(self._run_call, call)

    def _on_message(self, ev: MessageReceived) -> None:
        call = self.calls.get(ev.stream_id)
        if call is None:
            self.conn.release(ev.stream_id, ev.nbytes)  # nobody takes them
            return
        if call.send_channel is not None:
            # a client-streaming call: hand the messages over as one list (with their size,
            # released as the call takes them); the queue is bounded by the HTTP/2 windows,
            # so the reader never waits for the call
            call.held += ev.nbytes
            try:
                call.send_channel.send_nowait((ev.messages, ev.nbytes))
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                self._take(call, ev.nbytes)
        elif call.request is None and len(ev.messages) == 1:
            call.request = ev.messages[0]
            call.held += ev.nbytes
            self.held += ev.nbytes
        else:
            call.extra = True

    def _on_half_closed(self, stream_id: int, nursery: trio.Nursery) -> None:
        call = self.calls.get(stream_id)
        if call is None:
            return
        if call.send_channel is not None:
            call.send_channel.close()
            return
        self._take(call, call.held)  # the call takes its request now (or is refused)
        if call.request is None or call.extra:
            what = "no request message" if call.request is None else "more than one request"
            protocol_error(self.log, PROTOCOL, "bad_call", method=call.spec.name, error=what)
            self.calls.pop(stream_id, None)
            self.conn.send_trailers(
                stream_id, Status.INTERNAL, f"grpc: {what} for {call.spec.name}"
            )
            self._count(call.spec.name, Status.INTERNAL, 0.0)
            self._call_done()
            return
        nursery.start_soon(self._run_call, call)

    def _on_call_error(self, ev: CallError) -> None:
        call = self.calls.pop(ev.stream_id, None)
        if call is not None and not call.spec.client_streaming:
            self._take(call, call.held)
        name = call.spec.name if call is not None else "?"
        protocol_error(
            self.log, PROTOCOL, ev.kind, method=name, status=ev.status.name, error=ev.message
        )
        if call is not None:
            call.reset = True  # the trailers go out here, not from the call's task
            if call.scope is not None:
                call.scope.cancel()
            if call.send_channel is not None:
                call.send_channel.close()
        self.conn.send_trailers(ev.stream_id, ev.status, ev.message)
        self._count(name, ev.status, 0.0)
        self._call_done()

    # ------------------------------------------------------------------ calls
    async def _run_call(self, call: _Call) -> None:
        name = call.spec.name
        status: int = Status.OK
        message = ""
        started = time.perf_counter()
        with trio.CancelScope() as scope:
            call.scope = scope
            if call.end_status is not None:
                scope.cancel()
            if call.timeout_s is not None:
                scope.deadline = trio.current_time() + call.timeout_s
            try:
                if name == "Subscribe":
                    await self.service.Subscribe(call.request, _Sender(self, call), call)
                elif name == "PublishAsync":
                    await self._publish_async(call)
                else:
                    response = await getattr(self.service, name)(call.request)
                    self.conn.send_message(call.stream_id, response)
            except RpcError as exc:
                status, message = exc.status, exc.message
            except GatewayError as exc:
                err = rpc_error(exc)
                status, message = err.status, err.message
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                call.reset = True
            except Exception as exc:
                self.log.exception("rpc_failed", method=name, error=repr(exc))
                status, message = Status.INTERNAL, f"internal error: {exc!r}"
        if scope.cancelled_caught:
            if call.end_status is not None:
                status, message = call.end_status
            elif not call.reset:
                status, message = Status.DEADLINE_EXCEEDED, "deadline exceeded"
        if call.recv_channel is not None:
            call.recv_channel.close()  # the reader's next send to it fails
            self._take(call, call.held)  # what the call left in its queue is dropped
        if not call.reset:
            self.conn.send_trailers(call.stream_id, status, message)
            self._send_now()
        self.calls.pop(call.stream_id, None)
        self._count(name, status, time.perf_counter() - started)
        self._call_done()

    async def _publish_async(self, call: _Call) -> None:
        recv = call.recv_channel
        assert recv is not None
        sid = call.stream_id
        inbox = new_inbox()
        conn = self.conn

        def respond(messages: list[Any]) -> None:
            conn.send_raw(sid, b"".join(messages))
            self._send_now()

        def take(item: tuple[list[Any], int], batch: list[Any]) -> None:
            batch.extend(item[0])
            self._take(call, item[1])

        def take_queued(batch: list[Any]) -> None:
            while len(batch) < PUBLISH_RUN:
                try:
                    take(recv.receive_nowait(), batch)
                except (trio.WouldBlock, trio.EndOfChannel):
                    return

        while True:
            batch: list[Any] = []
            if self.draining:  # take what was queued, then end with OK
                take_queued(batch)
                if batch:
                    await self.service.publish_async(batch, inbox, respond)
                return
            with trio.CancelScope() as idle:
                call.idle_scope = idle
                try:
                    take(await recv.receive(), batch)
                except trio.EndOfChannel:
                    return
            call.idle_scope = None
            if idle.cancelled_caught:
                continue
            take_queued(batch)
            await self.service.publish_async(batch, inbox, respond)
            # a client that publishes without reading its acks: stop taking its requests
            # (its next ones wait in TCP) until they drain
            while conn.pending_bytes(sid) > STREAM_QUEUE_BYTES:
                await self.progress.wait()

    async def _publish_inline(
        self, ev: CallStarted, events: list[Any], first: int, half_closed: int
    ) -> None:
        """A whole PublishAsync call in one read (its HEADERS, messages and END_STREAM: the
        usual shape of a one-message publish) with no other call in flight: handled here in
        the reader, without the call's task, channel and cancel scopes. The same frames go
        out as from ``_run_call``; the reader reads nothing more until the core has stored
        the messages, which with nothing else in flight only delays this client's next
        bytes (TCP holds them). A call with a grpc-timeout takes the task path (its
        deadline needs a scope)."""
        call = _Call(ev.stream_id, ev.method, ev.timeout_s)
        self.calls[ev.stream_id] = call
        batch: list[Any] = []
        nbytes = 0
        for j in range(first, half_closed):
            batch.extend(events[j].messages)
            nbytes += events[j].nbytes
        sid = call.stream_id
        conn = self.conn
        status: int = Status.OK
        message = ""
        started = time.perf_counter()

        def respond(messages: list[Any]) -> None:
            conn.send_raw(sid, b"".join(messages))

        try:
            if batch:
                await self.service.publish_async(batch, new_inbox(), respond)
        except RpcError as exc:
            status, message = exc.status, exc.message
        except GatewayError as exc:
            err = rpc_error(exc)
            status, message = err.status, err.message
        except Exception as exc:
            self.log.exception("rpc_failed", method="PublishAsync", error=repr(exc))
            status, message = Status.INTERNAL, f"internal error: {exc!r}"
        conn.release(sid, nbytes)
        conn.send_trailers(sid, status, message)
        self.calls.pop(sid, None)
        self._count("PublishAsync", status, time.perf_counter() - started)
        self._call_done()

    def _count(self, name: str, status: int, seconds: float) -> None:
        outcome = "ok" if status == Status.OK else Status(status).name.lower()
        name = snake_case(name)
        labelled(REQUESTS, PROTOCOL, name, outcome).inc()
        if seconds:
            labelled(REQUEST_LATENCY, PROTOCOL, name).observe(seconds)

    def _call_done(self) -> None:
        if not self.calls:
            self._idle.set()

    # ------------------------------------------------------------------ drain
    def drain(self, io: Connection) -> None:
        """The gateway drains: GOAWAY, end subscriptions and idle publishes, let the other calls
        finish, then end the connection."""
        self.draining = True
        self.conn.goaway()
        for call in list(self.calls.values()):
            if call.spec.name == "Subscribe":
                call.end(Status.UNAVAILABLE, "server is shutting down")
            elif call.idle_scope is not None:
                call.idle_scope.cancel()
        self.kick()
        io.start_soon(self._finish_calls, io)

    async def _finish_calls(self, io: Connection) -> None:
        while self.calls:
            self._idle = trio.Event()
            await self._idle.wait()
        await self._send_pending()
        io.stop()


def _whole_call(events: list[Any], start: int, stream_id: int) -> int:
    """The index of the HalfClosed that ends ``stream_id`` when the events from ``start`` are
    only that call's messages then its HalfClosed; -1 otherwise."""
    n = len(events)
    i = start
    while i < n:
        ev = events[i]
        t = type(ev)
        if getattr(ev, "stream_id", -1) != stream_id:
            return -1
        if t is HalfClosed:
            return i
        if t is not MessageReceived:
            return -1
        i += 1
    return -1


async def handle_connection(stream: trio.abc.Stream, ctx: ConnectionContext) -> None:
    """Serve one Liftbridge client connection until it closes (or the gateway drains)."""
    await drive(stream, ctx, Session(stream, ctx))
