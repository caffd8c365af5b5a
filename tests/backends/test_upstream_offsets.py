"""Concurrent appends to one partition through an upstream backend whose protocol answers a
produce without offsets (TANK, Iggy): the offsets each append reports are read from the
partition's watermark afterwards, so appends of this gateway to one partition are serialized
and each reports exactly where its records landed."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gateway.model import AppendResult, Record, RecordBatch
from tests.backends.upstream import upstream_factory


@pytest.mark.parametrize("protocol", ["tank", "iggy"])
async def test_concurrent_appends_report_where_their_records_landed(
    protocol: str, tmp_path: Path
) -> None:
    async with upstream_factory(protocol)(tmp_path, pool_size=8) as backend:
        await backend.create_topic("t", 1, ())
        results: dict[int, AppendResult] = {}

        async def append(n: int) -> None:
            batch = RecordBatch([Record(None, f"{n}-{i}".encode()) for i in range(n)])
            results[n] = await backend.append("t", 0, batch)

        for _ in range(3):
            results.clear()
            async with trio.open_nursery() as nursery:
                for n in range(1, 9):
                    nursery.start_soon(append, n)
            spans = sorted((r.base_offset, r.last_offset, n) for n, r in results.items())
            for (_, last, _), (base, _, _) in zip(spans, spans[1:], strict=False):
                assert base == last + 1, spans  # no overlap, no gap
            stored: dict[int, bytes] = {}
            offset = spans[0][0]
            while offset <= spans[-1][1]:
                for b in await backend.read("t", 0, offset, 1000, 1 << 20):
                    for r in b.records:
                        stored[r.offset] = r.value
                        offset = r.offset + 1
            for n, r in results.items():
                got = [stored[o] for o in range(r.base_offset, r.last_offset + 1)]
                assert got == [f"{n}-{i}".encode() for i in range(n)], (n, r)
