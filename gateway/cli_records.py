"""Records on the command line, sans-IO: input lines to bounded batches (``gateway produce``),
records to output lines (``gateway consume``), and the JSON form both share.

The JSON form of a record is one object per line::

    {"topic": "t", "partition": 0, "offset": 7, "timestamp_us": 1700000000000000,
     "key": "k", "value": {"base64": "AAEC"}, "headers": [["trace", "abc"]]}

Keys, values and header values are strings when they are valid UTF-8, ``{"base64": "..."}``
otherwise, ``null`` when absent. ``gateway produce --format json`` reads the same objects (only
``value`` is needed; ``topic`` and ``offset`` are ignored), so the two round-trip.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gateway.cli_errors import UsageError
from gateway.model import Record

Headers = tuple[tuple[str, bytes], ...]


def bytes_to_json(data: bytes | None) -> str | dict[str, str] | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def bytes_from_json(obj: Any, what: str) -> bytes | None:
    if obj is None:
        return None
    if isinstance(obj, str):
        return obj.encode("utf-8")
    if isinstance(obj, dict) and set(obj) == {"base64"} and isinstance(obj["base64"], str):
        try:
            return base64.b64decode(obj["base64"], validate=True)
        except binascii.Error:
            raise UsageError(f"{what}: {obj['base64']!r} is not valid base64") from None
    raise UsageError(f'{what}: expected a string, {{"base64": "..."}} or null, got {obj!r}')


def record_to_json(
    topic: str,
    partition: int,
    offset: int,
    timestamp_us: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes]],
) -> str:
    return json.dumps(
        {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "timestamp_us": timestamp_us,
            "key": bytes_to_json(key),
            "value": bytes_to_json(value),
            "headers": [[name, bytes_to_json(v)] for name, v in headers],
        },
        ensure_ascii=False,
    )


def record_to_text(key: bytes | None, value: bytes | None, keyed: bool) -> bytes:
    line = (value or b"") + b"\n"
    return (key or b"") + b"\t" + line if keyed else line


@dataclass(frozen=True)
class Entry:
    """One input record: what to append, and where (``None``: the gateway decides)."""

    record: Record
    partition: int | None


def parse_text(line: bytes, keyed: bool, where: str) -> Entry:
    if keyed:
        key, tab, value = line.partition(b"\t")
        if not tab:
            shown = line[:60].decode(errors="replace")
            raise UsageError(f"{where}: --keyed expects key<TAB>value, got {shown!r}")
        return Entry(Record(key, value), None)
    return Entry(Record(None, line), None)


def parse_json(line: bytes, where: str) -> Entry:
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise UsageError(f"{where}: not a JSON object: {exc}") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    headers = obj.get("headers") or []
    if not isinstance(headers, list) or not all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) for h in headers
    ):
        raise UsageError(f"{where}: headers must be a list of [name, value] pairs")
    ts = obj.get("timestamp_us")
    partition = obj.get("partition")
    for name, v in (("timestamp_us", ts), ("partition", partition)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise UsageError(f"{where}: {name} must be an integer, got {v!r}")
    record = Record(
        bytes_from_json(obj.get("key"), f"{where}: key"),
        bytes_from_json(obj.get("value"), f"{where}: value"),
        tuple((n, bytes_from_json(v, f"{where}: header {n}") or b"") for n, v in headers),
        -1 if ts is None else ts,
    )
    return Entry(record, partition)


def record_size(r: Record) -> int:
    return (
        len(r.key or b"")
        + len(r.value or b"")
        + sum(len(n) + len(v) for n, v in r.headers)
        + 32  # the per-record overhead of the canonical encoding, roughly
    )


def batches(
    lines: Iterable[bytes],
    fmt: str,
    keyed: bool,
    partition: int | None,
    max_records: int,
    max_bytes: int,
) -> Iterator[tuple[int | None, list[Record]]]:
    """``(partition, records)`` batches of the input lines, each at most ``max_records``
    records and about ``max_bytes`` bytes (one larger record makes a batch of its own).
    Empty lines are skipped; only one batch is held at a time."""
    batch: list[Record] = []
    size = 0
    current: int | None = partition
    for n, raw in enumerate(lines, 1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        where = f"stdin line {n}"
        entry = parse_json(line, where) if fmt == "json" else parse_text(line, keyed, where)
        target = partition if partition is not None else entry.partition
        rsize = record_size(entry.record)
        if batch and (target != current or len(batch) >= max_records or size + rsize > max_bytes):
            yield current, batch
            batch, size = [], 0
        current = target
        batch.append(entry.record)
        size += rsize
    if batch:
        yield current, batch
