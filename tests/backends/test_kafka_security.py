"""The Kafka backend into a secured cluster: TLS through a real TLS terminator (HAProxy, since
Tansu 0.6's own TLS options cannot be combined) in front of Tansu, an untrusted certificate's
clear failure (one log line, /readyz 503 naming it, retriable errors, no crash), and the config
checks. SASL (and TLS with SASL) against a broker that speaks it: test_kafka_sasl.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme

from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.model import Record, RecordBatch
from tests.backends.servers import HaproxyTls, TansuServer, free_port, http_json
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """(bootstrap, trusted CA file, untrusted CA file): Tansu behind HAProxy's TLS."""
    work = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        work / "server.pem"
    )
    ca.cert_pem.write_to_path(work / "ca.pem")
    trustme.CA().cert_pem.write_to_path(work / "other-ca.pem")
    tls_port = free_port()
    tansu = TansuServer(advertised_port=tls_port).start()
    proxy = HaproxyTls(work, work / "server.pem", tansu.port, tls_port).start()
    try:
        yield f"127.0.0.1:{tls_port}", work / "ca.pem", work / "other-ca.pem"
    finally:
        proxy.stop()
        tansu.stop()


async def test_tls_round_trip_through_the_terminator(tls_cluster):
    bootstrap, ca, _ = tls_cluster
    backend = KafkaBackend("k", KafkaConfig(bootstrap=bootstrap, tls=True, tls_ca_file=str(ca)))
    async with trio.open_nursery() as nursery:
        await backend.open(nursery)
        topic = f"tls-{uuid.uuid4().hex[:6]}"
        await backend.create_topic(topic, 1)
        await backend.append(topic, 0, RecordBatch([Record(b"k", b"over tls")]))
        got = await backend.read(topic, 0, 0, 10, 1 << 20)
        assert [r.value for b in got for r in b.records] == [b"over tls"]
        await backend.close()
        nursery.cancel_scope.cancel()


def test_untrusted_certificate_fails_clearly_without_a_crash(tls_cluster, tmp_path):
    bootstrap, _, other = tls_cluster
    gw = GatewayProcess(
        tmp_path,
        listeners={"kafka08": {}},
        backends={"k": {"type": "kafka", "bootstrap": bootstrap, "tls_ca_file": str(other)}},
    ).start()
    try:
        for _ in range(3):
            status, body = http_json("GET", gw.admin_url + "/readyz")
            assert status == 503
        reason = json.dumps(body)
        assert "certificate verify failed" in reason and bootstrap in reason, reason
        assert gw.proc is not None and gw.proc.poll() is None  # still running
    finally:
        assert gw.stop() == 0
    lines = [line for line in gw.log_text().splitlines() if "cannot connect" in line]
    assert len(lines) == 1, lines  # one line per distinct cause, however often it is met
    assert "certificate verify failed" in lines[0] and "Traceback" not in gw.log_text()


def test_config_problems_name_their_keys(tmp_path):
    problems = KafkaConfig(
        isolation="dirty",
        sasl_mechanism="GSSAPI",
        tls_cert_file=str(tmp_path / "none"),
        delivery_timeout_ms=0,
    ).validate()
    text = "\n".join(problems)
    assert "isolation: got 'dirty'" in text and "sasl_mechanism: got 'GSSAPI'" in text
    assert "tls_cert_file/tls_key_file" in text and "sasl_username" in text
    assert "delivery_timeout_ms: got 0, expected a positive number of milliseconds" in text
