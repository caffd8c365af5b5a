"""Test data: records with every field of the model (null keys and values, empty and repeated
headers, distinct timestamps), and helpers to compare them."""

from __future__ import annotations

from gateway.model import Record

BASE_TS = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds


def make_records(n: int, seed: int = 0, start_ts: int = BASE_TS) -> list[Record]:
    out = []
    for i in range(n):
        j = i + seed
        key = None if j % 7 == 0 else b"key-%d" % (j % 1000)
        value = None if j % 97 == 3 else (b"value-%d-" % j) + bytes([j % 256]) * (j % 50)
        if j % 3 == 0:
            headers: tuple[tuple[str, bytes], ...] = ()
        elif j % 3 == 1:
            headers = (("trace", b"t-%d" % j),)
        else:
            headers = (("a", b""), ("a", b"\x00\xff"), ("h\u00e9", b"%d" % j))
        out.append(Record(key, value, headers, start_ts + j * 1000))
    return out


def as_tuple(r: object) -> tuple:
    """(key, value, headers, timestamp_us) of a Record, a FetchedRecord or a row dict whose
    ``timestamp`` is microseconds (Spark: ``unix_micros(timestamp)``; Arrow: cast to int64)."""
    if isinstance(r, dict):
        headers = tuple((h["key"], h["value"]) for h in (r["headers"] or ()))
        return (r["key"], r["value"], headers, int(r["timestamp"]))
    return (r.key, r.value, tuple(r.headers), r.timestamp_us)  # type: ignore[attr-defined]
