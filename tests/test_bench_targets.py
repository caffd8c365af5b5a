"""bench/targets.py: every performance target read from a run's driver results, met, missed or not
measured, and the report's table naming the misses."""

from __future__ import annotations

from typing import Any

from bench import targets


def by_what(evaluated: list[dict[str, Any]], fragment: str) -> dict[str, Any]:
    (hit,) = [t for t in evaluated if fragment in t["what"]]
    return hit


def drivers(**results: dict) -> dict[str, dict]:
    return {name: {"status": "ok", "result": result} for name, result in results.items()}


def test_a_figure_under_its_floor_is_missed_and_one_over_it_met() -> None:
    tank = {"runs": {"none": {"tank": {"produce_msgs_per_s": 250_000.0}}}}
    iggy = {
        "embedded": {"gateway": {"send_msgs_per_s": 149_999.0}},
        "memory": {"gateway": {"send_msgs_per_s": 150_000.0}},
    }
    out = targets.evaluate(drivers(tank=tank, iggy=iggy))
    assert by_what(out, "TANK produce")["met"] is True
    assert by_what(out, "Iggy send, embedded")["met"] is False
    assert by_what(out, "Iggy send, memory")["met"] is True  # the bound itself is met


def test_an_upper_bound_is_met_at_or_under_it() -> None:
    load = {"added_p99_ms": 2.0, "meets_target": True}
    latency = {
        "protocols": {"iggy": {"load": load}, "tank": {"load": {**load, "added_p99_ms": 2.01}}},
        "idle": {"bytes_per_idle_connection": 70_000},
    }
    out = targets.evaluate(drivers(latency=latency))
    assert by_what(out, "iggy: p99")["met"] is True
    assert by_what(out, "tank: p99")["met"] is False
    assert by_what(out, "idle connection")["met"] is False


def test_what_did_not_run_or_has_no_figure_is_not_measured() -> None:
    latency = {"protocols": {"kafka08": {"load": {"added_p99_ms": 0.5, "meets_target": None}}}}
    out = targets.evaluate({**drivers(latency=latency), "tank": {"status": "timed out"}})
    unmeasured = by_what(out, "kafka08: p99")
    assert (unmeasured["measured"], unmeasured["met"]) == (0.5, None)  # too few quiet rounds
    assert by_what(out, "cursus: p99")["met"] is None  # protocol absent from the result
    assert by_what(out, "TANK produce")["met"] is None  # the driver has no result
    assert all(t["met"] is None for t in targets.evaluate({}))


def test_the_section_names_what_was_missed() -> None:
    tank = {"runs": {"none": {"tank": {"produce_msgs_per_s": 1_000.0}}}}
    lines = targets.section(targets.evaluate(drivers(tank=tank)))
    assert "| TANK produce, uncompressed | tank | >= 200,000 messages/s | 1,000 | **NO** |" in lines
    assert lines[-1].startswith(f"0 of {len(targets.TARGETS)} met; missed: TANK produce")


def test_the_pipeline_targets_come_from_its_last_run_and_say_so() -> None:
    old = {"when": "then", "local1": 100.0, "local2": 120.0, "baseline": 100.0}
    last = {"when": "2026-11-26T02:28:04", "local1": 100.0, "local2": 140.0, "baseline": 150.0}
    ratio, over_read = targets.pipeline_targets([old, {**last, "pair_ratios": [1.1, 1.5, 1.35]}])
    assert "2026-11-26T02:28:04 (not this run)" in ratio["driver"]
    assert (ratio["measured"], ratio["met"]) == (1.35, True)  # the median pair, not local2/local1
    assert (over_read["measured"], over_read["met"]) == (0.93, False)
    assert targets.pipeline_targets([]) == []
