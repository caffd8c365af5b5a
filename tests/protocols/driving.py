"""Drive a protocol's session through the connection driver over in-memory streams (no
sockets, no server): a memory backend behind a real Core, a real ConnectionContext."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import structlog
import trio
import trio.testing

from gateway.backends.memory import MemoryBackend
from gateway.config import parse_config
from gateway.core.engine import Core
from gateway.observability import PROTOCOL_ERRORS
from gateway.protocols import get_protocol
from gateway.protocols.base import ConnectionContext

DEADLINE_S = 10  # generous: only proves the session still answers


def context(protocol: str, **listener: Any) -> ConnectionContext:
    """A connection's context on a fresh memory-backed core, the listener's config typed."""
    config = parse_config(
        {"listeners": {protocol: listener}, "backends": {"m": {"type": "memory"}}}
    )
    return ConnectionContext(
        protocol=protocol,
        core=Core({"m": MemoryBackend("m")}, [("*", "m")]),
        listener=config.listeners[protocol],
        config=config,
        peer="memory",
        advertised_host="127.0.0.1",
        advertised_port=1,
        log=structlog.get_logger().bind(protocol=protocol),
    )


@dataclass
class Driven:
    """The client's end of a driven connection and whether the driver has returned."""

    client: trio.abc.Stream
    done: trio.Event

    async def receive(self, until: Callable[[bytes], bool]) -> bytes:
        """Bytes from the session until ``until(everything so far)`` holds."""
        got = b""
        with trio.fail_after(DEADLINE_S):
            while not until(got):
                data = await self.client.receive_some(1 << 16)
                assert data, f"the session closed after {got!r}"
                got += data
        return got

    async def closed(self) -> None:
        """The driver returned by itself (the session closed the connection)."""
        with trio.fail_after(DEADLINE_S):
            await self.done.wait()


@asynccontextmanager
async def driven(protocol: str, **listener: Any) -> AsyncIterator[Driven]:
    """The protocol's session run by the driver on one end of an in-memory stream pair."""
    ctx = context(protocol, **listener)
    handle_connection = get_protocol(protocol).handle_connection  # the driver, lazily imported
    client, server = trio.testing.memory_stream_pair()
    done = trio.Event()

    async def run() -> None:
        try:
            await handle_connection(server, ctx)
        finally:
            done.set()
            await server.aclose()  # as the server does after its handler

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        yield Driven(client, done)
        await client.aclose()  # the peer goes: the driver ends the session
        with trio.fail_after(DEADLINE_S):
            await done.wait()


def protocol_errors(protocol: str, kind: str) -> float:
    return PROTOCOL_ERRORS.labels(protocol=protocol, kind=kind)._value.get()
