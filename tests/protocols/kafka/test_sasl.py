"""SASL on the Kafka listener with confluent-kafka: PLAIN and SCRAM-SHA-256/512 authenticate
and then produce and read back; a wrong password gets the SASL authentication error and the
connection is closed; a request before authentication is refused by closing."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from tests.protocols.kafka.conftest import confluent, expected, metric
from tests.protocols.kafka.test_dispatch import request_payload
from tests.support import GatewayProcess

USERS = [{"username": "alice", "password": "s3cret"}, {"username": "bob", "password": "hunter2"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: Any) -> Iterator[GatewayProcess]:
    listener = {
        "sasl_mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        "sasl_users": USERS,
    }
    with GatewayProcess(
        tmp_path_factory.mktemp("kafka-sasl"), listeners={"kafka08": listener}
    ) as gw:
        yield gw


def settings(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def bootstrap(gw: GatewayProcess) -> str:
    host, port = gw.address("kafka08")
    return f"{host}:{port}"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_authenticated_client_produces_and_reads(gateway: GatewayProcess, mechanism: str) -> None:
    out = confluent(
        {
            "bootstrap": bootstrap(gateway),
            "topic": f"sasl-{mechanism}",
            "count": 10,
            "common": settings(mechanism, "bob", "hunter2"),
        }
    )
    assert out["delivery_errors"] == [] and out["errors"] == []
    assert out["records"] == expected(10)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_wrong_password_gets_the_sasl_error(gateway: GatewayProcess, mechanism: str) -> None:
    before = metric(gateway, "gateway_protocol_errors_total", kind="sasl_authentication_failed")
    out = confluent(
        {
            "bootstrap": bootstrap(gateway),
            "topic": "never",
            "count": 0,
            "auth_probe": True,
            "common": settings(mechanism, "alice", "not-her-password"),
        }
    )
    messages = " ".join(text for _, text in out["errors"])
    assert "Authentication failed: invalid username or password" in messages, out
    after = metric(gateway, "gateway_protocol_errors_total", kind="sasl_authentication_failed")
    assert after > before


def _exchange(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    head = sock.recv(4)
    if not head:
        return b""
    (size,) = struct.unpack(">i", head)
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    return data


def test_request_before_authentication_closes(gateway: GatewayProcess) -> None:
    from kio.index import load_request_schema

    before = metric(gateway, "gateway_protocol_errors_total", kind="unauthenticated")
    with socket.create_connection(gateway.address("kafka08"), timeout=10) as sock:
        versions = load_request_schema(18, 0)()
        assert _exchange(sock, request_payload(18, 0, versions))  # ApiVersions: answered
        metadata = load_request_schema(3, 9)(
            topics=None,
            allow_auto_topic_creation=True,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        assert _exchange(sock, request_payload(3, 9, metadata)) == b""  # closed, no answer
    after = metric(gateway, "gateway_protocol_errors_total", kind="unauthenticated")
    assert after == before + 1


def test_one_sasl_exchange_per_connection(gateway: GatewayProcess) -> None:
    """A second SaslHandshake gets ILLEGAL_SASL_STATE and the close: a client cannot make the
    gateway hold more than one exchange per connection."""
    from kio.index import load_request_schema

    from tests.protocols.kafka.test_dispatch import read_response

    before = metric(gateway, "gateway_protocol_errors_total", kind="illegal_sasl_state")
    handshake = request_payload(17, 1, load_request_schema(17, 1)(mechanism="SCRAM-SHA-256"))
    with socket.create_connection(gateway.address("kafka08"), timeout=10) as sock:
        body = _exchange(sock, handshake)
        _, first = read_response(struct.pack(">i", len(body)) + body, 17, 1)
        assert first.error_code == 0
        body = _exchange(sock, handshake)
        _, second = read_response(struct.pack(">i", len(body)) + body, 17, 1)
        assert second.error_code == 34  # ILLEGAL_SASL_STATE
        assert sock.recv(1) == b""  # then closed
    after = metric(gateway, "gateway_protocol_errors_total", kind="illegal_sasl_state")
    assert after == before + 1
