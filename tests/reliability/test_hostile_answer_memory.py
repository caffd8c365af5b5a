"""Many clients that each ask for a huge answer and never read it, against a gateway whose
answer pool (``[server] max_answer_memory``) is a fraction of what they ask together.

Per protocol (Kafka 0.8 Fetch, TANK Consume), against a real gateway process on the embedded
log (answers are read from its segments, so what they hold is the gateway's own memory):
``ATTACKERS`` connections, each with a tiny receive buffer, send one request for 2^31-1 bytes
and never read. Then: the gateway's peak RSS grows by less than a bound derived from the pool
(not from the number of connections, which would be several times more); the pool's gauge never
exceeds the pool, and ``gateway_limit_hits_total{limit="max_answer_memory"}`` counts the answers
it cut; the admin endpoint and a well-behaved client of the same listener keep getting answers;
after ``send_timeout_s`` the connections whose answer is stuck are closed
(``gateway_limit_hits_total{limit="send_timeout_s"}``), the pool is whole again (gauge 0) and
the well-behaved client gets records again.
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
from gateway.protocols.kafka08 import codec as kc
from gateway.protocols.kafka08.messageset import encode_message_set
from gateway.protocols.tank import codec as tc
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess

MiB = 1 << 20
POOL = 32 * MiB  # [server] max_answer_memory
ANSWER = 16 * MiB  # max_answer_bytes of each listener
SEND_TIMEOUT_S = 2.0
ATTACKERS = 12  # unbounded, they would hold 12 x 16 MiB, as read and as encoded
# the pool's answers, each as read and as encoded, plus slack for the interpreter
RSS_BOUND = 2 * POOL + 32 * MiB
VALUE = 1024
PER_REQUEST = 4 * 1024  # records per produce request (about 4 MB)
REQUESTS = 6  # about 25 MB stored: more than one answer
TOPIC = "big"
DEADLINE_S = 30.0


def metrics(gw: GatewayProcess) -> str:
    with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10) as resp:
        return resp.read().decode()


def sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def hits(text: str, limit: str, protocol: str) -> float:
    return sample(text, f'gateway_limit_hits_total{{limit="{limit}",protocol="{protocol}"}}')


def held(text: str) -> float:
    return sample(text, "gateway_answer_memory_bytes")


def reset_peak(gw: GatewayProcess) -> None:
    assert gw.proc is not None
    Path(f"/proc/{gw.proc.pid}/clear_refs").write_text("5")


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        data = sock.recv(min(n - len(out), 1 << 20))
        assert data, "the gateway closed the connection"
        out += data
    return bytes(out)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    listener = {"max_answer_bytes": ANSWER, "send_timeout_s": SEND_TIMEOUT_S}
    tmp = tmp_path_factory.mktemp("answer-memory")
    with GatewayProcess(
        tmp,
        listeners={"kafka08": listener, "tank": listener},
        backend="embedded",
        server={"max_answer_memory": POOL},
    ) as gw:
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
        got = -1  # the Metadata answer first
        while got < REQUESTS:
            resp = client.next_response()
            if resp is None:
                client.receive_data(sock.recv(1 << 16))
                continue
            if got >= 0:
                [t] = resp[1].topics
                assert t.partitions[0].error == 0
            got += 1
        sock.close()
        yield gw


@pytest.fixture
def connect(gw: GatewayProcess) -> Iterator[Callable[..., socket.socket]]:
    opened: list[socket.socket] = []

    def open_one(listener: str, rcvbuf: int = 0) -> socket.socket:
        sock = socket.socket()
        if rcvbuf:  # before connecting, so the window stays small
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(60)
        sock.connect(gw.address(listener))
        opened.append(sock)
        return sock

    yield open_one
    for sock in opened:
        sock.close()


def kafka08_fetch(sock: socket.socket, max_bytes: int) -> int:
    """One Fetch of partition 0 from offset 0; the bytes of its message set."""
    client = kc.ClientConnection("bystander")
    body = kc.FETCH_REQUEST(
        -1, 0, 1, [kc.FETCH_TOPIC(TOPIC, [kc.FETCH_PARTITION(0, 0, max_bytes)])]
    )
    sock.sendall(client.send_request(1, 0, body))
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    payload = recv_exactly(sock, size)
    _corr, topics, n = struct.unpack(">iih", payload[:10])
    assert topics == 1 and payload[10 : 10 + n] == TOPIC.encode()
    _parts, partition, error, _hwm, set_size = struct.unpack(">iihqi", payload[10 + n : 32 + n])
    assert (partition, error) == (0, 0)
    return set_size


def tank_consume(sock: socket.socket, fetch_size: int, request_id: int = 1) -> int:
    """One Consume of partition 0 from the start; the bytes of its chunk."""
    req = tc.ConsumeRequest(
        request_id, [tc.ConsumeTopic(TOPIC, [tc.ConsumePartitionRequest(0, 0, fetch_size)])]
    )
    sock.sendall(tc.encode_request(req))
    msg_id, size = struct.unpack("<BI", recv_exactly(sock, 5))
    assert msg_id == tc.MsgId.CONSUME
    resp = tc.decode_response(msg_id, recv_exactly(sock, size))
    [part] = resp.topics[0].partitions
    assert part.err == 0
    return len(part.chunk)


def kafka08_hog(sock: socket.socket) -> None:
    client = kc.ClientConnection("hog")
    huge = kc.FETCH_REQUEST(
        -1, 0, 1, [kc.FETCH_TOPIC(TOPIC, [kc.FETCH_PARTITION(0, 0, 2**31 - 1)])]
    )
    sock.sendall(client.send_request(1, 0, huge))


def tank_hog(sock: socket.socket) -> None:
    assert recv_exactly(sock, 5) == tc.GREETING
    entries = [tc.ConsumePartitionRequest(0, 0, 2**32 - 1)]
    sock.sendall(tc.encode_request(tc.ConsumeRequest(7, [tc.ConsumeTopic(TOPIC, entries)])))


def open_tank(connect: Callable[..., socket.socket]) -> socket.socket:
    sock = connect("tank")
    assert recv_exactly(sock, 5) == tc.GREETING
    return sock


def stalled_clients_share_one_pool(
    gw: GatewayProcess,
    protocol: str,
    connect: Callable[..., socket.socket],
    hog: Callable[[socket.socket], None],
    well_behaved: Callable[[int], int],
) -> None:
    text = metrics(gw)
    cut_before = hits(text, "max_answer_memory", protocol)
    timeouts_before = hits(text, "send_timeout_s", protocol)
    assert held(text) == 0
    reset_peak(gw)
    baseline = Footprint.of(gw)
    with Bystander(gw) as bystander:
        for _ in range(ATTACKERS):
            hog(connect(protocol, rcvbuf=4096))
        deadline = time.monotonic() + DEADLINE_S
        seen = 0.0
        while True:  # until the pool is taken and answers were cut by it
            text = metrics(gw)
            assert held(text) <= POOL
            seen = max(seen, held(text))
            if seen and hits(text, "max_answer_memory", protocol) > cut_before:
                break
            assert time.monotonic() < deadline, f"no answer cut by the pool: {seen=}"
            time.sleep(0.1)
        # a client of the same listener is answered meanwhile (with what the pool has left)
        started = time.monotonic()
        assert well_behaved(64 * 1024) >= 0
        assert time.monotonic() - started < DEADLINE_S
        after = Footprint.of(gw)
        grown = after.peak_rss - baseline.rss
        print(f"{protocol}: peak RSS grew by {grown >> 20} MiB, pool held up to {seen / MiB} MiB")
        after.check_within(baseline, RSS_BOUND)
        # the stuck answers' connections are closed after send_timeout_s: the pool is whole
        while True:
            text = metrics(gw)
            assert held(text) <= POOL
            if hits(text, "send_timeout_s", protocol) > timeouts_before and held(text) == 0:
                break
            assert time.monotonic() < deadline, "the stalled answers were never given back"
            time.sleep(0.1)
        assert well_behaved(MiB) > 0  # records again
    bystander.check()


def test_kafka08_stalled_fetches_share_one_pool(gw: GatewayProcess, connect) -> None:
    sock = connect("kafka08")
    stalled_clients_share_one_pool(
        gw, "kafka08", connect, kafka08_hog, lambda size: kafka08_fetch(sock, size)
    )


def test_tank_stalled_consumes_share_one_pool(gw: GatewayProcess, connect) -> None:
    sock = open_tank(connect)
    ids = iter(range(1, 1000))
    stalled_clients_share_one_pool(
        gw, "tank", connect, tank_hog, lambda size: tank_consume(sock, size, next(ids))
    )
