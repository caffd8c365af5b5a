"""The ``gateway`` data source in Spark: batch reads with their options, and batch writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from gateway.model import Record
from gateway.pipeline.client import GatewayClient
from tests.pipeline.records import BASE_TS, as_tuple, make_records


def load(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("gateway").option("bootstrap", bootstrap).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows(df: Any) -> list[dict]:
    """Rows as dicts with integer microsecond timestamps, ordered by partition and offset."""
    out = df.withColumn("timestamp", F.unix_micros("timestamp")).orderBy("partition", "offset")
    return [r.asDict(recursive=True) for r in out.collect()]


@pytest.fixture
def four(client: GatewayClient, topic: str) -> dict[int, list[Record]]:
    """A 4-partition topic with 60, 0, 25 and 140 records."""
    client.create_topic(topic, 4)
    data = {0: make_records(60), 1: [], 2: make_records(25, seed=100), 3: make_records(140, 200)}
    for p, recs in data.items():
        for i in range(0, len(recs), 50):
            client.produce_batch(topic, recs[i : i + 50], p)
    return data


def test_read_every_field_one_task_per_partition(
    spark: Any, bootstrap: str, topic: str, four: dict[int, list[Record]]
) -> None:
    df = load(spark, bootstrap, topic)
    assert df.rdd.getNumPartitions() == 3  # the empty partition plans no task
    got = rows(df)
    expect = [(p, i, as_tuple(r)) for p in sorted(four) for i, r in enumerate(four[p])]
    assert [(g["partition"], g["offset"], as_tuple(g)) for g in got] == expect
    assert {g["topic"] for g in got} == {topic}


def test_large_partitions_split_by_offset_range(
    spark: Any, bootstrap: str, topic: str, four: dict[int, list[Record]]
) -> None:
    df = load(spark, bootstrap, topic, maxRecordsPerSplit="40", fetchMaxRecords="7")
    # 60 -> 2 tasks, 25 -> 1, 140 -> 4
    assert df.rdd.getNumPartitions() == 7
    got = rows(df)
    assert [(g["partition"], g["offset"]) for g in got] == [
        (p, i) for p in sorted(four) for i in range(len(four[p]))
    ]
    assert load(spark, bootstrap, topic, minPartitions="10").rdd.getNumPartitions() == 10


def test_starting_and_ending_offsets(
    spark: Any, bootstrap: str, topic: str, four: dict[int, list[Record]]
) -> None:
    df = load(
        spark,
        bootstrap,
        topic,
        startingOffsets='{"0": 10, "3": 100}',
        endingOffsets='{"0": 20, "2": 5}',
    )
    got = [(g["partition"], g["offset"]) for g in rows(df)]
    expect = [(0, i) for i in range(10, 20)] + [(2, i) for i in range(5)]
    expect += [(3, i) for i in range(100, 140)]
    assert got == expect
    assert load(spark, bootstrap, topic, startingOffsets="latest").count() == 0
    only = load(spark, bootstrap, topic, partitions="2")
    assert [(g["partition"], g["offset"]) for g in rows(only)] == [(2, i) for i in range(25)]


def test_starting_and_ending_timestamps(
    spark: Any, bootstrap: str, topic: str, four: dict[int, list[Record]]
) -> None:
    # record i of seed s has timestamp BASE_TS + (i + s) ms
    start_ms = BASE_TS // 1000 + 50
    end_iso = "2026-01-01T00:00:00.210Z"  # BASE_TS + 210 ms
    df = load(spark, bootstrap, topic, startingTimestamp=str(start_ms), endingTimestamp=end_iso)
    got = rows(df)
    expect = [(0, i) for i in range(50, 60)] + [(2, i) for i in range(25)]
    expect += [(3, i) for i in range(0, 10)]
    assert [(g["partition"], g["offset"]) for g in got] == expect
    assert all(BASE_TS + 50_000 <= g["timestamp"] < BASE_TS + 210_000 for g in got)


def test_reading_an_unknown_topic_fails_clearly(spark: Any, bootstrap: str) -> None:
    with pytest.raises(Exception, match="unknown|404"):
        load(spark, bootstrap, "no-such-topic").count()


def test_write_keeps_every_field_and_reports_totals(
    spark: Any, bootstrap: str, client: GatewayClient, topic: str, tmp_path: Path
) -> None:
    recs = make_records(300)
    df = (
        spark.createDataFrame(
            [
                (
                    r.key,
                    r.value,
                    [{"key": k, "value": v} for k, v in r.headers],
                    i % 3,
                    BASE_TS + i,
                )
                for i, r in enumerate(recs)
            ],
            "key binary, value binary, headers array<struct<key: string, value: binary>>, "
            "partition int, ts bigint",
        )
        .withColumn("timestamp", F.timestamp_micros("ts"))
        .drop("ts")
        .repartition(4)
    )
    report = tmp_path / "report.json"
    (
        df.write.format("gateway")
        .mode("append")
        .option("bootstrap", bootstrap)
        .option("topic", topic)
        .option("partitions", "3")
        .option("batchRecords", "37")
        .option("reportPath", str(report))
        .save()
    )
    totals = json.loads(report.read_text())
    assert totals["status"] == "committed"
    assert totals["records"] == 300 and totals["tasks"] == 4
    assert totals["per_partition"] == {"0": 100, "1": 100, "2": 100}
    got = rows(load(spark, bootstrap, topic))

    def by_time(x: tuple) -> tuple:
        return (x[0], x[1][3])

    expect = sorted(
        ((i % 3, (r.key, r.value, r.headers, BASE_TS + i)) for i, r in enumerate(recs)),
        key=by_time,
    )
    assert sorted(((g["partition"], as_tuple(g)) for g in got), key=by_time) == expect


def test_write_strings_and_map_headers_and_key_hash(
    spark: Any, bootstrap: str, client: GatewayClient, topic: str
) -> None:
    client.create_topic(topic, 2)
    df = spark.createDataFrame(
        [("k1", "hello", {"h": b"1"}), ("k1", "again", {}), (None, "no key", None)],
        "key string, value string, headers map<string, binary>",
    )
    df.write.format("gateway").mode("append").option("bootstrap", bootstrap).option(
        "topic", topic
    ).save()
    got = rows(load(spark, bootstrap, topic))
    got_kv = sorted(((g["key"] or b""), g["value"], as_tuple(g)[2]) for g in got)
    assert got_kv == [
        (b"", b"no key", ()),
        (b"k1", b"again", ()),
        (b"k1", b"hello", (("h", b"1"),)),
    ]
    # the same key went to the same partition
    assert len({g["partition"] for g in got if g["key"] == b"k1"}) == 1
    # no timestamp column: the gateway's clock
    assert all(g["timestamp"] > BASE_TS for g in got)


def test_write_refuses_overwrite_and_needs_value(spark: Any, bootstrap: str, topic: str) -> None:
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="append"):
        df.write.format("gateway").mode("overwrite").option("bootstrap", bootstrap).option(
            "topic", topic
        ).save()
    with pytest.raises(Exception, match="value"):
        spark.createDataFrame([("a",)], "v string").write.format("gateway").mode("append").option(
            "bootstrap", bootstrap
        ).option("topic", topic).save()


def test_failed_write_aborts_and_reports(
    spark: Any, bootstrap: str, client: GatewayClient, topic: str, tmp_path: Path
) -> None:
    client.create_topic(topic, 1)
    report = tmp_path / "report.json"

    def explode(v: str) -> str:
        if v == "bad":
            raise ValueError("boom")
        return v

    # A plain Python UDF: the Arrow-optimised kind (Spark 4's default) would need pandas.
    bad = F.udf(explode, "string", useArrow=False)
    df = spark.createDataFrame([("ok",), ("bad",)], "value string").withColumn(
        "value", bad("value")
    )
    with pytest.raises(Exception, match="boom"):
        df.write.format("gateway").mode("append").option("bootstrap", bootstrap).option(
            "topic", topic
        ).option("reportPath", str(report)).save()
    totals = json.loads(report.read_text())
    assert totals["status"] == "aborted"
    stored = sum(o.high_watermark for o in client.offsets(topic))
    # the report counts the tasks Spark saw end: either the task with the good row ended (its
    # record counted), or Spark cancelled it after its append and before it ended (a loaded
    # machine), and then no task is reported and its record is stored all the same
    assert totals["records"] == stored or (totals["records"] == 0 and totals["tasks"] == 0)


def test_an_embedded_log_written_before_start_tables_reads_the_same(
    spark: Any, tmp_path: Path
) -> None:
    """A log of version-1 blocks (as stored before 2026-11-25) with version-3 blocks appended
    after: Spark reads every record, the old ones through the reader's walk, the new ones
    through their start tables."""
    import trio

    from gateway.backends.embedded import EmbeddedBackend, EmbeddedConfig
    from gateway.canonical import CANONICAL
    from gateway.model import RecordBatch
    from tests.backends.conftest import opened
    from tests.support import GatewayProcess

    recs = make_records(300)
    data_dir = tmp_path / "log"

    async def write() -> None:
        backend = EmbeddedBackend("default", EmbeddedConfig(), data_dir)
        async with opened(backend):
            await backend.create_topic("mixed", 1)
            log = backend._partition("mixed", 0)
            for i in range(0, 150, 50):  # the old format, as the old code wrote it
                chunk = recs[i : i + 50]
                log.append(CANONICAL.encode(chunk, starts=False), 50, chunk[-1].timestamp_us)
            log.high_watermark = log.next_offset
            for i in range(150, 300, 50):
                block = CANONICAL.encode(recs[i : i + 50])
                ts = recs[i + 49].timestamp_us
                batch = RecordBatch(encoded=block, codec=CANONICAL, count=50, max_timestamp_us=ts)
                await backend.append("mixed", 0, batch)

    trio.run(write)
    backends = {"default": {"type": "embedded", "data_dir": str(data_dir)}}
    with GatewayProcess(tmp_path / "gw", backends=backends) as gw:
        host, port = gw.address("admin")
        bootstrap = f"{host}:{port}"
        with GatewayClient(bootstrap) as client:
            # byte 32 of an answer: the version of its first block (after 20 + 12 bytes of heads)
            versions = [client.fetch_binary("mixed", 0, o, 50)[32] for o in range(0, 300, 50)]
        got = rows(load(spark, bootstrap, "mixed", fetchMaxRecords="120"))
    assert versions == [1, 1, 1, 3, 3, 3]
    assert [(g["offset"], as_tuple(g)) for g in got] == [
        (i, as_tuple(r)) for i, r in enumerate(recs)
    ]
