"""One local[2] Spark session for every pipeline test, and a gateway (memory backend) to read from
and write to. Topics are per test, so tests share both without seeing each other's data."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.pipeline.client import GatewayClient
from tests.support import GatewayProcess

_names = itertools.count()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from gateway.pipeline.spark import spark_session

    session = spark_session("local[2]", tmp_path_factory.mktemp("spark"), driver_memory="1g")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(tmp_path_factory.mktemp("gw"), backend="memory") as gw:
        yield gw


@pytest.fixture(scope="session")
def bootstrap(gateway: GatewayProcess) -> str:
    host, port = gateway.address("admin")
    return f"{host}:{port}"


@pytest.fixture
def client(bootstrap: str) -> Iterator[GatewayClient]:
    with GatewayClient(bootstrap) as c:
        yield c


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A fresh topic name for this test."""
    return f"{request.node.name.replace('[', '-').rstrip(']')}-{next(_names)}"
