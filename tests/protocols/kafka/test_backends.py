"""confluent-kafka through the Kafka listener on every kind of backend: NATS (JetStream), Tansu
(a Kafka broker: the gateway's Kafka backend), and an Iggy upstream (a second gateway), beside
the embedded log of test_real_clients.py. Produce with idempotence and lz4, read back exactly;
a Kafka group's join admitted (committed offsets kept: an Iggy upstream keeps them as Iggy
consumer offsets when it logs in), or refused where none are kept."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.servers import _tag, shared_nats, shared_tansu
from tests.backends.upstream import IGGY_LOGIN, second_gateway
from tests.protocols.kafka.conftest import confluent, expected
from tests.protocols.kafka.test_dispatch import read_response
from tests.protocols.kafka08.test_session_group_waits import join_frame, read_frame
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
            **IGGY_LOGIN,  # the 0.6 dialect: committed offsets (Iggy consumer offsets)
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


def test_kafka_group_join_where_offsets_are_kept(gateway: tuple[str, GatewayProcess]) -> None:
    """A Kafka group needs committed offsets: every backend here keeps them, so a JoinGroup is
    admitted (MEMBER_ID_REQUIRED, 79: join again with the id)."""
    _, gw = gateway
    with socket.create_connection(gw.address("kafka08"), timeout=10) as sock:
        codes = []
        for n in range(2):
            sock.sendall(join_frame(n))
            codes.append(read_response(read_frame(sock), 11, 5)[1].error_code)
    assert codes == [79, 79]
    assert "kafka_group_join_refused" not in gw.log_text()


NO_OFFSETS = {
    "iggy-without-login": {"protocol": "iggy"},  # the old dialect: numeric consumer ids only
    "tank-local-groups": {"protocol": "tank", "local_groups": True},  # TANK keeps none
}


@pytest.mark.parametrize("kind", sorted(NO_OFFSETS))
def test_kafka_group_join_refused_where_no_offsets_are_kept(kind: str, tmp_path: Path) -> None:
    """Where no committed offsets are kept, a JoinGroup is refused with UNSUPPORTED_VERSION
    (35), logged once (not per join)."""
    settings = NO_OFFSETS[kind]
    host, port = second_gateway().address(str(settings["protocol"]))
    backend = {"type": "upstream", "address": f"{host}:{port}", "topic_prefix": _tag(tmp_path)}
    backends = {"default": {**backend, **settings}}
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}, backends=backends) as gw:
        with socket.create_connection(gw.address("kafka08"), timeout=10) as sock:
            codes = []
            for n in range(2):
                sock.sendall(join_frame(n))
                codes.append(read_response(read_frame(sock), 11, 5)[1].error_code)
        assert codes == [35, 35]
        deadline = time.monotonic() + 10
        while "kafka_group_join_refused" not in gw.log_text():
            assert time.monotonic() < deadline, gw.log_text()[-2000:]
            time.sleep(0.1)
        assert gw.log_text().count("kafka_group_join_refused") == 1  # once, not per join
        assert "Traceback" not in gw.log_text()
