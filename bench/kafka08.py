"""Kafka 0.8 listener throughput: librdkafka (kcat, Debian, in 0.8.2 mode; installed by
.ci/deps/kafka08.sh) against a gateway subprocess, and the same workload against the backend
in-process (the baseline), measured in the same run.

Workload: N records (default 200,000) of a 100-byte value and no key into one partition of a new
topic; produce with acks=1 (Produce v0, magic-0 message sets of up to ~1 MB), then consume the
partition from offset 0, its first (Fetch v0, 1 MiB per fetch). Records/s = N / wall time of the
kcat process (producer: kcat -P -l FILE with acks=1, linger 5 ms, 10,000-message batches;
consumer: kcat -C -o 0 -c N -e). Records per gateway CPU-second = N / CPU time the gateway process
used in the phase. Baseline: Core.execute(Produce) of 10,000-record batches, then
Core.execute(Fetch) of 1 MiB until N records were returned, records materialised, with the
allocator settings of ``gateway serve`` (gateway/allocator.py).

The consumer starts at offset 0 rather than ``-o beginning`` (the same records on a new topic):
with a logical start offset librdkafka first asks for it (ListOffsets), and when its partition
has not yet joined the broker thread at that moment (a race between its threads, more likely
when several Metadata answers arrive together) it retries the query 500 ms later ("no current
leader for partition: (re)starting offset query timer"); a third to half of the runs took that
extra half second, which a 200,000-record fetch of ~0.25 s cannot hide (bench/README.md).

Usage: python bench/kafka08.py [--records N] [--backend embedded|memory|both] [--repeat R]
[--fetch-runs F]. Produce figures are the best of R runs (default 3), each on a new topic; fetch
figures are the median of F runs (default 5; the topics in turn), all runs listed in the JSON.
Writes bench/results/kafka08.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    check_fetched,
    cpu_seconds,
    gateway_config,
    gateway_process,
    kcat_08_commands,
)
from gateway.allocator import tune_allocator  # noqa: E402
from gateway.config import parse_config  # noqa: E402
from gateway.model import CreateTopic, Fetch, Produce, Record, RecordBatch, now_us  # noqa: E402
from gateway.server import build_backends, build_core  # noqa: E402

VALUE_BYTES = 100
BASELINE_BATCH = 10_000
TARGETS = {"produce": 150_000, "fetch": 400_000}


def kcat() -> str:
    exe = shutil.which("kcat")
    if exe is None:
        sys.exit("kcat missing: run .ci/deps/kafka08.sh first")
    return exe


def run_listener(backend: str, n: int, repeat: int, fetch_runs: int) -> tuple[dict, dict, list]:
    """(records/s of wall time, records per gateway CPU second) per phase: produce the best of
    ``repeat`` runs, fetch the median of ``fetch_runs``; and the fetch runs' records/s."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        config = gateway_config("kafka08", {"type": backend}, tmp)
        with gateway_process(config, tmp) as (proc, ports):
            bootstrap = f"127.0.0.1:{ports['kafka08']}"
            records = tmp / "records.txt"
            records.write_bytes((b"v" * VALUE_BYTES + b"\n") * n)
            runs: dict[str, list[tuple[float, float]]] = {"produce": [], "fetch": []}

            def timed(phase: str, command: list[str]) -> None:
                cpu0 = cpu_seconds(proc.pid)
                t0 = time.perf_counter()
                res = subprocess.run(command, capture_output=True, timeout=300)
                seconds = time.perf_counter() - t0
                if res.returncode != 0:
                    sys.exit(f"kcat failed ({phase}): {res.stderr[-3000:]!r}")
                if phase == "fetch":
                    check_fetched(res.stdout, n)
                cpu = max(1e-9, cpu_seconds(proc.pid) - cpu0)
                runs[phase].append((n / seconds, n / cpu))

            commands = [
                kcat_08_commands(kcat(), bootstrap, f"bench-{rep}", records, n)
                for rep in range(repeat)
            ]
            for command in commands:  # from offset 0, not "beginning" (see the docstring)
                fetch = command["fetch"]
                fetch[fetch.index("-o") + 1] = "0"
            for rep in range(repeat):
                timed("produce", commands[rep]["produce"])
            for i in range(fetch_runs):
                timed("fetch", commands[i % repeat]["fetch"])
            out = {"produce": max(r for r, _ in runs["produce"])}
            per_cpu = {"produce": max(c for _, c in runs["produce"])}
            out["fetch"] = statistics.median(r for r, _ in runs["fetch"])
            per_cpu["fetch"] = statistics.median(c for _, c in runs["fetch"])
            return out, per_cpu, [round(r) for r, _ in runs["fetch"]]


async def _baseline(backend: str, n: int, repeat: int, fetch_runs: int) -> tuple[dict, dict]:
    """(records/s, records per CPU second) per phase in this process: produce the best of
    ``repeat`` runs, fetch the median of ``fetch_runs``."""
    runs: dict[str, list[tuple[float, float]]] = {"produce": [], "fetch": []}

    def note(phase: str, seconds: float, cpu: float) -> None:
        runs[phase].append((n / seconds, n / max(1e-9, cpu)))

    with tempfile.TemporaryDirectory() as d:
        config = parse_config(gateway_config("kafka08", {"type": backend}, Path(d)))
        backends = build_backends(config)
        async with trio.open_nursery() as nursery:
            for b in backends.values():
                await b.open(nursery)
            core = build_core(config, backends)
            value = b"v" * VALUE_BYTES
            for rep in range(repeat):
                topic = f"bench-{rep}"
                await core.execute(CreateTopic(topic, 1))
                c0, t0 = time.process_time(), time.perf_counter()
                for start in range(0, n, BASELINE_BATCH):
                    ts = now_us()
                    count = min(BASELINE_BATCH, n - start)
                    batch = RecordBatch([Record(None, value, (), ts) for _ in range(count)])
                    await core.execute(Produce(topic, batch, 0))
                note("produce", time.perf_counter() - t0, time.process_time() - c0)
            for i in range(fetch_runs):
                topic = f"bench-{i % repeat}"
                c0, t0 = time.process_time(), time.perf_counter()
                offset = got = 0
                while got < n:
                    res = await core.execute(Fetch(topic, 0, offset, max_bytes=1 << 20))
                    for b in res.batches:
                        got += len(b.records)
                        offset = b.last_offset + 1
                note("fetch", time.perf_counter() - t0, time.process_time() - c0)
            for b in backends.values():
                await b.close()
            nursery.cancel_scope.cancel()
    out = {"produce": max(r for r, _ in runs["produce"])}
    per_cpu = {"produce": max(c for _, c in runs["produce"])}
    out["fetch"] = statistics.median(r for r, _ in runs["fetch"])
    per_cpu["fetch"] = statistics.median(c for _, c in runs["fetch"])
    return out, per_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--backend", choices=["embedded", "memory", "both"], default="both")
    parser.add_argument("--repeat", type=int, default=3, help="produce: best of this many runs")
    parser.add_argument("--fetch-runs", type=int, default=5, help="fetch: median of this many")
    args = parser.parse_args()
    tune_allocator()  # the baseline runs with the allocator settings of `gateway serve`
    n = args.records
    backends = ["embedded", "memory"] if args.backend == "both" else [args.backend]
    print(__doc__.split("\n\n")[1].replace("\n", " "))
    load = os.getloadavg()
    print(
        f"N={n} records, value {VALUE_BYTES} bytes, no key, 1 partition; {os.cpu_count()} CPUs, "
        f"load average {load[0]:.1f} (records/s suffer when other work shares the CPUs; "
        f"records per gateway CPU-second do much less)"
    )
    results: dict = {
        "workload": {
            "records": n,
            "value_bytes": VALUE_BYTES,
            "key": None,
            "partitions": 1,
            "client": "kcat (librdkafka), 0.8.2 mode, acks=1, linger 5 ms, 10000-message batches",
            "baseline": f"in-process Core, {BASELINE_BATCH}-record batches, 1 MiB fetches",
            "produce_best_of": args.repeat,
            "fetch_median_of": args.fetch_runs,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m_at_start": round(load[0], 2),
        },
        "targets_records_per_s": TARGETS,
        "runs": {},
    }
    for backend in backends:
        listener, listener_cpu, fetch_runs = run_listener(backend, n, args.repeat, args.fetch_runs)
        baseline, baseline_cpu = trio.run(_baseline, backend, n, args.repeat, args.fetch_runs)
        run = {}
        for phase in ("produce", "fetch"):
            run[phase] = {
                "listener_records_per_s": round(listener[phase]),
                "baseline_records_per_s": round(baseline[phase]),
                "ratio": round(listener[phase] / baseline[phase], 3),
                "meets_target": listener[phase] >= TARGETS[phase],
                "listener_records_per_cpu_s": round(listener_cpu[phase]),
                "baseline_records_per_cpu_s": round(baseline_cpu[phase]),
                "cpu_ratio": round(listener_cpu[phase] / baseline_cpu[phase], 3),
            }
            r = run[phase]
            print(
                f"{backend:9} {phase:8} listener {listener[phase]:>9,.0f} rec/s   "
                f"baseline {baseline[phase]:>9,.0f} rec/s   ratio {r['ratio']:.2f}   "
                f"target {TARGETS[phase]:,} {'met' if r['meets_target'] else 'MISSED'}   "
                f"| per CPU-s: gateway {listener_cpu[phase]:>9,.0f}  "
                f"baseline {baseline_cpu[phase]:>9,.0f}  ratio {r['cpu_ratio']:.2f}"
            )
        run["fetch"]["listener_runs_records_per_s"] = fetch_runs
        print(f"{backend:9} fetch runs (records/s): {', '.join(f'{r:,}' for r in fetch_runs)}")
        results["runs"][backend] = run
    out = ROOT / "bench" / "results" / "kafka08.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
