"""A small trio Cursus client on the codec's client role (tests, benchmarks, an upstream backend).

One connection, one request at a time; every reply is one frame (a STREAM then pushes frames).
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from gateway.protocols.cursus import codec
from gateway.protocols.cursus.codec import Ack, Batch, FrameBuffer, Keepalive, Message


class CursusClient:
    def __init__(self, stream: trio.abc.Stream, compression: str = "none") -> None:
        self.stream = stream
        self.compression = compression
        self._buf = FrameBuffer(codec.MAX_FRAME_BYTES)

    @classmethod
    async def connect(cls, host: str, port: int, compression: str = "none") -> CursusClient:
        return cls(await trio.open_tcp_stream(host, port), compression)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> CursusClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ frames
    async def send_body(self, body: bytes) -> None:
        await self.stream.send_all(codec.frame(codec.compress(body, self.compression)))

    async def read_frame(self) -> bytes | None:
        """The next frame body, or None when the server closed the connection."""
        while True:
            body = self._buf.next_frame()
            if body is not None:
                return body
            data = await self.stream.receive_some(1 << 18)
            if not data:
                return None
            self._buf.feed(data)

    async def read_reply(self) -> Keepalive | Batch | str | None:
        body = await self.read_frame()
        return None if body is None else codec.decode_reply(body)

    # ------------------------------------------------------------------ requests
    async def command(self, text: str, envelope: str = "") -> str | Batch | Keepalive | None:
        """Send one text command (in the envelope) and read its reply."""
        await self.send_body(codec.encode_text(text, envelope))
        return await self.read_reply()

    async def text(self, text: str, envelope: str = "") -> str:
        reply = await self.command(text, envelope)
        if not isinstance(reply, str):
            raise codec.RemoteProtocolError(f"expected a text reply to {text!r}, got {reply!r}")
        return reply

    async def consume(self, topic: str, partition: int, offset: int, member: str, **extra: object
                      ) -> Batch | str:  # fmt: skip
        args = " ".join(f"{k}={v}" for k, v in extra.items())
        cmd = f"CONSUME topic={topic} partition={partition} offset={offset} member={member}"
        reply = await self.command(f"{cmd} {args}".strip())
        if reply is None or isinstance(reply, Keepalive):
            raise codec.RemoteProtocolError(f"unexpected reply to CONSUME: {reply!r}")
        return reply

    async def produce(
        self,
        topic: str,
        partition: int,
        messages: Sequence[Message],
        acks: str = "1",
        idempotent: bool = False,
    ) -> Ack | str:
        """Send a batch; the JSON ack, or the text of an error reply."""
        batch = codec.make_batch(topic, partition, messages, acks, idempotent)
        return await self.produce_body(codec.encode_batch(batch))

    async def produce_body(self, body: bytes) -> Ack | str:
        await self.send_body(body)
        reply = await self.read_frame()
        if reply is None:
            raise trio.BrokenResourceError("connection closed by the server")
        if reply.startswith(b"{"):
            return codec.decode_ack(reply)
        return reply.decode("utf-8", "replace")
