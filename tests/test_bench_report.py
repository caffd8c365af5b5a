"""bench/run.py's report header: the run's own time and machine, and what a partial run
(``--only``) says of the drivers it did not run."""

from __future__ import annotations

from bench import run


def latest(**extra: object) -> dict:
    return {
        "started": "2026-11-25 21:40:35",
        "machine": {"cpus": 2, "python": "3.11.7", "load_average_at_start": [1.0, 1.0, 1.0]},
        "embedded_fsync": "every 50 ms",
        "seconds": 293.9,
        "drivers": {},
        "throughput": [],
        **extra,
    }


def test_a_whole_run_names_its_time_and_nothing_else() -> None:
    header = run.report(latest(), []).splitlines()[2]
    assert header.startswith("Run at 2026-11-25 21:40:35 UTC on 2 CPUs")
    assert "--only" not in header


def test_a_partial_run_says_where_the_other_figures_come_from() -> None:
    rerun = {"drivers": ["workers"], "others_from": "2026-11-25 20:47:00"}
    header = run.report(latest(rerun=rerun), []).splitlines()[2]
    assert "Only workers ran at that time (`--only`)" in header
    assert "from the run of 2026-11-25 20:47:00 UTC" in header
