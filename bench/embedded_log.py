"""Benchmark: appends/s and reads/s of the embedded log against the memory backend (baseline).

Workload (printed too): records with a 100-byte value, an 8-byte key, no headers, one timestamp
each; batches of 1 and of 1000 records, handed to ``append`` as canonical blocks encoded before
the clock starts (what a session passes through when its wire format is canonical; encoding
Record objects is the codec's cost, measured separately on the last line). One partition. Appends
are timed up to and including a final ``flush()``. Reads go sequentially from offset 0 to the end
with ``max_bytes`` = 1 MiB per call and count the records handed out as batches (no per-record
decoding: that is the consumer's codec). The embedded log runs with its default fsync policy
(every 50 ms) on a fresh directory on local disk.

Run: ``python bench/embedded_log.py``; results go to ``bench/results/embedded_log.json``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.backends.base import Backend  # noqa: E402
from gateway.backends.embedded import EmbeddedBackend, EmbeddedConfig  # noqa: E402
from gateway.backends.memory import MemoryBackend  # noqa: E402
from gateway.canonical import CANONICAL  # noqa: E402
from gateway.model import Record, RecordBatch  # noqa: E402
from gateway.observability import setup_logging  # noqa: E402

VALUE_BYTES = 100
FSYNC = 50
RESULTS = Path(__file__).resolve().parent / "results" / "embedded_log.json"
# total records per run, by batch size
WORKLOADS = {1: 50_000, 1000: 1_000_000}
REPEATS = 3  # alternating memory/embedded runs; the best of each is reported (shared machine)


def best(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: max(r[k] for r in runs) for k in runs[0]}


def make_batches(batch_size: int, total: int) -> list[RecordBatch]:
    value = b"v" * VALUE_BYTES
    ts = 1_700_000_000_000_000
    out = []
    for b in range(total // batch_size):
        recs = [
            Record(b"key-%04d" % (i % 10_000), value, (), ts + i)
            for i in range(b * batch_size, (b + 1) * batch_size)
        ]
        block = CANONICAL.encode(recs)
        out.append(
            RecordBatch(
                encoded=block, codec=CANONICAL, count=batch_size, max_timestamp_us=recs[-1][3]
            )
        )
    return out


async def run_one(backend: Backend, batches: list[RecordBatch]) -> dict[str, float]:
    total = sum(b.count for b in batches)
    async with trio.open_nursery() as nursery:
        await backend.open(nursery)
        await backend.create_topic("bench", 1)
        start = time.perf_counter()
        for batch in batches:
            await backend.append("bench", 0, batch)
        await backend.flush()
        append_s = time.perf_counter() - start

        start = time.perf_counter()
        offset = got = 0
        while offset < total:
            for b in await backend.read("bench", 0, offset, 1_000_000, 1 << 20):
                got += b.count
                offset = b.last_offset + 1
        read_s = time.perf_counter() - start
        assert got == total, (got, total)
        await backend.close()
        nursery.cancel_scope.cancel()
    return {"appends_per_s": total / append_s, "reads_per_s": total / read_s}


async def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="embedded-bench-", dir=Path(__file__).parent))
    results: dict[str, Any] = {
        "workload": {
            "value_bytes": VALUE_BYTES,
            "key_bytes": 8,
            "headers": 0,
            "partitions": 1,
            "records_per_run": {str(k): v for k, v in WORKLOADS.items()},
            "input": "pre-encoded canonical blocks",
            "read_max_bytes": 1 << 20,
            "embedded_fsync": f"every {FSYNC} ms (default)",
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": os.getloadavg(),
        },
        "repeats": REPEATS,
        "runs": {},
    }
    print(__doc__.split("Run:")[0].strip())
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"\nmachine: {os.cpu_count()} CPUs, Python {platform.python_version()}, load average "
        f"{load}; best of {REPEATS} alternating runs per backend\n"
    )
    header = f"{'batch':>6} {'backend':<22} {'appends/s':>12} {'reads/s':>12}"
    print(header)
    print("-" * len(header))
    try:
        for batch_size, total in WORKLOADS.items():
            batches = make_batches(batch_size, total)
            mem_runs, emb_runs = [], []
            for rep in range(REPEATS):
                mem_runs.append(await run_one(MemoryBackend("memory"), batches))
                data = workdir / f"b{batch_size}-{rep}"
                config = EmbeddedConfig(fsync=FSYNC)
                emb_runs.append(await run_one(EmbeddedBackend("embedded", config, data), batches))
                shutil.rmtree(data, ignore_errors=True)
            mem, emb = best(mem_runs), best(emb_runs)
            ratios = {k: emb[k] / mem[k] for k in mem}
            results["runs"][str(batch_size)] = {
                "memory": mem,
                "embedded": emb,
                "embedded_over_memory": ratios,
            }
            for name, r in (("memory (baseline)", mem), (f"embedded fsync={FSYNC}ms", emb)):
                print(
                    f"{batch_size:>6} {name:<22} {r['appends_per_s']:>12,.0f} "
                    f"{r['reads_per_s']:>12,.0f}"
                )
            print(
                f"{batch_size:>6} {'embedded / memory':<22} {ratios['appends_per_s']:>12.2f} "
                f"{ratios['reads_per_s']:>12.2f}"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    recs = [Record(b"key-0001", b"v" * VALUE_BYTES, (), 1) for _ in range(1000)]
    start = time.perf_counter()
    for _ in range(200):
        CANONICAL.encode(recs)
    encode_rate = 200_000 / (time.perf_counter() - start)
    results["canonical_encode_records_per_s"] = encode_rate
    print(f"\n(canonical encoding of Record objects, not included above: {encode_rate:,.0f}/s)")

    big = results["runs"]["1000"]["embedded"]
    targets = {"appends_per_s": 500_000, "reads_per_s": 1_000_000}
    results["targets_batch_1000"] = {
        k: {"target": v, "met": big[k] >= v} for k, v in targets.items()
    }
    print(
        "targets (batches of 1000, embedded): "
        + ", ".join(
            f"{k} >= {v:,}: {'met' if big[k] >= v else 'NOT met'}" for k, v in targets.items()
        )
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    setup_logging("console", "warning")
    trio.run(main)
