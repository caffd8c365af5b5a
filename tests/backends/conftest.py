"""Backend fixtures for the conformance suite.

``BACKEND_FACTORIES`` maps a backend type to an async context manager factory
``factory(path, **options)`` that yields an opened backend and closes it on exit. Durable backends
keep their data under ``path`` (or in their external system, keyed by ``path``), so opening the
factory again with the same ``path`` is a restart. Adding a backend to the suite is one line here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from gateway.backends.base import Backend
from gateway.backends.embedded import EmbeddedBackend, EmbeddedConfig
from gateway.backends.memory import MemoryBackend
from tests.backends.servers import kafka_backend, nats_backend, opened
from tests.backends.upstream import IGGY_LOGIN, upstream_factory

BackendFactory = Callable[..., AbstractAsyncContextManager[Backend]]


def memory_backend(path: Path, **options: Any) -> AbstractAsyncContextManager[Backend]:
    return opened(MemoryBackend("memory"))


def embedded_backend(path: Path, **options: Any) -> AbstractAsyncContextManager[Backend]:
    """Small segments and index intervals so every test crosses segment boundaries."""
    settings: dict[str, Any] = {"segment_bytes": 16 * 1024, "index_interval_bytes": 1024}
    settings.update(options)
    return opened(EmbeddedBackend("embedded", EmbeddedConfig(**settings), path))


BACKEND_FACTORIES: dict[str, BackendFactory] = {
    "memory": memory_backend,
    "embedded": embedded_backend,
    "nats": nats_backend,
    "kafka": kafka_backend,
    "upstream-tank": upstream_factory("tank"),
    "upstream-cursus": upstream_factory("cursus"),
    "upstream-iggy": upstream_factory("iggy"),  # the old dialect: no committed offsets
    "upstream-iggy-login": upstream_factory("iggy", **IGGY_LOGIN),  # 0.6: committed offsets
    "upstream-liftbridge": upstream_factory("liftbridge"),
    "upstream-kafka08": upstream_factory("kafka08"),
}


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def backend_type(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def open_backend(backend_type: str, tmp_path: Path) -> Callable[..., Any]:
    """``open_backend(**options)``: an async context manager yielding the backend under test;
    calling it again after the first one closed reopens the same data (a restart)."""
    factory = BACKEND_FACTORIES[backend_type]

    def opener(**options: Any) -> AbstractAsyncContextManager[Backend]:
        return factory(tmp_path / "backend-data", **options)

    return opener


@pytest.fixture
async def backend(open_backend: Callable[..., Any]) -> AsyncIterator[Backend]:
    async with open_backend() as b:
        yield b
