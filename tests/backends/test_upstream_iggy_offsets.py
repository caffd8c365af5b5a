"""Committed offsets on an Iggy upstream: Iggy's own consumer offsets (STORE/GET_CONSUMER_OFFSET,
consumer kind 1 named by the group), against a second gateway's Iggy listener. Iggy stores the
last offset read: what a native Iggy consumer of that name sees, and what it stores, is the
committed offset - 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.backends.upstream.iggy import IggyUpstream
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from tests.backends.upstream import IGGY_LOGIN, second_gateway, upstream_factory


async def code_of(call: object) -> GatewayError:
    with pytest.raises(GatewayError) as info:
        await call  # type: ignore[misc]
    return info.value


async def native() -> IggyClient:
    client = await IggyClient.connect(*second_gateway().address("iggy"))
    await client.login(IGGY_LOGIN["username"], IGGY_LOGIN["password"])
    return client


async def test_commit_and_fetch_are_iggy_consumer_offsets(tmp_path: Path) -> None:
    async with upstream_factory("iggy", **IGGY_LOGIN)(tmp_path) as backend:
        assert isinstance(backend, IggyUpstream)
        assert backend.capabilities.committed_offsets
        await backend.create_topic("orders", 2)
        await backend.append("orders", 1, RecordBatch([Record(None, b"%d" % i) for i in range(5)]))

        assert await backend.fetch_offset("g", "orders", 1) is None  # nothing stored yet
        await backend.commit_offset("g", "orders", 1, 0, "")  # nothing read: still none
        assert await backend.fetch_offset("g", "orders", 1) is None
        await backend.commit_offset("g", "orders", 1, 3, "dropped metadata")
        assert await backend.fetch_offset("g", "orders", 1) == (3, "")
        await backend.commit_offset("g", "orders", 1, 5, "")  # everything read
        assert await backend.fetch_offset("g", "orders", 1) == (5, "")
        assert await backend.fetch_offset("other", "orders", 1) is None  # per group
        assert await backend.fetch_offset("g", "orders", 0) is None  # per partition

        # a native Iggy consumer named "g" sees the last offset read, and reads on after it
        stream, topic = backend.split("orders")
        async with await native() as client:
            g = c.Consumer(c.ConsumerKind.CONSUMER, c.Identifier("g"))
            got = await client.call(
                c.GetConsumerOffset(g, c.Identifier(stream), c.Identifier(topic), 2)
            )
            assert got.stored_offset == 4
            await client.call(
                c.StoreConsumerOffset(g, c.Identifier(stream), c.Identifier(topic), 2, 1)
            )
        assert await backend.fetch_offset("g", "orders", 1) == (2, "")

        # what Iggy cannot hold is refused, with the reason
        err = await code_of(backend.commit_offset("g", "orders", 1, 0, ""))
        assert err.code is ErrorCode.UNSUPPORTED and "nothing read" in err.message
        err = await code_of(backend.commit_offset("g", "orders", 1, 7, ""))  # beyond the log
        assert err.code is ErrorCode.OFFSET_OUT_OF_RANGE
        long_name = "g" * 256
        err = await code_of(backend.commit_offset(long_name, "orders", 1, 1, ""))
        assert err.code is ErrorCode.INVALID_REQUEST and "1..255 bytes" in err.message
        err = await code_of(backend.fetch_offset(long_name, "orders", 1))
        assert err.code is ErrorCode.INVALID_REQUEST
        await backend.commit_offset("é" * 127, "orders", 1, 1, "")  # 254 bytes: fits
        assert await backend.fetch_offset("é" * 127, "orders", 1) == (1, "")
        err = await code_of(backend.fetch_offset("g", "orders", 2))
        assert err.code is ErrorCode.UNKNOWN_PARTITION
        assert await backend.fetch_offset("g", "orders", 1) == (2, "")  # unchanged by those


async def test_without_a_login_no_committed_offsets(tmp_path: Path) -> None:
    """The old dialect has numeric consumer ids only: no room for a group name."""
    async with upstream_factory("iggy")(tmp_path) as backend:
        assert not backend.capabilities.committed_offsets
        await backend.create_topic("orders", 1)
        err = await code_of(backend.commit_offset("g", "orders", 0, 1, ""))
        assert err.code is ErrorCode.UNSUPPORTED and "username" in err.message
        err = await code_of(backend.fetch_offset("g", "orders", 0))
        assert err.code is ErrorCode.UNSUPPORTED
