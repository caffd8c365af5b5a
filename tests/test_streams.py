"""FastSocketStream (and GuardedStream over it) behave like trio's SocketStream: bytes, end of
stream, errors, partial sends of large buffers, concurrent sends refused; and a task that only
sends still lets other tasks run."""

from __future__ import annotations

import errno
import socket
import struct

import pytest
import trio
import trio.testing

from gateway.streams import (
    ConnectionTimeout,
    FastSocketStream,
    GuardedStream,
    accept_connection,
    sweep_interval,
)


async def stream_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listener.accept()
    await listener.aclose()
    return client, server


async def test_wraps_only_plain_socket_streams() -> None:
    client, server = await stream_pair()
    assert isinstance(FastSocketStream.wrap(server), FastSocketStream)
    assert FastSocketStream.wrap(GuardedStream(server)) is None
    assert GuardedStream(server)._fast is not None
    await client.aclose()
    await server.aclose()


@pytest.mark.parametrize("guarded", [False, True])
async def test_bytes_both_ways_large_sends_and_end_of_stream(guarded: bool) -> None:
    client, server = await stream_pair()
    fast: trio.abc.Stream = GuardedStream(server) if guarded else FastSocketStream(server)
    big = bytes(range(256)) * 40_000  # 10 MB: far more than the socket buffers take at once
    received = bytearray()

    async def read_all() -> None:
        while len(received) < len(big):
            received.extend(await client.receive_some(1 << 16))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        await fast.send_all(big)
    assert bytes(received) == big
    await client.send_all(b"hello")
    got = b""
    while len(got) < 5:
        got += await fast.receive_some(3)
    assert got == b"hello"
    await client.send_eof()
    assert await fast.receive_some() == b""
    await fast.send_all(b"")  # nothing to send: a no-op, like SocketStream
    await fast.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await fast.receive_some()
    with pytest.raises(trio.ClosedResourceError):
        await fast.send_all(b"x")
    await client.aclose()


async def test_reset_by_peer_is_a_broken_resource() -> None:
    client, server = await stream_pair()
    fast = FastSocketStream(server)
    linger = struct.pack("ii", 1, 0)  # on, 0 s: close sends RST
    client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
    await client.aclose()  # linger 0: RST
    with pytest.raises(trio.BrokenResourceError):
        for _ in range(100):
            await fast.send_all(b"x" * 65536)
            await trio.sleep(0.01)
    await fast.aclose()


async def test_a_receive_waiting_for_data_wakes_when_it_arrives() -> None:
    client, server = await stream_pair()
    fast = FastSocketStream(server)
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _receive_into(fast, got))
        await trio.sleep(0.05)
        assert got == []
        await client.send_all(b"late")
    assert got == [b"late"]
    await client.aclose()
    await fast.aclose()


async def _receive_into(stream: trio.abc.Stream, out: list[bytes]) -> None:
    out.append(await stream.receive_some())


async def test_concurrent_sends_are_refused() -> None:
    client, server = await stream_pair()
    fast = FastSocketStream(server)
    big = b"x" * 20_000_000  # blocks: nobody reads on the other side yet
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fast.send_all, big)
        await trio.sleep(0.05)
        with pytest.raises(trio.BusyResourceError):
            await fast.send_all(b"y")
        received = 0
        while received < len(big):
            received += len(await client.receive_some(1 << 20))
    await client.aclose()
    await fast.aclose()


async def test_try_send_takes_what_fits_now_and_never_waits() -> None:
    client, server = await stream_pair()
    guarded = GuardedStream(server)
    assert guarded.try_send(b"hello") == 5
    assert await client.receive_some(5) == b"hello"
    assert guarded.bytes_out == 5
    big = b"x" * 20_000_000  # more than the socket buffers: nobody reads yet
    sent = guarded.try_send(big)
    assert 0 < sent < len(big)
    while taken := guarded.try_send(big[sent:]):  # up to the brim, never waiting
        sent += taken
    assert sent < len(big)
    assert guarded.try_send(b"more") == 0  # the buffers are full: nothing taken
    async with trio.open_nursery() as nursery:
        nursery.start_soon(guarded.send_all, big[sent:])
        await trio.sleep(0.05)
        assert guarded.try_send(b"y") == 0  # another task is in send_all
        received = 0
        while received < len(big):
            received += len(await client.receive_some(1 << 20))
    assert received == len(big)
    await client.aclose()
    await guarded.aclose()
    with pytest.raises(trio.ClosedResourceError):
        guarded.try_send(b"z")


async def test_try_send_over_another_stream_takes_nothing() -> None:
    left, right = trio.testing.memory_stream_pair()
    assert GuardedStream(left).try_send(b"abc") == 0


async def test_a_task_that_only_sends_still_lets_others_run() -> None:
    client, server = await stream_pair()
    fast = FastSocketStream(server)
    ticks = 0

    async def other() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    async def drain() -> None:
        while await client.receive_some(1 << 20):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain)
        nursery.start_soon(other)
        await trio.sleep(0)
        before = ticks
        for _ in range(50):
            await fast.send_all(b"z" * 10)
        assert ticks - before >= 40  # the other task ran between sends
        nursery.cancel_scope.cancel()
    await client.aclose()
    await fast.aclose()


async def _swept_pair(**timeouts: float) -> tuple[trio.SocketStream, GuardedStream]:
    client, server = await stream_pair()
    return client, GuardedStream(server, swept=True, **timeouts)


async def _receive_or_timeout(stream: GuardedStream, out: list[object]) -> None:
    """One receive_some's result or ConnectionTimeout; a wait nothing ends fails the test
    (after 10 s) rather than hanging it."""
    try:
        with trio.fail_after(10):
            out.append(await stream.receive_some())
    except ConnectionTimeout as exc:
        out.append(exc)


async def test_a_swept_idle_wait_ends_when_its_timeout_ran_out() -> None:
    """A swept stream's wait has no cancel scope: its owner's expire_if_due ends it, and only
    once the idle timeout has run out."""
    client, guarded = await _swept_pair(idle_timeout_s=5.0)
    outcome: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_or_timeout, guarded, outcome)
        await trio.testing.wait_all_tasks_blocked()
        guarded.expire_if_due(trio.current_time() + 4.0)  # not yet due
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == []
        guarded.expire_if_due(trio.current_time() + 5.0)
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionTimeout)
    assert outcome[0].kind == "idle"
    await client.aclose()
    await guarded.aclose()


async def test_a_swept_wait_inside_a_request_is_a_read_timeout() -> None:
    client, guarded = await _swept_pair(idle_timeout_s=600.0, read_timeout_s=1.0)
    await client.send_all(b"half a req")
    assert await guarded.receive_some() == b"half a req"
    outcome: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_or_timeout, guarded, outcome)
        await trio.testing.wait_all_tasks_blocked()
        guarded.expire_if_due(trio.current_time() + 1.0)
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionTimeout)
    assert outcome[0].kind == "read"
    await client.aclose()
    await guarded.aclose()


async def test_a_swept_wait_not_yet_due_still_gets_its_bytes_and_a_drain_ends_the_next() -> None:
    client, guarded = await _swept_pair(idle_timeout_s=5.0)
    got: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_or_timeout, guarded, got)
        await trio.testing.wait_all_tasks_blocked()
        guarded.expire_if_due(trio.current_time())
        await client.send_all(b"ping")
    assert got == [b"ping"]
    guarded.between_requests()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_or_timeout, guarded, got)
        await trio.testing.wait_all_tasks_blocked()
        guarded.drain()  # the gateway stops: a handler waiting between requests sees the end
    assert got == [b"ping", b""]
    # the socket still works after the wake-up (nothing closed it)
    await guarded.send_all(b"bye")
    assert await client.receive_some() == b"bye"
    await client.aclose()
    await guarded.aclose()


async def test_closing_a_swept_stream_under_a_wait_is_still_a_closed_resource() -> None:
    client, guarded = await _swept_pair()
    errors: list[BaseException] = []

    async def receive() -> None:
        try:
            await guarded.receive_some()
        except trio.ClosedResourceError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()
        await guarded.aclose()
    assert len(errors) == 1
    await client.aclose()


def test_sweep_interval_follows_the_shortest_timeout() -> None:
    assert sweep_interval([600.0, 60.0]) == 1.0
    assert sweep_interval([600.0, 0.2]) == pytest.approx(0.02)
    assert sweep_interval([0.001]) == 0.01


async def test_a_swept_read_timeout_counts_from_the_requests_first_byte() -> None:
    """Bytes trickling in do not restart the read timeout: the request as a whole must be in
    within ``read_timeout_s`` of its first byte."""
    client, guarded = await _swept_pair(idle_timeout_s=600.0, read_timeout_s=1.0)
    await client.send_all(b"h")
    assert await guarded.receive_some() == b"h"
    first = trio.current_time()
    await trio.sleep(0.05)
    await client.send_all(b"a")  # more of the same request, later
    assert await guarded.receive_some() == b"a"
    outcome: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_or_timeout, guarded, outcome)
        await trio.testing.wait_all_tasks_blocked()
        guarded.expire_if_due(first + 1.0)  # 1 s after the first byte, < 1 s after the last
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionTimeout)
    assert outcome[0].kind == "read"
    await client.aclose()
    await guarded.aclose()


async def test_an_answer_ends_the_request_and_the_next_one_starts_its_own_clock() -> None:
    client, guarded = await _swept_pair(idle_timeout_s=600.0, read_timeout_s=1.0)
    await client.send_all(b"req1")
    assert await guarded.receive_some() == b"req1"
    first = trio.current_time()
    await guarded.send_all(b"answer1")
    await trio.sleep(0.05)
    await client.send_all(b"re")
    assert await guarded.receive_some() == b"re"
    second = trio.current_time()
    got: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_or_timeout, guarded, got)
        await trio.testing.wait_all_tasks_blocked()
        guarded.expire_if_due(first + 1.0)  # due for the first request, not for this one
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        guarded.expire_if_due(second + 1.0)
    assert len(got) == 1 and isinstance(got[0], ConnectionTimeout) and got[0].kind == "read"
    await client.aclose()
    await guarded.aclose()


async def test_request_done_restarts_the_clock_at_the_last_receive() -> None:
    """A handler that took whole requests out and keeps part of the next one, with nothing to
    answer, says so: the next request's clock starts at the receive that brought its start."""
    client, guarded = await _swept_pair(idle_timeout_s=600.0, read_timeout_s=1.0)
    await client.send_all(b"r")
    assert await guarded.receive_some() == b"r"
    first = trio.current_time()
    await trio.sleep(0.05)
    await client.send_all(b"eq1|re")
    assert await guarded.receive_some() == b"eq1|re"
    second = trio.current_time()
    guarded.request_done()
    got: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_receive_or_timeout, guarded, got)
        await trio.testing.wait_all_tasks_blocked()
        guarded.expire_if_due(first + 1.0)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        guarded.expire_if_due(second + 1.0)
    assert len(got) == 1 and isinstance(got[0], ConnectionTimeout) and got[0].kind == "read"
    await client.aclose()
    await guarded.aclose()


def test_a_trickle_over_a_scoped_stream_is_cut_at_the_read_timeout() -> None:
    """The same over a stream the guard waits on with a cancel scope (TLS, PROXY prefix): one
    byte every 0.4 s, read timeout 1 s, on trio's virtual clock."""

    async def main() -> tuple[float, ConnectionTimeout]:
        client, server = trio.testing.memory_stream_pair()
        guarded = GuardedStream(server, idle_timeout_s=600.0, read_timeout_s=1.0)
        async with trio.open_nursery() as nursery:

            async def trickle() -> None:
                while True:
                    await client.send_all(b"x")
                    await trio.sleep(0.4)

            nursery.start_soon(trickle)
            start = trio.current_time()
            try:
                while True:
                    await guarded.receive_some(1)
            except ConnectionTimeout as exc:
                nursery.cancel_scope.cancel()
                return trio.current_time() - start, exc
        raise AssertionError("unreachable")

    took, exc = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert exc.kind == "read"
    assert 1.0 <= took < 1.4


class FailsOnce(trio.abc.Listener[trio.SocketStream]):
    """A real listener whose first accept fails as it does when out of file descriptors."""

    def __init__(self, real: trio.SocketListener) -> None:
        self.real, self.failed = real, False

    async def accept(self) -> trio.SocketStream:
        if not self.failed:
            self.failed = True
            raise OSError(errno.EMFILE, "Too many open files")
        return await self.real.accept()

    async def aclose(self) -> None:
        await self.real.aclose()


class Events:
    def __init__(self) -> None:
        self.errors: list[tuple[str, dict[str, object]]] = []

    def error(self, event: str, **fields: object) -> None:
        self.errors.append((event, fields))


async def test_a_failed_accept_is_logged_and_the_next_connection_still_accepted() -> None:
    listener = FailsOnce((await trio.open_tcp_listeners(0, host="127.0.0.1"))[0])
    port = listener.real.socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    log = Events()
    with trio.fail_after(10):
        server = await accept_connection(listener, "kafka08", log)
    assert log.errors == [
        ("accept_failed", {"protocol": "kafka08", "error": "[Errno 24] Too many open files"})
    ]
    assert server.socket.getpeername() == client.socket.getsockname()
    for s in (client, server, listener):
        await s.aclose()


async def _blocked_send(stream: GuardedStream, data: bytes, out: list[object]) -> None:
    try:
        with trio.fail_after(10):
            await stream.send_all(data)
        out.append("sent")
    except (trio.ClosedResourceError, trio.BrokenResourceError) as exc:
        out.append(exc)


async def test_a_swept_send_the_client_does_not_take_ends_at_the_send_timeout() -> None:
    client, guarded = await _swept_pair(idle_timeout_s=600.0, send_timeout_s=5.0)
    outcome: list[object] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_blocked_send, guarded, b"x" * (32 << 20), outcome)
        await trio.testing.wait_all_tasks_blocked()
        guarded.expire_if_due(trio.current_time() + 4.0)  # blocked, but not that long yet
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == [] and not guarded.send_timed_out
        guarded.expire_if_due(trio.current_time() + 5.0)
    assert guarded.send_timed_out
    assert len(outcome) == 1 and isinstance(outcome[0], trio.ClosedResourceError)
    with pytest.raises(trio.BrokenResourceError, match="send timeout"):
        await guarded.send_all(b"more")  # the connection is over: no second wait
    await client.aclose()
    await guarded.aclose()


async def test_a_slow_reader_and_a_quiet_stream_are_not_send_timeouts() -> None:
    """Only a write the client takes nothing of counts: one it reads slowly goes on, and a
    stream with nothing to send (an idle subscription) is never a send timeout."""
    client, guarded = await _swept_pair(idle_timeout_s=600.0, send_timeout_s=5.0)
    guarded.expire_if_due(trio.current_time() + 100.0)  # nothing being sent
    assert not guarded.send_timed_out
    size = 16 << 20
    outcome: list[object] = []
    got = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_blocked_send, guarded, b"x" * size, outcome)
        while got < size:
            await trio.testing.wait_all_tasks_blocked()
            # each time the socket took bytes the clock restarts: never 5 s without progress
            guarded.expire_if_due(trio.current_time() + 4.0)
            got += len(await client.receive_some(1 << 20))
    assert outcome == ["sent"] and not guarded.send_timed_out
    await client.aclose()
    await guarded.aclose()


async def test_a_send_over_a_stream_without_a_sweeper_has_its_own_deadline() -> None:
    client, server = await stream_pair()
    guarded = GuardedStream(server, send_timeout_s=0.3)  # not swept (as over TLS)
    outcome: list[object] = []
    await _blocked_send(guarded, b"x" * (32 << 20), outcome)
    assert guarded.send_timed_out
    assert len(outcome) == 1 and isinstance(outcome[0], trio.BrokenResourceError)
    await client.aclose()
    await guarded.aclose()
