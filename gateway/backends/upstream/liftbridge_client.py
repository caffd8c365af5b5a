"""A small trio Liftbridge client: gRPC on the codec's client role (``GrpcConnection``), one
HTTP/2 connection, one call at a time (the upstream backend's connection and the matrix driver)."""

from __future__ import annotations

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
        self.status = status
        self.message = message
        self.received = received or []  # a streaming call's messages before the status


class LiftbridgeClient:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = GrpcConnection(client=True)
        self.conn.initiate()

    @classmethod
    async def connect(cls, host: str, port: int) -> LiftbridgeClient:
        client = cls(await trio.open_tcp_stream(host, port))
        await client._flush()
        return client

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            await self.stream.send_all(data)

    async def _events(self) -> list[Any]:
        data = await self.stream.receive_some(1 << 18)
        if not data:
            raise EOFError("the Liftbridge server closed the connection")
        events = self.conn.receive_data(data)
        await self._flush()  # window updates, PING and SETTINGS acks
        return events

    async def call_stream(self, method: str, request: Any, limit: int | None = None) -> list[Any]:
        """Start ``method`` with one request message; every response message until the call
        ends (or ``limit`` messages arrived, then the call is cancelled)."""
        sid = self.conn.start_call(method)
        self.conn.send_message(sid, request)
        self.conn.end_call(sid)
        await self._flush()
        out: list[Any] = []
        while True:
            for ev in await self._events():
                if getattr(ev, "stream_id", sid) != sid:
                    continue
                if isinstance(ev, MessageReceived):
                    out.extend(ev.messages)
                    if limit is not None and len(out) >= limit:
                        self.conn.reset(sid)
                        await self._flush()
                        return out[:limit]
                elif isinstance(ev, CallEnded):
                    if ev.status != Status.OK:
                        raise GrpcStatusError(method, ev.status, ev.message, out)
                    return out
                elif isinstance(ev, CallError):
                    raise GrpcStatusError(method, ev.status, ev.message)
                elif isinstance(ev, CallReset):
                    raise EOFError(f"{method}: the server reset the call")
                elif isinstance(ev, ConnectionClosed):
                    raise EOFError(f"{method}: the server sent GOAWAY")

    async def call(self, method: str, request: Any) -> Any:
        """A unary call: its one response message."""
        answers = await self.call_stream(method, request)
        if len(answers) != 1:
            raise GrpcStatusError(
                method, Status.INTERNAL, f"{len(answers)} responses to a unary call"
            )
        return answers[0]

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
        sid = self.conn.start_call("PublishAsync")
        self.conn.send_messages(
            sid,
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
            ],
        )
        self.conn.end_call(sid)
        await self._flush()
        offsets: list[int | None] = [None] * len(messages)
        left = len(messages)
        ended = False
        while left or not ended:
            for ev in await self._events():
                if getattr(ev, "stream_id", sid) != sid:
                    continue
                if isinstance(ev, MessageReceived):
                    for resp in ev.messages:  # one event carries every message of a read
                        if resp.HasField("asyncError"):
                            raise GrpcStatusError(
                                "PublishAsync",
                                _ASYNC_STATUS.get(resp.asyncError.code, Status.INTERNAL),
                                resp.asyncError.message,
                            )
                        cid = resp.correlationId or resp.ack.correlationId
                        offsets[int(cid)] = resp.ack.offset
                        left -= 1
                elif isinstance(ev, CallEnded):
                    if ev.status != Status.OK:
                        raise GrpcStatusError("PublishAsync", ev.status, ev.message)
                    ended = True
                elif isinstance(ev, CallError):
                    raise GrpcStatusError("PublishAsync", ev.status, ev.message)
                elif isinstance(ev, CallReset | ConnectionClosed):
                    raise EOFError("PublishAsync: the call was reset")
            if ended and left:
                raise GrpcStatusError(
                    "PublishAsync", Status.INTERNAL, f"{left} publishes not acked"
                )
        return [o if o is not None else -1 for o in offsets]

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

    async def set_cursor(self, stream: str, partition: int, cursor: str, offset: int) -> None:
        await self.call(
            "SetCursor",
            pb.SetCursorRequest(stream=stream, partition=partition, cursorId=cursor, offset=offset),
        )

    async def fetch_cursor(self, stream: str, partition: int, cursor: str) -> int:
        resp = await self.call(
            "FetchCursor",
            pb.FetchCursorRequest(stream=stream, partition=partition, cursorId=cursor),
        )
        return resp.offset
