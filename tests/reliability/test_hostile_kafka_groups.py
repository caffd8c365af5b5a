"""A hostile Kafka group client: one connection pipelines JoinGroup requests, each forming a new
group with 64 KiB of member metadata and never heartbeating, far past
``[server] max_kafka_groups``. The gateway answers every one (INVALID_REQUEST beyond the budget,
counted as a limit hit), a well-behaved client keeps getting answers, the process stays within
its memory bound, and once the silent members' session timeout has passed their groups are
swept away, so a new group forms again."""

from __future__ import annotations

import datetime
import itertools
import socket
import struct
import threading
import time

from kio.schema.errors import ErrorCode as K

from gateway.protocols.kafka.codec import build, nested, request_class
from tests.protocols.kafka.test_dispatch import read_response, request_payload
from tests.protocols.kafka08.conftest import metric
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess

GROUPS = 40  # the budget
ATTEMPTS = 400
METADATA = b"\x00\x00" + b"x" * (64 << 10)


def join_frame(group: str, correlation: int) -> bytes:
    cls = request_class(11, 5)
    protocol = nested(cls, "JoinGroupRequestProtocol")(name="range", metadata=METADATA)
    body = build(
        cls,
        group_id=group,
        session_timeout=datetime.timedelta(seconds=6),
        rebalance_timeout=datetime.timedelta(seconds=6),
        member_id="",
        group_instance_id="hostile",  # static: a member at once (no MEMBER_ID_REQUIRED)
        protocol_type="consumer",
        protocols=(protocol,),
    )
    payload = request_payload(11, 5, body, correlation)
    return struct.pack(">i", len(payload)) + payload


def read_answers(sock: socket.socket, count: int) -> list:
    answers, buf = [], b""
    while len(answers) < count:
        while len(buf) < 4 or len(buf) < 4 + struct.unpack_from(">i", buf)[0]:
            data = sock.recv(1 << 20)
            assert data, f"closed after {len(answers)} answers"
            buf += data
        size = struct.unpack_from(">i", buf)[0]
        answers.append(read_response(buf[: 4 + size], 11, 5)[1])
        buf = buf[4 + size :]
    return answers


def test_a_flood_of_new_groups_is_bounded(tmp_path) -> None:
    server = {"max_kafka_groups": GROUPS}
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}, server=server) as gw:
        baseline = Footprint.of(gw)
        with Bystander(gw) as bystander:
            with socket.create_connection(gw.address("kafka08"), timeout=30) as sock:
                frames = b"".join(join_frame(f"flood-{i}", i) for i in range(ATTEMPTS))
                # pipelined, read meanwhile (the leader's answers carry the metadata back)
                sender = threading.Thread(target=sock.sendall, args=(frames,), daemon=True)
                sender.start()
                answers = read_answers(sock, ATTEMPTS)
                sender.join()
        bystander.check()
        Footprint.of(gw).check_within(baseline)
        codes = [a.error_code for a in answers]
        assert codes[:GROUPS] == [K.none] * GROUPS
        assert set(codes[GROUPS:]) == {K.invalid_request}
        hits = metric(gw, "gateway_limit_hits_total", limit="max_kafka_groups")
        assert hits == ATTEMPTS - GROUPS
        # the members never heartbeat: once their 6 s session timeout has passed their groups
        # are swept and a new group forms (asked every 0.25 s; a generous deadline)
        deadline = time.monotonic() + 30
        with socket.create_connection(gw.address("kafka08"), timeout=30) as sock:
            for attempt in itertools.count(1):
                sock.sendall(join_frame("after", attempt))
                code = read_answers(sock, 1)[0].error_code
                if code == K.none:
                    break
                assert code == K.invalid_request and time.monotonic() < deadline, code
                time.sleep(0.25)
