"""Benchmark: ``gateway serve --workers 2`` against ``--workers 1`` on a shared NATS JetStream
backend, in one run.

Workload (printed too): nats-server with JetStream (the test extra's binary) on loopback; a
gateway with the nats backend and the Kafka 0.8 listener, started with --workers 1, then with
--workers 2 (SO_REUSEPORT: the kernel spreads the connections over the workers). Load: --clients
(default 4) kcat processes (librdkafka, C, 0.8.2 mode) at once, each producing --records (default
20,000) records of 100 bytes to its own new topic (acks=1, linger 5 ms, 10,000-message
batches), then --clients kcat consumers at once, each reading its topic back from the start.
records/s = all records / wall time of the slowest client. Each figure is the best of --runs
(default 2) alternating runs. Machine with CPUs shared with other work: the gain of a second
worker is bounded by the CPUs left over by the clients and nats-server.

Run: ``python bench/workers.py [--clients C] [--records N] [--runs R]``; results go to
``bench/results/workers.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.backends.servers import NatsServer  # noqa: E402
from tests.support import GatewayProcess  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "workers.json"
VALUE_BYTES = 100
KCAT_08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]


def kcat_produce(bootstrap: str, topic: str, path: Path) -> list[str]:
    return ["kcat", "-b", bootstrap, "-P", "-t", topic, "-p", "0", *KCAT_08,
            "-X", "request.required.acks=1", "-X", "linger.ms=5",
            "-X", "batch.num.messages=10000",
            "-X", "queue.buffering.max.messages=2000000", "-l", str(path)]  # fmt: skip


def kcat_consume(bootstrap: str, topic: str, n: int) -> list[str]:
    return ["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", *KCAT_08,
            "-o", "beginning", "-c", str(n), "-e", "-q", "-f", "%o\n",
            "-X", "fetch.message.max.bytes=1048576"]  # fmt: skip


def parallel(commands: list[list[str]], n: int, check_fetch: bool) -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in commands]
    outs = [p.communicate(timeout=300) for p in procs]
    seconds = time.perf_counter() - t0
    for p, (out, err) in zip(procs, outs, strict=True):
        if p.returncode != 0:
            sys.exit(f"kcat failed: {err[-2000:]!r}")
        if check_fetch and len(out.split()) != n:
            sys.exit(f"fetch: got {len(out.split())} of {n} records")
    return len(commands) * n / seconds


def one_run(workers: int, nats_url: str, clients: int, n: int, tmp: Path, tag: str) -> dict:
    records = tmp / "records.txt"
    if not records.exists():
        records.write_bytes((b"v" * VALUE_BYTES + b"\n") * n)
    with GatewayProcess(
        tmp / f"gw-{tag}",
        listeners={"kafka08": {}},
        backends={"default": {"type": "nats", "url": nats_url}},
        server={"log_level": "warning"},
        extra_args=("--workers", str(workers)),
    ) as gw:
        host, port = gw.address("kafka08")
        bootstrap = f"{host}:{port}"
        topics = [f"w{tag}-{i}" for i in range(clients)]
        produce = parallel([kcat_produce(bootstrap, t, records) for t in topics], n, False)
        fetch = parallel([kcat_consume(bootstrap, t, n) for t in topics], n, True)
    return {"produce": produce, "fetch": fetch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    workload = {
        "backend": "nats (JetStream, one nats-server)",
        "listener": "kafka08",
        "clients": args.clients,
        "records_per_client": args.records,
        "value_bytes": VALUE_BYTES,
        "generator": "kcat (librdkafka) 0.8.2 mode, one process per client",
        "best_of": args.runs,
    }
    print("workload:", json.dumps(workload))
    best: dict[int, dict[str, float]] = {1: {}, 2: {}}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with NatsServer(tmp / "nats") as nats:
            for run in range(args.runs):
                for workers in (1, 2):
                    r = one_run(workers, nats.url, args.clients, args.records, tmp,
                                f"{workers}x{run}")  # fmt: skip
                    print(f"run {run} workers={workers}: {json.dumps(r)}", flush=True)
                    for k, v in r.items():
                        best[workers][k] = max(best[workers].get(k, 0.0), v)
    ratio = {k: round(best[2][k] / best[1][k], 3) for k in ("produce", "fetch")}
    summary = (
        f"kafka08 listener on NATS, {args.clients} kcat clients x {args.records:,} records: "
        f"1 worker {best[1]['produce']:,.0f} produced/s, {best[1]['fetch']:,.0f} fetched/s; "
        f"2 workers {best[2]['produce']:,.0f} produced/s, {best[2]['fetch']:,.0f} fetched/s "
        f"(x{ratio['produce']} produce, x{ratio['fetch']} fetch) on {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}."
    )
    print(summary)
    out = {
        "workload": workload,
        "machine": {"cpus": os.cpu_count(), "load_average_at_end": os.getloadavg()},
        "records_per_s": {
            "1 worker": {k: round(v) for k, v in best[1].items()},
            "2 workers": {k: round(v) for k, v in best[2].items()},
        },
        "two_over_one": ratio,
        "summary": summary,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
