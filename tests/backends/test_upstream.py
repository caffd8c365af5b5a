"""Upstream backends beyond the conformance suite: outages (BACKEND_UNAVAILABLE, then working
again once the server is back, without a restart), requests nobody answers (TIMEOUT), Iggy
credentials, and the config."""

from __future__ import annotations

import signal
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio

from gateway.backends.upstream import UpstreamConfig, make_upstream
from gateway.backends.upstream.pool import Pool
from gateway.config import ConfigError, parse_config
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from gateway.protocols.kafka08.client import Kafka08Client
from tests.backends.servers import free_port, opened
from tests.support import GatewayProcess

PROTOCOLS = ("kafka08", "iggy", "tank", "liftbridge", "cursus")


def upstream(protocol: str, port: int, **options: object) -> object:
    config = UpstreamConfig(protocol=protocol, address=f"127.0.0.1:{port}", **options)
    return opened(make_upstream(f"up-{protocol}", config))


async def code_of(call: object) -> ErrorCode:
    with pytest.raises(GatewayError) as info:
        await call  # type: ignore[misc]
    return info.value.code


async def test_outage_then_back_without_a_restart(tmp_path: Path) -> None:
    """One upstream server with all five listeners on fixed ports: not there yet, there, killed
    (SIGKILL), back on the same ports and data: every backend reports the outage and then works
    again by itself."""
    ports = {protocol: free_port() for protocol in PROTOCOLS}
    server = GatewayProcess(
        tmp_path, listeners={p: {"port": port} for p, port in ports.items()}, backend="embedded"
    )
    batch = RecordBatch([Record(b"k", b"v", (), 1_700_000_000_000_000)])
    async with AsyncExitStack() as stack:
        backends = {
            p: await stack.enter_async_context(upstream(p, port, connect_timeout_ms=1000))
            for p, port in ports.items()
        }
        for backend in backends.values():  # nothing listens yet
            assert await code_of(backend.list_topics()) is ErrorCode.BACKEND_UNAVAILABLE
            assert (await backend.health())[0] is False
        await trio.to_thread.run_sync(server.start)
        try:
            for p, backend in backends.items():
                if p == "kafka08":  # no CreateTopics: the broker auto-creates on Metadata
                    client = await Kafka08Client.connect("127.0.0.1", ports[p])
                    await client.metadata([f"t-{p}"])
                    await client.aclose()
                else:
                    await backend.create_topic(f"t-{p}", 1)
                assert (await backend.append(f"t-{p}", 0, batch)).base_offset == 0
                assert (await backend.health()) == (True, "ok")
            # an abrupt outage: every call fails as unavailable (retriable), none hangs
            await trio.to_thread.run_sync(server.stop, signal.SIGKILL)
            for p, backend in backends.items():
                for call in (
                    backend.append(f"t-{p}", 0, batch),
                    backend.read(f"t-{p}", 0, 0, 10, 1000),
                    backend.partition_info(f"t-{p}", 0),
                ):
                    with trio.fail_after(10):
                        assert await code_of(call) is ErrorCode.BACKEND_UNAVAILABLE, p
            assert ErrorCode.BACKEND_UNAVAILABLE.retriable
            # back on the same ports and data: the pools connect again by themselves
            await trio.to_thread.run_sync(server.start)
            for p, backend in backends.items():
                got = await backend.read(f"t-{p}", 0, 0, 10, 1000)
                assert [r.value for b in got for r in b.records] == [b"v"], p
                assert (await backend.append(f"t-{p}", 0, batch)).base_offset == 1, p
        finally:
            await trio.to_thread.run_sync(server.stop)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_server_that_never_answers_is_a_timeout(protocol: str) -> None:
    async def silent(stream: trio.SocketStream) -> None:
        while await stream.receive_some(1 << 16):
            pass

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            lambda task_status: trio.serve_tcp(silent, 0, host="127.0.0.1", task_status=task_status)
        )
        port = listeners[0].socket.getsockname()[1]
        async with upstream(protocol, port, request_timeout_ms=300) as backend:
            with trio.fail_after(5):
                assert await code_of(backend.list_topics()) is ErrorCode.TIMEOUT
                assert await code_of(backend.read("t", 0, 0, 1, 1)) in (
                    ErrorCode.TIMEOUT,  # each call waits its own timeout on a new connection
                )
        nursery.cancel_scope.cancel()


async def test_iggy_credentials(tmp_path: Path) -> None:
    listener = {"users": [{"username": "gw", "password": "secret"}], "allow_anonymous": False}
    with GatewayProcess(tmp_path, listeners={"iggy": listener}) as server:
        port = server.address("iggy")[1]
        async with upstream("iggy", port, username="gw", password="secret") as backend:
            await backend.create_topic("s.t", 2)
            assert (await backend.topic("s.t")).partitions == 2
        async with upstream("iggy", port, username="gw", password="wrong") as backend:
            assert await code_of(backend.list_topics()) is ErrorCode.UNAUTHENTICATED
        async with upstream("iggy", port) as backend:  # no login where the server wants one
            assert await code_of(backend.list_topics()) in (
                ErrorCode.UNAUTHENTICATED,
                ErrorCode.UNAUTHORIZED,
            )


def test_config() -> None:
    config = parse_config(
        {
            "backends": {
                "up": {"type": "upstream", "protocol": "tank", "address": "tank.internal:11011"}
            }
        }
    )
    options = config.backends["up"].options
    assert (options.protocol, options.host_port, options.pool_size) == (
        "tank",
        ("tank.internal", 11011),
        4,
    )
    with pytest.raises(ConfigError) as info:
        parse_config(
            {"backends": {"up": {"type": "upstream", "protocol": "amqp", "address": "nohost"}}}
        )
    text = str(info.value)
    assert "protocol: got 'amqp'" in text and "address: got 'nohost'" in text


async def test_a_key_longer_than_cursus_carries_is_cut_as_declared(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, listeners={"cursus": {}}) as server:
        async with upstream("cursus", server.address("cursus")[1]) as backend:
            await backend.create_topic("big", 1)
            record = Record(b"k" * 70_000, b"v")  # Cursus keys have a u16 length
            await backend.append("big", 0, RecordBatch([record]))
            got = (await backend.read("big", 0, 0, 1, 1 << 20))[0].records[0]
            assert got.key == backend.stored_form(record).key == b"k" * 65_535


async def test_the_pool_maps_failures_and_drops_broken_connections() -> None:
    opened: list[int] = []

    async def connect() -> int:
        opened.append(len(opened))
        return opened[-1]

    async def close(conn: int) -> None:
        pass

    pool = Pool("test", connect, close, size=2, request_timeout=0.2)

    async def answered(conn: int) -> None:
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC, "answered")

    async def broken(conn: int) -> None:
        raise trio.BrokenResourceError("reset")

    async def bug(conn: int) -> None:
        raise ValueError("cannot encode")

    async def silent(conn: int) -> None:
        await trio.sleep_forever()

    async def fine(conn: int) -> int:
        return conn

    assert await code_of(pool.call(answered)) is ErrorCode.UNKNOWN_TOPIC
    assert await pool.call(fine) == 0  # an answered error keeps the connection
    assert await code_of(pool.call(broken, retry=False)) is ErrorCode.BACKEND_UNAVAILABLE
    assert await pool.call(fine) == 1  # the broken one was dropped: a new connection
    assert await code_of(pool.call(bug)) is ErrorCode.INTERNAL
    assert await code_of(pool.call(silent)) is ErrorCode.TIMEOUT
    assert await pool.call(fine) == 3
    assert await code_of(pool.call(broken)) is ErrorCode.BACKEND_UNAVAILABLE  # tried twice
    assert len(opened) == 5
