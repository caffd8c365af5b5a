"""Benchmark: ``gateway serve --workers N`` for N = 1, 2 and 4 on a shared NATS JetStream
backend, in one run, with the CPU time of every process so a reader sees where the time went,
and the cost of coordinating a consumer group through the backend.

Workload (printed too): nats-server with JetStream (the test extra's binary) on loopback; a
gateway with the nats backend and the Kafka 0.8 listener, started with --workers 1, then with
--workers 2 (SO_REUSEPORT: the kernel spreads the connections over the workers). The load is
gateway-bound by construction: many small requests, so the gateway's CPU per request (decode,
route, encode, one JetStream publish or read per request) dominates, while the clients are C.

- produce: --clients (default 8) kcat processes (librdkafka, C, 0.8.2 mode) at once, each
  producing --records (default 4,000) records of 100 bytes to its own new topic, one record per
  Produce request (batch.num.messages=1, linger.ms=0, acks=1);
- fetch: then --clients kcat consumers at once, each reading its topic back from the start with
  fetch.message.max.bytes=1024 (a handful of records per Fetch request).
- produce_c32: then bench/loadgen.c (the latency benchmark's C generator, bench/loadgen.py)
  over 32 connections for --c-seconds (default 4), one 1-record Produce in flight per
  connection (closed loop). It costs a few us of CPU per request where librdkafka costs more,
  so on a small machine more of it is left for the workers; every answered produce is checked
  against the topic.

records/s = all records / wall time of the slowest client. Each figure is the best of --runs
(default 2) alternating runs, with the CPU figures of that run: CPU seconds (user + system, from
/proc and the clients' rusage) of each gateway worker, the kcat processes together and
nats-server, each worker's utilisation (CPU seconds / wall seconds: 1.0 = a whole CPU), the whole
machine's busy CPUs over the same interval (/proc/stat: includes other work on the machine), and
records per gateway CPU-second. When the machine has no CPU left for a second worker, the
records/s ratio cannot show a gain; the CPU figures then show whether the gateway or the machine
was the limit.

records/s per worker = records/s / N: flat when the work spreads over N cores; on a machine with
fewer idle cores than N it falls, and the busy-CPU figures say so.

rebalance: a gateway with --workers 2 and the Cursus listener on the same nats-server; 8 members
join one new group (each JOIN_GROUP on its own connection, so the kernel spreads them over the
two workers: the group state lives in the JetStream key-value store). From the last join's
answer, every member heartbeats, rejoins on GEN_MISMATCH and reads its assignment; the time to
the moment all 8 hold their assignment of the final generation is one sample; the median and
the worst of --rebalances (default 10) groups are reported.

Run: ``python bench/workers.py [--clients C] [--records N] [--runs R] [--workers 1,2,4]``;
results go to ``bench/results/workers.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import KCAT_08, cpu_seconds, machine_jiffies  # noqa: E402
from bench.loadgen import Loadgen, build, capture  # noqa: E402
from gateway.model import Record  # noqa: E402
from gateway.protocols.cursus.client import CursusClient  # noqa: E402
from gateway.protocols.kafka08.client import Kafka08Client  # noqa: E402
from tests.backends.servers import NatsServer  # noqa: E402
from tests.support import GatewayProcess  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "workers.json"
VALUE_BYTES = 100
FETCH_BYTES = 1024
C_CONNECTIONS = 32
OPS = ("produce", "fetch", "produce_c32")


def kcat_produce(bootstrap: str, topic: str, path: Path) -> list[str]:
    return ["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "0", *KCAT_08,
            "-X", "request.required.acks=1", "-X", "linger.ms=0",
            "-X", "batch.num.messages=1",
            "-X", "queue.buffering.max.messages=2000000", "-l", str(path)]  # fmt: skip


def kcat_consume(bootstrap: str, topic: str, n: int) -> list[str]:
    return ["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", *KCAT_08,
            "-o", "beginning", "-c", str(n), "-e", "-q", "-f", "%o\n",
            "-X", f"fetch.message.max.bytes={FETCH_BYTES}"]  # fmt: skip


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split()]


def worker_pids(gw: GatewayProcess) -> list[int]:
    """The serving processes: the forked workers, or the gateway itself with --workers 1."""
    assert gw.proc is not None
    return children(gw.proc.pid) or [gw.proc.pid]


class Watch:
    """The CPU seconds of the gateway's processes and nats-server, the clients' rusage and the
    machine's busy jiffies, from construction to ``stop``."""

    def __init__(self, gw: GatewayProcess, nats_pid: int) -> None:
        assert gw.proc is not None
        watched = {f"gateway worker {i + 1}": pid for i, pid in enumerate(worker_pids(gw))}
        if watched.get("gateway worker 1") != gw.proc.pid:
            watched["gateway parent"] = gw.proc.pid
        watched["nats-server"] = nats_pid
        self.watched = watched
        self.before = {name: cpu_seconds(pid) for name, pid in watched.items()}
        self.kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.jiffies0 = machine_jiffies()
        self.t0 = time.perf_counter()

    def stop(self, clients: str) -> tuple[float, dict[str, float], float]:
        """(wall seconds, CPU seconds per process with the clients' under ``clients``, busy
        CPUs of the machine)."""
        wall = time.perf_counter() - self.t0
        busy1, _, total1 = machine_jiffies()
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = {n: round(cpu_seconds(pid) - self.before[n], 2) for n, pid in self.watched.items()}
        k0 = self.kids0
        cpu[clients] = round(kids1.ru_utime + kids1.ru_stime - k0.ru_utime - k0.ru_stime, 2)
        busy0, _, total0 = self.jiffies0
        busy = (busy1 - busy0) / max(1, total1 - total0) * (os.cpu_count() or 1)
        return wall, cpu, busy


def phase(
    commands: list[list[str]], n: int, check_fetch: bool, gw: GatewayProcess, nats_pid: int
) -> dict[str, Any]:
    """Run the clients at once; records/s and the CPU seconds of every process meanwhile."""
    watch = Watch(gw, nats_pid)
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in commands]
    outs = [p.communicate(timeout=300) for p in procs]
    wall, cpu, busy = watch.stop("kcat (all clients)")
    for p, (out, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            sys.exit(f"kcat failed: {err[-2000:]!r}")
        if check_fetch and len(out.split()) != n:
            sys.exit(f"fetch: got {len(out.split())} of {n} records")
    return phase_result(len(commands) * n, wall, cpu, busy)


def c_phase(gw: GatewayProcess, nats_pid: int, exe: Path, topic: str, seconds: float) -> dict:
    """bench/loadgen.c over C_CONNECTIONS connections, closed loop of 1-record produces."""
    address = gw.address("kafka08")
    one = Record(None, b"v" * VALUE_BYTES, (), int(time.time() * 1e6), -1)

    async def run() -> dict[str, Any]:
        client = await Kafka08Client.connect(*address)
        try:
            await client.metadata([topic])  # 0.8 creates topics on Metadata
        finally:
            await client.aclose()
        frames = await capture("kafka08", address, topic, one)
        gen = Loadgen(exe, "kafka08", address, address, topic, frames, 0)
        watch = Watch(gw, nats_pid)
        result = await gen.closed(C_CONNECTIONS, seconds)
        return phase_result(result["requests"], *watch.stop("loadgen"))

    return trio.run(run)


def phase_result(records: int, wall: float, cpu: dict[str, float], busy: float) -> dict[str, Any]:
    workers = [v for k, v in cpu.items() if k.startswith("gateway worker")]
    gateway_cpu = sum(workers) + cpu.get("gateway parent", 0.0)
    return {
        "records_per_s": round(records / wall),
        "wall_s": round(wall, 2),
        "cpu_s": cpu,
        "worker_utilisation": [round(w / wall, 2) for w in workers],
        "gateway_cpu_s": round(gateway_cpu, 2),
        "records_per_gateway_cpu_s": round(records / gateway_cpu) if gateway_cpu else None,
        "machine_busy_cpus": round(busy, 2),
    }


def one_run(
    workers: int, nats: NatsServer, args: argparse.Namespace, exe: Path, tmp: Path, tag: str
) -> dict[str, Any]:
    clients, n = args.clients, args.records
    records = tmp / "records.txt"
    if not records.exists():
        records.write_bytes((b"v" * VALUE_BYTES + b"\n") * n)
    assert nats.proc is not None
    with GatewayProcess(
        tmp / f"gw-{tag}",
        listeners={"kafka08": {}},
        backends={"default": {"type": "nats", "url": nats.url}},
        server={"log_level": "warning"},
        extra_args=("--workers", str(workers)),
    ) as gw:
        host, port = gw.address("kafka08")
        bootstrap = f"{host}:{port}"
        topics = [f"w{tag}-{i}" for i in range(clients)]
        produce = phase(
            [kcat_produce(bootstrap, t, records) for t in topics], n, False, gw, nats.proc.pid
        )
        fetch = phase([kcat_consume(bootstrap, t, n) for t in topics], n, True, gw, nats.proc.pid)
        produce_c = c_phase(gw, nats.proc.pid, exe, f"w{tag}-c", args.c_seconds)
    return {"produce": produce, "fetch": fetch, "produce_c32": produce_c}


def label(workers: int) -> str:
    return f"{workers} worker" + ("" if workers == 1 else "s")


def summary_text(best: dict[int, dict[str, dict[str, Any]]], args: argparse.Namespace) -> str:
    parts = []
    for op in OPS:
        base = best[min(best)][op]["records_per_s"]
        figures = []
        for workers, ops in sorted(best.items()):
            r = ops[op]
            figures.append(
                f"{label(workers)} {r['records_per_s']:,} records/s (x"
                f"{r['records_per_s'] / base:.2f}; {r['records_per_s_per_worker']:,} per worker; "
                f"workers at {' + '.join(map(str, r['worker_utilisation']))} CPU, machine "
                f"{r['machine_busy_cpus']} of {os.cpu_count()} CPUs busy)"
            )
        parts.append(f"{op}: " + ", ".join(figures))
    return (
        f"kafka08 listener on NATS, {args.clients} kcat clients x {args.records:,} records of "
        f"{VALUE_BYTES} B, one record per Produce request, Fetch requests of {FETCH_BYTES} B; "
        f"produce_c32: bench/loadgen.c, {C_CONNECTIONS} connections, 1-record Produce requests "
        f"for {args.c_seconds} s: "
        + "; ".join(parts)
        + f". Load average {os.getloadavg()[0]:.1f} at the end."
    )


MEMBERS = 8


def rebalance_cost(nats: NatsServer, tmp: Path, rounds: int) -> dict[str, Any]:
    """Median seconds from the last of 8 joins to every member holding its assignment of the
    final generation, over ``rounds`` new groups, on a 2-worker gateway (see the docstring)."""
    with GatewayProcess(
        tmp / "gw-rebalance",
        listeners={"cursus": {"session_timeout_ms": 60_000}},
        backends={"default": {"type": "nats", "url": nats.url}},
        server={"log_level": "warning"},
        extra_args=("--workers", "2"),
    ) as gw:
        addr = gw.address("cursus")

        async def one(group: str) -> float:
            clients = [await CursusClient.connect(*addr) for _ in range(MEMBERS)]
            try:
                joined = [await cl.join_group("rb", group, f"m{i}") for i, cl in enumerate(clients)]
                t0 = time.perf_counter()
                final = joined[-1].generation

                async def settle(i: int) -> None:
                    nonlocal final
                    member, generation = joined[i].member, joined[i].generation
                    while True:
                        reply = await clients[i].text(
                            f"HEARTBEAT topic=rb group={group} member={member} "
                            f"generation={generation}"
                        )
                        if reply == "OK" and generation >= final:
                            return
                        again = await clients[i].join_group("rb", group, member)
                        generation = again.generation
                        final = max(final, generation)

                async with trio.open_nursery() as n:
                    for i in range(MEMBERS):
                        n.start_soon(settle, i)
                return time.perf_counter() - t0
            finally:
                for cl in clients:
                    await cl.aclose()

        async def run() -> list[float]:
            async with await CursusClient.connect(*addr) as admin:
                await admin.create_topic("rb", 8)
            return [await one(f"rb{i}") for i in range(rounds)]

        samples = sorted(trio.run(run))
    return {
        "members": MEMBERS,
        "gateway_workers": 2,
        "groups": rounds,
        "median_s": round(samples[len(samples) // 2], 4),
        "max_s": round(samples[-1], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--records", type=int, default=4_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--c-seconds", type=float, default=4.0, help="the produce_c32 phase")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    parser.add_argument("--rebalances", type=int, default=10, help="groups timed (rebalance)")
    args = parser.parse_args()
    counts = sorted({int(w) for w in args.workers.split(",")})
    workload = {
        "backend": "nats (JetStream, one nats-server)",
        "listener": "kafka08",
        "clients": args.clients,
        "records_per_client": args.records,
        "value_bytes": VALUE_BYTES,
        "produce": "one record per Produce request (batch.num.messages=1, linger.ms=0, acks=1)",
        "fetch": f"fetch.message.max.bytes={FETCH_BYTES} (a few records per Fetch request)",
        "generator": "kcat (librdkafka, C) 0.8.2 mode, one process per client",
        "produce_c32": (
            f"bench/loadgen.c (C): {C_CONNECTIONS} connections, one 1-record Produce request "
            f"in flight on each (closed loop), {args.c_seconds} s"
        ),
        "best_of": args.runs,
    }
    print("workload:", json.dumps(workload))
    best: dict[int, dict[str, dict[str, Any]]] = {w: {} for w in counts}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        exe = build(tmp)
        with NatsServer(tmp / "nats") as nats:
            for run in range(args.runs):
                for workers in counts:
                    r = one_run(workers, nats, args, exe, tmp, f"{workers}x{run}")
                    for v in r.values():
                        v["records_per_s_per_worker"] = round(v["records_per_s"] / workers)
                    runs.append({"run": run, "workers": workers, **r})
                    print(f"run {run} workers={workers}: {json.dumps(r)}", flush=True)
                    for op, v in r.items():
                        if v["records_per_s"] > best[workers].get(op, {}).get("records_per_s", 0):
                            best[workers][op] = v
            rebalance = rebalance_cost(nats, tmp, args.rebalances)
    summary = summary_text(best, args)
    summary += (
        f" Rebalance of {MEMBERS} members on NATS (2 workers): median {rebalance['median_s']} s "
        f"from the last join to every member's assignment (worst {rebalance['max_s']} s of "
        f"{rebalance['groups']} groups)."
    )
    print(summary)
    out = {
        "workload": workload,
        "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "best": {label(w): best[w] for w in counts},
        "records_per_s": {
            label(w): {op: v["records_per_s"] for op, v in best[w].items()} for w in counts
        },
        "records_per_s_per_worker": {
            label(w): {op: v["records_per_s_per_worker"] for op, v in best[w].items()}
            for w in counts
        },
        "over_one": {
            label(w): {
                op: round(best[w][op]["records_per_s"] / best[counts[0]][op]["records_per_s"], 3)
                for op in OPS
            }
            for w in counts
        },
        "rebalance": rebalance,
        "runs": runs,
        "summary": summary,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
