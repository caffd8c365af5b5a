"""The Cursus upstream backend against a broker in either reply dialect (a gateway's Cursus
listener with ``dialect`` fixed): topics are created, grown, listed and deleted, records go round
trip."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.backends.upstream import UpstreamConfig, make_upstream
from gateway.model import Record, RecordBatch
from tests.backends.servers import opened
from tests.protocols.cursus.conftest import cursus_gateway


@pytest.mark.parametrize("dialect", ["2026-04", "2026-08"])
async def test_upstream_cursus_in_both_dialects(tmp_path: Path, dialect: str) -> None:
    async with cursus_gateway(tmp_path, dialect=dialect) as (host, port):
        config = UpstreamConfig(protocol="cursus", address=f"{host}:{port}")
        async with opened(make_upstream("up-cursus", config)) as backend:
            assert (await backend.create_topic("t", 1)).partitions == 1
            assert (await backend.create_partitions("t", 2)).partitions == 3
            assert [(t.name, t.partitions) for t in await backend.list_topics()] == [("t", 3)]
            await backend.append("t", 2, RecordBatch([Record(b"k", b"v1"), Record(None, b"v2")]))
            got = (await backend.read("t", 2, 0, 10, 1 << 20))[0].records
            assert [(r.offset, r.key, r.value) for r in got] == [(0, b"k", b"v1"), (1, None, b"v2")]
            await backend.delete_topic("t")
            assert await backend.list_topics() == []
