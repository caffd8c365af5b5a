"""Benchmark: records/s through every pair of clients (producer listener -> consumer listener),
on the direct path and through each upstream chain, in one run.

Workload (printed too): for each of the 36 ordered pairs of kafka08, iggy, tank, liftbridge,
cursus and kafka, RECORDS records (key ``key-<i // 10>``, a value of ~30 bytes, two headers, a
millisecond timestamp) produced through the producer's listener in one request where the
protocol allows it (Kafka 0.8 one message set, TANK one bundle, Liftbridge one PublishAsync
call, Cursus one batch; Iggy one send per run of ten records sharing a key, its partitioning
key) and consumed from offset 0 through the consumer's listener, each side with the in-repo
client on that protocol's codec (``gateway.interop.drivers``), every field both ends carry
checked as in the test matrix. ``kafka`` is today's Kafka client on the Kafka listener:
confluent-kafka (librdkafka, its defaults: it batches on its own, record batches v2) in a worker
process, records crossing a pipe as JSON both ways, so its rates include that. records/s =
records / (produce time + consume time) of the pair, one connection per protocol (librdkafka: a
producer, and a consumer per read).

- ``direct``: gateway B (``python -m gateway serve``, the BACKEND backend, all five listeners).
- ``via <U>``: gateway A (all five listeners) on an upstream backend of protocol U pointing at B's
  U listener: every produce and consume of A goes to B over U. Its overhead is reported as the
  ratio direct records/s / chained records/s, per pair and over all pairs (total records over
  total time).

Run: ``python bench/matrix.py [--records N] [--backend memory|embedded] [--kafka-python PATH]``
(default: the confluent-kafka venv .ci/deps/kafka08.sh makes); results go to
``bench/results/matrix.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.interop.drivers import CLIENTS, PROTOCOLS, confluent_python  # noqa: E402
from gateway.interop.matrix import PairResult, client_addresses, run_matrix  # noqa: E402
from tests.support import GatewayProcess  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "matrix.json"
LISTENERS = {name: {} for name in PROTOCOLS}
KAFKA_VENV = ROOT / ".test-venvs" / "confluent-kafka" / "bin" / "python"


def rate(results: list[PairResult]) -> float:
    """Records over time across all pairs (failed pairs count as nothing moved)."""
    ok = [r for r in results if r.ok]
    seconds = sum(r.produce_s + r.consume_s for r in ok)
    return sum(r.records for r in ok) / seconds if seconds else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--backend", default="memory", choices=("memory", "embedded"))
    parser.add_argument("--kafka-python", help="a Python with confluent-kafka (the kafka client)")
    args = parser.parse_args()
    kafka_python = args.kafka_python or (str(KAFKA_VENV) if KAFKA_VENV.exists() else None)
    kafka_python = confluent_python(kafka_python)
    if kafka_python is None:
        sys.exit(
            "no confluent-kafka for the kafka client: .ci/deps/kafka08.sh or --kafka-python PATH"
        )
    options = {"kafka": {"python": kafka_python}}
    workload = {
        "pairs": len(CLIENTS) ** 2,
        "clients": list(CLIENTS),
        "records_per_pair": args.records,
        "record": "key key-<i//10>, ~30-byte value, 2 headers, ms timestamp",
        "backend_of_b": args.backend,
        "chains": [f"A -> upstream {u} -> B" for u in PROTOCOLS],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    print("workload:", json.dumps(workload))
    runs: dict[str, list[PairResult]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        with GatewayProcess(root / "b", listeners=LISTENERS, backend=args.backend) as b:
            direct = {n: b.address(n) for n in PROTOCOLS}
            runs["direct"] = trio.run(
                lambda: run_matrix(
                    client_addresses(direct), count=args.records, options=options, prefix="direct-"
                )
            )
            for u in PROTOCOLS:
                host, port = direct[u]
                backend = {"type": "upstream", "protocol": u, "address": f"{host}:{port}"}
                if u in ("tank", "kafka08"):
                    # brokers without groups: the Cursus consumer's group lives in gateway A
                    backend["local_groups"] = True
                with GatewayProcess(
                    root / u, listeners=LISTENERS, backends={"default": backend}
                ) as a:
                    chained = client_addresses({n: a.address(n) for n in PROTOCOLS})
                    runs[f"via {u}"] = trio.run(
                        lambda chained=chained, u=u: run_matrix(
                            chained,
                            count=args.records,
                            options=options,
                            through=u,
                            create_at=direct,
                            prefix=f"via-{u}-",
                        )
                    )
    columns = list(runs)
    by_pair = {
        name: {(r.producer, r.consumer): r for r in results} for name, results in runs.items()
    }
    header = ["pair", *columns]
    rows = []
    for p in CLIENTS:
        for c in CLIENTS:
            row = [f"{p} -> {c}"]
            base = by_pair["direct"][(p, c)].records_per_s
            for name in columns:
                r = by_pair[name][(p, c)]
                if not r.ok:
                    row.append("FAIL")
                elif name == "direct" or not base:
                    row.append(f"{r.records_per_s:,.0f}")
                else:
                    row.append(f"{r.records_per_s:,.0f} (x{base / r.records_per_s:.1f})")
            rows.append(row)
    base_all = rate(runs["direct"])
    total = ["all pairs"]
    for name in columns:
        value = rate(runs[name])
        ratio = "" if name == "direct" or not value else f" (x{base_all / value:.1f})"
        total.append(f"{value:,.0f}{ratio}")
    rows.append(total)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print("records/s per pair (x N: times slower than direct)")
    for row in [header, *rows]:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    failed = [
        f"{n}: {r.producer}->{r.consumer}: {r.error}" for n in runs for r in runs[n] if not r.ok
    ]
    for line in failed:
        print("FAILED", line)
    out: dict[str, Any] = {
        "workload": workload,
        "records_per_s": {
            name: {f"{r.producer}->{r.consumer}": round(r.records_per_s) for r in results}
            for name, results in runs.items()
        },
        "all_pairs_records_per_s": {name: round(rate(results)) for name, results in runs.items()},
        "overhead_vs_direct": {
            name: round(base_all / rate(results), 2)
            for name, results in runs.items()
            if name != "direct" and rate(results)
        },
        "failed": failed,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written to {RESULTS.relative_to(ROOT)}")
    if failed:
        sys.exit(f"{len(failed)} pair(s) failed")


if __name__ == "__main__":
    main()
