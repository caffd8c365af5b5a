"""The modern Kafka APIs: ``APIS = {api_key: Api(name, min_version, max_version, handler)}``,
and :func:`serve`, which answers one request frame with them.

A handler is ``async def handle(ctx: KafkaContext, header: RequestHeader, request) -> response``
(see the package docstring): ``request`` is kio's request entity of ``header.api_version``, the
response kio's response entity of the same version (or ``None``: no answer). Which versions a key
serves is its ``Api`` row, and exactly that range is advertised by ApiVersions (joined to the
0.8 session's versions of the key where they meet: see :func:`advertised_table`).

Routing between the 0.8 session's v0 fast paths and this table is :func:`route`: the 0.8
session keeps every (key, version) of its own 0.8.2 table; the rest goes here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from gateway.observability import REQUEST_LATENCY, labelled, protocol_error
from gateway.protocols.kafka import api_versions
from gateway.protocols.kafka.codec import MalformedRequest, decode_request, encode_response
from gateway.protocols.kafka.context import (
    PROTOCOL,
    CloseConnection,
    KafkaContext,
    RequestHeader,
)
from gateway.protocols.kafka08.codec import API_TABLE as LEGACY_TABLE

Handler = Callable[[KafkaContext, RequestHeader, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Api:
    name: str
    """The ``api`` label of the request metrics (snake case)."""
    min_version: int
    max_version: int
    handler: Handler


APIS: dict[int, Api] = {
    18: Api("api_versions", 0, 3, api_versions.handle),
    # group and admin APIs (FindCoordinator, JoinGroup, ..., DescribeConfigs) register here too
}


@cache
def advertised_table() -> list[tuple[int, int, int]]:
    """(api key, min, max) rows ApiVersions answers."""
    return api_versions.advertised(APIS, LEGACY_TABLE)


def _legacy(api_key: int, version: int) -> bool:
    return any(key == api_key and low <= version <= high for key, low, high in LEGACY_TABLE)


def route(api_key: int, version: int) -> bool:
    """True when (key, version) is answered here rather than by the 0.8 session: ApiVersions
    always (any version: an unknown one gets UNSUPPORTED_VERSION), the 0.8 session's own
    versions never, every other version of an ``APIS`` row."""
    if api_key == api_versions.API_VERSIONS:
        return True
    if _legacy(api_key, version):
        return False
    api = APIS.get(api_key)
    return api is not None and api.min_version <= version <= api.max_version


_LATENCY: dict[str, Any] = {}


async def serve(ctx: KafkaContext, payload: bytes | memoryview) -> bytes | None:
    """The framed answer to one request payload (``route`` said it is ours), or None (no
    answer). Raises CloseConnection after a logged protocol error for a malformed request."""
    start = time.perf_counter()
    try:
        header, request = decode_request(payload)
    except MalformedRequest as exc:
        protocol_error(ctx.log, PROTOCOL, "malformed", error=str(exc))
        raise CloseConnection from None
    except Exception as exc:  # kio has no schema for this version (ApiVersions above v4)
        if payload[:2] == b"\x00\x12":  # ApiVersions: answer v0, as brokers do
            from gateway.protocols.kafka.codec import decode_header

            header, _ = decode_header(payload, False)
            request = None
        else:
            protocol_error(ctx.log, PROTOCOL, "unknown_api", error=str(exc))
            raise CloseConnection from None
    api = APIS[header.api_key]
    response = await api.handler(ctx, header, request)
    latency = _LATENCY.get(api.name)
    if latency is None:
        latency = _LATENCY[api.name] = labelled(REQUEST_LATENCY, PROTOCOL, api.name)
    latency.observe(time.perf_counter() - start)
    if response is None:
        return None
    if isinstance(response, bytes):
        return response  # a fast path's finished frame
    return encode_response(header.correlation_id, response)
