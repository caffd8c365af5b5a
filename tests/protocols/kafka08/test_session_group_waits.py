"""Pipelined requests before a JoinGroup, over a real socket: the Kafka listener answers in
order, and an answer queued before a JoinGroup goes out before that JoinGroup's round waits (a
client's Metadata must not wait for a rebalance of up to the rebalance timeout)."""

from __future__ import annotations

import datetime
import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.protocols.kafka.codec import build, request_class
from tests.protocols.kafka.kio_calls import sub
from tests.protocols.kafka.test_dispatch import read_response, request_payload
from tests.protocols.kafka.test_groups import subscription
from tests.support import GatewayProcess

REBALANCE = datetime.timedelta(seconds=20)  # the second join waits up to this for the first


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(tmp_path_factory.mktemp("kafka-waits"), listeners={"kafka08": {}}) as gw:
        yield gw


def frame(api: int, version: int, correlation: int, **fields: Any) -> bytes:
    payload = request_payload(
        api, version, build(request_class(api, version), **fields), correlation
    )
    return struct.pack(">i", len(payload)) + payload


def join_frame(correlation: int, member_id: str = "") -> bytes:
    meta = subscription("t")
    return frame(
        11,
        5,
        correlation,
        group_id="g",
        session_timeout=datetime.timedelta(seconds=30),
        rebalance_timeout=REBALANCE,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(sub(11, 5, "JoinGroupRequestProtocol", name="range", metadata=meta),),
    )


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "the gateway closed the connection"
            out += chunk
        return out

    head = exactly(4)
    return head + exactly(struct.unpack(">i", head)[0])


def test_metadata_before_a_waiting_join_is_answered_first(gateway: GatewayProcess) -> None:
    addr = gateway.address("kafka08")
    with socket.create_connection(addr, timeout=10) as a, socket.create_connection(addr) as b:
        # member A: its id first (MEMBER_ID_REQUIRED), then the join that forms generation 1
        a.sendall(join_frame(1))
        _, first = read_response(read_frame(a), 11, 5)
        assert first.error_code == 79 and first.member_id  # MEMBER_ID_REQUIRED
        a.sendall(join_frame(2, first.member_id))
        _, joined = read_response(read_frame(a), 11, 5)
        assert joined.error_code == 0 and joined.generation_id == 1
        # B pipelines a Metadata and a join as a known member id (v5 needs one): a new member,
        # so its round waits for A to join again (A does not, for up to the rebalance timeout)
        b.sendall(join_frame(3))
        _, b_first = read_response(read_frame(b), 11, 5)
        assert b_first.error_code == 79
        b.sendall(
            frame(
                3,
                9,
                4,
                topics=None,
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )  # fmt: skip
            + join_frame(5, b_first.member_id)
        )
        b.settimeout(5)  # well below the round's 20 s: the Metadata must not wait for it
        correlation, metadata = read_response(read_frame(b), 3, 9)
        assert correlation == 4 and [x.node_id for x in metadata.brokers] == [0]
        # the join is still waiting: nothing else has come
        b.settimeout(0.5)
        with pytest.raises(TimeoutError):
            b.recv(1)
        # A joins again: the round ends and B's join is answered (generation 2, two members)
        a.sendall(join_frame(6, first.member_id))
        _, again = read_response(read_frame(a), 11, 5)
        assert again.error_code == 0 and again.generation_id == 2 and len(again.members) == 2
        b.settimeout(10)
        correlation, b_joined = read_response(read_frame(b), 11, 5)
        assert correlation == 5 and b_joined.error_code == 0 and b_joined.generation_id == 2
