"""The tank-cli <-> tank 4.0 wire captures, replayed against a running gateway (a subprocess).

No TANK client or broker installs from PyPI or apt, so the captures of the
real tank-cli <-> tank 4.0 exchange are the reference: requests go out byte for byte as tank-cli
sent them, answers must be byte-identical to the real broker's (the consume answer too: a TANK
bundle is stored and served back untouched), or, where they contain a time, identical around it.
"""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest

from gateway.protocols.tank import bundle as B
from gateway.protocols.tank import codec as C
from tests.protocols.tank import vectors as V
from tests.support import GatewayProcess


class Raw:
    """A bare TCP connection that sends frames and reads whole frames back."""

    def __init__(self, addr: tuple[str, int]) -> None:
        self.sock = socket.create_connection(addr, timeout=10)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, n: int) -> bool:
        while len(self.buf) < n:
            data = self.sock.recv(65536)
            if not data:
                return False
            self.buf += data
        return True

    def frame(self) -> bytes:
        assert self._fill(5), "connection closed"
        size = int.from_bytes(self.buf[1:5], "little")
        assert self._fill(5 + size), "connection closed mid-frame"
        out, self.buf = self.buf[: 5 + size], self.buf[5 + size :]
        return out

    def ask(self, data: bytes) -> bytes:
        self.send(data)
        return self.frame()

    def closed(self) -> bool:
        """True when the peer closed the connection (EOF) within the timeout."""
        try:
            return not self._fill(len(self.buf) + 1)
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module", params=["memory", "embedded"])
def gateway(request, tmp_path_factory):
    """The memory backend keeps a produced bundle as it came; the embedded log stores canonical
    batches, so its answers are re-encoded bundles: both must match the captures."""
    tmp = tmp_path_factory.mktemp(f"tank-golden-{request.param}")
    with GatewayProcess(tmp, listeners={"tank": {}}, backend=request.param) as gw:
        yield gw


@pytest.fixture
def raw(gateway):
    conn = Raw(gateway.address("tank"))
    assert conn.frame() == V.GREETING  # sent at once, before any request
    yield conn
    conn.close()


def create(raw: Raw, topic: bytes, partitions: int, request_id: int = 1) -> bytes:
    payload = (
        request_id.to_bytes(4, "little")
        + bytes([len(topic)])
        + topic
        + partitions.to_bytes(2, "little")
        + b"\x00"
    )
    return raw.ask(b"\x07" + len(payload).to_bytes(4, "little") + payload)


def test_capture_session_orders(raw: Raw) -> None:
    """The create, produce, consume and partition-discovery captures, in tank-cli's order."""
    assert raw.ask(V.CREATE_ORDERS) == V.CREATE_ORDERS_OK
    assert raw.ask(V.PRODUCE_ABC) == V.PRODUCE_OK
    assert raw.ask(V.produce_frame(b"orders", 0, V.BUNDLE_THREE)) == V.PRODUCE_OK
    assert raw.ask(V.produce_frame(b"orders", 0, V.BUNDLE_KEYED)) == V.PRODUCE_OK
    assert raw.ask(V.CONSUME_ORDERS_0) == V.CONSUME_ORDERS_0_HEADER + V.CONSUME_ORDERS_0_CHUNK
    assert raw.ask(V.DISCOVER_PARTITIONS_ORDERS) == V.DISCOVER_PARTITIONS_ORDERS_RESP
    # create_topic of an existing topic: tank-cli prints "Already Exists"
    assert raw.ask(V.CREATE_ORDERS) == V.CREATE_ORDERS_OK[:-1] + b"\x01"


def test_capture_discovery_and_status(raw: Raw, gateway) -> None:
    assert create(raw, b"events", 1)[-1] == 0
    got = raw.ask(C.encode_request(C.DiscoverTopicsRequest(1)))
    # the real broker lists topics in its hash map's order; the gateway lists them by name
    assert len(got) == len(V.DISCOVER_TOPICS_RESP) and got[:14] == V.DISCOVER_TOPICS_RESP[:14]
    decode = C.decode_response
    assert {(t.name, t.enabled, t.partitions) for t in decode(0x0B, got[5:]).topics} == {
        (t.name, t.enabled, t.partitions) for t in decode(0x0B, V.DISCOVER_TOPICS_RESP[5:]).topics
    }
    status = raw.ask(C.encode_request(C.StatusRequest(1)))
    assert status[: len(V.STATUS_RESP_PREFIX)] == V.STATUS_RESP_PREFIX
    assert status[-4:] == V.STATUS_RESP_SUFFIX
    startup = int.from_bytes(status[-8:-4], "little")
    assert time.time() - 600 < startup <= time.time()
    assert raw.ask(C.encode_request(C.DiscoverTopologyRequest(1))) == V.DISCOVER_TOPOLOGY_RESP


@pytest.fixture(scope="module")
def orders_events(gateway):
    """Both capture sessions above create these; make sure they exist whatever runs first."""
    conn = Raw(gateway.address("tank"))
    conn.frame()
    create(conn, b"orders", 2)
    create(conn, b"events", 1)
    conn.close()


def test_capture_error_cases(raw: Raw, gateway, orders_events) -> None:
    """The error captures: unknown topic (produce and consume), unknown partition 7; counted."""

    def counted(api: str, outcome: str) -> float:
        labels = f'api="{api}",outcome="{outcome}",protocol="tank"'
        return metric(gateway, f"gateway_requests_total{{{labels}}}")

    before = [counted("produce", "unknown_topic"), counted("consume", "unknown_partition")]
    assert raw.ask(V.produce_frame(b"nosuch", 0, V.BUNDLE_ABC)) == V.PRODUCE_UNKNOWN_TOPIC
    got = raw.ask(V.consume_frame(b"nosuch", 0, 0))
    assert got.endswith(V.CONSUME_UNKNOWN_TOPIC_PART)
    assert got == C.encode_response(C.ConsumeResponse(1, [C.ConsumeTopicResult("nosuch", None, 1)]))
    got = raw.ask(V.consume_frame(b"orders", 7, 0))
    assert got.endswith(V.UNKNOWN_PARTITION_7_PART)
    assert raw.ask(V.produce_frame(b"orders", 7, V.BUNDLE_ABC)) == V.PRODUCE_OK[:-1] + b"\x01"
    after = [counted("produce", "unknown_topic"), counted("consume", "unknown_partition")]
    assert after == [before[0] + 1, before[1] + 1]


def test_capture_produce_with_seqnum_and_boundary_fault(raw: Raw) -> None:
    """The ProduceWithSeqnum capture (base 100 after 99 messages), then the boundary fault
    (asked 500, hwmark 100, first available 1)."""
    assert create(raw, b"bf", 1)[-1] == 0
    msgs = [(None, b"x%d" % i, V.TS_MS) for i in range(99)]
    assert raw.ask(V.produce_frame(b"bf", 0, B.encode_bundle(msgs)))[-1] == C.P_OK
    # a gap (base 102) and a rewrite (base 50) are refused with "invalid sequence numbers"
    for base in (102, 50):
        bundle = B.encode_bundle([(None, b"s", V.TS_MS)], first_seq=base)
        assert raw.ask(V.produce_frame(b"bf", 0, bundle, base=base))[-1] == C.P_INVALID_SEQNUMS
    got = raw.ask(V.produce_frame(b"bf", 0, V.BUNDLE_SPARSE_100, base=100))
    assert got == V.PWS_ANSWER_OK  # a Produce answer (0x01), as the real broker frames it
    got = raw.ask(V.consume_frame(b"bf", 0, 500))
    assert got.endswith(V.BOUNDARY_FAULT_PART)
    header_tail = b"\x02bf\x01" + V.BOUNDARY_FAULT_PART
    assert got[14:] == header_tail
    # the sparse message is at sequence number 100
    resp = C.decode_response(0x02, raw.ask(V.consume_frame(b"bf", 0, 100))[5:])
    (part,) = resp.topics[0].partitions
    assert [(m.seq, m.content) for m in part.messages() if m.seq >= 100] == [(100, b"sparse1")]


def test_snappy_bundle(raw: Raw) -> None:
    assert create(raw, b"snappy", 1)[-1] == 0
    msgs = [(None, bytes([97 + i]) * 600, V.TS_MS) for i in range(2)]
    bundle = B.encode_bundle(msgs)
    assert bundle[0] == 0x09
    assert raw.ask(V.produce_frame(b"snappy", 0, bundle)) == V.PRODUCE_OK
    resp = C.decode_response(0x02, raw.ask(V.consume_frame(b"snappy", 0, 0))[5:])
    got = resp.topics[0].partitions[0].messages()
    assert [(m.seq, m.content, m.timestamp_ms) for m in got] == [
        (1, msgs[0][1], V.TS_MS),
        (2, msgs[1][1], V.TS_MS),
    ]


def metric(gateway, name: str) -> float:
    with urllib.request.urlopen(gateway.admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        (bytes.fromhex("04 00000000"), "unknown_msg"),
        (V.PRODUCE_ABC[:31] + b"\xff\xff\xff\xff\xff\xff" + V.PRODUCE_ABC[37:], "bad_varint"),
        (V.PRODUCE_ABC[:31] + b"\x40" + V.PRODUCE_ABC[32:], "bundle_too_long"),
        (V.PRODUCE_ABC[:-4] + b"\x09abc", "bad_bundle"),
    ],
)
def test_bad_input_closes_only_that_connection(gateway, orders_events, frame, kind) -> None:
    """Like the real broker (service_api_produce.cpp: shutdown(c)): the connection is closed,
    nothing is acknowledged, the error is counted, other connections carry on."""
    name = f'gateway_protocol_errors_total{{kind="{kind}",protocol="tank"}}'
    before = metric(gateway, name)
    other = Raw(gateway.address("tank"))
    assert other.frame() == V.GREETING
    bad = Raw(gateway.address("tank"))
    assert bad.frame() == V.GREETING
    hw_before = other.ask(V.DISCOVER_PARTITIONS_ORDERS)
    bad.send(frame)
    assert bad.closed()
    assert metric(gateway, name) == before + 1
    # nothing of the bad request was stored, and the other connection still works
    assert other.ask(V.DISCOVER_PARTITIONS_ORDERS) == hw_before
    assert other.ask(V.produce_frame(b"events", 0, V.BUNDLE_ABC)) == V.PRODUCE_OK
    other.close()
    bad.close()


def test_client_ping_gets_no_answer(raw: Raw, orders_events) -> None:
    raw.send(V.GREETING)
    # the next frame is the answer to the request after the ping, not a ping
    assert raw.ask(V.DISCOVER_PARTITIONS_ORDERS)[0] == 0x06


def test_rich_producer_bundle_and_sparse_gap(raw: Raw) -> None:
    from tests.protocols.tank.test_codec import rich_producer_bundle, sparse_with_gap

    assert create(raw, b"rich", 1)[-1] == 0
    assert raw.ask(V.produce_frame(b"rich", 0, rich_producer_bundle())) == V.PRODUCE_OK
    resp = C.decode_response(0x02, raw.ask(V.consume_frame(b"rich", 0, 0))[5:])
    got = resp.topics[0].partitions[0].messages()
    assert [(m.seq, m.content, m.timestamp_ms) for m in got] == [(1, b"rich", V.TS_MS)]
    # explicit sequence numbers with a gap cannot be stored densely: 0x0a, nothing stored
    gap = sparse_with_gap(first=2)  # starts right after the hwmark, but 3 is missing
    assert raw.ask(V.produce_frame(b"rich", 0, gap))[-1] == C.P_INVALID_SEQNUMS
    resp = C.decode_response(0x02, raw.ask(V.consume_frame(b"rich", 0, 0))[5:])
    assert resp.topics[0].partitions[0].hwmark == 1
