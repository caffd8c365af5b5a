"""bench/loadgen.c, the latency benchmark's C load generator, against a real gateway: built with
the machine's compiler, it replays each protocol's produce request (encoded by the in-repo
client) in the closed and the open loop, every answer is counted once, and every answered
produce stored its record (the generator's own check, which fails when they differ)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from bench import latency, loadgen
from gateway.interop.drivers import PROTOCOLS
from gateway.model import Record
from tests.support import GatewayProcess

RECORD = Record(None, b"v" * 100, (), 1_700_000_000_000_000, -1)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    listeners = {p: {} for p in PROTOCOLS}
    with GatewayProcess(tmp_path_factory.mktemp("loadgen"), listeners=listeners) as gw:
        yield gw


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return loadgen.build(tmp_path_factory.mktemp("loadgen-build"))


def generator(
    gw: GatewayProcess, exe: Path, name: str, topic: str, checked_topic: str | None = None
) -> loadgen.Loadgen:
    async def make() -> loadgen.Loadgen:
        await latency.create(gw, topic)
        if checked_topic:
            await latency.create(gw, checked_topic)
        frames = await loadgen.capture(name, gw.address(name), topic, RECORD)
        return loadgen.Loadgen(exe, name, gw.address(name), gw.address("kafka08"),
                               checked_topic or topic, frames, latency.gateway_pid(gw))  # fmt: skip

    return trio.run(make)


@pytest.mark.parametrize("name", PROTOCOLS)
def test_closed_and_open_loops_store_every_answered_produce(
    name: str, gateway: GatewayProcess, exe: Path
) -> None:
    gen = generator(gateway, exe, name, f"lg-{name}")
    before = trio.run(loadgen.end_offset, gateway.address("kafka08"), f"lg-{name}")

    closed = trio.run(gen.closed, 4, 0.3)
    assert closed["requests_per_s"] > 0
    assert closed["gateway_cpu_cores"] > 0  # the gateway's /proc figures were read

    run = trio.run(gen.open, 4, 400.0, 40, 200)
    assert len(run.latencies) == len(run.lags) == 200
    assert all(lat > 0 for lat in run.latencies)  # every timed request was answered
    assert all(lag >= 0 for lag in run.lags)  # none released before its due time
    assert run.seconds >= 199 / 400.0  # 200 requests due 1/400 s apart
    assert run.total_jiffies > 0

    stored = trio.run(loadgen.end_offset, gateway.address("kafka08"), f"lg-{name}") - before
    assert stored == closed["requests"] + 40 + 200


def test_a_produce_that_stored_nothing_fails_the_run(gateway: GatewayProcess, exe: Path) -> None:
    """The records go to one topic while the generator checks another: 0 stored of N answered."""
    gen = generator(gateway, exe, "tank", "lg-real", checked_topic="lg-other")
    with pytest.raises(loadgen.LoadgenError, match="produces answered, 0 records stored"):
        trio.run(gen.closed, 1, 0.1)


def test_a_refused_connection_is_an_error(gateway: GatewayProcess, exe: Path) -> None:
    gen = generator(gateway, exe, "kafka08", "lg-refused")
    gen.address = ("127.0.0.1", 1)  # nothing listens on port 1
    with pytest.raises(loadgen.LoadgenError, match="connect"):
        trio.run(gen.closed, 1, 0.1)
