"""A line protocol used only by the server and driver tests: ``WHO`` answers the peer address the
server recorded, anything else is echoed upper-cased. It exercises the server's accept, limits,
PROXY protocol, TLS and timeouts, and the connection driver, independently of any broker
protocol. Lines are cut with the shared receive buffer; a line longer than the listener's
``max_frame_bytes`` is a protocol error (kind ``line_too_long``)."""

from __future__ import annotations

import trio

from gateway.protocols.base import ConnectionContext, ListenerConfig, ProtocolSpec
from gateway.protocols.buffer import ReceiveBuffer
from gateway.protocols.driver import Connection, drive
from gateway.protocols.errors import RemoteProtocolError


class Lines:
    """The driver's framing: newline-delimited lines."""

    def __init__(self, max_bytes: int) -> None:
        self.buf = ReceiveBuffer()
        self.receive_data = self.buf.feed
        self.max_bytes = max_bytes

    @property
    def buffered(self) -> int:
        return len(self.buf)

    def next_request(self) -> bytes | None:
        try:
            return self.buf.take_until(b"\n", self.max_bytes)
        except ValueError as exc:
            raise RemoteProtocolError(str(exc), "line_too_long") from None


class EchoSession:
    receive_bytes = 4096

    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.framing = Lines(ctx.listener.max_frame_bytes)

    async def handle(self, line: bytes, io: Connection) -> bool:
        if line == b"WHO":
            await io.send(self.ctx.peer.encode() + b"\n")
        else:
            await io.send(line.upper() + b"\n")
        return True


async def handle(stream: trio.abc.Stream, ctx: ConnectionContext) -> None:
    await drive(stream, ctx, EchoSession(ctx))


PROTOCOL = ProtocolSpec("echo", ListenerConfig, handle, "test-only line echo")
