"""bench/metadata_freeze.py's figures and their section of bench/run.py's report."""

from __future__ import annotations

from bench import metadata_freeze, run


def test_summary_takes_the_max_and_the_99th_percentile() -> None:
    waits = [0.001] * 99 + [0.5]
    assert metadata_freeze.summary(waits) == {"probes": 100, "max_ms": 500.0, "p99_ms": 500.0}
    assert metadata_freeze.summary([0.002] * 200 + [0.5])["p99_ms"] == 2.0


def test_the_report_shows_each_run_against_its_baseline() -> None:
    result = {
        "workload": {
            "request": "one Kafka 0.8 Metadata v0 request naming 1000 unknown topics",
            "bystander": "Cursus HELP every 10 ms on another listener",
            "baseline": "the same probes for 2 s before the request, same process",
            "backend": "embedded, fsync every 50 ms",
        },
        "runs": {
            "creation unlimited": {
                "attack_s": 6.37,
                "topics_created": 1000,
                "topics_refused": 0,
                "baseline": {"probes": 188, "max_ms": 12.93, "p99_ms": 1.27},
                "during": {"probes": 492, "max_ms": 48.08, "p99_ms": 17.71},
            }
        },
    }
    latest = {
        "started": "2026-11-27 07:00:00",
        "machine": {"cpus": 2, "python": "3.11.7", "load_average_at_start": [1.0, 1.0, 1.0]},
        "embedded_fsync": "every 50 ms",
        "seconds": 10.0,
        "drivers": {"metadata_freeze": {"status": "ok", "seconds": 9, "generator": "x",
                                        "result": result}},
        "throughput": [],
    }  # fmt: skip
    text = run.report(latest, [])
    assert "## A topic-creation storm (bench/metadata_freeze.py)" in text
    assert "| creation unlimited | 6.37 | 1000 / 0 | 48.1 (12.9) | 17.7 (1.3) | 492 |" in text
    assert run.metadata_freeze_section({}) == []
