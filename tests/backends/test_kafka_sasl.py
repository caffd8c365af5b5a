"""The Kafka backend's SASL against a broker that speaks it: a second gateway serving the modern
Kafka listener with SASL (the listener confluent-kafka authenticates to in
tests/protocols/kafka/test_sasl.py). PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 log in, produce and
read back; a wrong password or a mechanism the broker does not offer is one clear line (the
password never in it), /readyz 503 naming it, no crash; TLS and SASL together."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme

from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from tests.backends.servers import http_json
from tests.support import GatewayProcess

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
USERS = [{"username": "gw", "password": "pa55-word"}, {"username": "other", "password": "x"}]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap of a gateway whose Kafka listener requires SASL (every mechanism)."""
    listener = {"sasl_mechanisms": MECHANISMS, "sasl_users": USERS}
    with GatewayProcess(
        tmp_path_factory.mktemp("sasl-broker"), listeners={"kafka08": listener}
    ) as gw:
        host, port = gw.address("kafka08")
        yield f"{host}:{port}"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(bootstrap, CA file) of a gateway whose Kafka listener speaks TLS and requires SASL
    SCRAM-SHA-512 only."""
    work = tmp_path_factory.mktemp("tls-sasl-broker")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(work / "cert.pem")
    for pem in cert.cert_chain_pems[1:]:
        pem.write_to_path(work / "cert.pem", append=True)
    cert.private_key_pem.write_to_path(work / "key.pem")
    ca.cert_pem.write_to_path(work / "ca.pem")
    listener = {
        "sasl_mechanisms": ["SCRAM-SHA-512"],
        "sasl_users": USERS,
        "tls_cert": str(work / "cert.pem"),
        "tls_key": str(work / "key.pem"),
    }
    with GatewayProcess(work, listeners={"kafka08": listener}) as gw:
        host, port = gw.address("kafka08")
        yield f"{host}:{port}", work / "ca.pem"


async def round_trip(nursery: trio.Nursery, config: KafkaConfig) -> list[bytes]:
    """Create a topic, append two records, read them back: their values."""
    backend = KafkaBackend("k", config)
    await backend.open(nursery)
    try:
        topic = f"sasl-{uuid.uuid4().hex[:6]}"
        await backend.create_topic(topic, 1)
        await backend.append(topic, 0, RecordBatch([Record(b"k", b"one"), Record(b"k", b"two")]))
        got = await backend.read(topic, 0, 0, 10, 1 << 20)
        return [r.value for b in got for r in b.records]
    finally:
        await backend.close()


def sasl(mechanism: str, password: str = "pa55-word", **more: str) -> dict[str, str]:
    return {
        "sasl_mechanism": mechanism,
        "sasl_username": "gw",
        "sasl_password": password,
        **more,
    }


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_login_produce_and_read_back(nursery, broker, mechanism):
    config = KafkaConfig(bootstrap=broker, **sasl(mechanism))
    assert await round_trip(nursery, config) == [b"one", b"two"]


async def test_password_from_a_file(nursery, broker, tmp_path):
    (tmp_path / "password").write_text("pa55-word\n")
    config = KafkaConfig(
        bootstrap=broker,
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="gw",
        sasl_password_file=str(tmp_path / "password"),
    )
    assert await round_trip(nursery, config) == [b"one", b"two"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_a_wrong_password_is_refused_clearly_at_once(nursery, broker, mechanism):
    backend = KafkaBackend("k", KafkaConfig(bootstrap=broker, **sasl(mechanism, "wrong-secret")))
    await backend.open(nursery)
    with trio.fail_after(15):  # generous: the refusal is not retried until a delivery timeout
        with pytest.raises(GatewayError) as info:
            await backend.append("any", 0, RecordBatch([Record(b"k", b"v")]))
    await backend.close()
    assert info.value.code is ErrorCode.BACKEND_UNAVAILABLE
    message = info.value.message
    assert f"refused SASL {mechanism} login of user 'gw'" in message, message
    assert "Authentication failed: invalid username or password" in message, message
    assert "wrong-secret" not in message


async def test_a_mechanism_the_broker_does_not_offer(nursery, tls_broker):
    bootstrap, ca = tls_broker
    config = KafkaConfig(bootstrap=bootstrap, tls_ca_file=str(ca), **sasl("PLAIN"))
    backend = KafkaBackend("k", config)
    await backend.open(nursery)
    with pytest.raises(GatewayError) as info:
        await backend.append("any", 0, RecordBatch([Record(b"k", b"v")]))
    await backend.close()
    assert "does not offer PLAIN (offers: SCRAM-SHA-512)" in info.value.message


async def test_tls_and_sasl_together(nursery, tls_broker):
    bootstrap, ca = tls_broker
    config = KafkaConfig(bootstrap=bootstrap, tls_ca_file=str(ca), **sasl("SCRAM-SHA-512"))
    assert await round_trip(nursery, config) == [b"one", b"two"]


def test_a_gateway_with_a_wrong_password_says_so_once_and_keeps_running(broker, tmp_path):
    backend = {"type": "kafka", "bootstrap": broker, **sasl("SCRAM-SHA-512", "wrong-secret")}
    gw = GatewayProcess(tmp_path, listeners={"kafka08": {}}, backends={"k": backend}).start()
    try:
        for _ in range(3):
            status, body = http_json("GET", gw.admin_url + "/readyz")
            assert status == 503
        reason = json.dumps(body)
        assert "refused SASL SCRAM-SHA-512 login of user 'gw'" in reason, reason
        assert gw.proc is not None and gw.proc.poll() is None  # still running
    finally:
        assert gw.stop() == 0
    log = gw.log_text()
    lines = [line for line in log.splitlines() if "cannot connect" in line]
    assert len(lines) == 1, lines  # one line per distinct cause, however often it is met
    assert "refused SASL SCRAM-SHA-512" in lines[0]
    assert "Traceback" not in log and "wrong-secret" not in log
