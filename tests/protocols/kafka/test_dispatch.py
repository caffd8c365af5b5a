"""The modern Kafka dispatcher, sans sockets: framing, headers and ApiVersions."""

from __future__ import annotations

import io
import struct
from typing import Any

import structlog
import trio
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as K
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from gateway.config import parse_config
from gateway.protocols.base import ConnectionContext
from gateway.protocols.kafka import dispatch
from gateway.protocols.kafka.context import KafkaContext
from gateway.protocols.kafka08 import Kafka08ListenerConfig


def context(**listener: Any) -> KafkaContext:
    conn = ConnectionContext(
        "kafka08",
        None,  # type: ignore[arg-type]  # ApiVersions never reaches the core
        Kafka08ListenerConfig(**listener),
        parse_config({}),
        "127.0.0.1:1",
        "gw.example",
        9092,
        log=structlog.get_logger(),
    )
    return KafkaContext.for_connection(conn)


def request_payload(api_key: int, version: int, body: Any, correlation: int = 7) -> bytes:
    """A request frame's payload as a client writes it, with kio's own header writer."""
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=i16(api_key),
            request_api_version=i16(version),
            correlation_id=i32(correlation),
            client_id="test",
        ),
    )
    entity_writer(cls)(buf, body)
    return buf.getvalue()


def read_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    (size, correlation) = struct.unpack_from(">ii", frame, 0)
    assert size == len(frame) - 4
    cls = load_response_schema(api_key, version)
    offset = 9 if cls.__header_schema__.__flexible__ else 8
    body, _ = entity_reader(cls)(frame, offset)
    return correlation, body


def test_api_versions_every_version_lists_the_table() -> None:
    ctx = context()
    for version in range(4):
        cls = load_request_schema(18, version)
        if version >= 3:
            body = cls(client_software_name="test", client_software_version="1")
        else:
            body = cls()
        frame = trio.run(dispatch.serve, ctx, request_payload(18, version, body))
        corr, answer = read_response(frame, 18, version)
        assert corr == 7
        assert answer.error_code == K.none
        rows = {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}
        assert rows[18] == (0, 3)
        assert rows == {k: (lo, hi) for k, lo, hi in dispatch.advertised_table()}


def test_api_versions_above_v3_answers_v0_unsupported_version() -> None:
    ctx = context()
    body = load_request_schema(18, 4)(client_software_name="x", client_software_version="1")
    frame = trio.run(dispatch.serve, ctx, request_payload(18, 4, body, correlation=9))
    corr, answer = read_response(frame, 18, 0)
    assert corr == 9
    assert answer.error_code == K.unsupported_version
    assert [(a.api_key, a.min_version, a.max_version) for a in answer.api_keys] == [(18, 0, 3)]


def test_route_keeps_the_08_versions_on_the_08_path() -> None:
    assert dispatch.route(18, 0) and dispatch.route(18, 7)
    assert not dispatch.route(0, 0)  # Produce v0: the 0.8 fast path
    assert not dispatch.route(3, 0)  # Metadata v0
    assert not dispatch.route(999, 0)
