"""Planning without Spark or a gateway: splitting ranges, sharing a micro-batch budget, options."""

from __future__ import annotations

import pytest

from gateway.pipeline.options import EARLIEST, LATEST, OptionError, ReaderOptions, WriterOptions
from gateway.pipeline.source import cap_offsets, split_ranges


def test_split_cuts_large_ranges_and_drops_empty_ones() -> None:
    got = split_ranges([(0, 0, 10), (1, 5, 5), (2, 3, 7)], max_records=4)
    assert got == [(0, 0, 4), (0, 4, 8), (0, 8, 10), (2, 3, 7)]


def test_split_meets_min_partitions_by_halving_the_largest() -> None:
    got = split_ranges([(0, 0, 100), (1, 0, 10)], max_records=1000, min_splits=4)
    assert len(got) == 4
    assert sum(e - s for _, s, e in got) == 110
    # still contiguous per partition
    zero = [(s, e) for p, s, e in got if p == 0]
    assert zero[0][0] == 0 and zero[-1][1] == 100
    assert all(a[1] == b[0] for a, b in zip(zero, zero[1:], strict=False))


def test_split_never_cuts_single_records() -> None:
    assert split_ranges([(0, 0, 1)], max_records=10, min_splits=5) == [(0, 0, 1)]


@pytest.mark.parametrize("max_rows", [1, 5, 17, 100, 1000])
def test_cap_offsets_shares_the_budget(max_rows: int) -> None:
    start = {"0": 0, "1": 10, "2": 5}
    end = {"0": 50, "1": 12, "2": 5, "3": 30}
    capped = cap_offsets(start, end, max_rows)
    taken = {p: capped[p] - start.get(p, 0) for p in end}
    total = sum(end[p] - start.get(p, 0) for p in end)
    assert sum(taken.values()) == min(max_rows, total)
    assert all(0 <= taken[p] <= end[p] - start.get(p, 0) for p in end)
    if max_rows >= 4:  # every partition with data gets some
        assert taken["0"] > 0 and taken["1"] > 0 and taken["3"] > 0


def test_reader_options_defaults_and_json_offsets() -> None:
    opts = ReaderOptions.parse({"bootstrap": "h:1", "topic": "t"}, streaming=False)
    assert opts.starting == EARLIEST and opts.ending == LATEST
    opts = ReaderOptions.parse({"bootstrap": "h:1", "topic": "t"}, streaming=True)
    assert opts.starting == LATEST
    opts = ReaderOptions.parse(
        {
            "bootstrap": "h:1",
            "topic": "t",
            "startingOffsets": '{"0": 5, "2": -2}',
            "endingTimestamp": "2026-01-01T00:00:01Z",
            "startingTimestamp": "1767225600000",
            "partitions": "2,0",
        },
        streaming=False,
    )
    assert opts.starting_per == {0: 5, 2: -2}
    assert opts.starting_timestamp_us == 1_767_225_600_000_000
    assert opts.ending_timestamp_us == 1_767_225_601_000_000
    assert opts.partitions == (0, 2)


@pytest.mark.parametrize(
    "options, streaming, message",
    [
        ({"topic": "t"}, False, "bootstrap"),
        ({"bootstrap": "h:1"}, False, "topic"),
        ({"bootstrap": "h:1", "topic": "t", "startingOffsets": "soon"}, False, "startingOffsets"),
        ({"bootstrap": "h:1", "topic": "t", "endingOffsets": "earliest"}, False, "earliest"),
        ({"bootstrap": "h:1", "topic": "t", "endingOffsets": "latest"}, True, "batch"),
        ({"bootstrap": "h:1", "topic": "t", "startingTimestamp": "yesterday"}, False, "ISO"),
        ({"bootstrap": "h:1", "topic": "t", "maxRecordsPerSplit": "0"}, False, ">= 1"),
        ({"bootstrap": "h:1", "topic": "t", "failOnDataLoss": "maybe"}, False, "boolean"),
    ],
)
def test_reader_options_errors(options: dict, streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        ReaderOptions.parse(options, streaming=streaming)


def test_writer_options() -> None:
    opts = WriterOptions.parse({"bootstrap": "h:1", "topic": "t", "partitions": "3"})
    assert opts.partitions == 3 and opts.batch_records == 5000
    with pytest.raises(OptionError, match="topic"):
        WriterOptions.parse({"bootstrap": "h:1"})
