"""Operations with a real client (kcat, librdkafka) on the Kafka 0.8 listener: TLS, mutual TLS,
plain text refused on a TLS listener, and metrics that move when records flow."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import trustme

from tests.protocols.kafka08.conftest import metric
from tests.support import GatewayProcess

KAFKA08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]


def run_kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("kcat")
    assert exe, "kcat is installed by .ci/deps/kafka08.sh"
    return subprocess.run(
        [exe, *args, *KAFKA08], input=stdin, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def pki(tmp_path):
    ca = trustme.CA()
    files = {}
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.example")
    for name, blob in {
        "ca.pem": ca.cert_pem,
        "server.pem": server.cert_chain_pems[0],
        "server.key": server.private_key_pem,
        "client.pem": client.cert_chain_pems[0],
        "client.key": client.private_key_pem,
    }.items():
        blob.write_to_path(str(tmp_path / name))
        files[name] = str(tmp_path / name)
    return files


def produce_consume(bootstrap: str, *extra: str) -> list[str]:
    res = run_kcat(
        "-b",
        bootstrap,
        "-P",
        "-t",
        "secure",
        "-p",
        "0",
        "-K:",
        *extra,
        stdin="k1:hello\nk2:world\n",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    res = run_kcat(
        "-b", bootstrap, "-C", "-t", "secure", "-p", "0", "-o", "beginning", "-e", "-K:", *extra
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.splitlines()


def test_kcat_over_tls_and_plain_text_is_refused(tmp_path, pki) -> None:
    listener = {"tls_cert": pki["server.pem"], "tls_key": pki["server.key"]}
    with GatewayProcess(tmp_path, listeners={"kafka08": listener}) as gw:
        host, port = gw.address("kafka08")
        tls = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki['ca.pem']}"]
        assert produce_consume(f"{host}:{port}", *tls) == ["k1:hello", "k2:world"]
        refused_before = metric(
            gw, "gateway_connections_refused_total", protocol="kafka08", reason="tls"
        )
        res = run_kcat("-b", f"{host}:{port}", "-L", "-m", "3")
        assert res.returncode != 0
        assert (
            metric(gw, "gateway_connections_refused_total", protocol="kafka08", reason="tls")
            > refused_before
        )
        assert "connection_refused" in gw.log_text()


def test_kcat_mutual_tls_needs_a_client_certificate(tmp_path, pki) -> None:
    listener = {
        "tls_cert": pki["server.pem"],
        "tls_key": pki["server.key"],
        "tls_client_ca": pki["ca.pem"],
    }
    with GatewayProcess(tmp_path, listeners={"kafka08": listener}) as gw:
        host, port = gw.address("kafka08")
        tls = ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki['ca.pem']}"]
        mtls = tls + [
            "-X",
            f"ssl.certificate.location={pki['client.pem']}",
            "-X",
            f"ssl.key.location={pki['client.key']}",
        ]
        assert produce_consume(f"{host}:{port}", *mtls) == ["k1:hello", "k2:world"]
        res = run_kcat("-b", f"{host}:{port}", "-L", "-m", "3", *tls)
        assert res.returncode != 0


def test_metrics_move_when_a_real_client_produces_and_consumes(tmp_path) -> None:
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}) as gw:
        host, port = gw.address("kafka08")
        before = {
            "in": metric(gw, "gateway_records_in_total", protocol="kafka08"),
            "out": metric(gw, "gateway_records_out_total", protocol="kafka08"),
            "conns": metric(gw, "gateway_connections_total", protocol="kafka08"),
            "reqs": metric(gw, "gateway_requests_total", protocol="kafka08"),
            "lat": metric(gw, "gateway_request_seconds_count", protocol="kafka08"),
        }
        assert produce_consume(f"{host}:{port}") == ["k1:hello", "k2:world"]
        assert metric(gw, "gateway_records_in_total", protocol="kafka08") == before["in"] + 2
        assert metric(gw, "gateway_records_out_total", protocol="kafka08") >= before["out"] + 2
        assert metric(gw, "gateway_connections_total", protocol="kafka08") >= before["conns"] + 2
        assert metric(gw, "gateway_requests_total", protocol="kafka08") > before["reqs"]
        assert metric(gw, "gateway_request_seconds_count", protocol="kafka08") > before["lat"]
        assert metric(gw, "gateway_backend_seconds_count", command="produce") >= 1
