"""Today's Kafka protocol: confluent-kafka through the gateway's Kafka listener (embedded log)
beside the same client against Tansu directly, in the same run.

Workload: N records of a 100-byte value and no key into partition 0 of a new topic, with
librdkafka's default batching (acks all, linger 5 ms, up to 10,000 messages or 1 MB per batch,
no compression); then a consumer assign()ed to the partition reads all N from the beginning.
Records/s = N / wall time of that phase in the client process. Rows:

  gateway   confluent-kafka (librdkafka 2.16, today's APIs: Produce v9, Fetch v13) -> the
            gateway's Kafka listener -> the embedded log
  tansu     the same client straight to Tansu (a Kafka broker in Rust, its own storage)

Targets: gateway >= 0.45x tansu for produce, >= 0.5x for fetch. Each row is the best of --runs
runs, interleaved. Needs .test-venvs/confluent-kafka and the Tansu binary (tests/backends).
Usage: python bench/kafka.py [--records N] [--runs R]. Writes bench/results/kafka.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import cpu_seconds, gateway_config, gateway_process  # noqa: E402
from tests.backends.servers import TansuServer  # noqa: E402

VALUE_BYTES = 100
TARGETS = {"produce": 0.45, "fetch": 0.5}
VENV_PY = ROOT / ".test-venvs" / "confluent-kafka" / "bin" / "python"

CLIENT = textwrap.dedent(
    """
    import json, sys, time
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap, n, size, topic = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    p = Producer({"bootstrap.servers": bootstrap})
    value = b"v" * size
    p.produce(topic, value, partition=0)  # creates the topic, connects: not timed
    assert p.flush(60) == 0
    t = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.005)
        p.poll(0)
    assert p.flush(120) == 0
    out = {"produce": n / (time.perf_counter() - t)}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 1)])
    t = time.perf_counter()
    got = 0
    while got < n:
        for m in c.consume(10000, 5):
            if m.error() is None:
                got += 1
    out["fetch"] = n / (time.perf_counter() - t)
    c.close()
    print(json.dumps(out))
    """
)


def run_client(bootstrap: str, n: int, topic: str) -> dict[str, float]:
    res = subprocess.run(
        [str(VENV_PY), "-c", CLIENT, bootstrap, str(n), str(VALUE_BYTES), topic],
        capture_output=True,
        timeout=900,
    )
    if res.returncode != 0:
        sys.exit(f"confluent-kafka client failed: {res.stderr.decode()[-3000:]}")
    return json.loads(res.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    n = args.records
    print(__doc__.split("\n\n")[1].replace("\n", " "))
    load = os.getloadavg()
    print(f"N={n} records of {VALUE_BYTES} B; {os.cpu_count()} CPUs, load {load[0]:.1f}")
    best: dict[str, dict[str, float]] = {"gateway": {}, "tansu": {}}
    cpu: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp_name, TansuServer() as tansu:
        tmp = Path(tmp_name)
        config = gateway_config("kafka08", {"type": "embedded"}, tmp)
        with gateway_process(config, tmp) as (proc, ports):
            gateway = f"127.0.0.1:{ports['kafka08']}"
            for run in range(args.runs):
                for row, bootstrap in (("gateway", gateway), ("tansu", tansu.bootstrap)):
                    before = cpu_seconds(proc.pid)
                    got = run_client(bootstrap, n, f"bench-{run}")
                    if row == "gateway":
                        cpu[f"run{run}"] = cpu_seconds(proc.pid) - before
                    for phase, rate in got.items():
                        best[row][phase] = max(best[row].get(phase, 0.0), rate)
    results: dict = {
        "workload": {
            "records": n,
            "value_bytes": VALUE_BYTES,
            "client": "confluent-kafka (librdkafka 2.16) defaults; assign() consumer",
            "best_of": args.runs,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m_at_start": round(load[0], 2),
        },
        "targets_ratio": TARGETS,
        "gateway_cpu_s_per_run": {k: round(v, 2) for k, v in cpu.items()},
        "phases": {},
    }
    for phase in ("produce", "fetch"):
        g, t = best["gateway"][phase], best["tansu"][phase]
        ratio = g / t
        results["phases"][phase] = {
            "gateway_records_per_s": round(g),
            "tansu_records_per_s": round(t),
            "ratio": round(ratio, 3),
            "meets_target": ratio >= TARGETS[phase],
        }
        print(
            f"{phase:8} gateway {g:>10,.0f} rec/s   tansu {t:>10,.0f} rec/s   ratio {ratio:.2f}"
            f"   target {TARGETS[phase]}x {'met' if ratio >= TARGETS[phase] else 'MISSED'}"
        )
    out = ROOT / "bench" / "results" / "kafka.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
