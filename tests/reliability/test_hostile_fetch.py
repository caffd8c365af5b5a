"""Hostile fetches: a few dozen bytes asking for 2^31-1 bytes of answer (or one partition listed
many times, or 2^32-1 messages), pipelined, from a client that never reads, against a gateway
holding far more data than the answer budget (``max_answer_bytes``, 64 MiB by default), on the
memory backend and on the embedded log.

Each attack runs against a real gateway process while a well-behaved client keeps getting
answers (tests/reliability/hostile.py); then the gateway's peak RSS above its size before the
attack must stay under ``RSS_BOUND`` (one answer's budget held, plus the copies made while
building it), the gateway still runs, and the answers the attacker finally reads are the
documented ones: at most ``max_answer_bytes`` of record data each, a Kafka 0.8 partition listed
many times answered once.
"""

from __future__ import annotations

import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.model import Record
from gateway.protocols.iggy import codec as ic
from gateway.protocols.kafka08 import codec as kc
from gateway.protocols.kafka08.messageset import encode_message_set
from gateway.protocols.tank import codec as tc
from gateway.protocols.tank.bundle import read_varint
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess

BUDGET = 64 << 20  # the default max_answer_bytes
# peak RSS growth allowed during one attack: an answer's data as read and as encoded, plus
# slack for the interpreter (measured: 35-100 MiB with either backend)
RSS_BOUND = 2 * BUDGET + (32 << 20)
VALUE = 1024
PER_REQUEST = 32 * 1024  # records per produce request (about 34 MB)
REQUESTS = 8  # about 270 MB stored: four times the budget
TOPIC = "big"
DEADLINE_S = 60.0


def metric(gw: GatewayProcess, protocol: str) -> float:
    with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    prefix = f'gateway_limit_hits_total{{limit="max_answer_bytes",protocol="{protocol}"}}'
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_for_hit(gw: GatewayProcess, protocol: str, before: float) -> None:
    """Until the gateway has built (and counted) at least one capped answer."""
    deadline = time.monotonic() + DEADLINE_S
    while metric(gw, protocol) <= before:
        assert time.monotonic() < deadline, f"no capped {protocol} answer within {DEADLINE_S} s"
        time.sleep(0.2)
    time.sleep(1.0)  # let it go on building what the attacker pipelined


def reset_peak(gw: GatewayProcess) -> None:
    """Start the peak RSS (VmHWM) afresh, so each attack is measured on its own."""
    assert gw.proc is not None
    Path(f"/proc/{gw.proc.pid}/clear_refs").write_text("5")


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        data = sock.recv(min(n - len(out), 1 << 20))
        assert data, "the gateway closed the connection"
        out += data
    return bytes(out)


def skip_exactly(sock: socket.socket, n: int) -> None:
    while n:
        data = sock.recv(min(n, 1 << 20))
        assert data, "the gateway closed the connection"
        n -= len(data)


def whole_bundles(chunk: bytes | memoryview) -> bool:
    """A TANK chunk made of whole bundles (length varint, bundle), the last one not cut."""
    pos = 0
    while pos < len(chunk):
        size, pos = read_varint(chunk, pos, len(chunk))
        pos += size
    return pos == len(chunk)


@pytest.fixture(scope="module", params=["memory", "embedded"])
def gw(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """A gateway holding about 270 MB in one partition (memory: the blocks as stored; the
    embedded log: read back from its segments for every answer)."""
    listeners = {"kafka08": {}, "tank": {}, "iggy": {}}
    tmp = tmp_path_factory.mktemp(f"hostile-fetch-{request.param}")
    with GatewayProcess(tmp, listeners=listeners, backend=request.param) as gw:
        # fill one partition with big Kafka 0.8 produces (stored as canonical blocks)
        sock = socket.create_connection(gw.address("kafka08"), timeout=60)
        client = kc.ClientConnection("filler")
        values = [Record(None, b"%08d" % i + b"v" * (VALUE - 8)) for i in range(PER_REQUEST)]
        body = kc.PRODUCE_REQUEST(
            1,
            30_000,
            [kc.PRODUCE_TOPIC(TOPIC, [kc.PRODUCE_PARTITION(0, encode_message_set(values))])],
        )
        sock.sendall(client.send_request(3, 0, kc.METADATA_REQUEST([TOPIC])))  # creates it
        for _ in range(REQUESTS):
            sock.sendall(client.send_request(0, 0, body))
        while client.next_response() is None:
            client.receive_data(sock.recv(1 << 16))
        got = 0
        while got < REQUESTS:
            resp = client.next_response()
            if resp is None:
                client.receive_data(sock.recv(1 << 16))
                continue
            [t] = resp[1].topics
            assert t.partitions[0].error == 0
            got += 1
        sock.close()
        yield gw


@pytest.fixture
def connect(gw: GatewayProcess) -> Iterator[Callable[[str], socket.socket]]:
    """Connections to the gateway's listeners, closed after the test whatever happened."""
    opened: list[socket.socket] = []

    def open_one(listener: str) -> socket.socket:
        opened.append(socket.create_connection(gw.address(listener), timeout=60))
        return opened[-1]

    yield open_one
    for sock in opened:
        sock.close()


def attack(gw: GatewayProcess, protocol: str, sock: socket.socket, requests: list[bytes]) -> None:
    """Send the requests without reading; the gateway must stay bounded and responsive."""
    before = metric(gw, protocol)
    reset_peak(gw)
    baseline = Footprint.of(gw)
    with Bystander(gw) as bystander:
        sock.sendall(b"".join(requests))
        wait_for_hit(gw, protocol, before)
        after = Footprint.of(gw)
        print(f"{protocol}: peak RSS grew by {(after.peak_rss - baseline.rss) >> 20} MiB")
        after.check_within(baseline, RSS_BOUND)
    bystander.check()


def test_kafka08_fetch_of_2_31_bytes_and_repeated_partitions(gw: GatewayProcess, connect) -> None:
    client = kc.ClientConnection("attacker")
    huge = kc.FETCH_PARTITION(0, 0, 2**31 - 1)
    one = kc.FETCH_REQUEST(-1, 0, 1, [kc.FETCH_TOPIC(TOPIC, [huge])])
    repeated = kc.FETCH_REQUEST(-1, 0, 1, [kc.FETCH_TOPIC(TOPIC, [huge] * 200)])
    requests = [client.send_request(1, 0, body) for body in (one, one, repeated)]
    assert len(requests[0]) < 100
    sock = connect("kafka08")
    attack(gw, "kafka08", sock, requests)
    # the answers: each partition once, its message set cut at the budget like at MaxBytes
    for _ in requests:
        size, _corr, topics = struct.unpack(">iii", recv_exactly(sock, 12))
        (n,) = struct.unpack(">h", recv_exactly(sock, 2))
        assert (topics, recv_exactly(sock, n)) == (1, TOPIC.encode())
        partitions, partition, error, hwm, set_size = struct.unpack(
            ">iihqi", recv_exactly(sock, 22)
        )
        assert (partitions, partition, error) == (1, 0, 0)
        assert hwm == PER_REQUEST * REQUESTS
        # whole stored batches while they fit (the backends' reads), never past the budget
        assert 0 < set_size <= BUDGET and size == 4 + 4 + 2 + n + 22 + set_size
        skip_exactly(sock, set_size)


def test_tank_consume_of_many_partitions_of_4_gib(gw: GatewayProcess, connect) -> None:
    entries = [tc.ConsumePartitionRequest(0, 0, 2**32 - 1)] * 17
    requests = [
        tc.encode_request(tc.ConsumeRequest(i, [tc.ConsumeTopic(TOPIC, entries)])) for i in range(4)
    ]
    assert len(requests[0]) < 300
    sock = connect("tank")
    assert recv_exactly(sock, 5) == tc.GREETING
    attack(gw, "tank", sock, requests)
    for _ in requests:
        msg_id, size = struct.unpack("<BI", recv_exactly(sock, 5))
        assert msg_id == tc.MsgId.CONSUME
        payload = recv_exactly(sock, size)
        resp = tc.decode_response(msg_id, payload)
        parts = resp.topics[0].partitions
        assert len(parts) == 17  # every entry answered, as the real broker does
        assert all(p.err == 0 and p.hwmark == PER_REQUEST * REQUESTS for p in parts)
        # the entries share the budget in order (whole bundles); the last ones find none left
        chunks = [len(p.chunk) for p in parts]
        assert BUDGET - (2 << 20) < sum(chunks) <= BUDGET
        assert chunks[0] > 0 and chunks[-1] == 0
        assert all(whole_bundles(p.chunk) for p in parts)
        msgs = parts[0].messages()
        assert [m.seq for m in msgs[:2]] == [1, 2] and msgs[1].content[:8] == b"00000001"


def test_iggy_poll_of_2_32_messages(gw: GatewayProcess, connect) -> None:
    conn = ic.ClientConnection()
    poll = ic.PollMessages(
        ic.Consumer(ic.ConsumerKind.CONSUMER, ic.Identifier(1)),
        ic.Identifier("default"),
        ic.Identifier(TOPIC),
        1,
        ic.PollingKind.OFFSET,
        0,
        2**32 - 1,
        False,
    )
    requests = [conn.send(poll) for _ in range(4)]
    assert len(requests[0]) < 100
    sock = connect("iggy")
    attack(gw, "iggy", sock, requests)
    for _ in requests:
        status, length = struct.unpack("<II", recv_exactly(sock, 8))
        # whole messages of whole stored batches while they fit, never past the budget
        assert status == 0 and 0 < length <= BUDGET
        partition, _current, count = struct.unpack("<IQI", recv_exactly(sock, 16))
        assert partition == 1 and count == (length - 16) // (45 + VALUE)
        skip_exactly(sock, length - 16)
