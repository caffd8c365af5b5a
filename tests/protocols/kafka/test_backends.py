"""confluent-kafka through the Kafka listener on every kind of backend: NATS (JetStream), Tansu
(a Kafka broker: the gateway's Kafka backend), and an Iggy upstream (a second gateway), beside
the embedded log of test_real_clients.py. Produce with idempotence and lz4, read back exactly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.servers import _tag, shared_nats, shared_tansu
from tests.backends.upstream import second_gateway
from tests.protocols.kafka.conftest import confluent, expected
from tests.support import GatewayProcess


def backend_table(kind: str, where: Path) -> dict[str, dict[str, Any]]:
    tag = _tag(where)
    if kind == "nats":
        return {
            "default": {
                "type": "nats",
                "url": shared_nats().url,
                "stream_prefix": tag,
                "subject_prefix": tag,
                "kv_bucket": tag,
            }
        }
    if kind == "kafka":
        return {
            "default": {
                "type": "kafka",
                "bootstrap": shared_tansu().bootstrap,
                "kv_topic": f"__gw_kv_{tag}",
            }
        }
    host, port = second_gateway().address("iggy")
    return {
        "default": {
            "type": "upstream",
            "protocol": "iggy",
            "address": f"{host}:{port}",
            "topic_prefix": tag + "-",
        }
    }


@pytest.fixture(scope="module", params=["nats", "kafka", "upstream-iggy"])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: Any
) -> Iterator[tuple[str, GatewayProcess]]:
    tmp = tmp_path_factory.mktemp(f"kafka-{request.param}")
    backends = backend_table(request.param, tmp)
    with GatewayProcess(tmp, listeners={"kafka08": {}}, backends=backends) as gw:
        yield request.param, gw


def test_produce_and_read_back(gateway: tuple[str, GatewayProcess]) -> None:
    kind, gw = gateway
    host, port = gw.address("kafka08")
    out = confluent(
        {
            "bootstrap": f"{host}:{port}",
            "topic": "modern",
            "count": 25,
            "produce": {"enable.idempotence": True, "compression.type": "lz4"},
        }
    )
    assert out["delivery_errors"] == [] and out["unflushed"] == 0, out
    assert out["errors"] == []
    if kind != "upstream-iggy":
        assert out["records"] == expected(25)
        return
    # Iggy keeps no record keys and no empty header values, and stamps its own time
    assert [(r[0], r[1], r[2], r[3]) for r in out["records"]] == [
        (r[0], None, r[2], r[3][:1]) for r in expected(25)
    ]
