"""The connection driver with the test-only line protocol (tests/echo_protocol.py) over in-memory
streams behind the server's GuardedStream: drain, protocol errors, budgets, task failures."""

from __future__ import annotations

from typing import Any

import pytest
import structlog
import trio
import trio.testing

from gateway.observability import LIMIT_HITS, PROTOCOL_ERRORS
from gateway.protocols.base import ConnectionContext, ListenerConfig
from gateway.protocols.driver import Connection, drive
from gateway.protocols.errors import RemoteProtocolError
from gateway.streams import GuardedStream
from tests.echo_protocol import EchoSession

DEADLINE_S = 10


def context(**listener: Any) -> ConnectionContext:
    return ConnectionContext(
        protocol="echo",
        core=None,  # type: ignore[arg-type]  # the echo session uses no core
        listener=ListenerConfig(**listener),
        config=None,  # type: ignore[arg-type]
        peer="memory",
        advertised_host="127.0.0.1",
        advertised_port=1,
        log=structlog.get_logger(),
    )


class Session(EchoSession):
    """Echo, plus ``SLOW`` (answered once ``release`` is set), ``TASK`` (a task that raises),
    ``HUGE`` (a budget error) and a record of ``drain`` and ``close``."""

    def __init__(self, ctx: ConnectionContext) -> None:
        super().__init__(ctx)
        self.release = trio.Event()
        self.in_hand = trio.Event()
        self.handled: list[bytes] = []
        self.hooks: list[str] = []

    async def handle(self, line: bytes, io: Connection) -> bool:
        self.handled.append(line)
        if line == b"SLOW":
            self.in_hand.set()
            await self.release.wait()
        elif line == b"TASK":
            io.start_soon(self._fail)
        elif line == b"HUGE":
            raise RemoteProtocolError("a huge request", "too_big", limit="max_huge")
        return await super().handle(line, io)

    async def _fail(self) -> None:
        raise ValueError("a bug in a task")

    def drain(self, io: Connection) -> None:
        self.hooks.append("drain")

    async def close(self) -> None:
        self.hooks.append("close")


async def read_until(stream: trio.abc.Stream, want: bytes) -> bytes:
    got = b""
    with trio.fail_after(DEADLINE_S):
        while not got.endswith(want):
            data = await stream.receive_some()
            assert data, got
            got += data
    return got


async def serve(ctx: ConnectionContext, session: Session, body: Any) -> GuardedStream:
    """Run the driver on one end of a memory stream pair while ``body(client, guarded)`` runs;
    returns when the driver returned."""
    client, server = trio.testing.memory_stream_pair()
    guarded = GuardedStream(server)
    with trio.fail_after(DEADLINE_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive, guarded, ctx, session)
            await body(client, guarded)
    return guarded


async def test_drain_finishes_the_request_in_hand_and_reads_no_more() -> None:
    ctx = context()
    session = Session(ctx)

    async def body(client: trio.abc.Stream, guarded: GuardedStream) -> None:
        await client.send_all(b"a\nSLOW\nNEXT\n")
        assert await read_until(client, b"A\n") == b"A\n"
        await session.in_hand.wait()
        ctx.shutdown.set()  # what the server does on stop
        guarded.drain()
        session.release.set()
        assert await read_until(client, b"SLOW\n") == b"SLOW\n"

    await serve(ctx, session, body)
    assert session.handled == [b"a", b"SLOW"]
    assert session.hooks == ["drain", "close"]


async def test_drain_while_idle_ends_the_connection() -> None:
    ctx = context()
    session = Session(ctx)

    async def body(client: trio.abc.Stream, guarded: GuardedStream) -> None:
        await client.send_all(b"hi\n")
        await read_until(client, b"HI\n")
        ctx.shutdown.set()
        guarded.drain()

    await serve(ctx, session, body)
    assert session.hooks == ["drain", "close"]


async def test_a_long_line_is_a_protocol_error_that_closes() -> None:
    ctx = context(max_frame_bytes=16)
    session = Session(ctx)
    before = PROTOCOL_ERRORS.labels(protocol="echo", kind="line_too_long")._value.get()

    async def body(client: trio.abc.Stream, guarded: GuardedStream) -> None:
        await client.send_all(b"ok\n" + b"x" * 64)
        await read_until(client, b"OK\n")

    await serve(ctx, session, body)
    assert session.handled == [b"ok"]
    assert PROTOCOL_ERRORS.labels(protocol="echo", kind="line_too_long")._value.get() == before + 1


async def test_a_budget_error_counts_a_limit_hit() -> None:
    ctx = context()
    session = Session(ctx)
    before = LIMIT_HITS.labels("max_huge", "echo")._value.get()

    async def body(client: trio.abc.Stream, guarded: GuardedStream) -> None:
        await client.send_all(b"HUGE\nafter\n")

    await serve(ctx, session, body)
    assert session.handled == [b"HUGE"]
    assert LIMIT_HITS.labels("max_huge", "echo")._value.get() == before + 1


async def test_a_peer_closing_inside_a_request_is_counted_truncated() -> None:
    ctx = context()
    session = Session(ctx)
    before = PROTOCOL_ERRORS.labels(protocol="echo", kind="truncated")._value.get()

    async def body(client: trio.abc.Stream, guarded: GuardedStream) -> None:
        await client.send_all(b"half a li")
        await client.aclose()

    await serve(ctx, session, body)
    assert PROTOCOL_ERRORS.labels(protocol="echo", kind="truncated")._value.get() == before + 1


async def test_a_failing_task_fails_the_connection_with_its_exception() -> None:
    ctx = context()
    session = Session(ctx)
    client, server = trio.testing.memory_stream_pair()
    await client.send_all(b"TASK\n")
    with trio.fail_after(DEADLINE_S), pytest.raises(ValueError, match="a bug in a task"):
        await drive(GuardedStream(server), ctx, session)  # bare, not in an exception group
    assert session.hooks == ["close"]
