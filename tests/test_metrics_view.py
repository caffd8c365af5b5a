"""gateway/metrics_view.py: merging workers' expositions, the scrape-time gauges."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import load_config
from gateway.metrics_view import merge, merge_status, scrape
from gateway.model import (
    CommitOffset,
    CreateTopic,
    DeleteTopic,
    GatewayError,
    Produce,
    Record,
    RecordBatch,
)
from tests.support import make_config, serving, write_toml

WORKER_A = """\
# HELP gateway_requests_total Requests
# TYPE gateway_requests_total counter
gateway_requests_total{protocol="tank",api="produce",outcome="ok"} 3.0
# HELP gateway_connections_open Open
# TYPE gateway_connections_open gauge
gateway_connections_open{protocol="tank"} 2.0
# HELP gateway_backend_up Up
# TYPE gateway_backend_up gauge
gateway_backend_up{backend="default"} 1.0
# HELP gateway_consumer_lag Lag
# TYPE gateway_consumer_lag gauge
gateway_consumer_lag{group="g",topic="t",partition="0"} 7.0
# HELP gateway_request_seconds Latency
# TYPE gateway_request_seconds histogram
gateway_request_seconds_bucket{protocol="tank",api="produce",le="0.001"} 1.0
gateway_request_seconds_bucket{protocol="tank",api="produce",le="+Inf"} 3.0
gateway_request_seconds_count{protocol="tank",api="produce"} 3.0
gateway_request_seconds_sum{protocol="tank",api="produce"} 0.5
"""
WORKER_B = (
    WORKER_A.replace("} 3.0", "} 4.0")
    .replace('up{backend="default"} 1.0', 'up{backend="default"} 0.0')
    .replace("} 2.0", "} 5.0")
)


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text.decode())
        for s in fam.samples
    }


def test_merge_adds_counters_and_histograms_and_applies_gauge_rules() -> None:
    out = samples(merge([(WORKER_A, True), (WORKER_B, True)]))
    req = ("gateway_requests_total", (("api", "produce"), ("outcome", "ok"), ("protocol", "tank")))
    assert out[req] == 7
    hist = ("gateway_request_seconds_count", (("api", "produce"), ("protocol", "tank")))
    assert out[hist] == 7
    assert out[("gateway_connections_open", (("protocol", "tank"),))] == 7  # open: summed
    assert out[("gateway_backend_up", (("backend", "default"),))] == 0  # one worker sees it down
    lag = ("gateway_consumer_lag", (("group", "g"), ("partition", "0"), ("topic", "t")))
    assert out[lag] == 7  # every worker sees the same shared offsets: not doubled
    assert out[("gateway_workers", ())] == 2


def test_a_gone_worker_keeps_its_counters_not_its_gauges() -> None:
    out = samples(merge([(WORKER_A, True), (WORKER_B, False)]))
    req = ("gateway_requests_total", (("api", "produce"), ("outcome", "ok"), ("protocol", "tank")))
    assert out[req] == 7
    assert out[("gateway_connections_open", (("protocol", "tank"),))] == 2
    assert out[("gateway_backend_up", (("backend", "default"),))] == 1
    assert out[("gateway_workers", ())] == 1


def test_merge_status_sums_listeners_and_needs_every_worker_ready() -> None:
    def view(pid: int, conns: int, ready: bool = True) -> dict:
        return {
            "ready": ready,
            "worker": {"index": pid, "pid": pid},
            "listeners": [
                {"protocol": "tank", "connections": conns, "accepted": conns, "refused": 0}
            ],
            "groups": [{"name": "g", "members": conns}],
        }

    out = merge_status([view(1, 2), view(2, 3)], 2)
    assert out["listeners"][0]["connections"] == 5 and out["listeners"][0]["accepted"] == 5
    assert out["groups"] == [{"name": "g", "members": 3}]
    assert out["ready"] is True and [w["pid"] for w in out["workers"]] == [1, 2]
    assert merge_status([view(1, 2), view(2, 3, ready=False)], 2)["ready"] is False
    assert merge_status([view(1, 2)], 2)["ready"] is False  # a worker did not answer


async def test_lag_series_follow_the_groups_committed_offsets(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text(write_toml(make_config(tmp_path, {}, backend="memory")))
    async with serving(load_config(path)) as server:
        core = server.core
        await core.execute(CreateTopic("lagged", 2))
        records = [Record(None, b"x", (), 0)] * 5
        await core.execute(Produce("lagged", RecordBatch(records), partition=1))
        await core.execute(CommitOffset("lag-group", "lagged", 1, 2))
        out = samples(await scrape(server))
        key = (
            "gateway_consumer_lag",
            (("group", "lag-group"), ("partition", "1"), ("topic", "lagged")),
        )
        assert out[key] == 3
        assert out[("gateway_backend_up", (("backend", "default"),))] == 1
        assert out[("gateway_ready", ())] == 1
        assert out[("gateway_writes_stopped", (("backend", "default"),))] == 0
        # an offset no longer committed (-1 reads as none): the series goes with it
        await core.groups.commit("lag-group", "lagged", 1, -1)
        assert key not in samples(await scrape(server))
        await core.execute(CommitOffset("lag-group", "lagged", 1, 4))
        assert samples(await scrape(server))[key] == 1
        await core.execute(DeleteTopic("lagged"))  # and with its topic
        assert key not in samples(await scrape(server))


async def test_a_failed_fsync_shows_as_writes_stopped(tmp_path: Path) -> None:
    """The embedded log's disk fails an fsync (injected: an fsync raising EIO): the backend
    refuses writes, and the scrape says so (writes stopped, backend down, not ready)."""
    path = tmp_path / "gw.toml"
    backends = {"default": {"type": "embedded", "fsync": "always"}}
    path.write_text(write_toml(make_config(tmp_path, {}, backends=backends)))
    async with serving(load_config(path)) as server:
        core = server.core
        await core.execute(CreateTopic("disk", 1))
        out = samples(await scrape(server))
        assert out[("gateway_writes_stopped", (("backend", "default"),))] == 0
        assert out[("gateway_backend_up", (("backend", "default"),))] == 1

        def broken_disk(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        server.backends["default"].syncer._fsync = broken_disk
        with pytest.raises(GatewayError):
            await core.execute(Produce("disk", RecordBatch([Record(None, b"x", (), 0)])))
        out = samples(await scrape(server))
        assert out[("gateway_writes_stopped", (("backend", "default"),))] == 1
        assert out[("gateway_backend_up", (("backend", "default"),))] == 0
        assert out[("gateway_ready", ())] == 0
