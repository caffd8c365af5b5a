"""Benchmark: export a topic to Parquet with Spark local[1] and local[2], beside a plain
single-process Python read of the same topic through the same endpoint (the admin data API).

    .venv/bin/python bench/pipeline.py [--records 1000000] [--partitions 4] [--value-bytes 100]

Workload: one gateway (embedded backend, fsync never) on loopback; a topic of --partitions
partitions filled with --records records (16-byte keys, --value-bytes values, one header of 8
bytes on every other record) in canonical batches of 5,000. Then, each measured on the same
topic in this run:
- baseline: one Python process reading every partition in turn with GatewayClient.fetch
  (binary format, 10,000 records per request, building one record tuple per record);
- for reference: the same read over the JSON API (on the first 100,000 records);
- Spark export: ``gateway pipeline``'s export job (read with the ``gateway`` source, write
  Parquet) in a fresh process per master (local[1], local[2]), both kept running, each after two
  warm-up exports of the whole topic (the JIT); then --pairs pairs of timed exports, one per
  master, alternating which goes first, one export at a time. Rates are each master's median
  wall time (excluding the JVM start); local[2] / local[1] is the median of the pairs' ratios,
  so that the host's load, which drifts over minutes on a shared machine, weighs on both sides
  of each ratio alike. The session is ``gateway.pipeline.spark.spark_session``'s (ParallelGC,
  C2 only) and the export writes key and value without a Parquet dictionary
  (``jobs.EXPORT_PARQUET_OPTIONS``), as the CLI's export does.
CPU seconds are printed beside each figure (reader, gateway, Spark's JVM and Python workers;
for Spark the mean of the timed exports, and the gateway's CPU in the first warm-up export
apart: the session's first read of the topic): on a busy machine they tell more than wall time.
Targets: local[2] >= 1.3x local[1]; the local[2] export >= the baseline.
Results are printed and appended to bench/results/pipeline.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import cpu_seconds  # noqa: E402
from gateway.model import Record  # noqa: E402
from gateway.pipeline.client import GatewayClient  # noqa: E402
from tests.support import GatewayProcess  # noqa: E402

TOPIC = "bench-pipeline"
WARMUPS = 2
CHILD_TIMEOUT_S = 1800  # for one RESULT of a child (its start and warm-ups, or one export)


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    parents: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            parents.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(parents.get(p, []))
    return out


def fill(client: GatewayClient, records: int, partitions: int, value_bytes: int) -> float:
    client.create_topic(TOPIC, partitions)
    value = b"v" * value_bytes
    t0 = time.perf_counter()
    batch = 5000
    per = records // partitions
    for p in range(partitions):
        for start in range(0, per, batch):
            n = min(batch, per - start)
            recs = [
                Record(
                    b"key-%012d" % (start + i),
                    value,
                    (("trace", b"abcdefgh"),) if i % 2 else (),
                    1_767_225_600_000_000 + start + i,
                )
                for i in range(n)
            ]
            client.produce_batch(TOPIC, recs, p)
    return time.perf_counter() - t0


def plain_read(bootstrap: str, wire_format: str, limit: int | None = None) -> tuple[int, float]:
    n = 0
    t0 = time.perf_counter()
    with GatewayClient(bootstrap, wire_format=wire_format) as client:
        for po in client.offsets(TOPIC):
            offset = po.log_start_offset
            end = po.high_watermark if limit is None else min(po.high_watermark, limit // 4)
            while offset < end:
                recs = client.fetch(TOPIC, po.partition, offset, min(10_000, end - offset)).records
                n += len(recs)
                offset = recs[-1].offset + 1
    return n, time.perf_counter() - t0


def _is_java(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"java" in f.read().split(b"\0")[0]
    except FileNotFoundError:
        return False


def jvm_threads_cpu(pids: list[int]) -> dict[str, float]:
    """CPU seconds of the JVMs among ``pids`` by thread kind: Spark's task threads, the JIT
    compiler threads (C1 and C2), the collector's threads, everything else."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"tasks": 0.0, "jit": 0.0, "gc": 0.0, "other": 0.0}
    for pid in pids:
        if not _is_java(pid):
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except (FileNotFoundError, ProcessLookupError):
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat.rsplit(")", 1)[1].split()
            kind = (
                "tasks"
                if name.startswith("Executor task")
                else "jit"
                if "CompilerThre" in name
                else "gc"
                if name.startswith("GC Thread")
                else "other"
            )
            out[kind] += (int(fields[11]) + int(fields[12])) / tick
    return out


def spark_export_child(master: str, bootstrap: str, out: str, gateway_pid: str) -> None:
    """Run in a fresh process: one Spark session with ``master``, ``WARMUPS`` untimed exports of
    the whole topic, then one timed export per ``export`` line on stdin (``RESULT`` lines on
    stdout), until stdin ends."""
    from gateway.pipeline.jobs import export_topic
    from gateway.pipeline.spark import spark_session

    def say(what: dict) -> None:
        print("RESULT " + json.dumps(what), flush=True)

    t0 = time.perf_counter()
    spark = spark_session(master, Path(out) / "scratch", driver_memory="2g")
    startup = time.perf_counter() - t0
    # Warm-up exports of the whole topic: the JVM's JIT compiles the Arrow-to-row and Parquet
    # paths over the first million or two rows (C2 compile threads took 2-3 CPU seconds during
    # the first 1M-record export, ~1 s later on), and those compile threads compete with the
    # tasks; a shorter warm-up measured mostly the JIT, and local[2] (two tasks and C2 on two
    # CPUs) more so than local[1].
    # The gateway's CPU in the first export (the session's first read of the topic) is printed
    # apart: a gateway that did per-block work on a first read only (a cache) shows it there.
    first_gw = 0.0
    for i in range(WARMUPS):
        gw_before = cpu_seconds(int(gateway_pid))
        export_topic(spark, bootstrap, TOPIC, str(Path(out) / f"warm{i}"))
        if i == 0:
            first_gw = cpu_seconds(int(gateway_pid)) - gw_before
        shutil.rmtree(Path(out) / f"warm{i}", ignore_errors=True)
    say({"startup": startup, "gateway_cpu_first": first_gw})
    for i, line in enumerate(sys.stdin):
        if line.strip() != "export":
            break
        procs = [p for p in descendants(os.getpid()) if p != os.getpid()]
        before = {p: cpu_seconds(p) for p in procs}
        gw_before = cpu_seconds(int(gateway_pid))
        threads_before = jvm_threads_cpu(procs)
        t0 = time.perf_counter()
        n = export_topic(spark, bootstrap, TOPIC, str(Path(out) / f"export{i}.parquet"))
        seconds = time.perf_counter() - t0
        procs = [p for p in descendants(os.getpid()) if p != os.getpid()]
        used = {p: cpu_seconds(p) - before.get(p, 0.0) for p in procs}
        threads = {k: v - threads_before.get(k, 0.0) for k, v in jvm_threads_cpu(procs).items()}
        jvm = sum(v for p, v in used.items() if _is_java(p))
        # Task threads come and go (a pooled thread that ends takes its CPU out of /proc with
        # it); the JIT, collector and other threads live as long as the JVM, so the tasks'
        # share is the JVM's whole CPU less theirs.
        threads["tasks"] = jvm - threads["jit"] - threads["gc"] - threads["other"]
        shutil.rmtree(Path(out) / f"export{i}.parquet", ignore_errors=True)
        say(
            {
                "records": n,
                "seconds": seconds,
                "spark_cpu": sum(used.values()),
                "jvm_cpu": jvm,
                "gateway_cpu": cpu_seconds(int(gateway_pid)) - gw_before,
                **{f"jvm_{k}": v for k, v in threads.items()},
            }
        )
    spark.stop()


class SparkExporter:
    """A ``spark_export_child`` process kept alive, so that exports of the two masters can
    alternate (see the module docstring: pairs measured seconds apart, not minutes)."""

    def __init__(self, master: str, bootstrap: str, scratch: Path, gateway_pid: int) -> None:
        self.master = master
        self.out = scratch / master.replace("[", "-").replace("]", "")
        self.out.mkdir(parents=True)
        self.stderr = open(self.out / "stderr.log", "w+")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                master,
                bootstrap,
                str(self.out),
                str(gateway_pid),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.runs: list[dict] = []
        self.ready = self._result()

    def _result(self) -> dict:
        """The child's next RESULT line (its JVM start and warm-ups, or one export): within
        ``CHILD_TIMEOUT_S``, or the bench ends (SIGALRM) and main's ``finally`` stops both."""
        assert self.proc.stdout is not None

        def expired(signum: int, frame: object) -> None:
            raise TimeoutError(f"spark export with {self.master}: no result in {CHILD_TIMEOUT_S} s")

        signal.signal(signal.SIGALRM, expired)
        signal.alarm(CHILD_TIMEOUT_S)
        try:
            for line in self.proc.stdout:
                if line.startswith("RESULT "):
                    return json.loads(line[len("RESULT ") :])
        finally:
            signal.alarm(0)
        self.stderr.seek(0)
        raise SystemExit(f"spark export with {self.master} failed:\n{self.stderr.read()[-4000:]}")

    def export(self) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write("export\n")
        self.proc.stdin.flush()
        r = self._result()
        self.runs.append(r)
        return r

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()
        shutil.rmtree(self.out, ignore_errors=True)

    def cpu_seconds(self) -> float:
        """CPU seconds of the session's processes so far (its Python, JVM and workers)."""
        return sum(cpu_seconds(p) for p in descendants(self.proc.pid))

    def summary(self) -> dict:
        """The median run's records and seconds, and the mean CPU of the runs."""
        runs = self.runs
        median = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
        mean = {k: sum(r[k] for r in runs) / len(runs) for k in runs[0] if k != "records"}
        return {
            "records": median["records"],
            "seconds": median["seconds"],
            "all_seconds": [round(r["seconds"], 2) for r in runs],
            **{k: self.ready[k] for k in ("startup", "gateway_cpu_first")},
            **{k: mean[k] for k in ("spark_cpu", "jvm_cpu", "gateway_cpu")},
            "jvm_threads": {k: round(mean[f"jvm_{k}"], 2) for k in ("tasks", "jit", "gc", "other")},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=5, help="timed exports per master")
    parser.add_argument("--child", nargs=4, metavar=("MASTER", "BOOTSTRAP", "OUT", "GW_PID"))
    args = parser.parse_args()
    if args.child:
        spark_export_child(*args.child)
        return

    print(
        f"workload: {args.records} records in {args.partitions} partitions "
        f"(16-byte keys, {args.value_bytes}-byte values, a header on every other record), "
        f"embedded backend, admin data API on loopback; {os.cpu_count()} CPU(s)"
    )
    scratch = Path(tempfile.mkdtemp(prefix="gw-bench-pipeline-"))
    try:
        backends = {"default": {"type": "embedded", "fsync": "never"}}
        with GatewayProcess(scratch / "gw", backends=backends) as gw:
            host, port = gw.address("admin")
            bootstrap = f"{host}:{port}"
            with GatewayClient(bootstrap) as client:
                dt = fill(client, args.records, args.partitions, args.value_bytes)
                total = sum(o.high_watermark for o in client.offsets(TOPIC))
            print(f"fill (binary produce):              {total / dt:>10,.0f} records/s")
            n, dt = plain_read(bootstrap, "json", limit=100_000)
            print(f"plain read, JSON API (first {n}): {n / dt:>10,.0f} records/s")
            assert gw.proc is not None
            gw_pid = gw.proc.pid
            own, gw0 = time.process_time(), cpu_seconds(gw_pid)
            n, dt = plain_read(bootstrap, "binary")
            own, gw_cpu = time.process_time() - own, cpu_seconds(gw_pid) - gw0
            baseline = n / dt
            assert n == total, (n, total)
            print(
                f"plain read, binary (baseline):      {baseline:>10,.0f} records/s ({dt:.1f} s; "
                f"CPU: reader {own:.1f} s, gateway {gw_cpu:.2f} s: its first binary read)"
            )
            masters = ("local[1]", "local[2]")
            exporters: dict[str, SparkExporter] = {}
            pair_ratios: list[float] = []
            background: list[float] = []
            try:
                # Started one after the other: a JVM start and its warm-up exports are not
                # timed, and nothing else runs beside them.
                for master in masters:
                    exporters[master] = SparkExporter(master, bootstrap, scratch, gw_pid)
                for i in range(args.pairs):
                    order = masters if i % 2 == 0 else masters[::-1]
                    secs = {}
                    for m in order:
                        # The other session should be idle meanwhile: its CPU during this
                        # export is recorded (JIT or GC catching up there would slow this one).
                        other = exporters[masters[1 - masters.index(m)]]
                        before = other.cpu_seconds()
                        secs[m] = exporters[m].export()["seconds"]
                        background.append(other.cpu_seconds() - before)
                    pair_ratios.append(secs["local[1]"] / secs["local[2]"])
            finally:
                for e in exporters.values():
                    e.close()
            rates = {}
            cpu: dict[str, dict[str, float]] = {}
            for master in masters:
                r = exporters[master].summary()
                assert all(run["records"] == total for run in exporters[master].runs), r
                rates[master] = r["records"] / r["seconds"]
                cpu[master] = {
                    "jvm": round(r["jvm_cpu"], 2),
                    "python": round(r["spark_cpu"] - r["jvm_cpu"], 2),
                    "gateway": round(r["gateway_cpu"], 2),
                    "gateway_first_export": round(r["gateway_cpu_first"], 2),
                    "jvm_threads": r["jvm_threads"],
                }
                print(
                    f"spark export {master} to Parquet:    {rates[master]:>10,.0f} records/s "
                    f"(median of {r['all_seconds']} s; JVM start {r['startup']:.1f} s; CPU: JVM "
                    f"{r['jvm_cpu']:.1f} s, Python workers {r['spark_cpu'] - r['jvm_cpu']:.1f} s, "
                    f"gateway {r['gateway_cpu']:.2f} s, in the first warm-up export "
                    f"{r['gateway_cpu_first']:.2f} s; JVM threads: "
                    + ", ".join(f"{k} {v:.1f} s" for k, v in r["jvm_threads"].items())
                    + ")"
                )
        spread = sorted(pair_ratios)[len(pair_ratios) // 2]
        print(
            "local[1] seconds / local[2] seconds, per pair: "
            + ", ".join(f"{r:.2f}" for r in pair_ratios)
            + f"; the idle session's CPU during each export: at most {max(background):.2f} s"
        )
        keep_up = rates["local[2]"] / baseline
        print(
            f"local[2] / local[1] = {spread:.2f}, the median pair (target >= 1.3: "
            f"{'met' if spread >= 1.3 else 'NOT met'}); "
            f"local[2] / baseline = {keep_up:.2f} (target >= 1.0: "
            f"{'met' if keep_up >= 1.0 else 'NOT met'})"
        )
        results = ROOT / "bench" / "results"
        results.mkdir(parents=True, exist_ok=True)
        with open(results / "pipeline.jsonl", "a") as f:
            f.write(
                json.dumps(
                    {
                        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                        "records": total,
                        "partitions": args.partitions,
                        "value_bytes": args.value_bytes,
                        "baseline": round(baseline),
                        "local1": round(rates["local[1]"]),
                        "local2": round(rates["local[2]"]),
                        "pair_ratios": [round(r, 3) for r in pair_ratios],
                        "idle_session_cpu_max": round(max(background), 2),
                        "baseline_reader_cpu": round(own, 2),
                        "baseline_gateway_cpu": round(gw_cpu, 2),
                        "local1_cpu": cpu["local[1]"],
                        "local2_cpu": cpu["local[2]"],
                        "load": os.getloadavg()[0],
                    }
                )
                + "\n"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
