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
from gateway.protocols.kafka import (
    admin,
    api_versions,
    cluster,
    fetch,
    group_admin,
    groups,
    list_offsets,
    metadata,
    offsets,
    produce,
    producer_id,
    sasl,
)
from gateway.protocols.kafka.codec import (
    MalformedRequest,
    decode_header,
    decode_request,
    encode_response,
    peek_api,
)
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


async def _api_versions(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    return api_versions.answer(ctx, header, advertised_table())


APIS: dict[int, Api] = {
    0: Api("produce", 3, 9, produce.handle),
    1: Api("fetch", 4, 13, fetch.handle),
    2: Api("list_offsets", 1, 7, list_offsets.handle),
    3: Api("metadata", 1, 12, metadata.handle),
    17: Api("sasl_handshake", 1, 1, sasl.handshake),
    18: Api("api_versions", 0, 3, _api_versions),
    22: Api("init_producer_id", 0, 4, producer_id.handle),
    36: Api("sasl_authenticate", 0, 2, sasl.authenticate),
    60: Api("describe_cluster", 0, 1, cluster.handle),
    8: Api("offset_commit", 2, 9, offsets.offset_commit),
    9: Api("offset_fetch", 2, 9, offsets.offset_fetch),
    10: Api("find_coordinator", 1, 5, groups.find_coordinator),
    11: Api("join_group", 0, 9, groups.join_group),
    12: Api("heartbeat", 0, 4, groups.heartbeat),
    13: Api("leave_group", 0, 5, groups.leave_group),
    14: Api("sync_group", 0, 5, groups.sync_group),
    15: Api("describe_groups", 0, 5, group_admin.describe_groups),
    16: Api("list_groups", 0, 5, group_admin.list_groups),
    19: Api("create_topics", 2, 7, admin.create_topics),
    20: Api("delete_topics", 1, 6, admin.delete_topics),
    32: Api("describe_configs", 1, 4, admin.describe_configs),
    37: Api("create_partitions", 0, 3, admin.create_partitions),
    42: Api("delete_groups", 0, 2, group_admin.delete_groups),
}


@cache
def advertised_table() -> list[tuple[int, int, int]]:
    """(api key, min, max) rows ApiVersions answers."""
    return api_versions.advertised(APIS, LEGACY_TABLE)


def _legacy(api_key: int, version: int) -> bool:
    return any(key == api_key and low <= version <= high for key, low, high in LEGACY_TABLE)


SASL_KEYS = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate


def route(api_key: int, version: int) -> bool:
    """True when (key, version) is answered here rather than by the 0.8 session: ApiVersions
    always (any version: an unknown one gets UNSUPPORTED_VERSION), the 0.8 session's own
    versions never, every version of an ``APIS`` row from its lowest up (above its highest:
    closed with a protocol error)."""
    if api_key == api_versions.API_VERSIONS:
        return True
    if _legacy(api_key, version):
        return False
    api = APIS.get(api_key)
    # above the range too: refused here (closed) rather than misread by the 0.8 code, which
    # reads any version of its APIs as v0; below it, the 0.8 code's behaviour is unchanged
    return api is not None and api.min_version <= version


def router(ctx: KafkaContext) -> Callable[[int, int], bool]:
    """The route of one connection, from its listener's ``api_versions`` and SASL settings:
    "full" routes as :func:`route`; "0.8" and "off" leave everything to the 0.8 session (its
    0.8.2 ApiVersions table, or none). While SASL is on and the connection is not
    authenticated, every request comes here (and only the SASL ones are answered)."""
    mode = ctx.listener.api_versions

    def decide(api_key: int, version: int) -> bool:
        if ctx.sasl_required and (not ctx.principal or api_key in SASL_KEYS):
            return True
        return mode == "full" and route(api_key, version)

    return decide


_LATENCY: dict[str, Any] = {}


async def serve(ctx: KafkaContext, payload: bytes | memoryview) -> bytes | None:
    """The framed answer to one request payload (``router`` said it is ours), or None (no
    answer). Raises CloseConnection after a logged protocol error for a request refused."""
    start = time.perf_counter()
    key_version = peek_api(payload)
    if key_version is None:
        protocol_error(ctx.log, PROTOCOL, "malformed", error="request header truncated")
        raise CloseConnection
    api_key, version = key_version
    if ctx.sasl_required and not ctx.principal and api_key not in SASL_KEYS | {18}:
        protocol_error(
            ctx.log,
            PROTOCOL,
            "unauthenticated",
            error=f"api key {api_key} v{version} before SASL authentication",
        )
        raise CloseConnection
    api = APIS.get(api_key)
    if api_key == api_versions.API_VERSIONS and version > api_versions.MAX_VERSION:
        # a version this gateway does not know: v0 with UNSUPPORTED_VERSION, as brokers do
        header, _ = decode_header(payload, False)
        request = None
    elif api is None or not api.min_version <= version <= api.max_version:
        protocol_error(ctx.log, PROTOCOL, "unknown_api", api_key=api_key, api_version=version)
        raise CloseConnection
    else:
        try:
            header, request = decode_request(payload)
        except MalformedRequest as exc:
            protocol_error(ctx.log, PROTOCOL, "malformed", error=str(exc))
            raise CloseConnection from None
    assert api is not None
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
