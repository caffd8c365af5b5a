"""The core's topic-creation budgets: ``max_partitions_total`` (derived from the open-file limit
by default) and ``max_topics_created_per_s``, each counted in gateway_limit_hits_total."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
import trio

from gateway.backends.memory import MemoryBackend
from gateway.config import ConfigError, parse_config
from gateway.core.engine import Core, CreationRate
from gateway.fdlimit import default_partition_cap
from gateway.model import CreatePartitions, CreateTopic, DescribeTopic, ErrorCode, GatewayError
from gateway.observability import LIMIT_HITS
from tests.backends.test_embedded import embedded


def hits(limit: str) -> float:
    return LIMIT_HITS.labels(limit, "server")._value.get()


def core(**budgets: object) -> Core:
    return Core({"m": MemoryBackend("m")}, [("*", "m")], **budgets)  # type: ignore[arg-type]


async def test_max_partitions_total_refuses_creates_beyond_it_clearly() -> None:
    c = core(max_partitions_total=10)
    await c.execute(CreateTopic("a", 6))
    before = hits("max_partitions_total")
    with pytest.raises(GatewayError) as exc:
        await c.execute(CreateTopic("b", 5))
    assert exc.value.code is ErrorCode.INVALID_PARTITIONS
    assert "max_partitions_total (10)" in exc.value.message and "holds 6" in exc.value.message
    with pytest.raises(GatewayError):
        await c.execute(CreatePartitions("a", 5))
    await c.execute(CreatePartitions("a", 4))  # exactly up to the cap is fine
    assert (await c.topic("a")).partitions == 10
    with pytest.raises(GatewayError):  # auto-creation counts too (default_partitions = 1)
        await c.execute(DescribeTopic("d", create=True))
    assert hits("max_partitions_total") == before + 3


def test_the_default_partition_cap_follows_the_file_limit() -> None:
    assert default_partition_cap(1024) == (1024 - 256) // 4
    assert default_partition_cap(256) == (256 - 64) // 4
    assert default_partition_cap(1 << 20) == ((1 << 20) - (1 << 18)) // 4
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert default_partition_cap() == default_partition_cap(soft)


async def test_max_topics_created_per_s_is_a_token_bucket() -> None:
    now = [100.0]
    rate = CreationRate(3, clock=lambda: now[0])
    for _ in range(3):
        rate.take()  # a burst of one second's worth
    before = hits("max_topics_created_per_s")
    with pytest.raises(GatewayError) as exc:
        rate.take()
    assert exc.value.code is ErrorCode.BACKEND_UNAVAILABLE and exc.value.code.retriable
    assert "max_topics_created_per_s (3)" in exc.value.message
    assert hits("max_topics_created_per_s") == before + 1
    now[0] += 0.34
    rate.take()  # refilled by one
    with pytest.raises(GatewayError):
        rate.take()
    unlimited = CreationRate(0, clock=lambda: now[0])
    for _ in range(1000):
        unlimited.take()


async def test_the_core_applies_the_creation_rate() -> None:
    c = core(max_topics_created_per_s=2)
    await c.execute(CreateTopic("a", 1))
    await c.execute(DescribeTopic("b", create=True))
    with pytest.raises(GatewayError) as exc:
        await c.execute(DescribeTopic("c", create=True))
    assert "max_topics_created_per_s" in exc.value.message
    assert [t.name for t in await c.router.backends["m"].list_topics()] == ["a", "b"]


def test_config_keys_are_validated() -> None:
    cfg = parse_config({"server": {"max_partitions_total": 500, "max_topics_created_per_s": 5}})
    assert cfg.server.max_partitions_total == 500 and cfg.server.max_topics_created_per_s == 5
    with pytest.raises(ConfigError) as exc:
        parse_config({"server": {"max_partitions_total": -1, "max_topics_created_per_s": -2}})
    text = str(exc.value)
    assert "server.max_partitions_total: got -1" in text
    assert "server.max_topics_created_per_s: got -2" in text


async def test_concurrent_creates_cannot_pass_the_partition_budget_together(
    tmp_path: Path,
) -> None:
    async with embedded(tmp_path, fsync="never") as backend:
        c = Core({"e": backend}, [("*", "e")], max_partitions_total=10)
        outcomes: list[str] = []

        async def create(name: str) -> None:
            try:
                await c.execute(CreateTopic(name, 4))
                outcomes.append("created")
            except GatewayError as exc:
                assert "max_partitions_total (10)" in exc.message
                outcomes.append("refused")

        async with trio.open_nursery() as nursery:
            for i in range(6):  # all start before any finishes (creation waits in a thread)
                nursery.start_soon(create, f"t{i}")
        assert sorted(outcomes) == ["created"] * 2 + ["refused"] * 4
        assert sum(t.partitions for t in await backend.list_topics()) == 8
        assert c._creating == c._creating_topics == 0
        # the topic count budget too: 2 topics exist, 2 more fit
        c = Core({"e": backend}, [("*", "e")], max_topics=4, max_partitions_total=1000)

        async def create_one(name: str) -> None:
            try:
                await c.execute(CreateTopic(name, 1))
            except GatewayError as exc:
                assert "max_topics = 4" in exc.message

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(create_one, f"u{i}")
        assert len(await backend.list_topics()) == 4
