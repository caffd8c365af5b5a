"""Soak: a bounded load with many connections opening and closing over every listener; memory
and file descriptors of the gateway return to their baseline afterwards.
``GATEWAY_SOAK_SECONDS`` (default 15) sets the length; ``make soak`` runs minutes."""

from __future__ import annotations

import os
import random
import time

import trio

from tests.reliability.test_live_fuzz import healthy_exchange
from tests.support import GatewayProcess

SECONDS = float(os.environ.get("GATEWAY_SOAK_SECONDS", "15"))
PROTOCOLS = ("kafka08", "iggy", "tank", "cursus", "liftbridge")


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def churn(gw: GatewayProcess, seconds: float, seed: int) -> int:
    rng = random.Random(seed)
    done = 0
    deadline = trio.current_time() + seconds
    while trio.current_time() < deadline:
        protocol = rng.choice(PROTOCOLS)
        request, prefix, skip = healthy_exchange(protocol)
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream(*gw.address(protocol))
            await stream.send_all(request)
            got = b""
            while len(got) < skip + max(len(prefix), 1):
                chunk = await stream.receive_some(65536)
                assert chunk, protocol
                got += chunk
            await stream.aclose()
        done += 1
    return done


async def load(gw: GatewayProcess, seconds: float) -> int:
    results: list[int] = []

    async def worker(i: int) -> None:
        results.append(await churn(gw, seconds, i))

    async with trio.open_nursery() as nursery:
        for i in range(16):
            nursery.start_soon(worker, i)
    return sum(results)


def test_memory_and_fds_return_to_baseline(tmp_path) -> None:
    listeners = {p: {} for p in PROTOCOLS}
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        pid = gw.proc.pid
        trio.run(load, gw, 2.0)  # warm-up: imports, caches, first topics
        time.sleep(0.5)
        base_rss, base_fds = rss_kib(pid), fds(pid)
        exchanges = trio.run(load, gw, SECONDS)
        time.sleep(1.0)  # connections finish closing
        assert exchanges > 100
        assert fds(pid) <= base_fds, f"fds grew from {base_fds} to {fds(pid)}"
        grown = rss_kib(pid) - base_rss
        assert grown < max(20_000, base_rss // 5), (
            f"RSS grew by {grown} KiB ({exchanges} exchanges)"
        )
        assert gw.stop() == 0
