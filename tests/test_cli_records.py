"""The CLI's record forms and batching (sans-IO): bounded batches, the JSON form's bytes."""

from __future__ import annotations

import json

import pytest

from gateway.cli_errors import UsageError
from gateway.cli_records import batches, bytes_from_json, bytes_to_json, record_to_json


def test_batches_are_bounded_by_records_and_bytes() -> None:
    lines = (b"%04d\n" % i for i in range(25))
    got = list(batches(lines, "text", False, None, max_records=10, max_bytes=1 << 20))
    assert [len(b) for _, b in got] == [10, 10, 5]
    assert got[0][1][0].value == b"0000" and got[-1][1][-1].value == b"0024"
    # bytes: each record counts its fields plus a fixed overhead (32): 3 of 100 bytes per 500
    lines = (b"x" * 100 + b"\n" for _ in range(7))
    got = list(batches(lines, "text", False, None, max_records=1000, max_bytes=500))
    assert [len(b) for _, b in got] == [3, 3, 1]
    # a record larger than the bound goes alone, not refused
    got = list(batches([b"y" * 2000 + b"\n", b"z\n"], "text", False, None, 1000, 500))
    assert [len(b) for _, b in got] == [1, 1]


def test_batches_are_lazy() -> None:
    """Only one batch is read ahead: the input is never held whole."""
    read = 0

    def lines():  # type: ignore[no-untyped-def]
        nonlocal read
        for i in range(1_000_000):
            read += 1
            yield b"%d\n" % i

    first = next(batches(lines(), "text", False, None, max_records=100, max_bytes=1 << 20))
    assert len(first[1]) == 100 and read == 101


def test_keyed_text_and_json_partitions() -> None:
    got = list(batches([b"k\tv\n", b"\n", b"a\tb\tc\r\n"], "text", True, None, 10, 1 << 20))
    assert [(r.key, r.value) for r in got[0][1]] == [(b"k", b"v"), (b"a", b"b\tc")]
    lines = [
        json.dumps({"value": "a", "partition": 0}).encode(),
        json.dumps({"value": "b", "partition": 0}).encode(),
        json.dumps({"value": "c", "partition": 1}).encode(),
        json.dumps({"value": "d"}).encode(),
    ]
    got = list(batches(lines, "json", False, None, 10, 1 << 20))
    assert [(p, [r.value for r in b]) for p, b in got] == [
        (0, [b"a", b"b"]),
        (1, [b"c"]),
        (None, [b"d"]),
    ]
    # --partition wins over the records' own
    got = list(batches(lines, "json", False, 3, 10, 1 << 20))
    assert [(p, len(b)) for p, b in got] == [(3, 4)]


def test_bytes_in_json() -> None:
    assert bytes_to_json(None) is None
    assert bytes_to_json("é".encode()) == "é"
    assert bytes_to_json(b"\xff\x00") == {"base64": "/wA="}
    for raw in (b"", b"text", b"\x80\x81", bytes(range(256))):
        assert bytes_from_json(bytes_to_json(raw), "v") == raw
    with pytest.raises(UsageError, match="not valid base64"):
        bytes_from_json({"base64": "!!"}, "v")
    with pytest.raises(UsageError, match="expected a string"):
        bytes_from_json(5, "v")
    line = record_to_json("t", 1, 7, 42, None, b"\xfe", [("h", b"x")])
    assert json.loads(line) == {
        "topic": "t",
        "partition": 1,
        "offset": 7,
        "timestamp_us": 42,
        "key": None,
        "value": {"base64": "/g=="},
        "headers": [["h", "x"]],
    }


def test_bad_json_lines_name_the_line() -> None:
    for text, message in (
        (b"{", "stdin line 1: not a JSON object"),
        (b'{"value": "v", "partition": "0"}', "stdin line 1: partition must be an integer"),
        (b'{"value": "v", "headers": {"a": "b"}}', "stdin line 1: headers must be a list"),
    ):
        with pytest.raises(UsageError, match=message):
            list(batches([text], "json", False, None, 10, 100))
