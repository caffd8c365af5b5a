"""The trio Liftbridge client of this repository, on the codec's client role (``GrpcConnection``):
the upstream Liftbridge backend's connection, the interop driver, the tests and benchmarks.
Real-client tests use gufo-liftbridge and grpcio instead.

    async with await LiftbridgeClient.connect(host, port) as lb:
        await lb.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
        acks = await lb.publish_async([pb.PublishRequest(stream="s", value=b"x")])

One HTTP/2 connection, any number of calls at once (from one task or several), and no task of
its own: a task waiting for a call's next message reads the connection (one reader at a time)
and hands every event to the call it belongs to. So nothing is read while no call waits, and the
client needs no nursery (a pool can hold it between calls).

Errors: a call that ends with a non-OK gRPC status raises :class:`GrpcStatusError` (the only
error type of this client); a lost connection, a call reset by the server, or a GOAWAY before
the server took the call raise ``EOFError``; a server breaking HTTP/2 raises the codec's
``RemoteProtocolError``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import trio

from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.codec import (
    CallEnded,
    CallError,
    CallReset,
    ConnectionClosed,
    GrpcConnection,
    MessageReceived,
    Status,
)

_ASYNC_STATUS = {
    pb.PublishAsyncError.NOT_FOUND: Status.NOT_FOUND,
    pb.PublishAsyncError.BAD_REQUEST: Status.INVALID_ARGUMENT,
    pb.PublishAsyncError.READONLY: Status.FAILED_PRECONDITION,
    pb.PublishAsyncError.PERMISSION_DENIED: Status.PERMISSION_DENIED,
}
"""PublishAsync reports a failed publish in the message (its own codes): as gRPC statuses."""


class GrpcStatusError(Exception):
    """The server ended a call with a non-OK gRPC status."""

    def __init__(
        self, method: str, status: int, message: str, received: list[Any] | None = None
    ) -> None:
        super().__init__(f"{method}: gRPC status {status} {message}")
        self.method = method
        self.status = status
        self.message = message
        self.received = received or []  # a streaming call's messages before the status


class _Ended:
    """The end of a call (its trailers), queued after its messages."""

    __slots__ = ("status", "message")

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


class Call:
    """One call in progress (:meth:`LiftbridgeClient.open_call`)."""

    def __init__(self, client: LiftbridgeClient, stream_id: int, method: str) -> None:
        self.client = client
        self.stream_id = stream_id
        self.method = method
        self.items: deque[Any] = deque()  # messages, then _Ended or an EOFError
        self.done = False

    async def send(self, messages: Sequence[Any]) -> None:
        """Send request messages (protobuf objects or their bytes)."""
        self.client.conn.send_messages(self.stream_id, list(messages))
        await self.client._flush()

    async def end(self) -> None:
        """No more request messages (half-close)."""
        self.client.conn.end_call(self.stream_id)
        await self.client._flush()

    async def receive(self) -> Any:
        """The next response message; None once the call ended with OK. Raises
        GrpcStatusError for another status, EOFError when the call or connection is gone."""
        if self.done:
            return None
        item = await self.client._next(self)
        if type(item) is _Ended:
            self.done = True
            if item.status != Status.OK:
                raise GrpcStatusError(self.method, item.status, item.message)
            return None
        if isinstance(item, EOFError):
            self.done = True
            raise item
        return item

    async def cancel(self) -> None:
        """Reset the call (RST_STREAM CANCEL) unless it is over."""
        if self.client._calls.pop(self.stream_id, None) is not None:
            self.done = True
            self.client.conn.reset(self.stream_id)
            await self.client._flush()


class LiftbridgeClient:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = GrpcConnection(client=True)
        self.conn.initiate()
        self._calls: dict[int, Call] = {}
        self._read_lock = trio.Lock()
        self._send_lock = trio.Lock()
        self._gone = ""  # why the connection ended ("" while it is open)
        self._last_stream: int | None = None  # the server's GOAWAY: calls above it are not taken

    @classmethod
    async def connect(cls, host: str, port: int) -> LiftbridgeClient:
        client = cls(await trio.open_tcp_stream(host, port))
        await client._flush()
        return client

    async def __aenter__(self) -> LiftbridgeClient:
        await self._flush()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def _flush(self) -> None:
        async with self._send_lock:
            data = self.conn.data_to_send()
            if data:
                await self.stream.send_all(data)

    # ------------------------------------------------------------------ calls
    def open_call(self, method: str, timeout_s: float | None = None) -> Call:
        """Start a call (its headers go out with the next send)."""
        if self._gone:
            raise EOFError(f"{method}: {self._gone}")
        if self._last_stream is not None:
            raise EOFError(f"{method}: the server sent GOAWAY")
        sid = self.conn.start_call(method, timeout_s=timeout_s)
        call = self._calls[sid] = Call(self, sid, method)
        return call

    async def _next(self, call: Call) -> Any:
        """The next item of ``call``, reading the connection while there is none."""
        items = call.items
        while not items:
            async with self._read_lock:
                if not items:
                    await self._read()
        return items.popleft()

    async def _read(self) -> None:
        """One read: its events to their calls; a lost connection ends every call."""
        if self._gone:
            raise EOFError(self._gone)
        try:
            data = await self.stream.receive_some(1 << 18)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._end_all(f"the connection to the Liftbridge server failed: {exc!r}")
            raise
        if not data:
            self._end_all("the Liftbridge server closed the connection")
            return
        try:
            events = self.conn.receive_data(data)
        except Exception:
            self._end_all("the Liftbridge server broke the HTTP/2 protocol")
            raise
        calls = self._calls
        for ev in events:
            if type(ev) is MessageReceived:
                call = calls.get(ev.stream_id)
                if call is not None:
                    call.items.extend(ev.messages)
            elif type(ev) is CallEnded or type(ev) is CallError:
                call = calls.pop(ev.stream_id, None)
                if call is not None:
                    call.items.append(_Ended(ev.status, ev.message))
            elif type(ev) is CallReset:
                call = calls.pop(ev.stream_id, None)
                if call is not None:
                    call.items.append(EOFError(f"{call.method}: the server reset the call"))
            elif type(ev) is ConnectionClosed:
                self._last_stream = ev.last_stream_id
                for sid in [s for s in calls if s > ev.last_stream_id]:
                    call = calls.pop(sid)
                    call.items.append(EOFError(f"{call.method}: the server sent GOAWAY"))
        await self._flush()  # window updates, PING and SETTINGS acks

    def _end_all(self, why: str) -> None:
        self._gone = why
        for call in self._calls.values():
            call.items.append(EOFError(f"{call.method}: {why}"))
        self._calls.clear()

    async def call_stream(self, method: str, request: Any, limit: int | None = None) -> list[Any]:
        """Start ``method`` with one request message; every response message until the call
        ends (or ``limit`` messages arrived, then the call is cancelled). A non-OK status
        raises GrpcStatusError with the messages received before it."""
        call = self.open_call(method)
        self.conn.send_message(call.stream_id, request)
        await call.end()
        out: list[Any] = []
        try:
            while True:
                item = await call.receive()
                if item is None:
                    return out
                out.append(item)
                if limit is not None and len(out) >= limit:
                    await call.cancel()
                    return out
        except GrpcStatusError as exc:
            exc.received = out
            raise

    async def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """A unary call: its one response message."""
        call = self.open_call(method, timeout_s)
        self.conn.send_message(call.stream_id, request)
        await call.end()
        answers = []
        while (item := await call.receive()) is not None:
            answers.append(item)
        if len(answers) != 1:
            raise GrpcStatusError(
                method, Status.INTERNAL, f"{len(answers)} responses to a unary call"
            )
        return answers[0]

    async def publish_async(
        self, requests: Sequence[pb.PublishRequest], window: int = 4096
    ) -> list[pb.PublishResponse]:
        """One PublishAsync call: send the requests (at most ``window`` unanswered), collect one
        response per request whose ackPolicy is not NONE, then the call's end."""
        call = self.open_call("PublishAsync")
        expect = sum(1 for r in requests if r.ackPolicy != pb.NONE)
        out: list[pb.PublishResponse] = []

        async def take() -> None:
            item = await call.receive()
            if item is None:
                raise GrpcStatusError("PublishAsync", Status.INTERNAL, "ended early", out)
            out.append(item)

        sent = 0
        while sent < len(requests):
            chunk = requests[sent : sent + max(1, window - (sent - len(out)))]
            await call.send(chunk)
            sent += len(chunk)
            while sent - len(out) >= window // 2 and len(out) < expect:
                await take()
        await call.end()
        while len(out) < expect:
            await take()
        if await call.receive() is not None:
            raise GrpcStatusError("PublishAsync", Status.INTERNAL, "more acks than requests")
        return out

    async def subscribe(self, request: pb.SubscribeRequest) -> AsyncIterator[pb.Message]:
        """Messages after the handshake; ends quietly on OK, raises GrpcStatusError otherwise.
        Leaving the loop early cancels the call."""
        call = self.open_call("Subscribe")
        self.conn.send_message(call.stream_id, request)
        await call.end()
        try:
            if await call.receive() is None:  # the empty handshake message
                return
            while (item := await call.receive()) is not None:
                yield item
        finally:
            await call.cancel()

    # ------------------------------------------------------------------ conveniences
    async def create_stream(self, name: str, partitions: int, subject: str = "") -> None:
        await self.call(
            "CreateStream",
            pb.CreateStreamRequest(subject=subject or name, name=name, partitions=partitions),
        )

    async def delete_stream(self, name: str) -> None:
        await self.call("DeleteStream", pb.DeleteStreamRequest(name=name))

    async def metadata(self, streams: list[str] | None = None) -> Any:
        return await self.call("FetchMetadata", pb.FetchMetadataRequest(streams=streams or []))

    async def partition_metadata(self, stream: str, partition: int) -> Any:
        resp = await self.call(
            "FetchPartitionMetadata",
            pb.FetchPartitionMetadataRequest(stream=stream, partition=partition),
        )
        return resp.metadata

    async def publish(
        self,
        stream: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: dict[str, bytes] | None = None,
    ) -> int:
        """Publish one message with ack policy ALL; its offset."""
        resp = await self.call(
            "Publish",
            pb.PublishRequest(
                stream=stream,
                partition=partition,
                key=key or b"",
                value=value or b"",
                headers=headers or {},
                ackPolicy=pb.ALL,
            ),
        )
        return resp.ack.offset

    async def publish_many(
        self,
        stream: str,
        partition: int,
        messages: list[tuple[bytes | None, bytes | None, dict[str, bytes]]],
    ) -> list[int]:
        """Publish ``(key, value, headers)`` messages over one PublishAsync call (ack policy
        ALL, correlation ids 0..n-1); their offsets, in order. An async error raises
        GrpcStatusError with its code."""
        call = self.open_call("PublishAsync")
        await call.send(
            [
                pb.PublishRequest(
                    stream=stream,
                    partition=partition,
                    key=k or b"",
                    value=v or b"",
                    headers=h,
                    ackPolicy=pb.ALL,
                    correlationId=str(i),
                )
                for i, (k, v, h) in enumerate(messages)
            ]
        )
        await call.end()
        offsets: list[int] = [-1] * len(messages)
        left = len(messages)
        while (resp := await call.receive()) is not None:
            if resp.HasField("asyncError"):
                await call.cancel()
                raise GrpcStatusError(
                    "PublishAsync",
                    _ASYNC_STATUS.get(resp.asyncError.code, Status.INTERNAL),
                    resp.asyncError.message,
                )
            offsets[int(resp.correlationId or resp.ack.correlationId)] = resp.ack.offset
            left -= 1
        if left:
            raise GrpcStatusError("PublishAsync", Status.INTERNAL, f"{left} publishes not acked")
        return offsets

    async def fetch(self, stream: str, partition: int, offset: int, stop: int) -> list[Any]:
        """Messages ``offset..stop`` (inclusive) through a Subscribe with a stop offset (the
        subscription's handshake message is left out)."""
        request = pb.SubscribeRequest(
            stream=stream,
            partition=partition,
            startPosition=pb.OFFSET,
            startOffset=offset,
            stopPosition=pb.STOP_OFFSET,
            stopOffset=stop,
        )
        try:
            messages = await self.call_stream("Subscribe", request, limit=stop - offset + 2)
        except GrpcStatusError as exc:
            # the server ends the call once past the stop offset; with gaps in the offsets
            # (a Kafka backend's transaction markers) that comes before ``limit`` messages
            if exc.status != Status.RESOURCE_EXHAUSTED or "Stop offset" not in exc.message:
                raise
            messages = exc.received
        return messages[1:]
