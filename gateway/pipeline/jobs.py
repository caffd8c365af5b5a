"""Jobs on the ``gateway`` data source: export, import, copy, stats.

Each takes a Spark session (``gateway.pipeline.spark.spark_session``) and plain arguments, so
the CLI, the tests and the benchmark run the same code. Progress goes to ``progress`` (stderr by
default) from a small thread that watches Spark's status tracker.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gateway.pipeline.client import GatewayClient

WRITE_COLUMNS = ("key", "value", "headers", "timestamp", "partition")

# Parquet writer options of an export. Record keys and values are mostly distinct, so a
# dictionary for them is work thrown away: Parquet hashes and compares every value into the
# dictionary until it passes its page size (1 MiB) and falls back to plain pages, and keeps
# hashing the whole file when values do repeat. Without it the export's JVM needed ~1 CPU-second
# less per 1M records (with ParallelGC, bench/pipeline.py); the other columns keep theirs (topic,
# partition, header names compress to almost nothing with it). Files of mostly repeated values
# get larger (the bench's identical 100-byte values: 18 MB instead of 13 per 1M records).
EXPORT_PARQUET_OPTIONS = {
    "parquet.enable.dictionary#key": "false",
    "parquet.enable.dictionary#value": "false",
}


def job_fraction(tracker: Any) -> tuple[float, str] | None:
    """(fraction of the tasks done, ``stage N: done/total tasks``) over the stages of the jobs
    Spark is running now; None between jobs."""
    done = total = 0
    shown = []
    for job_id in tracker.getActiveJobsIds():
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            done += stage.numCompletedTasks
            total += stage.numTasks
            if stage.numActiveTasks or 0 < stage.numCompletedTasks < stage.numTasks:
                shown.append(f"stage {stage.stageId}: {stage.numCompletedTasks}/{stage.numTasks}")
    if total == 0:
        return None
    return done / total, ", ".join(shown)


@contextmanager
def progress(
    spark: Any,
    label: str,
    out: TextIO | None = None,
    every: float = 1.0,
    total: int | None = None,
    started: float | None = None,
) -> Iterator[None]:
    """Print progress lines while Spark jobs run: records done of ``total`` (estimated from the
    tasks done, which cover equal offset ranges), rate and time left; without a total, the
    share of tasks done and the time left. ``started`` (``time.monotonic()``): when the command
    began, so the time includes Spark's start. A new line only when the text changes."""
    from gateway.cli_progress import ProgressLine, duration, progress_text

    stream = out if out is not None else sys.stderr
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    line_out = ProgressLine(stream, every=0.0)
    if started is not None:
        line_out.started = started
    job_started: float | None = None

    def watch() -> None:
        nonlocal job_started
        last = None
        while not stop.wait(every):
            try:
                state = job_fraction(tracker)
            except Exception:  # noqa: BLE001 - the JVM is shutting down: no line this time
                continue
            if state is None:
                continue
            fraction, stages = state
            now = time.monotonic()
            job_started = job_started if job_started is not None else now - every
            run = now - job_started
            tasks = f"tasks: {stages}" if stages else ""
            if total:
                done = int(total * fraction)
                text = progress_text(label, done, total, line_out.elapsed(), tasks, run)
            else:
                left = run * (1 - fraction) / fraction if fraction > 0 else None
                text = f"{label}: {100 * fraction:.0f}% of the tasks done ({stages or 'waiting'})"
                if left is not None:
                    text += f", about {duration(left)} left"
                text += f", {duration(line_out.elapsed())} so far"
            key = (int(100 * fraction), stages)
            if key != last:
                line_out.show(text, force=True)
                last = key

    thread = threading.Thread(target=watch, name="pipeline-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        line_out.end()


def read_topic(spark: Any, bootstrap: str, topic: str, **options: Any) -> Any:
    reader = spark.read.format("gateway").option("bootstrap", bootstrap).option("topic", topic)
    for k, v in options.items():
        if v is not None:
            reader = reader.option(k, str(v))
    return reader.load()


@dataclass
class WriteReport:
    status: str
    records: int
    bytes: int
    tasks: int
    seconds: float


def write_topic(
    df: Any,
    bootstrap: str,
    topic: str,
    keep_partitions: bool = True,
    partitions: int | None = None,
) -> WriteReport:
    """Append a DataFrame's rows to ``topic``. With ``keep_partitions`` and a ``partition``
    column, rows keep their partition and, within it, their ``offset`` order (rows of one topic
    partition go to one Spark task, sorted); otherwise records go by key hash. The topic is
    created with ``partitions`` (default: enough for the partition column, else the gateway's
    default) when it does not exist."""
    from pyspark.sql import functions as F

    cols = [c for c in WRITE_COLUMNS if c in df.columns]
    if "value" not in cols:
        raise ValueError("the data needs a 'value' column")
    if not keep_partitions and "partition" in cols:
        cols.remove("partition")
    with GatewayClient(bootstrap) as client:
        existing = client.topics()
        if topic not in existing:
            want = partitions
            if want is None and "partition" in cols:
                top = df.agg(F.max("partition")).first()[0]
                want = None if top is None else int(top) + 1
            client.create_topic(topic, want)
        elif "partition" in cols:
            top = df.agg(F.max("partition")).first()[0]
            if top is not None and int(top) >= existing[topic]:
                raise ValueError(
                    f"topic {topic} has {existing[topic]} partition(s); the data has "
                    f"partition {top}: create it with more partitions or drop the partitions"
                )
    out = df
    if "partition" in cols:
        order = ["partition", "offset"] if "offset" in df.columns else ["partition"]
        n = max(1, df.sparkSession.sparkContext.defaultParallelism)
        out = out.repartition(n, "partition").sortWithinPartitions(*order)
    out = out.select(*cols)
    with tempfile.TemporaryDirectory(prefix="gw-write-") as tmp:
        report_path = str(Path(tmp) / "report.json")
        t0 = time.perf_counter()
        (
            out.write.format("gateway")
            .mode("append")
            .option("bootstrap", bootstrap)
            .option("topic", topic)
            .option("reportPath", report_path)
            .save()
        )
        seconds = time.perf_counter() - t0
        report = json.loads(Path(report_path).read_text())
    return WriteReport(
        report["status"], report["records"], report["bytes"], report["tasks"], seconds
    )


def export_topic(
    spark: Any,
    bootstrap: str,
    topic: str,
    path: str,
    fmt: str = "parquet",
    overwrite: bool = False,
    parquet_options: dict[str, str] | None = None,
    **read_options: Any,
) -> int:
    """Write the topic (every field of every record) to ``path``; returns the record count.
    ``parquet_options`` replace :data:`EXPORT_PARQUET_OPTIONS` (Parquet writes only)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    if fmt not in ("parquet", "json"):
        raise ValueError(f"unknown export format {fmt!r} (parquet or json)")
    # The count comes from the write itself (an observed metric, summed over the successful
    # tasks), not from a second job reading the files back: that job cost 0.4-0.6 s of a ~4 s
    # export of 1M records (bench/README.md, "Spark export"), and for JSON a full re-read.
    written = Observation("export")
    df = read_topic(spark, bootstrap, topic, **read_options)
    df = df.observe(written, F.count(F.lit(1)).alias("records"))
    # Parquet timestamps in microseconds, the model's unit (Spark's default is the legacy INT96).
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    writer = df.write.mode("overwrite" if overwrite else "errorifexists")
    if fmt == "parquet":
        opts = EXPORT_PARQUET_OPTIONS if parquet_options is None else parquet_options
        for k, v in opts.items():
            writer = writer.option(k, v)
    writer.format(fmt).save(path)
    return int(written.get["records"])


def import_path(
    spark: Any,
    path: str,
    bootstrap: str,
    topic: str,
    fmt: str = "parquet",
    keep_partitions: bool = True,
    partitions: int | None = None,
) -> WriteReport:
    df = spark.read.format(fmt).load(path)
    return write_topic(df, bootstrap, topic, keep_partitions, partitions)


def copy_topic(
    spark: Any,
    topic: str,
    source: str,
    target: str,
    target_topic: str | None = None,
    keep_partitions: bool = True,
    **read_options: Any,
) -> WriteReport:
    """Copy a topic from the gateway at ``source`` to the gateway at ``target`` (each an admin
    endpoint), every field kept; partition order kept when ``keep_partitions``."""
    df = read_topic(spark, source, topic, **read_options)
    partitions = None
    if keep_partitions:
        with GatewayClient(source) as client:
            partitions = client.topics().get(topic)
    return write_topic(df, target, target_topic or topic, keep_partitions, partitions)


# ----------------------------------------------------------------------------- stats


ISO = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"  # in the session's time zone (UTC, see spark.py)


def fill_hours(hours: list[tuple[str, int]], max_span: int = 1000) -> list[tuple[str, int]]:
    """Insert the empty hours between the first and the last (up to ``max_span`` hours)."""
    from datetime import datetime, timedelta

    if len(hours) < 2:
        return hours
    fmt = "%Y-%m-%d %H:00"
    first = datetime.strptime(hours[0][0], fmt)
    last = datetime.strptime(hours[-1][0], fmt)
    span = int((last - first).total_seconds() // 3600)
    if span > max_span:
        return hours
    have = dict(hours)
    out = []
    for i in range(span + 1):
        h = (first + timedelta(hours=i)).strftime(fmt)
        out.append((h, have.get(h, 0)))
    return out


def topic_stats(spark: Any, bootstrap: str, topic: str, **read_options: Any) -> dict[str, Any]:
    """Records per hour, key cardinality, record size distribution and per-partition counts."""
    from pyspark.sql import functions as F

    df = read_topic(spark, bootstrap, topic, **read_options)
    size = (
        F.coalesce(F.length("key"), F.lit(0))
        + F.coalesce(F.length("value"), F.lit(0))
        + F.coalesce(
            F.aggregate(
                "headers",
                F.lit(0),
                lambda acc, h: (
                    acc + F.length(h["key"]) + F.coalesce(F.length(h["value"]), F.lit(0))
                ),
            ),
            F.lit(0),
        )
    )
    df = df.withColumn("size", size)
    overall = df.agg(
        F.count(F.lit(1)).alias("records"),
        F.countDistinct("key").alias("distinct_keys"),
        F.sum(F.col("key").isNull().cast("long")).alias("null_keys"),
        F.sum("size").alias("bytes"),
        F.min("size").alias("min"),
        F.max("size").alias("max"),
        F.avg("size").alias("mean"),
        F.percentile_approx("size", [0.5, 0.9, 0.99], 10000).alias("pct"),
        F.date_format(F.min("timestamp"), ISO).alias("first"),
        F.date_format(F.max("timestamp"), ISO).alias("last"),
    ).first()
    # One more pass for the small tables: counts per (hour, partition, size bucket).
    bucket = F.when(F.col("size") <= 1, F.lit(0)).otherwise(F.ceil(F.log2(F.col("size"))))
    cells = (
        df.groupBy(
            F.date_format(F.date_trunc("hour", "timestamp"), "yyyy-MM-dd HH:00").alias("hour"),
            "partition",
            bucket.alias("bucket"),
        )
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    )
    per_hour: dict[str, int] = {}
    per_partition: dict[int, int] = {}
    per_bucket: dict[int, int] = {}
    for c in cells:
        per_hour[c["hour"]] = per_hour.get(c["hour"], 0) + c["n"]
        per_partition[c["partition"]] = per_partition.get(c["partition"], 0) + c["n"]
        per_bucket[int(c["bucket"])] = per_bucket.get(int(c["bucket"]), 0) + c["n"]
    hours = fill_hours(sorted(per_hour.items()))
    buckets = sorted(per_bucket.items())
    per_partition = dict(sorted(per_partition.items()))
    pct = overall["pct"] or [None, None, None]
    return {
        "topic": topic,
        "records": overall["records"],
        "bytes": overall["bytes"] or 0,
        "distinct_keys": overall["distinct_keys"],
        "null_keys": overall["null_keys"] or 0,
        "first": overall["first"],
        "last": overall["last"],
        "size": {
            "min": overall["min"],
            "p50": pct[0],
            "p90": pct[1],
            "p99": pct[2],
            "max": overall["max"],
            "mean": None if overall["mean"] is None else round(overall["mean"], 1),
        },
        "per_hour": hours,
        # bucket b holds sizes in (2^(b-1), 2^b] bytes; bucket 0 holds 0 and 1
        "size_histogram": [(0 if b == 0 else 2 ** (b - 1) + 1, 2**b, n) for b, n in buckets],
        "per_partition": per_partition,
    }


def format_stats(stats: dict[str, Any]) -> str:
    s = stats["size"]
    lines = [
        f"topic {stats['topic']}: {stats['records']} records, {stats['bytes']} bytes",
        f"  time:       {stats['first']} .. {stats['last']}",
        f"  keys:       {stats['distinct_keys']} distinct, {stats['null_keys']} records without",
        f"  size bytes: min {s['min']}  p50 {s['p50']}  p90 {s['p90']}  p99 {s['p99']}  "
        f"max {s['max']}  mean {s['mean']}",
        "  partitions: " + "  ".join(f"{p}={n}" for p, n in stats["per_partition"].items()),
        "  records per hour:",
    ]
    lines += [f"    {hour}  {n}" for hour, n in stats["per_hour"]]
    lines.append("  size histogram (bytes):")
    lines += [f"    {lo:>8}..{hi:<8} {n}" for lo, hi, n in stats["size_histogram"]]
    return "\n".join(lines)


def stats_chart(stats: dict[str, Any], path: str) -> None:
    """A PNG with records per hour and the size histogram."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    hours = stats["per_hour"]
    ax1.bar(range(len(hours)), [n for _, n in hours], color="#4c72b0")
    ax1.set_xticks(range(len(hours)))
    ax1.set_xticklabels([h for h, _ in hours], rotation=45, ha="right", fontsize=7)
    ax1.set_title(f"{stats['topic']}: records per hour")
    ax1.set_ylabel("records")
    hist = stats["size_histogram"]
    ax2.bar(range(len(hist)), [n for _, _, n in hist], color="#dd8452")
    ax2.set_xticks(range(len(hist)))
    ax2.set_xticklabels([f"≤{hi}" for _, hi, _ in hist], rotation=45, ha="right", fontsize=7)
    ax2.set_title(
        f"record size (p50 {stats['size']['p50']} B, {stats['distinct_keys']} distinct keys)"
    )
    ax2.set_ylabel("records")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
