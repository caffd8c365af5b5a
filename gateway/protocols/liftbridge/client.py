"""A small trio Liftbridge client on the codec's client role (tests, benchmarks; the base of an
upstream Liftbridge backend). Real-client tests use gufo-liftbridge and grpcio instead.

    async with await LiftbridgeClient.connect(host, port) as lb:
        await lb.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
        acks = await lb.publish_async([pb.PublishRequest(stream="s", value=b"x")])
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import trio

from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.codec import (
    CallEnded,
    CallReset,
    GrpcConnection,
    MessageReceived,
)


class RpcFailed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"gRPC status {status}: {message}")
        self.status = status
        self.message = message


class LiftbridgeClient:
    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = GrpcConnection(client=True)
        self._calls: dict[int, trio.MemorySendChannel[Any]] = {}
        self._nursery: trio.Nursery | None = None
        self._cm: Any = None
        self._send_lock = trio.Lock()

    @classmethod
    async def connect(cls, host: str, port: int) -> LiftbridgeClient:
        return cls(await trio.open_tcp_stream(host, port))

    async def __aenter__(self) -> LiftbridgeClient:
        self._cm = trio.open_nursery()
        self._nursery = await self._cm.__aenter__()
        self.conn.initiate()
        await self._flush()
        self._nursery.start_soon(self._reader)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()
        await self._cm.__aexit__(None, None, None)
        await self.stream.aclose()

    async def _flush(self) -> None:
        async with self._send_lock:
            data = self.conn.data_to_send()
            if data:
                await self.stream.send_all(data)

    async def _reader(self) -> None:
        while True:
            data = await self.stream.receive_some(256 * 1024)
            if not data:
                for ch in self._calls.values():
                    ch.send_nowait(RpcFailed(14, "connection closed"))
                return
            for ev in self.conn.receive_data(data):
                ch = self._calls.get(ev.stream_id) if hasattr(ev, "stream_id") else None
                if ch is None:
                    continue
                if type(ev) is MessageReceived:
                    for m in ev.messages:
                        ch.send_nowait(m)
                elif type(ev) is CallEnded:
                    ch.send_nowait(None if ev.status == 0 else RpcFailed(ev.status, ev.message))
                    del self._calls[ev.stream_id]
                elif type(ev) is CallReset:
                    ch.send_nowait(RpcFailed(1, "reset"))
                    del self._calls[ev.stream_id]
            await self._flush()

    def _open(self, method: str, timeout_s: float | None) -> tuple[int, Any]:
        send, recv = trio.open_memory_channel[Any](float("inf"))
        sid = self.conn.start_call(method, timeout_s=timeout_s)
        self._calls[sid] = send
        return sid, recv

    async def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        """A unary call; raises RpcFailed for a non-OK status."""
        sid, recv = self._open(method, timeout_s)
        self.conn.send_message(sid, request)
        self.conn.end_call(sid)
        await self._flush()
        response = None
        async for item in recv:
            if item is None:
                return response
            if isinstance(item, RpcFailed):
                raise item
            response = item
        raise RpcFailed(14, "connection closed")

    async def publish_async(
        self, requests: Sequence[pb.PublishRequest], window: int = 4096
    ) -> list[pb.PublishResponse]:
        """One PublishAsync call: send the requests (at most ``window`` unanswered), collect one
        response per request whose ackPolicy is not NONE."""
        sid, recv = self._open("PublishAsync", None)
        expect = sum(1 for r in requests if r.ackPolicy != pb.NONE)
        out: list[pb.PublishResponse] = []
        sent = 0
        while sent < len(requests):
            chunk = requests[sent : sent + max(1, window - (sent - len(out)))]
            self.conn.send_messages(sid, list(chunk))
            sent += len(chunk)
            await self._flush()
            while sent - len(out) >= window // 2:
                item = await recv.receive()
                while True:
                    if isinstance(item, RpcFailed) or item is None:
                        raise item or RpcFailed(13, "ended early")
                    out.append(item)
                    try:
                        item = recv.receive_nowait()
                    except trio.WouldBlock:
                        break
        self.conn.end_call(sid)
        await self._flush()
        while len(out) < expect:
            item = await recv.receive()
            if isinstance(item, RpcFailed) or item is None:
                raise item or RpcFailed(13, "ended early")
            out.append(item)
        return out

    async def subscribe(self, request: pb.SubscribeRequest) -> AsyncIterator[pb.Message]:
        """Messages after the handshake; ends quietly on OK, raises RpcFailed otherwise."""
        sid, recv = self._open("Subscribe", None)
        self.conn.send_message(sid, request)
        self.conn.end_call(sid)
        await self._flush()
        first = True
        try:
            async for item in recv:
                if item is None:
                    return
                if isinstance(item, RpcFailed):
                    raise item
                if first:
                    first = False  # the empty handshake message
                    continue
                yield item
        finally:
            if sid in self._calls:
                del self._calls[sid]
                self.conn.reset(sid)
                await self._flush()
