"""A line protocol used only by the server tests: ``WHO`` answers the peer address the server
recorded, anything else is echoed upper-cased. It exercises the server's accept, limits, PROXY
protocol, TLS and timeouts independently of any broker protocol."""

from __future__ import annotations

import trio

from gateway.protocols.base import ConnectionContext, ListenerConfig, ProtocolSpec


async def handle(stream: trio.abc.Stream, ctx: ConnectionContext) -> None:
    buf = b""
    while not ctx.shutdown.is_set():
        data = await stream.receive_some(4096)
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line == b"WHO":
                await stream.send_all(ctx.peer.encode() + b"\n")
            else:
                await stream.send_all(line.upper() + b"\n")


PROTOCOL = ProtocolSpec("echo", ListenerConfig, handle, "test-only line echo")
