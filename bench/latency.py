"""Benchmark: latency under load (the p99 the gateway adds at 50% of its saturation rate),
concurrency, batch throughput and idle connections of the five listeners, in one run.

The gateway is ``python -m gateway serve`` in a subprocess with all five listeners on loopback.
The load of the gateway path (saturation and latency under load) comes from bench/loadgen.c, a C
program in its own process that replays the produce request the protocol's in-repo client encoded
(``gateway.interop.drivers``, built on the protocol's codec; bench/loadgen.py records it), and
checks after every run that each answered produce stored its record. ``--generator python`` drives
the same requests from this process through the in-repo clients instead (the generator of the
measurements before 2026-11-25: 200-300 us of CPU per request, as much as the gateway's, on a
machine of 2 CPUs). The batches and idle-connection figures use the in-repo clients in this process.
The gateway's and the generator's CPU use are recorded during every loaded run, so a generator-bound
figure is visible in the results.

Workload (printed too), per protocol:

- latency under load (the target: "p99 added latency of the gateway (gateway path minus direct
  backend path) at 50% of saturation, per protocol; target <= 2 ms"). Requests: produce of 1
  record (100-byte value) to partition 0 of one topic. Backend: the embedded log with its default
  fsync policy (every 50 ms in a worker thread; an acknowledgement does not wait for it): the
  backend of the default configuration, so the figure is what a default deployment adds
  (``--backend memory`` measures without the log's file writes).

  1. saturation: closed loop, 1, 4 and 32 connections each sending requests back to back for
     --seconds (reported as the concurrency figures, with the gateway's and the generator's
     CPU use in cores), then two more closed loops at the count that did best; saturation = the
     median of those three. Not the best of them: on this host one 1-second closed loop at a
     fixed count reads up to 1.7x another a second later (bench/README), and the maximum of
     such draws set a load the gateway could not sustain at 50%.
  2. gateway path: open loop at --fraction (0.5) of saturation for --load-seconds (at least
     --min-requests requests), after 0.5 s of warm-up at that rate. Request i is released at
     t0 + i/rate into a queue served by --pool (8) connections; the releasing never waits for
     an answer, so a slow answer does not hold back later requests (no coordinated omission): a
     request that finds every connection busy waits in the queue, and that wait is part of its
     latency. Latency = answer received minus release. The C generator releases on a timerfd
     (microseconds late); this process's open loop (the direct path, and the gateway path with
     ``--generator python``) in ~1 ms ticks, since Python's epoll rounds timeouts up to whole
     milliseconds (bursts of rate/1000 requests). How late each release is against its ideal
     time is reported apart as ``schedule_lag_p99_ms``, for both paths, rather than charged to
     either.
  3. direct backend path, right after each gateway-path run: the same open loop (same rate,
     request count and pool size) of ``Core.execute(Produce)`` of the same record into an
     embedded backend of the same configuration in this process: the command the gateway
     executes for the request, without the network, the codecs and the gateway's event loop.
  4. rounds: 2 and 3 together are one round; --rounds (3) rounds are counted and the round
     with the median added p99 is the figure (the upper middle one for an even count), every
     round kept in the result. A p99 over a few seconds moves by ms with one stall of the
     machine, which the gateway path (two processes) meets more often than the direct one (one
     process, whose late releases are not charged): the median of rounds reports the gateway,
     one bad moment does not. A round is not counted when one of its runs did not keep its
     schedule (achieved < 90% of the rate, or lag p99 > 20 ms: the generator or the machine
     stalled) or ran while the host stole more than 0.5% of the CPUs' time (``host_steal_pct``,
     from /proc/stat: on a virtual machine whose host is oversubscribed the vCPUs stop for ms
     at a time, and at 50% of saturation a queue builds behind each stop; on the shared 2-CPU
     machine this was written on, identical runs had a gateway p99 of ~1 ms under 0.25% steal,
     2-3 ms at ~1% and 4-5 ms at 2-2.5%: ``MAX_STEAL_PCT``). The protocols take their rounds
     in turn, every protocol's saturation first (a noisy minute costs each protocol a round
     rather than one protocol all of its rounds), each up to 24 rounds (saturation measured
     again, the same way, after a run that fell behind its rate), and no round starts that
     would take the rounds past --round-budget (45) seconds per protocol, pooled, so a noisy
     host cannot push the driver past its time limit in ``make bench``; with fewer counted
     rounds than asked the verdict is "not measured" rather than a figure.

  added = gateway path minus direct path, at p50, p99 and p999; the verdict is added p99 <= 2 ms.
  The two paths have different generators: the direct path's figure includes this process's
  open loop (trio scheduling, ~0.1-0.2 ms at p50), the gateway path's the C generator's few us,
  so the added figure can be lower than the gateway's share by up to that much (the added p50
  can be negative); the gateway path's own p99, which includes the backend, is reported beside
  it (``gateway.p99_ms``). With ``--generator python`` the added figure includes the client's
  encode/decode and its event loop's backlog instead (an upper bound on the gateway's share;
  the clients then use ``gateway.streams.FastSocketStream``, fewer trips through the
  generator's scheduler). This process's garbage collector is paused during the timed runs
  (its pauses are not the gateway's); the gateway's is not.
- batches (memory backend): batches of 1000 records of 100 bytes and of 1 KiB on one connection
  (--batches batches), then one connection consuming them back from offset 0; records/s and MB/s.
  Baseline: the same in ``Core.execute`` on a memory backend in this process.
- idle connections (TANK listener, memory backend): the gateway's RSS before and after opening
  --idle (default 1000) idle TCP connections, bytes per connection, and the 1000-record batch
  produce rate on one active connection with and without the idle ones open (best of 3
  alternating rounds).

Run: ``python bench/latency.py [--seconds S] [--load-seconds S] [--backend embedded|memory]
[--batches B] [--idle C] [--protocols a,b]``; results go to ``bench/results/latency.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import cpu_seconds, machine_jiffies  # noqa: E402
from bench.loadgen import Loadgen, build, capture  # noqa: E402
from gateway.backends.base import Backend  # noqa: E402
from gateway.backends.embedded.backend import EmbeddedBackend  # noqa: E402
from gateway.backends.embedded.config import EmbeddedConfig  # noqa: E402
from gateway.backends.memory import MemoryBackend  # noqa: E402
from gateway.core.engine import Core  # noqa: E402
from gateway.interop.drivers import DRIVERS, PROTOCOLS, Driver  # noqa: E402
from gateway.model import CreateTopic, Fetch, Produce, Record, RecordBatch  # noqa: E402
from gateway.streams import FastSocketStream  # noqa: E402
from tests.support import GatewayProcess  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "latency.json"
CONNECTIONS = (1, 4, 32)
SIZES = (100, 1024)
BATCH = 1000
TARGET_ADDED_P99_MS = 2.0
MAX_LAG_MS = 20.0  # a scheduler later than this at p99 was stalled: the run is repeated
# the host ran something else on our virtual CPUs for more than this share of the run's CPU
# time (/proc/stat steal): both processes were stalled at random for ms at a time, and that
# tail says nothing about the gateway, so the run is repeated. Why 0.5: in identical runs of
# one build (bench/README, 2026-11-26) the gateway path's p99 rose with the steal from the
# first tenths of a percent (Kafka 0.8 at 2,800 req/s: 0.9-1.1 ms at 0.1-0.25% steal, 2.0-2.9
# at 0.56-1.05%, 3.7-5.1 at 1.8-2.6%): the host takes its share in bursts of ms, and a queue
# of requests builds up behind each one
MAX_STEAL_PCT = 0.5
MAX_ROUNDS = 24  # rounds per protocol at most (the pooled --round-budget usually ends first)
SATURATION_RUNS = 3  # closed loops at the best connection count; their median is saturation


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


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


# ----------------------------------------------------------------------------- baseline


async def batch_baseline() -> dict[str, float]:
    """In-process 1000-record produces and 1 MiB fetches on a memory backend."""
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    out: dict[str, float] = {}
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


@asynccontextmanager
async def direct_core(kind: str, data_dir: Path) -> AsyncIterator[Core]:
    """A Core on one backend of ``kind`` in this process: the direct backend path."""
    backend: Backend
    if kind == "embedded":
        backend = EmbeddedBackend("direct", EmbeddedConfig(), data_dir=data_dir)
    else:
        backend = MemoryBackend("direct")
    async with trio.open_nursery() as nursery:
        await backend.open(nursery)
        try:
            yield Core({"direct": backend}, [("*", "direct")])
        finally:
            await backend.close()
            nursery.cancel_scope.cancel()


# ----------------------------------------------------------------------------- open loop

Send = Callable[[], Awaitable[object]]


@dataclass
class OpenLoopRun:
    latencies: list[float]  # answer minus release, seconds
    lags: list[float]  # release minus ideal send time, seconds
    seconds: float  # first ideal send time to last answer


async def open_loop(senders: Sequence[Send], rate: float, count: int) -> OpenLoopRun:
    """Release ``count`` requests at ``rate`` per second (request i at t0 + i/rate) into a queue
    that one task per sender serves; the releasing task never waits for an answer."""
    tx, rx = trio.open_memory_channel[float](count)
    latencies: list[float] = []
    lags: list[float] = []

    async def serve(send: Send, queue: trio.MemoryReceiveChannel[float]) -> None:
        async with queue:
            async for released in queue:
                await send()
                latencies.append(trio.current_time() - released)

    t0 = trio.current_time() + 0.005
    async with trio.open_nursery() as nursery:
        async with rx:
            for send in senders:
                nursery.start_soon(serve, send, rx.clone())
        async with tx:
            for i in range(count):
                due = t0 + i / rate
                now = trio.current_time()
                if now < due:
                    await trio.sleep_until(due)
                    now = trio.current_time()
                lags.append(now - due)
                tx.send_nowait(now)
    return OpenLoopRun(latencies, lags, trio.current_time() - t0)


@contextmanager
def generator_gc_paused() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def run_summary(
    latencies: Sequence[float],
    lags: Sequence[float],
    rate: float,
    seconds: float,
    jiffies: tuple[int, int, int],
    generator_cpu_s: float,
    gateway_cpu_s: float | None,
) -> dict[str, Any]:
    """One timed open-loop run: latency percentiles, whether it kept its schedule, the
    machine's busy CPUs and host steal (``jiffies``: busy, steal, total over the run) and the
    CPU per request of the generator and of the gateway (None: not measured, the direct path)."""
    count = len(latencies)
    busy, steal, total = jiffies
    out: dict[str, Any] = summary_ms(list(latencies))
    out["requests"] = count
    out["achieved_rps"] = round(count / seconds)
    # fell behind its schedule: the CPUs it needed were not there (other work, or too much load)
    out["overloaded"] = out["achieved_rps"] < 0.9 * rate
    out["schedule_lag_p99_ms"] = round(pct(list(lags), 0.99) * 1e3, 3)
    out["machine_busy_cpus"] = round(busy / max(1, total) * (os.cpu_count() or 1), 2)
    out["host_steal_pct"] = round(100 * steal / max(1, total), 1)
    if gateway_cpu_s is not None:
        out["gateway_cpu_us_per_request"] = round(gateway_cpu_s / count * 1e6, 1)
    out["client_cpu_us_per_request"] = round(generator_cpu_s / count * 1e6, 1)
    return out


async def measured_open_loop(
    senders: Sequence[Send], rate: float, count: int, gw_pid: int | None
) -> dict[str, Any]:
    """0.5 s of warm-up at ``rate``, then the timed run of this process's open loop."""
    await open_loop(senders, rate, max(1, int(rate * 0.5)))
    with generator_gc_paused():
        cpu0 = cpu_seconds(gw_pid) if gw_pid else 0.0
        own0 = time.process_time()
        j0 = machine_jiffies()
        run = await open_loop(senders, rate, count)
        j1 = machine_jiffies()
        own = time.process_time() - own0
        cpu = cpu_seconds(gw_pid) - cpu0 if gw_pid else None
    jiffies = (j1[0] - j0[0], j1[1] - j0[1], j1[2] - j0[2])
    return run_summary(run.latencies, run.lags, rate, run.seconds, jiffies, own, cpu)


# ----------------------------------------------------------------------------- gateway


async def open_driver(name: str, addr: tuple[str, int]) -> Driver:
    """A connected driver whose client reads and writes its socket through
    ``FastSocketStream`` (the same bytes on the wire as trio's ``SocketStream``, fewer trips
    through the generator's scheduler): the generator's CPU per request is contention for the
    gateway on a 2-CPU machine and queueing inside the generator, both counted in the gateway
    path's latency."""
    d = DRIVERS[name](*addr)
    with trio.fail_after(20):
        await d.open()
    client = getattr(d, "client", None)
    fast = FastSocketStream.wrap(getattr(client, "stream", None))  # type: ignore[arg-type]
    if fast is not None:
        client.stream = fast  # type: ignore[union-attr]
    return d


async def create(gw: GatewayProcess, topic: str) -> None:
    creator = await open_driver("tank", gw.address("tank"))
    try:
        await creator.create_topic(topic, 1)
    finally:
        await creator.aclose()


def gateway_pid(gw: GatewayProcess) -> int:
    assert gw.proc is not None
    return gw.proc.pid


async def closed_loop(drivers: Sequence[Driver], topic: str, seconds: float, pid: int) -> dict:
    """Every driver sends 1-record produces back to back for ``seconds``: requests/s and the CPU
    (in cores) the gateway and this generator used meanwhile."""
    one = records(1, 100)
    counts = [0] * len(drivers)
    deadline = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        while time.perf_counter() < deadline:
            await drivers[i].produce(topic, one)
            counts[i] += 1

    cpu0, own0, t = cpu_seconds(pid), time.process_time(), time.perf_counter()
    async with trio.open_nursery() as n:
        for i in range(len(drivers)):
            n.start_soon(worker, i)
    wall = time.perf_counter() - t
    return {
        "requests_per_s": round(sum(counts) / wall),
        "gateway_cpu_cores": round((cpu_seconds(pid) - cpu0) / wall, 2),
        "generator_cpu_cores": round((time.process_time() - own0) / wall, 2),
    }


def trustworthy(run: dict[str, Any]) -> bool:
    """The open loop kept its schedule: it sent at the rate asked, its scheduler was never
    held up for long (a stalled generator or machine, not the system under test), and the host
    did not steal the virtual CPUs for more than ``MAX_STEAL_PCT`` of the run."""
    return (
        not run["overloaded"]
        and run["schedule_lag_p99_ms"] <= MAX_LAG_MS
        and run["host_steal_pct"] <= MAX_STEAL_PCT
    )


def median_round(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The round whose added p99 is the median of ``rounds`` (the upper one of the two middle
    rounds when their number is even: the worse, never the better)."""
    ordered = sorted(rounds, key=lambda r: r["added_p99_ms"])
    return ordered[len(ordered) // 2]


class PythonPath:
    """The gateway path driven by this process: the protocol's in-repo client per connection."""

    def __init__(
        self, drivers: Sequence[Driver], topic: str, one: list[Record], pid: int, pool: int
    ) -> None:
        self.drivers, self.topic, self.pid = drivers, topic, pid
        self.senders = [lambda d=d: d.produce(topic, one) for d in drivers[:pool]]

    async def closed(self, connections: int, seconds: float) -> dict[str, float]:
        return await closed_loop(self.drivers[:connections], self.topic, seconds, self.pid)

    async def open(self, rate: float, count: int) -> dict[str, Any]:
        return await measured_open_loop(self.senders, rate, count, self.pid)


class CPath:
    """The gateway path driven by the C generator (bench/loadgen.c), one process per run."""

    def __init__(self, gen: Loadgen, pool: int) -> None:
        self.gen, self.pool = gen, pool

    async def closed(self, connections: int, seconds: float) -> dict[str, float]:
        return await self.gen.closed(connections, seconds)

    async def open(self, rate: float, count: int) -> dict[str, Any]:
        """Like ``measured_open_loop``: 0.5 s of warm-up at ``rate`` on the same connections,
        then ``count`` timed requests."""
        run = await self.gen.open(self.pool, rate, max(1, int(rate * 0.5)), count)
        jiffies = (run.busy_jiffies, run.steal_jiffies, run.total_jiffies)
        cpu = run.generator_cpu_s, run.gateway_cpu_s
        return run_summary(run.latencies, run.lags, rate, run.seconds, jiffies, *cpu)


@asynccontextmanager
async def gateway_path(
    name: str, gw: GatewayProcess, topic: str, args: argparse.Namespace, exe: Path | None
) -> AsyncIterator[PythonPath | CPath]:
    """The generator of the gateway path: the C one when ``exe`` is given, else this process."""
    pid = gateway_pid(gw)
    one = records(1, 100)
    if exe is not None:
        frames = await capture(name, gw.address(name), topic, one[0])
        gen = Loadgen(exe, name, gw.address(name), gw.address("kafka08"), topic, frames, pid)
        yield CPath(gen, args.pool)
        return
    drivers = [await open_driver(name, gw.address(name)) for _ in range(max(CONNECTIONS))]
    try:
        for d in drivers:  # warm-up: every connection has produced before it is timed
            await d.produce(topic, one)
        yield PythonPath(drivers, topic, one, pid, args.pool)
    finally:
        for d in drivers:
            await d.aclose()


async def closed_rates(
    path: PythonPath | CPath, connections: int, seconds: float, runs: int
) -> list[float]:
    """Requests/s of ``runs`` closed loops in a row at ``connections``."""
    return [(await path.closed(connections, seconds))["requests_per_s"] for _ in range(runs)]


class ProtocolLoad:
    """One protocol's latency-under-load measurement: its saturation, then its rounds (see the
    module docstring); ``load_latency`` interleaves the rounds of every protocol."""

    def __init__(
        self, name: str, path: PythonPath | CPath, direct: Core, dtopic: str, pool: int
    ) -> None:
        self.name, self.path = name, path
        command = Produce(dtopic, RecordBatch(records=records(1, 100)), partition=0)
        self.direct_senders: list[Send] = [lambda: direct.execute(command)] * pool
        self.rounds: list[dict[str, Any]] = []
        self.conc: dict[str, dict[str, float]] = {}
        self.best = CONNECTIONS[0]
        self.saturation_runs: list[float] = []

    async def saturate(self, seconds: float) -> None:
        """The closed loops at every connection count, then more at the best one."""
        self.conc = {str(c): await self.path.closed(c, seconds) for c in CONNECTIONS}
        self.best = max(CONNECTIONS, key=lambda c: self.conc[str(c)]["requests_per_s"])
        self.saturation_runs = [self.conc[str(self.best)]["requests_per_s"]]
        more = SATURATION_RUNS - 1
        self.saturation_runs += await closed_rates(self.path, self.best, seconds, more)

    def counted(self) -> list[dict[str, Any]]:
        return [r for r in self.rounds if r["counted"]]

    def wants_round(self, asked: int) -> bool:
        return len(self.rounds) < MAX_ROUNDS and len(self.counted()) < asked

    async def round(self, args: argparse.Namespace) -> None:
        """One gateway-path run and one direct-path run at ``args.fraction`` of saturation (measured
        again first when the previous round fell behind its rate)."""
        last = self.rounds[-1] if self.rounds else None
        if last and (last["gateway"]["overloaded"] or last["direct"]["overloaded"]):
            self.saturation_runs = await closed_rates(
                self.path, self.best, args.seconds, SATURATION_RUNS
            )
        saturation = statistics.median(self.saturation_runs)
        rate = max(1.0, args.fraction * saturation)
        count = max(args.min_requests, int(rate * args.load_seconds))
        gateway = await self.path.open(rate, count)
        direct_run = await measured_open_loop(self.direct_senders, rate, count, None)
        self.rounds.append(
            {
                "saturation_rps": saturation,
                "saturation_runs_rps": self.saturation_runs,
                "rate_rps": round(rate),
                "gateway": gateway,
                "direct": direct_run,
                **{
                    f"added_{q}_ms": round(gateway[f"{q}_ms"] - direct_run[f"{q}_ms"], 3)
                    for q in ("p50", "p99", "p999")
                },
                "counted": trustworthy(gateway) and trustworthy(direct_run),
            }
        )

    def result(self, asked: int) -> dict[str, Any]:
        """The median counted round (the median of all when none counted), every round kept."""
        counted = self.counted()
        chosen = median_round(counted or self.rounds)
        return {
            "concurrency": self.conc,
            **{k: v for k, v in chosen.items() if k != "counted"},
            # None: not measured (fewer than asked rounds on a quiet host, even when repeated)
            "meets_target": (
                chosen["added_p99_ms"] <= TARGET_ADDED_P99_MS if len(counted) >= asked else None
            ),
            "added_p99_ms_of_counted_rounds": [r["added_p99_ms"] for r in counted],
            "rounds": self.rounds,
        }


async def load_latency(
    names: Sequence[str],
    gw: GatewayProcess,
    direct: Core,
    args: argparse.Namespace,
    exe: Path | None,
) -> dict[str, dict[str, Any]]:
    """Every protocol's saturation, then rounds taken in turn (one for each protocol still short
    of ``args.rounds`` counted ones, then again) until each has them, has run ``MAX_ROUNDS``, or
    another round would overrun ``args.round_budget`` seconds per protocol, pooled. In turn, so
    a noisy minute of the host costs every protocol a round, not one protocol all of its
    rounds, and the time goes to the protocols that still need it."""
    async with AsyncExitStack() as stack:
        loads = []
        for name in names:
            topic, dtopic = f"lat-{name}", f"direct-{name}"
            await create(gw, topic)
            await direct.execute(CreateTopic(dtopic, 1))
            path = await stack.enter_async_context(gateway_path(name, gw, topic, args, exe))
            loads.append(ProtocolLoad(name, path, direct, dtopic, args.pool))
        for load in loads:
            await load.saturate(args.seconds)
        budget, started, done = args.round_budget * len(loads), trio.current_time(), 0
        while pending := [load for load in loads if load.wants_round(args.rounds)]:
            for load in pending:
                spent = trio.current_time() - started
                if done >= len(loads) and spent + spent / done > budget:  # each had one
                    return {load.name: load.result(args.rounds) for load in loads}
                await load.round(args)
                print(load.name, "round", json.dumps(load.rounds[-1]), flush=True)
                done += 1
        return {load.name: load.result(args.rounds) for load in loads}


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


GENERATORS = {
    "c": (
        "latency and saturation: bench/loadgen.c (C, epoll, timerfd releases) replaying the "
        "produce request the protocol's in-repo client encoded, in its own process; batches "
        "and idle connections: in-repo codec clients (gateway.interop.drivers) in the bench "
        "process"
    ),
    "python": "in-repo codec clients (gateway.interop.drivers) in the bench process",
}
VERDICT = {
    True: "meets the 2 ms target",
    False: "OVER the 2 ms target",
    None: "not measured: no run kept its schedule on a host that did not steal its CPUs",
}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="each closed-loop run")
    parser.add_argument("--load-seconds", type=float, default=2.0, help="the open-loop run")
    parser.add_argument("--min-requests", type=int, default=2000)
    parser.add_argument("--fraction", type=float, default=0.5, help="of saturation")
    parser.add_argument("--pool", type=int, default=8, help="open-loop connections")
    parser.add_argument(
        "--rounds", type=int, default=3, help="counted rounds of both paths; the median is kept"
    )
    parser.add_argument(
        "--round-budget",
        type=float,
        default=45.0,
        help="seconds of rounds per protocol, pooled over the protocols: no further round starts "
        "once one more would overrun the pool (a noisy host then gives 'not measured' within "
        "make bench's time limit)",
    )
    parser.add_argument("--backend", choices=("embedded", "memory"), default="embedded")
    parser.add_argument(
        "--batches",
        type=int,
        default=20,
        help="1,000-record batches per size and protocol (0: no batch figures, and --idle 0)",
    )
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--protocols", default=",".join(PROTOCOLS))
    parser.add_argument(
        "--generator",
        choices=("c", "python"),
        default="c",
        help="the gateway path's load generator: bench/loadgen.c, or this process's clients",
    )
    args = parser.parse_args()
    if args.idle and args.batches < 1:
        parser.error("--idle measures with --batches batches: give --batches 1 or more")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.idle)), hard))
    backend = (
        "embedded (default fsync: every 50 ms, acknowledgements do not wait for it)"
        if args.backend == "embedded"
        else "memory"
    )
    workload = {
        "latency": (
            f"produces of 1 record (100 B) to one partition; saturation = median of "
            f"{SATURATION_RUNS} closed-loop runs ({args.seconds} s each) at the best of "
            f"{'/'.join(map(str, CONNECTIONS))} connections; open loop at {args.fraction:.0%} "
            f"of it for {args.load_seconds} s (at least "
            f"{args.min_requests} requests) over {args.pool} connections, latency from each "
            f"request's release; direct path: the same open loop of Core.execute(Produce) "
            f"in-process on the same backend type, right after; the median of {args.rounds} "
            f"counted rounds of both, the protocols taking rounds in turn (a round under host "
            f"steal > {MAX_STEAL_PCT:g}% or off its schedule is not counted)"
        ),
        "latency_backend": backend,
        "batches": f"{args.batches} batches of {BATCH} records of {SIZES} bytes, then consume",
        "batches_backend": "memory",
        "idle": f"{args.idle} idle TCP connections on the TANK listener",
        "generator": GENERATORS[args.generator],
        "gateway_path_generator": args.generator,
    }
    print("workload:", json.dumps(workload))
    protocols = args.protocols.split(",")
    out: dict[str, Any] = {
        "workload": workload,
        "target_added_p99_ms": TARGET_ADDED_P99_MS,
        "max_steal_pct": MAX_STEAL_PCT,
        "rounds": {"asked": args.rounds, "max": MAX_ROUNDS},
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "baseline": await batch_baseline(),
        "protocols": {},
    }
    print("baseline:", json.dumps(out["baseline"]))
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(Path(tmp)) if args.generator == "c" else None
        listeners = {p: {"max_connections": max(1024, 4 * args.idle)} for p in PROTOCOLS}
        # latency topics (lat-*) on the backend under test, the rest on memory
        gw = GatewayProcess(
            Path(tmp),
            listeners=listeners,
            backends={"load": {"type": args.backend}, "mem": {"type": "memory"}},
            routes=[{"topic": "lat-*", "backend": "load"}, {"topic": "*", "backend": "mem"}],
            server={"log_level": "warning"},
        )
        gw.start()
        try:
            async with direct_core(args.backend, Path(tmp) / "direct") as direct:
                loads = await load_latency(protocols, gw, direct, args, exe)
                for name in protocols:
                    row: dict[str, Any] = {"load": loads[name]}
                    if args.batches:
                        row["batches"] = {
                            str(s): await batches(name, gw, s, args.batches) for s in SIZES
                        }
                        print(name, json.dumps(row["batches"]), flush=True)
                    out["protocols"][name] = row
            if args.idle:
                out["idle"] = await idle_connections(gw, args.idle, args.batches)
                print("idle:", json.dumps(out["idle"]))
        finally:
            gw.stop()
    out["machine"]["load_average_at_end"] = os.getloadavg()
    for name, row in out["protocols"].items():
        ld = row["load"]
        print(
            f"{name}: saturation {ld['saturation_rps']} req/s, at {ld['rate_rps']} req/s p99 "
            f"gateway {ld['gateway']['p99_ms']} ms, direct {ld['direct']['p99_ms']} ms, added "
            f"{ld['added_p99_ms']} ms ({VERDICT[ld['meets_target']]})"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    trio.run(main)
