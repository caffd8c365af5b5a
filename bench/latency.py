"""Benchmark: request latency, concurrency and idle connections of the five listeners, beside the
in-process baseline (``Core.execute`` on a memory backend, no network, no codec), in one run.

Workload (printed too), per protocol, against ``python -m gateway serve`` in a subprocess (memory
backend, all five listeners on loopback); the load generator is this process with the in-repo
client of each protocol (``gateway.interop.drivers``, built on the protocol's codec), so the
generator and the gateway each have their own process:

- latency: --requests (default 1000) sequential produce requests of 1 record (100-byte value) on
  one connection; p50/p99/p999 of the request time. Baseline: the same count of
  ``Core.execute(Produce)`` of 1 record in this process. ``added_p99_ms`` = gateway p99 minus
  baseline p99 (the gateway's added latency, unloaded: at one request in flight the gateway is
  far below saturation), and the gateway's and the client's CPU time per request (from
  /proc/PID/stat: on a busy machine the part of the latency that is our own work).
- concurrency: 1, 4 and 32 connections, each sending produce requests of 1 record (100 bytes) for
  --seconds; records/s over all connections.
- batches: batches of 1000 records of 100 bytes and of 1 KiB on one connection (--batches
  batches), then one connection consuming them back from offset 0; records/s and MB/s.
- idle connections (TANK listener): the gateway's RSS before and after opening --idle (default
  1000) idle TCP connections, bytes per connection, and the 1000-record batch produce rate on one
  active connection with and without the idle ones open (best of 3 alternating rounds).

Run: ``python bench/latency.py [--requests N] [--seconds S] [--batches B] [--idle C]``;
results go to ``bench/results/latency.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.backends.memory import MemoryBackend  # noqa: E402
from gateway.core.engine import Core  # noqa: E402
from gateway.interop.drivers import DRIVERS, PROTOCOLS  # noqa: E402
from gateway.model import CreateTopic, Fetch, Produce, Record, RecordBatch  # noqa: E402
from tests.support import GatewayProcess  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "latency.json"
CONNECTIONS = (1, 4, 32)
SIZES = (100, 1024)
BATCH = 1000


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary_ms(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(pct(samples, 0.50) * 1e3, 3),
        "p99_ms": round(pct(samples, 0.99) * 1e3, 3),
        "p999_ms": round(pct(samples, 0.999) * 1e3, 3),
        "mean_ms": round(statistics.fmean(samples) * 1e3, 3),
    }


def records(n: int, size: int) -> list[Record]:
    ts = int(time.time() * 1e6)
    value = b"v" * size
    return [Record(None, value, (), ts, -1) for _ in range(n)]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


# ----------------------------------------------------------------------------- baseline


async def baseline(requests: int) -> dict[str, float]:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    await core.execute(CreateTopic("lat", 1))
    one = records(1, 100)
    samples = []
    for _ in range(requests):
        t = time.perf_counter()
        await core.execute(Produce("lat", RecordBatch(records=one), partition=0))
        samples.append(time.perf_counter() - t)
    out = summary_ms(samples)
    # batch baseline: 1000-record produces and 1 MiB fetches
    for size in SIZES:
        batch = records(BATCH, size)
        topic = f"b{size}"
        await core.execute(CreateTopic(topic, 1))
        t = time.perf_counter()
        for _ in range(20):
            await core.execute(Produce(topic, RecordBatch(records=batch), partition=0))
        out[f"produce_{size}_records_per_s"] = round(20 * BATCH / (time.perf_counter() - t))
        t = time.perf_counter()
        offset = 0
        while offset < 20 * BATCH:
            res = await core.execute(Fetch(topic, 0, offset, max_bytes=1 << 20))
            for b in res.batches:
                for _r in b.records:
                    pass
                offset = b.last_offset + 1
        out[f"fetch_{size}_records_per_s"] = round(20 * BATCH / (time.perf_counter() - t))
    return out


# ----------------------------------------------------------------------------- gateway


async def open_driver(name: str, addr: tuple[str, int]):
    d = DRIVERS[name](*addr)
    with trio.fail_after(20):
        await d.open()
    return d


async def create(gw: GatewayProcess, topic: str) -> None:
    creator = await open_driver("tank", gw.address("tank"))
    try:
        await creator.create_topic(topic, 1)
    finally:
        await creator.aclose()


async def latency(name: str, gw: GatewayProcess, requests: int) -> dict[str, float]:
    topic = f"lat-{name}"
    await create(gw, topic)
    d = await open_driver(name, gw.address(name))
    one = records(1, 100)
    try:
        for _ in range(20):  # warm-up
            await d.produce(topic, one)
        samples = []
        assert gw.proc is not None
        cpu0, own0 = cpu_seconds(gw.proc.pid), time.process_time()
        for _ in range(requests):
            t = time.perf_counter()
            await d.produce(topic, one)
            samples.append(time.perf_counter() - t)
        cpu = cpu_seconds(gw.proc.pid) - cpu0
        own = time.process_time() - own0
    finally:
        await d.aclose()
    out = summary_ms(samples)
    # CPU per request: what the latency would be on an idle machine, less the kernel's loopback
    out["gateway_cpu_us_per_request"] = round(cpu / requests * 1e6, 1)
    out["client_cpu_us_per_request"] = round(own / requests * 1e6, 1)
    return out


async def concurrency(name: str, gw: GatewayProcess, conns: int, seconds: float) -> float:
    topic = f"conc-{name}-{conns}"
    await create(gw, topic)
    drivers = [await open_driver(name, gw.address(name)) for _ in range(conns)]
    one = records(1, 100)
    counts = [0] * conns
    deadline = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        while time.perf_counter() < deadline:
            await drivers[i].produce(topic, one)
            counts[i] += 1

    t = time.perf_counter()
    try:
        async with trio.open_nursery() as n:
            for i in range(conns):
                n.start_soon(worker, i)
    finally:
        for d in drivers:
            await d.aclose()
    return round(sum(counts) / (time.perf_counter() - t))


async def batches(name: str, gw: GatewayProcess, size: int, count: int) -> dict[str, float]:
    topic = f"batch-{name}-{size}"
    await create(gw, topic)
    batch = records(BATCH, size)
    d = await open_driver(name, gw.address(name))
    try:
        t = time.perf_counter()
        for _ in range(count):
            await d.produce(topic, batch)
        produce = count * BATCH / (time.perf_counter() - t)
    finally:
        await d.aclose()
    d = await open_driver(name, gw.address(name))
    try:
        t = time.perf_counter()
        got = await d.consume(topic, count * BATCH)
        fetch = len(got) / (time.perf_counter() - t)
    finally:
        await d.aclose()
    return {
        "produce_records_per_s": round(produce),
        "produce_mb_per_s": round(produce * size / 1e6, 2),
        "fetch_records_per_s": round(fetch),
        "fetch_mb_per_s": round(fetch * size / 1e6, 2),
    }


async def idle_connections(gw: GatewayProcess, idle: int, count: int) -> dict[str, float]:
    """RSS per idle connection (first round) and the active connection's produce rate without
    and with the idle ones open: best of 3 alternating rounds (the machine is shared)."""
    assert gw.proc is not None
    pid = gw.proc.pid
    host, port = gw.address("tank")
    without, with_idle = [], []
    rss0 = rss1 = 0
    for round_ in range(3):
        without.append((await batches("tank", gw, 100, count))["produce_records_per_s"])
        await trio.sleep(0.5)
        if round_ == 0:
            rss0 = rss_bytes(pid)
        socks = []
        try:
            for _ in range(idle):
                socks.append(socket.create_connection((host, port)))
            await trio.sleep(2.0)  # let the gateway accept and park every one
            if round_ == 0:
                rss1 = rss_bytes(pid)
            with_idle.append((await batches("tank", gw, 100, count))["produce_records_per_s"])
        finally:
            for s in socks:
                s.close()
        await trio.sleep(0.5)
    return {
        "idle_connections": idle,
        "rss_before_bytes": rss0,
        "rss_with_idle_bytes": rss1,
        "bytes_per_idle_connection": round((rss1 - rss0) / idle),
        "target_bytes_per_connection": 65536,
        "active_produce_records_per_s_without_idle": max(without),
        "active_produce_records_per_s_with_idle": max(with_idle),
        "rounds": {"without_idle": without, "with_idle": with_idle},
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.idle)), hard))
    workload = {
        "latency": f"{args.requests} sequential produces of 1 record (100 B), one connection",
        "concurrency": f"{CONNECTIONS} connections, 1-record produces for {args.seconds} s",
        "batches": f"{args.batches} batches of {BATCH} records of {SIZES} bytes, then consume",
        "idle": f"{args.idle} idle TCP connections on the TANK listener",
        "backend": "memory",
        "generator": "in-repo codec clients (gateway.interop.drivers) in the bench process",
    }
    print("workload:", json.dumps(workload))
    protocols = args.protocols.split(",")
    out: dict = {
        "workload": workload,
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "baseline": await baseline(args.requests),
        "protocols": {},
    }
    print("baseline:", json.dumps(out["baseline"]))
    with tempfile.TemporaryDirectory() as tmp:
        listeners = {p: {"max_connections": 4 * args.idle} for p in PROTOCOLS}
        gw = GatewayProcess(Path(tmp), listeners=listeners, backend="memory")
        gw.start()
        try:
            for name in protocols:
                row: dict = {"latency": await latency(name, gw, args.requests)}
                row["added_p99_ms"] = round(row["latency"]["p99_ms"] - out["baseline"]["p99_ms"], 3)
                row["concurrency_records_per_s"] = {
                    str(c): await concurrency(name, gw, c, args.seconds) for c in CONNECTIONS
                }
                row["batches"] = {str(s): await batches(name, gw, s, args.batches) for s in SIZES}
                out["protocols"][name] = row
                print(name, json.dumps(row))
            if args.idle:
                out["idle"] = await idle_connections(gw, args.idle, args.batches)
                print("idle:", json.dumps(out["idle"]))
        finally:
            gw.stop()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    trio.run(main)
