"""The column-wise decoder of binary fetch answers (what the Spark reader runs) against the
record-by-record one, on answers built here: no gateway, no Spark."""

from __future__ import annotations

import random
import struct

import pytest

from gateway.canonical import CANONICAL, HEADER, without_starts
from gateway.model import Record
from gateway.pipeline.client import decode_binary_fetch
from gateway.pipeline.columnar import decode_fetch_arrow
from gateway.pipeline.source import arrow_schema, columns_to_arrow
from tests.pipeline.records import make_records


def answer(blocks: list[tuple[int, bytes]], hw: int = 999, lso: int = 3) -> bytes:
    head = struct.pack("<qqI", hw, lso, len(blocks))
    return head + b"".join(struct.pack("<qI", base, len(b)) + b for base, b in blocks)


def random_record(rng: random.Random) -> Record:
    def blob(n: int) -> bytes:
        return bytes(rng.randrange(256) for _ in range(n))

    key = None if rng.random() < 0.2 else blob(rng.randrange(0, 20))
    value = None if rng.random() < 0.2 else blob(rng.randrange(0, 50))
    names = ["a", "h\u00e9-\u00f1", "", "trace"]
    headers = tuple(
        (rng.choice(names), blob(rng.randrange(0, 10))) for _ in range(rng.choice([0, 0, 1, 2, 3]))
    )
    return Record(key, value, headers, rng.randrange(0, 2**50))


def reference(data: bytes, end: int) -> tuple[object, int, int, int]:
    cols, hw, lso = decode_binary_fetch(data)
    if cols.offsets:
        cols.truncate(end - cols.offsets[0])
    if not cols.offsets or cols.offsets[0] >= end:
        return None, hw, lso, len(cols.offsets)
    return columns_to_arrow(cols, "tp", 7, arrow_schema()), hw, lso, len(cols.offsets)


@pytest.mark.parametrize("versions", ["3", "1", "mixed"])
def test_same_batches_as_the_record_decoder(versions: str) -> None:
    """Blocks with start tables (version 3), without (version 1, stored before the tables)
    and both in one answer decode to the same batches as the record-by-record decoder."""
    rng = random.Random(11)
    schema = arrow_schema()
    for _ in range(150):
        base = rng.randrange(0, 100)
        blocks = []
        for _ in range(rng.randrange(0, 4)):
            count = rng.randrange(1, 30)
            block = CANONICAL.encode([random_record(rng) for _ in range(count)])
            if versions == "1" or (versions == "mixed" and rng.random() < 0.5):
                block = without_starts(block)
            blocks.append((base, block))
            base += count
        data = answer(blocks)
        end = rng.choice([10**9, rng.randrange(0, base + 2)])
        ref, hw, lso, _ = reference(data, end)
        page = decode_fetch_arrow(data, "tp", 7, end, schema)
        assert (page.high_watermark, page.log_start_offset) == (hw, lso)
        if ref is None:
            assert page.batch is None
            continue
        assert page.batch.schema.equals(schema)
        assert page.batch.equals(ref)
        assert page.batch.to_pylist() == ref.to_pylist()  # type: ignore[attr-defined]
        assert page.first_offset == blocks[0][0]
        assert page.last_offset == page.first_offset + page.batch.num_rows - 1


def test_every_field_of_the_test_records() -> None:
    recs = make_records(300)
    data = answer([(40, CANONICAL.encode(recs[:100])), (140, CANONICAL.encode(recs[100:]))])
    page = decode_fetch_arrow(data, "t", 0, 10**9, arrow_schema())
    rows = page.batch.to_pylist()
    assert [r["offset"] for r in rows] == list(range(40, 340))
    assert [(r["key"], r["value"]) for r in rows] == [(r.key, r.value) for r in recs]
    assert [tuple((h["key"], h["value"]) for h in r["headers"]) for r in rows] == [
        r.headers for r in recs
    ]
    stamps = page.batch.column("timestamp").cast("int64").to_pylist()
    assert stamps == [r.timestamp_us for r in recs]
    assert set(page.batch.column("topic").to_pylist()) == {"t"}


def test_empty_answer_and_range_end() -> None:
    empty = decode_fetch_arrow(answer([], hw=5, lso=1), "t", 0, 10, arrow_schema())
    assert empty.batch is None and empty.first_offset < 0
    assert (empty.high_watermark, empty.log_start_offset) == (5, 1)
    data = answer([(10, CANONICAL.encode(make_records(5)))])
    past = decode_fetch_arrow(data, "t", 0, 10, arrow_schema())
    assert past.batch is None and past.first_offset == 10
    cut = decode_fetch_arrow(data, "t", 0, 12, arrow_schema())
    assert cut.batch.num_rows == 2 and cut.last_offset == 11


@pytest.mark.parametrize("damage", ["short", "long", "version", "truncated"])
def test_damaged_answers_are_refused(damage: str) -> None:
    block = CANONICAL.encode(make_records(5))
    if damage == "short":
        data = answer([(0, block[:-1])])
    elif damage == "long":
        data = answer([(0, block + b"x")])
    elif damage == "version":
        data = answer([(0, b"\x02" + block[1:])])
    else:
        data = answer([(0, block)])[:-3]
    with pytest.raises((ValueError, struct.error)):
        decode_fetch_arrow(data, "t", 0, 10**9, arrow_schema())


def test_version_1_and_3_answers_give_equal_batches() -> None:
    recs = make_records(300)
    blocks = [CANONICAL.encode(recs[:120]), CANONICAL.encode(recs[120:])]
    new = answer([(0, blocks[0]), (120, blocks[1])])
    old = answer([(0, without_starts(blocks[0])), (120, without_starts(blocks[1]))])
    for end in (10**9, 50, 120, 121, 299):
        a = decode_fetch_arrow(new, "t", 0, end, arrow_schema())
        b = decode_fetch_arrow(old, "t", 0, end, arrow_schema())
        assert a.batch.equals(b.batch) and a.last_offset == b.last_offset == min(end, 300) - 1


def damaged_table(entry: int, value: int) -> bytes:
    """An answer of two blocks (offsets 0 and 5) whose second block's start table has ``entry``
    set to ``value``: the records are intact, the table lies about them."""
    second = bytearray(CANONICAL.encode(make_records(4)))
    struct.pack_into("<I", second, HEADER.size + 4 * entry, value)
    return answer([(0, CANONICAL.encode(make_records(5))), (5, bytes(second))])


@pytest.mark.parametrize(
    ("entry", "value", "record"),
    [
        (0, 1, 0),  # the first record does not start at the table's 0
        (2, 5, 1),  # record 1 does not end where the table says record 2 starts
        (3, 10**6, 2),  # an entry far past the block (and the answer)
        (3, 2**32 - 1, 2),
    ],
)
def test_start_tables_that_do_not_match_their_records_are_refused(
    entry: int, value: int, record: int
) -> None:
    with pytest.raises(
        ValueError,
        match=f"offset 5: its record start table does not match its "
        rf"records \(at record {record}\)",
    ):
        decode_fetch_arrow(damaged_table(entry, value), "t", 0, 10**9, arrow_schema())


def test_a_table_is_checked_when_the_range_ends_inside_its_block() -> None:
    data = damaged_table(2, 5)
    with pytest.raises(ValueError, match="offset 5"):
        decode_fetch_arrow(data, "t", 0, 7, arrow_schema())  # records 5 and 6: 6 ends wrong
    page = decode_fetch_arrow(data, "t", 0, 6, arrow_schema())  # record 5 ends at entry 1: fine
    assert page.batch.num_rows == 6
