"""Calling the modern Kafka dispatcher without sockets, on a Core of its own: requests built
from kio's classes of any version, framed as a client frames them (kio's own header writer),
answers read back with kio's reader of that version."""

from __future__ import annotations

from typing import Any

import structlog

from gateway.backends.memory import MemoryBackend
from gateway.config import parse_config
from gateway.core.engine import Core
from gateway.protocols.base import ConnectionContext
from gateway.protocols.kafka import dispatch
from gateway.protocols.kafka.codec import build, nested, request_class
from gateway.protocols.kafka.context import KafkaContext
from gateway.protocols.kafka08 import Kafka08ListenerConfig
from tests.protocols.kafka.test_dispatch import read_response, request_payload


def make_context(core: Core | None = None, **listener: Any) -> KafkaContext:
    core = core or Core({"a": MemoryBackend("a")}, [("*", "a")])
    conn = ConnectionContext(
        "kafka08",
        core,
        Kafka08ListenerConfig(**listener),
        parse_config({}),
        "127.0.0.1:5555",
        "gw.example",
        9092,
        log=structlog.get_logger(),
    )
    return KafkaContext.for_connection(conn)


def sub(api: int, version: int, entity: str, **fields: Any) -> Any:
    """A nested entity ``entity`` of the request (api, version), from the fields it has."""
    return build(nested(request_class(api, version), entity), **fields)


async def call(ctx: KafkaContext, api: int, version: int, **fields: Any) -> Any:
    """The answer to request (key, version) built from ``fields`` (those its version has)."""
    body = build(request_class(api, version), **fields)
    frame = await dispatch.serve(ctx, request_payload(api, version, body))
    assert frame is not None
    _, answer = read_response(frame, api, version)
    return answer
