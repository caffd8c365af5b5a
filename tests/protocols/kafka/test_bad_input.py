"""Bad input to today's Kafka APIs gets a clear answer: the connection that sent it is closed,
the protocol error counted and logged once, and other connections keep being answered."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from kio.index import load_request_schema

from tests.protocols.kafka.conftest import metric
from tests.protocols.kafka.test_dispatch import read_response, request_payload
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: Any) -> Iterator[GatewayProcess]:
    with GatewayProcess(tmp_path_factory.mktemp("kafka-bad"), listeners={"kafka08": {}}) as gw:
        yield gw


def send(sock: socket.socket, payload: bytes) -> bytes:
    """One request; its answer's frame, or b"" when the gateway closed instead."""
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return b""
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        body += sock.recv(size - len(body))
    return head + body


def api_versions() -> bytes:
    return request_payload(
        18, 3, load_request_schema(18, 3)(client_software_name="t", client_software_version="1")
    )


def errors(gw: GatewayProcess, kind: str) -> float:
    return metric(gw, "gateway_protocol_errors_total", protocol="kafka08", kind=kind)


def test_truncated_body_closes_and_is_counted(gateway: GatewayProcess) -> None:
    before = errors(gateway, "malformed")
    good = request_payload(
        3,
        9,
        load_request_schema(3, 9)(
            topics=None,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        ),
    )
    with socket.create_connection(gateway.address("kafka08"), timeout=10) as sock:
        assert send(sock, good[:-2]) == b""
    assert errors(gateway, "malformed") == before + 1


def test_unknown_version_closes(gateway: GatewayProcess) -> None:
    before = errors(gateway, "unknown_api")
    payload = struct.pack(">hhih", 0, 42, 1, -1) + b"\0" * 16  # Produce v42
    with socket.create_connection(gateway.address("kafka08"), timeout=10) as sock:
        assert send(sock, payload) == b""
    assert errors(gateway, "unknown_api") == before + 1


def test_flood_of_bad_requests_leaves_others_answered(gateway: GatewayProcess) -> None:
    baseline = Footprint.of(gateway)
    with Bystander(gateway) as bystander:
        with socket.create_connection(gateway.address("kafka08"), timeout=10) as good:
            for i in range(200):
                with socket.create_connection(gateway.address("kafka08"), timeout=10) as bad:
                    garbage = struct.pack(">hhih", 1, 13, i, 0) + bytes([0xFF]) * (i % 40)
                    assert send(bad, garbage) == b""
                if i % 50 == 0:
                    corr, answer = read_response(send(good, api_versions()), 18, 3)
                    assert corr == 7 and answer.error_code == 0
    bystander.check()
    Footprint.of(gateway).check_within(baseline)
