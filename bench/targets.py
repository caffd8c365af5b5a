"""The gateway's performance targets, checked against one ``make bench`` run.

Each target names the driver whose result measures it and where in that result the figure is;
``evaluate`` reads the figures of a run (``latest.json``'s drivers) and says for each whether it
was met, missed, or not measured (the driver did not run, or has no such figure). The report
(bench/run.py) puts the table first, so a missed target is not lost in the throughput rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Getter = Callable[[dict], Any]


@dataclass(frozen=True)
class Target:
    what: str  # what the figure measures: the target's name in the report
    driver: str
    get: Getter  # the figure in the driver's result (KeyError: not measured)
    bound: float
    at_most: bool = False  # the figure must be <= bound (else >=)
    unit: str = "records/s"


def _path(*keys: str) -> Getter:
    def get(result: dict) -> Any:
        for key in keys:
            result = result[key]
        return result

    return get


class Unmeasured(Exception):
    """A figure the driver gives without a verdict (too few trustworthy runs behind it)."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


def _latency(protocol: str) -> Getter:
    def get(result: dict) -> Any:
        load = result["protocols"][protocol]["load"]
        if load.get("meets_target") is None:  # too few rounds on a quiet host
            raise Unmeasured(load["added_p99_ms"])
        return load["added_p99_ms"]

    return get


TARGETS: list[Target] = [
    Target(
        "embedded log appends, batches of 1000 (in-process)",
        "embedded_log",
        _path("runs", "1000", "embedded", "appends_per_s"),
        500_000,
    ),
    Target(
        "embedded log reads, batches of 1000 (in-process)",
        "embedded_log",
        _path("runs", "1000", "embedded", "reads_per_s"),
        1_000_000,
    ),
    *(
        Target(
            f"Kafka 0.8 {op} through the listener, kcat, {backend} backend",
            "kafka08",
            _path("runs", backend, op, "listener_records_per_s"),
            bound,
        )
        for backend in ("embedded", "memory")
        for op, bound in (("produce", 150_000), ("fetch", 400_000))
    ),
    *(
        Target(
            f"Kafka {op} with today's APIs (confluent-kafka), gateway over Tansu direct",
            "kafka",
            _path("phases", op, "ratio"),
            bound,
            unit="x",
        )
        for op, bound in (("produce", 0.45), ("fetch", 0.5))
    ),
    *(
        Target(
            f"{op}: gateway -> {name} over {over}",
            "backends",
            _path("targets", op, key),
            bound,
            unit="x",
        )
        for op in ("produce", "fetch")
        for name, over, key, bound in (
            ("NATS", "nats-py direct", "nats_vs_nats_py", 1.0),
            ("Kafka", "gateway -> embedded", "kafka_vs_embedded", 0.7),
        )
    ),
    Target(
        "Liftbridge PublishAsync through gRPC (in-repo HTTP/2 client, another process)",
        "liftbridge",
        _path("runs", "memory", "publish", "codec", "messages_per_s"),
        20_000,
        unit="messages/s",
    ),
    Target(
        "TANK produce, uncompressed",
        "tank",
        _path("runs", "none", "tank", "produce_msgs_per_s"),
        200_000,
        unit="messages/s",
    ),
    *(
        Target(
            f"Cursus {op}, {backend} backend",
            "cursus",
            _path(backend, "gateway", f"{op}_msgs_per_s"),
            bound,
            unit="messages/s",
        )
        for backend in ("embedded", "memory")
        for op, bound in (("produce", 170_000), ("consume", 280_000))
    ),
    *(
        Target(
            f"Iggy send, {backend} backend",
            "iggy",
            _path(backend, "gateway", "send_msgs_per_s"),
            150_000,
            unit="messages/s",
        )
        for backend in ("embedded", "memory")
    ),
    *(
        Target(
            f"{protocol}: p99 added at 50% of saturation",
            "latency",
            _latency(protocol),
            2.0,
            at_most=True,
            unit="ms",
        )
        for protocol in ("kafka08", "iggy", "tank", "liftbridge", "cursus")
    ),
    Target(
        "memory per idle connection (1000 on the TANK listener)",
        "latency",
        _path("idle", "bytes_per_idle_connection"),
        65_536,
        at_most=True,
        unit="bytes",
    ),
]


def number(value: float) -> str:
    """1,000,000 and 0.777, not 1e+06 and 0.7770."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}"


def pipeline_targets(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Spark export's targets from the last run of bench/pipeline.py (``pipeline.jsonl``), which
    ``make bench`` does not run (two JVMs, minutes of exports): marked with that run's time."""
    if not runs:
        return []
    last = runs[-1]
    when = f"bench/pipeline.py of {last['when']} (not this run)"
    pairs = sorted(last.get("pair_ratios") or [last["local2"] / last["local1"]])
    figures = (
        ("Spark export local[2] / local[1], median pair", pairs[len(pairs) // 2], 1.3),
        (
            "Spark export local[2] / the single-process binary read",
            last["local2"] / last["baseline"],
            1.0,
        ),
    )
    return [
        {
            "what": what,
            "driver": when,
            "target": f">= {number(bound)} x",
            "measured": round(value, 2),
            "met": value >= bound,
        }
        for what, value, bound in figures
    ]


def evaluate(drivers: dict[str, dict]) -> list[dict[str, Any]]:
    """Every target with this run's figure: ``met`` True / False, or None when not measured
    (no figure, or one its driver gives no verdict on, shown all the same)."""
    out = []
    for t in TARGETS:
        result = drivers.get(t.driver, {}).get("result")
        measured = True
        try:
            value = t.get(result) if result else None
        except (KeyError, TypeError):
            value = None
        except Unmeasured as unmeasured:
            value, measured = unmeasured.value, False
        met = None
        if value is not None and measured:
            met = value <= t.bound if t.at_most else value >= t.bound
        out.append(
            {
                "what": t.what,
                "driver": t.driver,
                "target": f"{'<=' if t.at_most else '>='} {number(t.bound)} {t.unit}",
                "measured": value,
                "met": met,
            }
        )
    return out


def section(targets: list[dict[str, Any]]) -> list[str]:
    """The report's table of targets, with a line naming the missed and the unmeasured."""
    lines = [
        "",
        "## Performance targets",
        "",
        "| what it measures | driver | target | this run | met |",
        "|---|---|---|---|---|",
    ]
    for t in targets:
        value = t["measured"]
        shown = "-" if value is None else number(value)
        verdict = {True: "yes", False: "**NO**", None: "not measured"}[t["met"]]
        lines.append(f"| {t['what']} | {t['driver']} | {t['target']} | {shown} | {verdict} |")
    missed = [t["what"] for t in targets if t["met"] is False]
    unmeasured = [t["what"] for t in targets if t["met"] is None]
    lines += [
        "",
        f"{len(targets) - len(missed) - len(unmeasured)} of {len(targets)} met"
        + (f"; missed: {'; '.join(missed)}" if missed else "")
        + (f"; not measured: {'; '.join(unmeasured)}" if unmeasured else "")
        + ".",
    ]
    return lines
