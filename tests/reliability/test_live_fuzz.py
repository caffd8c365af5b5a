"""Live fuzzing per listener, and of the admin port: thousands of mutated frames (requests) over
many connections while a well-behaved client keeps getting answers; afterwards the gateway is
alive and every listener still serves. The admin port also gets huge headers, slow senders and
pipelining. ``GATEWAY_LIVE_FUZZ_FRAMES`` (default 2000 per protocol) sets the volume."""

from __future__ import annotations

import os
import random

import pytest
import trio

from tests.protocols.kafka08.conftest import metric
from tests.reliability.hostile import Bystander, Footprint
from tests.reliability.test_codec_fuzz import CASES
from tests.support import GatewayProcess

FRAMES = int(os.environ.get("GATEWAY_LIVE_FUZZ_FRAMES", "2000"))
CONNECTIONS = 20


def mutate(rng: random.Random, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(rng.randint(1, 6)):
        if not data:
            break
        i = rng.randrange(len(data))
        op = rng.choice(("flip", "set", "cut", "insert"))
        if op == "flip":
            data[i] ^= 1 << rng.randrange(8)
        elif op == "set":
            data[i] = rng.choice((0, 0x7F, 0x80, 0xFF))
        elif op == "cut":
            del data[i:]
        else:
            data[i:i] = rng.randbytes(rng.randint(1, 8))
    return bytes(data)


# A request a well-behaved client sends, and what the start of a good answer looks like.
def healthy_exchange(protocol: str) -> tuple[bytes, bytes, int]:
    """(request, expected answer prefix, bytes of greeting to skip)"""
    seeds = CASES[protocol][2]
    if protocol == "kafka08":
        return seeds[0], b"", 0  # Metadata: any whole answer frame
    if protocol == "iggy":
        return seeds[0], bytes(8), 0  # PING -> status 0, length 0
    if protocol == "tank":
        return seeds[0], b"\x07", 5  # greeting, then the CreateTopic answer
    if protocol == "cursus":
        return seeds[1], b"", 0  # CREATE -> a text reply frame
    return seeds[0], b"", 0  # liftbridge: the grpcio byte stream gets HTTP/2 frames back


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    listeners = {p: {"read_timeout_s": 2.0} for p in CASES}
    listeners["iggy"]["users"] = []
    with GatewayProcess(tmp_path_factory.mktemp("fuzz"), listeners=listeners) as proc:
        yield proc


async def fuzz_connection(addr, rng: random.Random, seeds: list[bytes], budget: list[int]) -> None:
    while budget[0] > 0:
        try:
            stream = await trio.open_tcp_stream(*addr)
        except OSError:
            await trio.sleep(0.01)
            continue
        try:
            while budget[0] > 0:
                budget[0] -= 1
                await stream.send_all(mutate(rng, rng.choice(seeds)))
                with trio.move_on_after(0.02):
                    if await stream.receive_some(65536) == b"":
                        break  # the server closed it, as a real server does on bad input
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await stream.aclose()


async def healthy_client(addr, protocol: str, done: trio.Event, answers: list[int]) -> None:
    request, prefix, skip = healthy_exchange(protocol)
    while not done.is_set():
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream(*addr)
            got = b""
            await stream.send_all(request)
            while len(got) < skip + max(len(prefix), 1):
                chunk = await stream.receive_some(65536)
                assert chunk, f"{protocol}: the well-behaved client was disconnected"
                got += chunk
            assert got[skip:].startswith(prefix), (protocol, got[:40])
            answers.append(1)
            await stream.aclose()
        await trio.sleep(0.02)


@pytest.mark.parametrize("protocol", list(CASES))
def test_listener_survives_mutated_frames(gw, protocol: str) -> None:
    addr = gw.address(protocol)
    seeds = CASES[protocol][2]
    errors_before = metric(gw, "gateway_protocol_errors_total", protocol=protocol)
    answers: list[int] = []

    async def main() -> None:
        budget = [FRAMES]
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(healthy_client, addr, protocol, done, answers)
            async with trio.open_nursery() as fuzzers:
                for i in range(CONNECTIONS):
                    fuzzers.start_soon(fuzz_connection, addr, random.Random(i), seeds, budget)
            done.set()

    trio.run(main)
    assert gw.proc.poll() is None, "the gateway died"
    assert len(answers) >= 3, answers
    assert metric(gw, "gateway_protocol_errors_total", protocol=protocol) > errors_before
    # and a fresh well-behaved exchange still works on every listener
    for other in CASES:
        trio.run(healthy_client_once, gw.address(other), other)


async def healthy_client_once(addr, protocol: str) -> None:
    done = trio.Event()
    answers: list[int] = []

    async def once() -> None:
        await healthy_client(addr, protocol, done, answers)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(once)
        with trio.fail_after(15):
            while not answers:
                await trio.sleep(0.01)
        done.set()


# ----------------------------------------------------------------------------- the admin port


def _http(method: str, path: str, body: bytes = b"", *headers: str) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "host: gateway", *headers]
    if body:
        head.append(f"content-length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


ADMIN_SEEDS = [
    _http("GET", "/healthz"),
    _http("HEAD", "/metrics"),
    _http("GET", "/v1/status"),
    _http("POST", "/v1/topics", b'{"name": "fuzz", "partitions": 2}'),
    _http("POST", "/v1/topics/fuzz/records", b'{"records": [{"key": "aw==", "value": "dg=="}]}'),
    _http("GET", "/v1/topics/fuzz/records?partition=0&offset=0&max=5"),
    _http("GET", "/v1/topics/fuzz/records?partition=1&format=binary&starts=1"),
    _http("GET", "/v1/groups/g%01x"),
    _http("POST", "/v1/groups/g/reset-offsets", b'{"topic": "fuzz", "to": "timestamp:1"}'),
    _http("DELETE", "/v1/topics"),
    _http("GET", "/v1/status", b"hello", "expect: 100-continue"),
    _http("POST", "/v1/topics/fuzz/records", b"", "transfer-encoding: chunked")
    + b'5\r\n{"rec\r\n0\r\n\r\n',
    _http("GET", "/healthz") + _http("HEAD", "/readyz") + _http("GET", "/v1/topics"),
]


async def huge_headers(addr, answers: list[bytes]) -> None:
    for _ in range(5):
        stream = await trio.open_tcp_stream(*addr)
        try:
            await stream.send_all(b"GET /healthz HTTP/1.1\r\nx-big: " + b"a" * (1 << 20))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # refused before it was all sent
        answers.append(await _read_until_closed(stream))


async def slow_sender(addr, answers: list[bytes]) -> None:
    """A byte every 0.2 s, a request that never ends: the read timeout closes it with a 408."""
    stream = await trio.open_tcp_stream(*addr)
    request = b"GET /healthz HTTP/1.1\r\nhost: gateway\r\nx-slow: " + b"z" * 1000
    got = b""
    with trio.move_on_after(15):
        try:
            for byte in request:
                await stream.send_all(bytes([byte]))
                with trio.move_on_after(0.2):
                    got += await stream.receive_some(65536)
                if got:
                    break
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    answers.append(got + await _read_until_closed(stream))


async def pipelined(addr, answers: list[bytes]) -> None:
    stream = await trio.open_tcp_stream(*addr)
    batch = _http("GET", "/healthz") * 49 + _http("GET", "/healthz", b"", "connection: close")
    await stream.send_all(batch)
    answers.append(await _read_until_closed(stream))


async def _read_until_closed(stream: trio.abc.Stream) -> bytes:
    got = b""
    with trio.move_on_after(15):
        try:
            while chunk := await stream.receive_some(65536):
                got += chunk
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await stream.aclose()
    return got


def test_admin_port_survives_hostile_http(tmp_path) -> None:
    proc = GatewayProcess(tmp_path, listeners={"kafka08": {}})
    proc.config["admin"].update(read_timeout_s=1.0, max_header_bytes=16384)
    with proc as gw:
        addr = gw.address("admin")
        errors_before = metric(gw, "gateway_protocol_errors_total", protocol="admin")
        baseline = Footprint.of(gw)
        big: list[bytes] = []
        slow: list[bytes] = []
        piped: list[bytes] = []

        async def main() -> None:
            budget = [FRAMES]
            async with trio.open_nursery() as nursery:
                for i in range(CONNECTIONS):
                    rng = random.Random(1000 + i)
                    nursery.start_soon(fuzz_connection, addr, rng, ADMIN_SEEDS, budget)
                nursery.start_soon(huge_headers, addr, big)
                for _ in range(10):
                    nursery.start_soon(slow_sender, addr, slow)
                nursery.start_soon(pipelined, addr, piped)

        with Bystander(gw) as bystander:
            trio.run(main)
        bystander.check()
        Footprint.of(gw).check_within(baseline)
        assert all(a.startswith(b"HTTP/1.1 431") for a in big), [a[:40] for a in big]
        assert len(slow) == 10 and all(a.startswith(b"HTTP/1.1 408") for a in slow), slow
        assert piped[0].count(b"HTTP/1.1 200") == 50, piped[0][-200:]
        assert metric(gw, "gateway_protocol_errors_total", protocol="admin") > errors_before
        assert metric(gw, "gateway_limit_hits_total", limit="max_header_bytes") >= 5
        assert gw.proc.poll() is None
        trio.run(healthy_client_once, gw.address("kafka08"), "kafka08")
