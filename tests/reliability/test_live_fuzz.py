"""Live fuzzing per listener: thousands of mutated frames over many connections while a
well-behaved client keeps getting answers; afterwards the gateway is alive and every listener
still serves. ``GATEWAY_LIVE_FUZZ_FRAMES`` (default 2000 per protocol) sets the volume."""

from __future__ import annotations

import os
import random

import pytest
import trio

from tests.protocols.kafka08.conftest import metric
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
                with trio.move_on_after(0.05):
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
