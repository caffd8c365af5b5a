"""Real backends: Kafka 0.8 clients through the gateway into NATS JetStream and into Kafka (Tansu),
beside the same through the gateway into the embedded log, and each system's own client direct.

Workload: N records of a 100-byte value and no key into one partition of a new topic; produce,
then consume the partition from the beginning. Records/s = N / wall time of the client process.
N is 100,000 (--records) for the NATS rows and 1,000,000 (--kafka-records) for the Kafka,
embedded and librdkafka rows: at 500k records/s a 100,000-record run lasts 0.2 s, so the fixed
costs (kcat start-up, metadata, topic creation in Tansu) and the machine's noise swung the
Kafka/embedded ratio by +-0.1 between runs; a 2 s run measures throughput. Rows, all measured in
this one run:

  gateway -> nats      kcat (librdkafka 2.0.2) in 0.8.2 mode -> kafka08 listener -> JetStream
  gateway -> kafka     the same -> Tansu 0.6 (Kafka protocol, record batches v2)
  gateway -> embedded  the same -> the embedded log (the Kafka-backend target's baseline)
  gateway -> kafka lz4 fetch only: confluent-kafka writes the records into Tansu straight, in
                       lz4-compressed batches (as modern producers do), kcat in 0.8 mode reads
                       them through the gateway; beside the fetch of "gateway -> kafka"
                       (uncompressed batches the gateway wrote)
  nats-py direct       nats-py 2.16: JetStream publish_async (pipelined acks), then a pull
                       consumer (ack none) fetching batches of 1000
  librdkafka direct    confluent-kafka 2.16.1 (librdkafka 2.16.0, modern protocol) -> Tansu
                       (kcat 1.7.1's librdkafka 2.0.2 cannot parse Tansu's ApiVersions v3 answer)

kcat: produce with acks=1, linger 5 ms, 10,000-message batches; consume from the beginning with
1 MiB fetches. Targets: gateway -> nats >= 1.0x nats-py direct; gateway -> kafka >= 0.7x
gateway -> embedded (both directions).

Each row is the best of --runs runs (default 3), the rows interleaved. Needs
.ci/deps/realbackends.sh (kcat, .test-venvs/realbackends). Usage:
python bench/backends.py [--records N] [--runs R] [--only kafka,embedded]. Also reports the CPU
seconds per 1000 records of the gateway process in each phase (and of Tansu behind it), which
move less than records/s on a shared machine. Writes bench/results/backends.json (full runs).
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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    check_fetched,
    cpu_seconds,
    gateway_config,
    gateway_process,
    kcat_08_commands,
)
from tests.backends.servers import NatsServer, TansuServer  # noqa: E402

VALUE_BYTES = 100
ROWS = ("nats", "nats-py", "kafka", "kafka-lz4", "librdkafka", "embedded")
VENV_PY = ROOT / ".test-venvs" / "realbackends" / "bin" / "python"


def gateway_run(
    backend: dict,
    n: int,
    tmp: Path,
    broker_pid: int | None = None,
    phases: tuple[str, ...] = ("produce", "fetch"),
) -> dict[str, float]:
    """Records/s of each phase, and the CPU seconds per 1000 records the gateway (and the
    broker behind it, when its pid is given) spent in it: ``<phase> gw cpu ms/krec``."""
    with gateway_process(gateway_config("kafka08", backend, tmp), tmp) as (proc, ports):
        records = tmp / "records.txt"
        records.write_bytes((b"v" * VALUE_BYTES + b"\n") * n)
        commands = kcat_08_commands("kcat", f"127.0.0.1:{ports['kafka08']}", "bench", records, n)
        out = {}
        for phase in phases:
            cpu0 = cpu_seconds(proc.pid)
            bcpu0 = cpu_seconds(broker_pid) if broker_pid else 0.0
            t0 = time.perf_counter()
            res = subprocess.run(commands[phase], capture_output=True, timeout=600)
            seconds = time.perf_counter() - t0
            out[f"{phase} gw cpu ms/krec"] = (cpu_seconds(proc.pid) - cpu0) * 1e6 / n
            if broker_pid:
                out[f"{phase} broker cpu ms/krec"] = (cpu_seconds(broker_pid) - bcpu0) * 1e6 / n
            if res.returncode != 0:
                sys.exit(f"kcat failed ({phase}): {res.stderr[-3000:]!r}")
            if phase == "fetch":
                check_fetched(res.stdout, n)
            out[phase] = n / seconds
        return out


NATS_PY = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig

    async def main(url, n, size):
        nc = await nats.connect(url)
        js = nc.jetstream(publish_async_max_pending=10000)
        await js.add_stream(StreamConfig(name="DIRECT", subjects=["direct"]))
        value = b"v" * size
        t = time.perf_counter()
        for _ in range(n):
            await js.publish_async("direct", value)
        await js.publish_async_completed()
        produce = n / (time.perf_counter() - t)
        t = time.perf_counter()
        sub = await js.pull_subscribe(
            "direct", durable=None, stream="DIRECT",
            config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL),
        )
        got = 0
        while got < n:
            got += len(await sub.fetch(batch=min(1000, n - got), timeout=10))
        fetch = n / (time.perf_counter() - t)
        await nc.close()
        print(json.dumps({"produce": produce, "fetch": fetch}))

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    """
)

LIBRDKAFKA = textwrap.dedent(
    """
    import json, sys, time
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    topic, codec, fetch_too = sys.argv[4], sys.argv[5], sys.argv[6] == "fetch"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                  "compression.type": codec, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 2000000})
    value = b"v" * size
    t = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    assert p.flush(60) == 0
    out = {"produce": n / (time.perf_counter() - t)}
    if fetch_too:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                      "enable.auto.commit": False, "fetch.message.max.bytes": 1048576})
        c.assign([TopicPartition(topic, 0, 0)])
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
# librdkafka direct: produce and fetch topic "direct", uncompressed; the lz4 row's writer:
# produce topic "bench" (the one the gateway rows read) in lz4 batches, no fetch
DIRECT_ARGS = ("direct", "none", "fetch")
LZ4_WRITER_ARGS = ("bench", "lz4", "produce")


def direct(script: str, target: str, n: int, *args: str) -> dict[str, float]:
    res = subprocess.run(
        [str(VENV_PY), "-c", script, target, str(n), str(VALUE_BYTES), *args],
        capture_output=True,
        timeout=900,
    )
    if res.returncode != 0:
        sys.exit(f"direct client failed: {res.stderr.decode()[-3000:]}")
    return json.loads(res.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="N of the NATS rows")
    parser.add_argument(
        "--kafka-records",
        type=int,
        default=1_000_000,
        help="N of the Kafka, embedded and librdkafka rows",
    )
    parser.add_argument("--runs", type=int, default=3, help="best of this many runs per row")
    parser.add_argument(
        "--only", default="", help=f"comma-separated rows to run (of {','.join(ROWS)}; default all)"
    )
    args = parser.parse_args()
    n, kn = args.records, args.kafka_records
    if not VENV_PY.exists():
        sys.exit("missing .test-venvs/realbackends: run .ci/deps/realbackends.sh first")
    print(__doc__.split("\n\n")[1].replace("\n", " "))
    load = os.getloadavg()
    print(
        f"N={n} (NATS rows), {kn} (Kafka, embedded, librdkafka) records of {VALUE_BYTES} B, "
        f"no key, 1 partition; {os.cpu_count()} CPUs, load "
        f"average {load[0]:.1f} at start (the brokers, the gateway and the clients share them)"
    )
    rows: dict[str, dict[str, float]] = {}
    only = {x.strip() for x in args.only.split(",") if x.strip()} or set(ROWS)
    unknown = only - set(ROWS)
    if unknown:
        sys.exit(f"--only: unknown rows {sorted(unknown)} (known: {', '.join(ROWS)})")

    def best(name: str, result: dict[str, float]) -> None:
        """Highest records/s, lowest CPU per record, of the runs so far."""
        row = rows.setdefault(name, {})
        for key, value in result.items():
            keep = max if key in ("produce", "fetch") else min
            row[key] = keep(row[key], value) if key in row else value

    for run in range(args.runs):  # interleaved, so a noisy moment hits every row alike
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            if "nats" in only:
                with NatsServer(tmp / "js") as nats:
                    (tmp / "gn").mkdir()
                    best(
                        "gateway -> nats",
                        gateway_run({"type": "nats", "url": nats.url}, n, tmp / "gn"),
                    )
            if "nats-py" in only:
                with NatsServer(tmp / "js2") as nats:
                    best("nats-py direct", direct(NATS_PY, nats.url, n))
            if "kafka" in only:
                with TansuServer() as tansu:
                    (tmp / "gk").mkdir()
                    assert tansu.proc is not None
                    backend = {"type": "kafka", "bootstrap": tansu.bootstrap}
                    best("gateway -> kafka", gateway_run(backend, kn, tmp / "gk", tansu.proc.pid))
            if "kafka-lz4" in only:
                with TansuServer() as tansu:
                    (tmp / "gz").mkdir()
                    assert tansu.proc is not None
                    direct(LIBRDKAFKA, tansu.bootstrap, kn, *LZ4_WRITER_ARGS)  # straight in
                    backend = {"type": "kafka", "bootstrap": tansu.bootstrap}
                    result = gateway_run(backend, kn, tmp / "gz", tansu.proc.pid, ("fetch",))
                    best("gateway -> kafka lz4", result)
            if "librdkafka" in only:
                with TansuServer() as tansu:
                    best("librdkafka direct", direct(LIBRDKAFKA, tansu.bootstrap, kn, *DIRECT_ARGS))
            if "embedded" in only:
                (tmp / "ge").mkdir()
                best("gateway -> embedded", gateway_run({"type": "embedded"}, kn, tmp / "ge"))
        print(f"run {run + 1}/{args.runs} done", flush=True)

    print(f"best of {args.runs} runs (CPU: gateway process, and Tansu for gateway -> kafka)")
    print(
        f"{'path':<22}{'produce rec/s':>15}{'fetch rec/s':>14}"
        f"{'produce CPU ms/krec':>21}{'fetch CPU ms/krec':>19}"
    )

    def cpu(r: dict[str, float], phase: str) -> str:
        if f"{phase} gw cpu ms/krec" not in r:
            return ""
        text = f"{r[f'{phase} gw cpu ms/krec']:.2f}"
        if f"{phase} broker cpu ms/krec" in r:
            text += f" +{r[f'{phase} broker cpu ms/krec']:.2f}"
        return text

    for name, r in rows.items():
        produced = f"{r['produce']:>15,.0f}" if "produce" in r else f"{'-':>15}"
        print(
            f"{name:<22}{produced}{r['fetch']:>14,.0f}{cpu(r, 'produce'):>21}{cpu(r, 'fetch'):>19}"
        )
    if "gateway -> kafka lz4" in rows and "gateway -> kafka" in rows:
        lz4_ratio = rows["gateway -> kafka lz4"]["fetch"] / rows["gateway -> kafka"]["fetch"]
        print(f"fetch    lz4 batches (confluent-kafka) / uncompressed (gateway) = {lz4_ratio:.2f}")
    checks: dict[str, dict[str, float | bool]] = {}
    for phase in ("produce", "fetch"):
        check: dict[str, float | bool] = checks.setdefault(phase, {})
        if "gateway -> nats" in rows and "nats-py direct" in rows:
            nats_ratio = rows["gateway -> nats"][phase] / rows["nats-py direct"][phase]
            check["nats_vs_nats_py"] = round(nats_ratio, 3)
            check["nats_target_1.0_met"] = nats_ratio >= 1.0
            print(
                f"{phase:8} gateway->nats / nats-py direct = {nats_ratio:.2f} "
                f"(target 1.0: {'met' if nats_ratio >= 1.0 else 'MISSED'})"
            )
        if "gateway -> kafka" in rows and "gateway -> embedded" in rows:
            kafka_ratio = rows["gateway -> kafka"][phase] / rows["gateway -> embedded"][phase]
            check["kafka_vs_embedded"] = round(kafka_ratio, 3)
            check["kafka_target_0.7_met"] = kafka_ratio >= 0.7
            print(
                f"{phase:8} gateway->kafka / gateway->embedded = {kafka_ratio:.2f} "
                f"(target 0.7: {'met' if kafka_ratio >= 0.7 else 'MISSED'})"
            )
    if only != set(ROWS):
        print("a partial run (--only): bench/results/backends.json not written")
        return
    out = ROOT / "bench" / "results" / "backends.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "workload": {
                    "records": n,
                    "kafka_records": kn,
                    "value_bytes": VALUE_BYTES,
                    "partitions": 1,
                    "best_of_runs": args.runs,
                },
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "load_average_1m_at_start": round(load[0], 2),
                },
                "records_per_s": {
                    k: {p: round(r[p]) for p in ("produce", "fetch") if p in r}
                    for k, r in rows.items()
                },
                "cpu_ms_per_1000_records": {
                    k: {p: round(v, 3) for p, v in r.items() if "cpu" in p}
                    for k, r in rows.items()
                    if any("cpu" in p for p in r)
                },
                "targets": checks,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
