"""What ``GET /metrics`` and ``GET /v1/status`` answer: one view of the gateway, whether it runs
as one process or as ``serve --workers N``.

Scrape-time gauges (readiness, backend health, write stops, consumer lag) are refreshed by
:func:`refresh` just before a scrape is rendered; the lag series are built fresh on every scrape,
so the series of a group whose offsets are gone disappear with it.

With ``--workers N`` every worker also listens on a unix socket in a private run directory (see
:class:`Peers`). The worker the kernel hands a scrape of the shared admin port asks each sibling
for its own exposition over that socket and merges them (:func:`merge`): counters and histograms
add up, so every scrape counts every worker's traffic and never goes down; gauges add up too
(open connections, group members) except the ones listed in ``GAUGE_MIN`` / ``GAUGE_MAX``. Every
exposition a scrape shows (the answering worker's and each sibling's) is also written to the run
directory; a sibling that no longer answers (it died) still contributes its last counters and
histograms from there, never its gauges, so counters do not go backwards when a worker is gone.
docs/decisions.md says why this and not prometheus-client's multiprocess mode.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import structlog
import trio
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from gateway.core.view import CoreView
from gateway.model import GatewayError
from gateway.observability import BACKEND_UP, READY, REGISTRY, WRITES_STOPPED
from gateway.status_view import status

log = structlog.get_logger("gateway.metrics")

# gauges whose workers' values do not add up: the merged value is the smallest / largest
GAUGE_MIN = frozenset(
    {"gateway_ready", "gateway_backend_up", "process_start_time_seconds", "process_max_fds"}
)
GAUGE_MAX = frozenset({"gateway_build_info", "gateway_writes_stopped", "gateway_consumer_lag"})
ADDITIVE_TYPES = frozenset({"counter", "histogram", "summary"})
MAX_LAG_SERIES = 10_000  # one scrape computes at most this many lag series (a bounded scrape)
HEALTH_TIMEOUT_S = 2.0
LAG_TIMEOUT_S = 5.0
PEER_TIMEOUT_S = 5.0
MAX_PEER_ANSWER = 64 << 20


# ---------------------------------------------------------------------------- scrape-time gauges
class _LagCollector:
    """``gateway_consumer_lag{group,topic,partition}``: rebuilt by every :func:`refresh`."""

    LABELS = ("group", "topic", "partition")

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, int, int]] = []

    def describe(self) -> list[Metric]:
        return [self._family([])]

    def collect(self) -> list[Metric]:
        return [self._family(self.rows)]

    @staticmethod
    def _family(rows: Iterable[tuple[str, str, int, int]]) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "gateway_consumer_lag",
            "Records between a group's committed offset and the partition's end",
            labels=list(_LagCollector.LABELS),
        )
        for group, topic, partition, lag in rows:
            family.add_metric([group, topic, str(partition)], lag)
        return family


LAG = _LagCollector()
REGISTRY.register(LAG)


def writes_stopped(backend: Any) -> bool:
    """The embedded log refuses writes after a failed fsync (its syncer keeps the failure)."""
    return bool(getattr(getattr(backend, "syncer", None), "failure", None))


async def refresh(server: Any) -> None:
    """Set the gauges that are read, not counted: readiness, backend health, write stops, lag."""
    ready = False
    with trio.move_on_after(HEALTH_TIMEOUT_S):  # a backend that hangs: not ready
        ready, _ = await server.readiness()
    READY.set(1 if ready else 0)
    for name, backend in server.backends.items():
        ok = False
        with trio.move_on_after(HEALTH_TIMEOUT_S):
            try:
                ok, _ = await backend.health()
            except Exception:
                ok = False
        BACKEND_UP.labels(name).set(1 if ok else 0)
        WRITES_STOPPED.labels(name).set(1 if writes_stopped(backend) else 0)
    LAG.rows = await _lag_rows(server.core)


async def _lag_rows(core: CoreView) -> list[tuple[str, str, int, int]]:
    """Every committed offset's lag, at most MAX_LAG_SERIES of them, within LAG_TIMEOUT_S (a
    backend that hangs must not hang the scrape: the rows found by then are shown)."""
    rows: list[tuple[str, str, int, int]] = []
    coord = core.groups
    with trio.move_on_after(LAG_TIMEOUT_S):
        try:
            for group in await coord.known_groups():
                for topic, partition, found in await coord.committed(group):
                    if len(rows) >= MAX_LAG_SERIES:
                        return rows
                    backend = core.router.backend_for(topic)
                    try:
                        info = await backend.partition_info(topic, partition)
                    except GatewayError:
                        continue  # the topic is gone or its backend is down: no lag to show
                    rows.append(
                        (group, topic, partition, max(0, info.high_watermark - found.offset))
                    )
        except GatewayError as exc:
            _warn_once_a_minute("lag_unavailable", error=exc.message)
    return rows


_WARNED: dict[str, float] = {}


def _warn_once_a_minute(event: str, **fields: Any) -> None:
    """A scrape every few seconds must not log the same trouble every few seconds."""
    now = time.monotonic()
    last = _WARNED.get(event)
    if last is None or now - last >= 60.0:
        _WARNED[event] = now
        log.warning(event, **fields)


async def local_exposition(server: Any) -> bytes:
    """This process's own metrics in the Prometheus text format."""
    await refresh(server)
    return generate_latest(REGISTRY)


# ---------------------------------------------------------------------------- workers
@dataclasses.dataclass(frozen=True)
class Peers:
    """Where the workers of one ``serve --workers N`` find each other: worker ``i`` answers on
    ``run_dir/worker-i.sock``; ``run_dir/worker-i.last`` holds its last answered exposition."""

    run_dir: Path
    index: int
    count: int

    def sock(self, i: int) -> Path:
        return self.run_dir / f"worker-{i}.sock"

    def last(self, i: int) -> Path:
        return self.run_dir / f"worker-{i}.last"

    def others(self) -> list[int]:
        return [i for i in range(self.count) if i != self.index]


async def serve_peers(
    server: Any, peers: Peers, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Answer the siblings' ``metrics`` and ``status`` requests on this worker's unix socket."""
    path = peers.sock(peers.index)
    path.unlink(missing_ok=True)
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    await sock.bind(str(path))
    sock.listen(16)
    listener = trio.SocketListener(sock)
    task_status.started()
    await trio.serve_listeners(functools.partial(_answer_peer, server, peers), [listener])


async def _answer_peer(server: Any, peers: Peers, stream: trio.abc.Stream) -> None:
    async with stream:
        request = b""
        with trio.move_on_after(PEER_TIMEOUT_S):
            while not request.endswith(b"\n") and len(request) < 64:
                chunk = await stream.receive_some(64)
                if not chunk:
                    break
                request += chunk
        what = request.strip()
        if what == b"metrics":
            payload = await local_exposition(server)
        elif what == b"status":
            payload = json.dumps(await _local_status(server, peers)).encode()
        else:
            return
        try:
            await stream.send_all(payload)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def _local_status(server: Any, peers: Peers | None) -> dict[str, Any]:
    out = await status(server)
    out["worker"] = {"index": peers.index if peers else 0, "pid": os.getpid()}
    return out


async def _ask(path: Path, what: bytes) -> bytes | None:
    """A sibling's answer, or None when it does not answer in time (gone, stuck)."""
    with trio.move_on_after(PEER_TIMEOUT_S):
        try:
            stream = await trio.open_unix_socket(str(path))
        except OSError:
            return None
        async with stream:
            try:
                await stream.send_all(what + b"\n")
                data = bytearray()
                while chunk := await stream.receive_some(1 << 16):
                    data += chunk
                    if len(data) > MAX_PEER_ANSWER:
                        return None
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            return bytes(data)
    return None


async def _ask_all(peers: Peers, what: bytes) -> dict[int, bytes | None]:
    answers: dict[int, bytes | None] = {}

    async def one(i: int) -> None:
        answers[i] = await _ask(peers.sock(i), what)

    async with trio.open_nursery() as nursery:
        for i in peers.others():
            nursery.start_soon(one, i)
    return answers


def _keep_last(path: Path, text: bytes) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(text)
    os.replace(tmp, path)


async def scrape(server: Any) -> bytes:
    """``GET /metrics``: this process's metrics, or with workers every worker's, merged."""
    local = await local_exposition(server)
    peers: Peers | None = getattr(server, "peers", None)
    if peers is None:
        return local
    _keep_last(peers.last(peers.index), local)  # what a scrape showed of each worker is kept
    parts: list[tuple[str, bool]] = [(local.decode(), True)]
    for i, answer in sorted((await _ask_all(peers, b"metrics")).items()):
        if answer is not None:
            _keep_last(peers.last(i), answer)
            parts.append((answer.decode(), True))
        else:
            try:
                parts.append((peers.last(i).read_text(), False))
            except FileNotFoundError:
                pass  # never scraped before it went: nothing of it was ever shown
    return merge(parts)


# ---------------------------------------------------------------------------- merging
def _combine(family: str, ftype: str, old: float, new: float) -> float:
    if family.endswith("_created"):
        return min(old, new)
    if ftype == "gauge" and family in GAUGE_MIN:
        return min(old, new)
    if ftype == "gauge" and family in GAUGE_MAX:
        return max(old, new)
    return old + new


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def merge(parts: Iterable[tuple[str, bool]]) -> bytes:
    """One exposition from several workers' (text, live) expositions. A worker that is gone
    (``live`` false) adds its counters and histograms (they never go backwards), not its gauges
    (its connections are closed, its view of a backend is stale)."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    live = 0
    for text, is_live in parts:
        live += is_live
        for fam in text_string_to_metric_families(text):
            if not is_live and fam.type not in ADDITIVE_TYPES and not fam.name.endswith("_created"):
                continue
            if fam.name not in families:
                families[fam.name] = Metric(fam.name, fam.documentation, fam.type)
                values[fam.name] = {}
            merged = values[fam.name]
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                old = merged.get(key)
                merged[key] = s.value if old is None else _combine(fam.name, fam.type, old, s.value)
    out: list[Metric] = []
    for name, fam in families.items():
        for (sample, labels), value in values[name].items():
            fam.add_sample(sample, dict(labels), value)
        out.append(fam)
    workers = GaugeMetricFamily(
        "gateway_workers", "Worker processes whose live metrics this scrape merged"
    )
    workers.add_metric([], live)
    out.append(workers)
    return generate_latest(_Families(out))


async def merged_status(server: Any, local: dict[str, Any]) -> dict[str, Any]:
    """``GET /v1/status``: with workers, every worker's listeners and groups in one answer."""
    peers: Peers | None = getattr(server, "peers", None)
    if peers is None:
        return local
    local = {**local, "worker": {"index": peers.index, "pid": os.getpid()}}
    views = [local]
    for _, answer in sorted((await _ask_all(peers, b"status")).items()):
        if answer is not None:
            try:
                views.append(json.loads(answer))
            except ValueError:
                continue
    return merge_status(views, peers.count)


def merge_status(views: list[dict[str, Any]], count: int) -> dict[str, Any]:
    """Listeners' counts summed, groups united (the one with most members here wins), ready only
    if every worker is; ``workers`` lists who answered."""
    out = dict(views[0])
    listeners: dict[str, dict[str, Any]] = {}
    for view in views:
        for lst in view.get("listeners", []):
            cur = listeners.get(lst["protocol"])
            if cur is None:
                listeners[lst["protocol"]] = {**lst, "clients": list(lst.get("clients", []))}
                continue
            for key in ("connections", "accepted", "refused"):
                cur[key] = cur.get(key, 0) + lst.get(key, 0)
            cur["clients"] = sorted(cur["clients"] + list(lst.get("clients", [])))[:100]
    groups: dict[str, dict[str, Any]] = {}
    for view in views:
        for g in view.get("groups", []):
            cur = groups.get(g["name"])
            if cur is None or g.get("members", 0) > cur.get("members", 0):
                groups[g["name"]] = g
    out["listeners"] = list(listeners.values())
    out["groups"] = [groups[n] for n in sorted(groups)]
    out["ready"] = len(views) == count and all(v.get("ready") for v in views)
    out["workers"] = [
        {
            **v.get("worker", {}),
            "ready": v.get("ready"),
            "connections": sum(x.get("connections", 0) for x in v.get("listeners", [])),
        }
        for v in views
    ]
    out["workers_expected"] = count
    out.pop("worker", None)
    return out
