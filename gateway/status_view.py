"""The status views of the admin endpoint (``/v1/status``, the status page, the public view):
this process's listeners, topics, backends and groups. The merge with the other workers' views
is gateway/metrics_view.py's."""

from __future__ import annotations

import time
from typing import Any

import gateway
from gateway.core.groups import group_summaries
from gateway.model import GatewayError, ListTopics


async def status(server: Any) -> dict[str, Any]:
    core = server.core
    topics = []
    for info in await core.execute(ListTopics()):
        backend = core.router.backend_for(info.name)
        parts = []
        for p in range(info.partitions):
            try:
                pi = await backend.partition_info(info.name, p)
                parts.append(
                    {
                        "partition": p,
                        "log_start_offset": pi.log_start_offset,
                        "high_watermark": pi.high_watermark,
                    }
                )
            except GatewayError as exc:
                parts.append({"partition": p, "error": exc.message})
        topics.append({"name": info.name, "backend": backend.name, "partitions": parts})
    backends = []
    for name, backend in server.backends.items():
        try:
            ok, why = await backend.health()
        except Exception as exc:
            ok, why = False, str(exc)
        backends.append({**backend.describe(), "name": name, "healthy": ok, "detail": why})
    return {
        **await _process_status(server),
        "listeners": [
            {**_listener_counts(st), "clients": sorted(c.peer for c in st.connections)[:100]}
            for st in server.listeners.values()
        ],
        "topics": topics,
        "backends": backends,
        "groups": await _status_groups(core),
    }


async def _process_status(server: Any) -> dict[str, Any]:
    """The head of both status views: version, uptime, readiness, draining."""
    ready, _ = await server.readiness()
    return {
        "version": gateway.__version__,
        "uptime_s": round(time.time() - server.started_at, 3),
        "ready": ready,
        "draining": server.draining,
    }


def _listener_counts(st: Any) -> dict[str, Any]:
    """A listener in both status views: addresses and connection counts, no clients."""
    return {
        "protocol": st.name,
        "address": f"{st.host}:{st.port}",
        "advertised": f"{st.advertised_host}:{st.advertised_port}",
        "connections": len(st.connections),
        "accepted": st.accepted,
        "refused": st.refused,
    }


async def public_status(server: Any) -> dict[str, Any]:
    """This process's status without client addresses, topics, groups or backend details,
    cheap to make (no topic or partition lookups); :func:`public_view` is what is shown."""
    backends = []
    for name, backend in server.backends.items():
        try:
            ok, _ = await backend.health()
        except Exception:
            ok = False
        backends.append({"name": name, "type": backend.describe().get("type", "?"), "healthy": ok})
    return {
        **await _process_status(server),
        "listeners": [_listener_counts(st) for st in server.listeners.values()],
        "backends": backends,
    }


PUBLIC_LISTENER_KEYS = ("protocol", "address", "advertised", "connections", "accepted", "refused")
PUBLIC_KEYS = ("version", "uptime_s", "ready", "draining", "workers", "workers_expected")


def public_view(data: dict[str, Any]) -> dict[str, Any]:
    """Only what anyone may see of a status view (also of one merged with other workers'
    views, which carry client addresses and groups): versions, readiness, listener counts,
    backend health."""
    out = {k: data[k] for k in PUBLIC_KEYS if k in data}
    out["listeners"] = [
        {k: x[k] for k in PUBLIC_LISTENER_KEYS if k in x} for x in data.get("listeners", [])
    ]
    out["backends"] = [
        {"name": b.get("name"), "type": b.get("type"), "healthy": b.get("healthy")}
        for b in data.get("backends", [])
    ]
    out["details"] = "topics, groups, clients and backend details need data API access"
    return out


async def _status_groups(core: Any) -> list[dict[str, Any]]:
    """Groups known to this gateway (live members here, stored snapshots, committed offsets)."""
    try:
        return await group_summaries(core)
    except GatewayError as exc:  # a backend down must not take the status page with it
        return [{"name": n, "error": exc.message} for n in core.groups.group_names()]
