"""The ``gateway`` data source against an admin endpoint that speaks TLS and asks for a client
certificate: a batch read and a batch write over ``https://`` with the TLS options (one small
Spark job each, on the shared session)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from gateway.admin_tls import ClientTLS
from gateway.model import Record
from gateway.pipeline.client import GatewayClient
from gateway.pipeline.options import OptionError, ReaderOptions
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    blobs = {"ca.pem": ca.cert_pem}
    server, client = ca.issue_cert("127.0.0.1"), ca.issue_cert("spark.example")
    blobs.update({"server.pem": server.cert_chain_pems[0], "server.key": server.private_key_pem})
    blobs.update({"client.pem": client.cert_chain_pems[0], "client.key": client.private_key_pem})
    for name, blob in blobs.items():
        blob.write_to_path(str(tmp / name))
    return {name: str(tmp / name) for name in blobs}


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory: pytest.TempPathFactory, pki: dict) -> Iterator[GatewayProcess]:
    proc = GatewayProcess(tmp_path_factory.mktemp("tlsgw"), backend="memory")
    proc.config["admin"].update(
        {
            "host": "0.0.0.0",
            "tls_cert": pki["server.pem"],
            "tls_key": pki["server.key"],
            "tls_client_ca": pki["ca.pem"],
        }
    )
    with proc as gw:
        yield gw


def test_read_and_write_over_https(spark: Any, tls_gateway: GatewayProcess, pki: dict) -> None:
    bootstrap = f"https://127.0.0.1:{tls_gateway.address('admin')[1]}"
    options = {
        "bootstrap": bootstrap,
        "tlsCaFile": pki["ca.pem"],
        "tlsCertFile": pki["client.pem"],
        "tlsKeyFile": pki["client.key"],
    }
    tls = ReaderOptions.parse({**options, "topic": "t"}, streaming=False).tls
    with GatewayClient(bootstrap, tls=tls) as client:
        client.create_topic("src", 2)
        client.produce_batch("src", [Record(b"a", b"1"), Record(b"b", b"2")], 0)
        client.produce_batch("src", [Record(None, b"3")], 1)
    df = spark.read.format("gateway").options(**options, topic="src").load()
    got = sorted((r.partition, r.offset, r.key, r.value) for r in df.collect())
    assert got == [(0, 0, b"a", b"1"), (0, 1, b"b", b"2"), (1, 0, None, b"3")]
    df.select("key", "value").write.format("gateway").mode("append").options(
        **options, topic="dst", partitions="1"
    ).save()
    with GatewayClient(bootstrap, tls=tls) as client:
        answer = client.fetch("dst", 0, 0)
    assert sorted(r.value for r in answer.records) == [b"1", b"2", b"3"]


def test_tls_options(tmp_path: Path) -> None:
    base = {"bootstrap": "https://gw:9644", "topic": "t"}
    assert ReaderOptions.parse(base, streaming=False).tls is None  # the workers' variables
    opts = ReaderOptions.parse(
        {**base, "tlsCaFile": "a.pem, b.pem", "tlsServerName": "gw.example"}, streaming=False
    )
    assert opts.tls == ClientTLS(ca_files=("a.pem", "b.pem"), server_name="gw.example")
    with pytest.raises(OptionError, match="tlsCertFile='c.pem' tlsKeyFile='': expected both"):
        ReaderOptions.parse({**base, "tlsCertFile": "c.pem"}, streaming=False)
