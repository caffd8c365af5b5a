"""The ``gateway pipeline stats`` job and the CLI's error paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.cli import main as gateway_cli
from gateway.model import Record
from gateway.pipeline.client import GatewayClient
from tests.pipeline.records import BASE_TS

HOUR_US = 3_600_000_000


def test_stats_per_hour_keys_sizes_and_chart(
    spark: Any, bootstrap: str, client: GatewayClient, topic: str, tmp_path: Path, capsys: Any
) -> None:
    client.create_topic(topic, 2)
    # hour 0: 30 records, hour 1: none, hour 2: 10; 7 distinct keys + 5 keyless; sizes known
    recs = [
        Record(b"k%d" % (i % 7), b"x" * (10 * (i % 4)), (), BASE_TS + i * 1000) for i in range(30)
    ]
    recs += [
        Record(None, b"y" * 200, (("h", b"12345"),), BASE_TS + 2 * HOUR_US + i) for i in range(5)
    ]
    recs += [Record(b"k0", b"", (), BASE_TS + 2 * HOUR_US + 10 + i) for i in range(5)]
    client.produce_batch(topic, recs[:20], 0)
    client.produce_batch(topic, recs[20:], 1)
    png = tmp_path / "stats.png"
    assert (
        gateway_cli(
            ["pipeline", "stats", topic, "--bootstrap", bootstrap, "--json", "--png", str(png)]
        )
        == 0
    )
    stats = json.loads(capsys.readouterr().out)
    assert stats["records"] == 40
    assert stats["distinct_keys"] == 7 and stats["null_keys"] == 5
    assert stats["per_hour"] == [
        ["2026-01-01 00:00", 30],
        ["2026-01-01 01:00", 0],
        ["2026-01-01 02:00", 10],
    ]
    assert stats["first"] == "2026-01-01T00:00:00.000000Z"
    assert stats["per_partition"] == {"0": 20, "1": 20}
    sizes = sorted(
        len(r.key or b"") + len(r.value or b"") + sum(len(k) + len(v) for k, v in r.headers)
        for r in recs
    )
    assert stats["bytes"] == sum(sizes)
    assert stats["size"]["min"] == sizes[0] and stats["size"]["max"] == sizes[-1]
    assert sum(n for _, _, n in stats["size_histogram"]) == 40
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000

    assert gateway_cli(["pipeline", "stats", topic, "--bootstrap", bootstrap]) == 0
    text = capsys.readouterr().out
    assert f"topic {topic}: 40 records" in text and "7 distinct" in text


def test_cli_errors_are_one_line(bootstrap: str, tmp_path: Path, capsys: Any) -> None:
    # no Spark needed to refuse these
    assert gateway_cli(["pipeline", "export", "t", str(tmp_path / "x"), "--bootstrap", "nope"]) == 2
    assert "bootstrap must be host:port" in capsys.readouterr().err
    missing = tmp_path / "missing.toml"
    missing.write_text("[admin]\nenabled = false\n")
    assert gateway_cli(["pipeline", "stats", "t", "--config", str(missing)]) == 2
    assert "--bootstrap" in capsys.readouterr().err


def test_session_jvm_runs_the_parallel_collector(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = {beans.get(i).getName() for i in range(beans.size())}
    assert names == {"PS Scavenge", "PS MarkSweep"}, names


def test_export_writes_keys_and_values_without_dictionary(
    spark: Any, bootstrap: str, client: GatewayClient, topic: str, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from gateway.pipeline.jobs import export_topic

    client.create_topic(topic, 1)
    # Repeated keys and values: Parquet would keep a dictionary for them if it were on.
    recs = [Record(b"k%d" % (i % 3), b"v" * 50, (("h", b"x"),), BASE_TS + i) for i in range(300)]
    client.produce_batch(topic, recs, 0)

    def encodings(path: Path) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for f in path.glob("*.parquet"):
            meta = pq.ParquetFile(f).metadata
            for g in range(meta.num_row_groups):
                for c in range(meta.num_columns):
                    col = meta.row_group(g).column(c)
                    out.setdefault(col.path_in_schema, set()).update(col.encodings)
        return out

    assert export_topic(spark, bootstrap, topic, str(tmp_path / "plain")) == 300
    plain = encodings(tmp_path / "plain")
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    assert not plain["key"] & dictionary and not plain["value"] & dictionary, plain
    assert plain["topic"] & dictionary, plain  # the other columns keep theirs
    # parquet_options replaces the defaults: Parquet's own behaviour back.
    assert export_topic(spark, bootstrap, topic, str(tmp_path / "d"), parquet_options={}) == 300
    assert encodings(tmp_path / "d")["value"] & dictionary


def test_export_count_is_what_the_write_wrote(
    spark: Any, bootstrap: str, client: GatewayClient, topic: str, tmp_path: Path
) -> None:
    """The count comes from the write's own observed metric: an empty topic gives 0 (and the
    call returns), a JSON export gives as many records as its files have lines."""
    from gateway.pipeline.jobs import export_topic

    client.create_topic(topic, 2)
    assert export_topic(spark, bootstrap, topic, str(tmp_path / "empty")) == 0
    assert spark.read.parquet(str(tmp_path / "empty")).count() == 0
    for p in (0, 1):
        recs = [Record(b"k", b"v%d" % i, (), BASE_TS + i) for i in range(40 + p)]
        client.produce_batch(topic, recs, p)
    assert export_topic(spark, bootstrap, topic, str(tmp_path / "j"), fmt="json") == 81
    lines = [ln for f in (tmp_path / "j").glob("*.json") for ln in f.read_text().splitlines()]
    assert len(lines) == 81


def test_progress_lines_count_records_of_the_total(spark: Any, tmp_path: Path) -> None:
    """A real Spark job of 4 tasks: two end at once, two wait for a gate file that the test
    opens only once a progress line has shown the first two done. The lines say records done
    of the total (estimated from the tasks done), the rate and the time left; no timing."""
    import io
    import threading
    import time

    from gateway.pipeline.jobs import progress

    out = io.StringIO()
    gate = tmp_path / "gate"
    halfway = "200 of 400 records (50%)"

    def task(i: int) -> None:
        import os
        import time

        while i >= 2 and not os.path.exists(str(gate)):
            time.sleep(0.05)

    def open_gate_at_halfway() -> None:
        deadline = time.monotonic() + 120
        while halfway not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        gate.touch()  # at the deadline too: the job ends and the assertion below reports it

    opener = threading.Thread(target=open_gate_at_halfway, daemon=True)
    opener.start()
    started = time.monotonic() - 30  # as if Spark took 30 s to start
    with progress(spark, "export t", out=out, every=0.1, total=400, started=started):
        spark.sparkContext.parallelize(range(4), 4).foreach(task)
    opener.join()
    lines = out.getvalue().splitlines()
    assert lines, "no progress line"
    assert all(line.startswith("export t: ") for line in lines)
    assert any(" of 400 records (" in line and "records/s" in line for line in lines), lines
    # between the first pair of tasks and the second there is a line part-way
    assert any(halfway in line and " left, " in line for line in lines), lines
    # the time so far counts from the command's start, Spark's start included
    assert all(int(line.split(" s so far")[0].rsplit(" ", 1)[1]) >= 30 for line in lines), lines
