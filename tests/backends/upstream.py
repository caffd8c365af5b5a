"""Conformance-suite factories for the upstream backends: each speaks its protocol to a second
gateway (a ``GatewayProcess`` on the memory backend with all five listeners, shared by the whole
test session), every test under a topic prefix of its own (``topic_prefix``), so opening the
factory again with the same path sees the same data (a restart)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from gateway.backends.base import Backend
from gateway.backends.upstream import UpstreamConfig, make_upstream
from gateway.protocols.cursus.client import CursusClient
from tests.backends.servers import _tag, opened
from tests.support import GatewayProcess

UPSTREAM_LISTENERS = ("kafka08", "iggy", "tank", "liftbridge", "cursus")
IGGY_LOGIN = {"username": "upstream", "password": "upstream-secret"}
"""A user of the second gateway's Iggy listener: an Iggy upstream with it logs in (the 0.6
dialect, string consumer ids: committed offsets); without it, the old dialect."""
_second: list[GatewayProcess] = []


def second_gateway() -> GatewayProcess:
    """The upstream server: one gateway for the test session (started on first use)."""
    if not _second:
        where = Path(tempfile.mkdtemp(prefix="gw-upstream-"))
        listeners: dict[str, dict[str, Any]] = {name: {} for name in UPSTREAM_LISTENERS}
        listeners["iggy"] = {"users": [IGGY_LOGIN]}  # anonymous (old dialect) allowed too
        gw = GatewayProcess(where, listeners=listeners, backend="memory").start()
        atexit.register(shutil.rmtree, where, True)
        atexit.register(gw.stop)
        _second.append(gw)
    return _second[0]


def upstream_factory(
    protocol: str, **defaults: Any
) -> Callable[..., AbstractAsyncContextManager[Backend]]:
    """``defaults``: more ``UpstreamConfig`` settings (e.g. ``**IGGY_LOGIN``)."""

    def factory(path: Path, **options: Any) -> AbstractAsyncContextManager[Backend]:
        host, port = second_gateway().address(protocol)
        config = UpstreamConfig(
            protocol=protocol,
            address=f"{host}:{port}",
            topic_prefix=_tag(path) + "-",
            **{**defaults, **options},
        )
        return opened(make_upstream(f"upstream-{protocol}", config))

    return factory


async def provision_on_second_gateway(backend: Any, name: str, partitions: int) -> None:
    """Make a topic on the upstream server out of band (through the second gateway's Cursus
    listener): for upstream protocols that cannot create topics (Kafka 0.8)."""
    host, port = second_gateway().address("cursus")
    async with await CursusClient.connect(host, port) as client:
        reply = await client.text(f"CREATE topic={backend.up(name)} partitions={partitions}")
    assert f"now has {partitions} partitions" in reply, reply


TOPIC_PROVISIONERS: dict[str, Callable[[Any, str, int], Awaitable[None]]] = {
    "upstream-kafka08": provision_on_second_gateway,
}
"""Backend name -> how the conformance suite makes a topic for a backend without
``create_topics``."""
