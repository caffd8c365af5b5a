"""bench/latency.py's open loop: requests are released on a fixed schedule whatever the answers
do, and a request's latency counts its wait for a free connection (no coordinated omission).
Runs on trio's MockClock: virtual time, so the checks are exact and independent of the machine."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import trio
import trio.testing

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def latency() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_latency", ROOT / "bench" / "latency.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_latency"] = module
    spec.loader.exec_module(module)
    return module


def run_virtual(fn) -> object:  # type: ignore[no-untyped-def]
    return trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_slow_server_does_not_hold_back_the_schedule(latency: ModuleType) -> None:
    """One connection answering in 10 ms, requests due every 1 ms: request i is released at
    i ms and answered at (i + 1) * 10 ms, so its latency is 9 i + 10 ms, queueing included."""
    releases: list[float] = []

    async def main() -> object:
        start = trio.current_time()

        async def slow() -> None:
            releases.append(trio.current_time() - start)
            await trio.sleep(0.010)

        return await latency.open_loop([slow], rate=1000.0, count=10)

    run = run_virtual(main)
    assert [round(lat * 1e3, 6) for lat in run.latencies] == [9 * i + 10 for i in range(10)]
    # the scheduler itself was never late: every release at its due time
    assert all(abs(lag) < 1e-9 for lag in run.lags)
    assert len(releases) == 10


def test_idle_connections_take_requests_at_once(latency: ModuleType) -> None:
    """With enough connections nothing queues: every latency is the service time."""

    async def main() -> object:
        async def service() -> None:
            await trio.sleep(0.003)

        return await latency.open_loop([service] * 4, rate=1000.0, count=50)

    run = run_virtual(main)
    assert len(run.latencies) == 50
    assert all(abs(lat - 0.003) < 1e-9 for lat in run.latencies)
    assert run.seconds == pytest.approx(0.049 + 0.003)  # first due time to last answer


def test_percentiles(latency: ModuleType) -> None:
    samples = [i / 1000 for i in range(1, 1001)]  # 1..1000 ms
    s = latency.summary_ms(samples)
    assert (s["p50_ms"], s["p99_ms"], s["p999_ms"]) == (501.0, 991.0, 1000.0)


def test_a_run_under_host_steal_is_not_trusted(latency: ModuleType) -> None:
    """A run that kept its schedule is still repeated when the host stole the virtual CPUs for
    more than MAX_STEAL_PCT of its time; schedule misses are untrusted whatever the steal."""
    quiet = {"overloaded": False, "schedule_lag_p99_ms": 1.0, "host_steal_pct": 0.25}
    assert latency.trustworthy(quiet)
    assert not latency.trustworthy({**quiet, "host_steal_pct": latency.MAX_STEAL_PCT + 0.1})
    assert not latency.trustworthy({**quiet, "overloaded": True})
    assert not latency.trustworthy({**quiet, "schedule_lag_p99_ms": latency.MAX_LAG_MS + 1})


def test_the_median_round_is_the_middle_or_the_worse_middle(latency: ModuleType) -> None:
    rounds = [{"added_p99_ms": x} for x in (9.0, 1.0, 2.0)]
    assert latency.median_round(rounds)["added_p99_ms"] == 2.0
    assert latency.median_round(rounds[:2])["added_p99_ms"] == 9.0  # even: the worse middle
    assert latency.median_round([{"added_p99_ms": 3.0}])["added_p99_ms"] == 3.0
