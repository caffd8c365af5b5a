from __future__ import annotations

from contextlib import asynccontextmanager

import pytest

from gateway.config import parse_config
from gateway.protocols.cursus.client import CursusClient
from tests.support import make_config, serving


@asynccontextmanager
async def cursus_gateway(tmp_path, backend="memory", **listener):
    config = parse_config(make_config(tmp_path, {"cursus": listener}, backend=backend, admin=False))
    async with serving(config) as server:
        yield server.addresses()["cursus"]


@pytest.fixture
async def gw(tmp_path):
    async with cursus_gateway(tmp_path) as addr:
        yield addr


@pytest.fixture
async def client(gw):
    async with await CursusClient.connect(*gw) as c:
        yield c
