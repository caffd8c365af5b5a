"""Structured Streaming from a topic: availableNow with a per-trigger limit, restart from the
checkpoint (exactly the new records), and a processingTime trigger picking up live appends."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from gateway.pipeline.client import GatewayClient
from tests.pipeline.records import make_records


def collecting_query(
    spark: Any, bootstrap: str, topic: str, checkpoint: Path, sink: list, **options: str
) -> Any:
    """A streaming DataFrame writer whose foreachBatch appends (partition, offset, value) of
    every micro-batch to ``sink`` (it runs in this process: the driver)."""
    lock = threading.Lock()

    def collect(batch: Any, batch_id: int) -> None:
        got = [(r.partition, r.offset, r.value) for r in batch.collect()]
        with lock:
            sink.append((batch_id, got))

    reader = (
        spark.readStream.format("gateway").option("bootstrap", bootstrap).option("topic", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
    )


def produce(client: GatewayClient, topic: str, per_partition: int, seed: int) -> set:
    """Append ``per_partition`` records to each of 3 partitions; returns their (p, value)."""
    out = set()
    for p in range(3):
        recs = make_records(per_partition, seed=seed + 1000 * p)
        recs = [r._replace(value=b"%d-%d-%d" % (seed, p, i)) for i, r in enumerate(recs)]
        client.produce_batch(topic, recs, p)
        out |= {(p, r.value) for r in recs}
    return out


def records_of(sink: list) -> list:
    return [rec for _, batch in sink for rec in batch]


def test_available_now_restart_from_checkpoint_gets_exactly_the_new_records(
    spark: Any, bootstrap: str, client: GatewayClient, topic: str, tmp_path: Path
) -> None:
    client.create_topic(topic, 3)
    first = produce(client, topic, 100, seed=1)
    checkpoint = tmp_path / "checkpoint"

    sink1: list = []
    q = (
        collecting_query(
            spark,
            bootstrap,
            topic,
            checkpoint,
            sink1,
            startingOffsets="earliest",
            maxOffsetsPerTrigger="120",
        )
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert not q.isActive and q.exception() is None
    got1 = records_of(sink1)
    assert {(p, v) for p, _, v in got1} == first and len(got1) == 300
    # the limit held: no micro-batch read more than 120 records
    sizes = [len(b) for _, b in sink1]
    assert max(sizes) <= 120 and sum(1 for n in sizes if n) >= 3

    second = produce(client, topic, 50, seed=2)
    sink2: list = []
    q = (
        collecting_query(
            spark,
            bootstrap,
            topic,
            checkpoint,
            sink2,
            startingOffsets="earliest",  # ignored on restart: the checkpoint wins
            maxOffsetsPerTrigger="120",
        )
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(300)
    assert q.exception() is None
    got2 = records_of(sink2)
    assert {(p, v) for p, _, v in got2} == second and len(got2) == 150
    assert sorted((p, o) for p, o, _ in got2) == [(p, o) for p in range(3) for o in range(100, 150)]
    # batch ids continue from the first run
    assert min(b for b, _ in sink2) > max(b for b, _ in sink1)


def test_processing_time_trigger_follows_live_appends(
    spark: Any, bootstrap: str, client: GatewayClient, topic: str, tmp_path: Path
) -> None:
    client.create_topic(topic, 3)
    produce(client, topic, 10, seed=3)  # before the start: not read
    start = json.dumps({str(o.partition): o.high_watermark for o in client.offsets(topic)})
    sink: list = []
    q = (
        collecting_query(
            spark, bootstrap, topic, tmp_path / "checkpoint", sink, startingOffsets=start
        )
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        expect = produce(client, topic, 20, seed=4)
        expect |= produce(client, topic, 5, seed=5)
        deadline = time.monotonic() + 120
        while len(records_of(sink)) < len(expect) and time.monotonic() < deadline:
            assert q.exception() is None
            time.sleep(0.2)
        time.sleep(1.5)  # a few more triggers: nothing else may arrive
    finally:
        q.stop()
    got = records_of(sink)
    assert len(got) == len(expect) == 75
    assert {(p, v) for p, _, v in got} == expect
