"""The interoperability matrix: for every ordered pair (producer protocol, consumer protocol),
produce records with keys, headers and timestamps through one listener and consume them through
the other, checking every field both protocols carry (and that the fields only the consumer
carries come back empty or as the append time: the documented degradation).

``run_matrix`` drives a running gateway (the test module and ``gateway matrix`` both use it);
``format_table`` prints the result for a person, as text or Markdown.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.backends.base import Backend
from gateway.interop.drivers import CLIENTS, DRIVERS, LISTENER, Driver
from gateway.model import Record, now_us

CREATE_ORDER = ("cursus", "tank", "liftbridge", "kafka08", "kafka")


def client_addresses(listeners: Mapping[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """{matrix client: address} from {listener name: address}: every client whose listener is
    there (``kafka`` and ``kafka08`` share the Kafka listener)."""
    return {c: listeners[LISTENER[c]] for c in CLIENTS if LISTENER[c] in listeners}


@dataclass
class PairResult:
    producer: str
    consumer: str
    records: int
    checked: tuple[str, ...] = ()
    ok: bool = False
    error: str = ""
    produce_s: float = 0.0
    consume_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def records_per_s(self) -> float:
        """Records through the pair per second (produce and consume, end to end)."""
        total = self.produce_s + self.consume_s
        return self.records / total if total > 0 and self.ok else 0.0


def matrix_records(producer: str, consumer: str, count: int, t0_us: int) -> list[Record]:
    """Keys in runs of ten, two headers, timestamps one millisecond apart (exact in every unit)
    and an hour in the past (never mistaken for an append time)."""
    return [
        Record(
            f"key-{i // 10}".encode(),
            f"{producer}->{consumer} #{i}".encode(),
            (("trace-id", f"{i:08x}".encode()), ("source", producer.encode())),
            t0_us + i * 1000,
        )
        for i in range(count)
    ]


def upstream_fields(protocol: str) -> frozenset[str]:
    """The fields a record keeps through an upstream backend of ``protocol`` (its declared
    capabilities): what a chain through it can carry."""
    import importlib

    module = importlib.import_module(f"gateway.backends.upstream.{protocol}")
    caps = next(
        v.capabilities
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, Backend) and getattr(v, "protocol", "") == protocol
    )
    found = {"value"}
    found |= {"key"} if caps.keys else set()
    found |= {"headers"} if caps.headers else set()
    found |= {"timestamp"} if caps.timestamps else set()
    return frozenset(found)


def check_pair(
    sent: Sequence[Record],
    got: Sequence[Record],
    producer: type[Driver],
    consumer: type[Driver],
    window_us: tuple[int, int],
    through: str | None = None,
) -> tuple[tuple[str, ...], list[str]]:
    """(fields compared, problems found). ``through``: the protocol of the upstream backend the
    records went through (a chain), whose fields also bound what survives."""
    both = producer.produces & consumer.consumes
    if through is not None:
        both &= upstream_fields(through)
    checked = tuple(f for f in ("key", "value", "headers", "timestamp") if f in both)
    problems: list[str] = []
    if len(got) < len(sent):
        return checked, [f"consumed {len(got)} of {len(sent)} records"]
    lo, hi = window_us
    # Liftbridge headers are a map: order is not kept through it
    unordered = "liftbridge" in (producer.name, consumer.name, through)
    # an upstream without timestamps gives none (0 or -1 at the consumer) or its own time
    no_time = through is not None and "timestamp" not in upstream_fields(through)
    for i, (s, g) in enumerate(zip(sent, got, strict=False)):
        where = f"record {i}"
        if g.offset != i:
            problems.append(f"{where}: offset {g.offset}, expected {i}")
        if g.value != s.value:
            problems.append(f"{where}: value {g.value!r}, expected {s.value!r}")
        if "key" in both and g.key != s.key:
            problems.append(f"{where}: key {g.key!r}, expected {s.key!r}")
        if "key" in consumer.consumes and "key" not in both and g.key is not None:
            problems.append(f"{where}: key {g.key!r}, expected none")
        if "headers" in both:
            want = sorted(s.headers) if unordered else list(s.headers)
            have = sorted(g.headers) if unordered else list(g.headers)
            if have != want:
                problems.append(f"{where}: headers {have}, expected {want}")
        elif "headers" in consumer.consumes and g.headers:
            problems.append(f"{where}: headers {list(g.headers)}, expected none")
        if "timestamp" in both and g.timestamp_us != s.timestamp_us:
            problems.append(f"{where}: timestamp {g.timestamp_us}, expected {s.timestamp_us}")
        elif "timestamp" in consumer.consumes and "timestamp" not in both:
            if not lo <= g.timestamp_us <= hi and not (no_time and g.timestamp_us <= 0):
                problems.append(f"{where}: timestamp {g.timestamp_us} is not the append time")
        if len(problems) > 5:
            problems.append("...")
            break
    return checked, problems


async def run_pair(
    producer: Driver,
    consumer: Driver,
    topic: str,
    count: int,
    timeout_s: float = 30.0,
    through: str | None = None,
) -> PairResult:
    result = PairResult(producer.name, consumer.name, count)
    t0 = (now_us() // 1000 - 3_600_000) * 1000
    sent = matrix_records(producer.name, consumer.name, count, t0)
    try:
        with trio.fail_after(timeout_s):
            lo = now_us() - 1_000_000
            started = time.perf_counter()
            await producer.produce(topic, sent)
            produced = time.perf_counter()
            got = await consumer.consume(topic, count)
            result.consume_s = time.perf_counter() - produced
            result.produce_s = produced - started
            hi = now_us() + 1_000_000
    except trio.TooSlowError:
        result.error = f"timed out after {timeout_s}s"
        return result
    except Exception as exc:  # noqa: BLE001 - a failed pair is reported, the matrix goes on
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    result.checked, result.problems = check_pair(
        sent, got[:count], type(producer), type(consumer), (lo, hi), through
    )
    result.ok = not result.problems
    if result.problems:
        result.error = result.problems[0]
    return result


async def run_matrix(
    addresses: Mapping[str, tuple[str, int]],
    *,
    count: int = 100,
    protocols: Sequence[str] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    prefix: str | None = None,
    through: str | None = None,
    create_at: Mapping[str, tuple[str, int]] | None = None,
) -> list[PairResult]:
    """Every ordered pair of ``protocols`` (matrix clients, ``CLIENTS``; default: those in
    ``addresses``, keyed by client name: see ``client_addresses``), in order, each on
    a topic of its own (``prefix`` + ``producer-to-consumer``, one partition).

    ``through``: the gateway's backend is an upstream of that protocol (a chain): the fields
    compared are those the upstream keeps too. ``create_at``: listeners where the topics are
    made (the upstream server's, for an upstream that cannot create topics); default the
    gateway's own."""
    names = [p for p in (protocols or CLIENTS) if p in addresses]
    prefix = prefix if prefix is not None else f"matrix-{int(time.time() * 1000) % 10**9}-"
    options = options or {}
    drivers: dict[str, Driver] = {}
    broken: dict[str, str] = {}
    try:
        for name in names:
            host, port = addresses[name]
            driver = DRIVERS[name](host, port, **dict(options.get(name, {})))
            try:
                with trio.fail_after(10):
                    await driver.open()
            except Exception as exc:  # noqa: BLE001 - reported in every pair of that protocol
                broken[name] = f"cannot open a {name} connection to {host}:{port}: {exc}"
                continue
            drivers[name] = driver
        where = create_at or addresses
        first = next((n for n in CREATE_ORDER if n in where), None)
        if first is None:
            raise ValueError("the matrix needs a Cursus, TANK, Liftbridge or Kafka listener")
        creator = DRIVERS[first](*where[first], **dict(options.get(first, {})))
        await creator.open()
        drivers[f"creator:{first}"] = creator
        results = []
        for p in names:
            for c in names:
                if p in broken or c in broken:
                    results.append(PairResult(p, c, count, error=broken.get(p) or broken[c]))
                    continue
                topic = f"{prefix}{p}-to-{c}"
                try:
                    with trio.fail_after(10):
                        await creator.create_topic(topic, 1)
                except Exception as exc:  # noqa: BLE001 - reported as the pair's failure
                    error = f"cannot create {topic} through {creator.name}: {exc!r}"
                    results.append(PairResult(p, c, count, error=error))
                    continue
                results.append(
                    await run_pair(drivers[p], drivers[c], topic, count, through=through)
                )
        return results
    finally:
        for driver in drivers.values():
            with trio.CancelScope(shield=True):
                try:
                    await driver.aclose()
                except Exception:  # noqa: BLE001, S110 - closing a broken connection
                    pass


# ----------------------------------------------------------------------------- printing


def _rate(r: PairResult) -> str:
    return f"{r.records_per_s:,.0f}" if r.ok else "-"


def format_table(results: Sequence[PairResult], markdown: bool = False) -> str:
    """A grid (producer rows, consumer columns) of pass/fail and records/s, then the fields
    each pair compared and any failures."""
    names: list[str] = []
    for r in results:
        for n in (r.producer, r.consumer):
            if n not in names:
                names.append(n)
    cell = {(r.producer, r.consumer): r for r in results}

    def text(p: str, c: str) -> str:
        r = cell.get((p, c))
        if r is None:
            return ""
        return f"ok {_rate(r)}/s" if r.ok else "FAIL"

    header = ["producer \\ consumer", *names]
    rows = [[p, *(text(p, c) for c in names)] for p in names]
    lines: list[str] = []
    if markdown:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        lines.extend("| " + " | ".join(row) + " |" for row in rows)
    else:
        widths = [max(len(str(x[i])) for x in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            lines.append("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))
    passed = sum(r.ok for r in results)
    lines.append("")
    lines.append(
        f"{passed}/{len(results)} pairs passed, {results[0].records if results else 0} "
        "records each (records/s: produce and consume, end to end)"
    )
    fields_line: dict[str, list[str]] = {}
    for r in results:
        fields_line.setdefault(", ".join(r.checked), []).append(f"{r.producer}->{r.consumer}")
    lines.append("")
    lines.append("Fields compared:" if not markdown else "**Fields compared:**")
    for fields, pairs in fields_line.items():
        bullet = "- " if markdown else "  "
        lines.append(f"{bullet}{fields}: {' '.join(pairs)}")
    failed = [r for r in results if not r.ok]
    if failed:
        lines.append("")
        lines.append("Failures:" if not markdown else "**Failures:**")
        for r in failed:
            bullet = "- " if markdown else "  "
            lines.append(f"{bullet}{r.producer}->{r.consumer}: {r.error}")
    return "\n".join(lines)
