"""Hostile Liftbridge (gRPC over HTTP/2) clients against a real gateway process.

Each attack runs for a bounded time while well-behaved clients keep getting answers: ``/healthz``
on the admin port (tests/reliability/hostile.py Bystander) and, for rapid reset, a grpcio
FetchMetadata call on another connection. After each attack the gateway still runs, its peak
RSS stayed within a stated bound above idle, and the attacker got the documented answer: GOAWAY
ENHANCE_YOUR_CALM, counted in ``gateway_limit_hits_total``.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import grpc
import hpack
import pytest

from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from tests.protocols.liftbridge.grpc_stub import grpc_module
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess

MiB = 1 << 20
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
ENHANCE_YOUR_CALM = 0x0B
RSS_BOUND = 200 * MiB  # peak growth above idle; the buffered cap is 64 MiB per connection
ATTACK_S = 20.0  # every attack ends (or is ended) well within this


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(
        tmp_path_factory.mktemp("hostile-lb"), listeners={"liftbridge": {}}, backend="memory"
    ) as gw:
        yield gw


def frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


def call_headers(encoder: hpack.Encoder, method: str) -> bytes:
    return encoder.encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", f"/proto.API/{method}"),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
    )


def connect(gw: GatewayProcess) -> socket.socket:
    sock = socket.create_connection(gw.address("liftbridge"), timeout=ATTACK_S)
    sock.sendall(PREFACE + frame(4, 0, 0, b""))
    return sock


def read_goaway(sock: socket.socket, deadline: float) -> int | None:
    """Read frames until a GOAWAY (its error code) or the connection ends (None)."""
    buf = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 16)
        except (TimeoutError, OSError):
            return None
        if not chunk:
            return None
        buf += chunk
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            kind, payload = buf[3], buf[9 : 9 + n]
            buf = buf[9 + n :]
            if kind == 7:
                return int.from_bytes(payload[4:8], "big")
    return None


def send_until_closed(sock: socket.socket, chunks: Iterator[bytes], deadline: float) -> None:
    """Write ``chunks`` until they run out, the gateway closes, or the deadline."""
    try:
        for chunk in chunks:
            if time.monotonic() > deadline:
                return
            sock.sendall(chunk)
    except OSError:
        return


def limit_hits(gw: GatewayProcess, limit: str) -> float:
    text = urllib.request.urlopen(gw.admin_url + "/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        m = re.match(r"^gateway_limit_hits_total\{(.*)\} (\S+)$", line)
        if m and f'limit="{limit}"' in m.group(1) and 'protocol="liftbridge"' in m.group(1):
            return float(m.group(2))
    return 0.0


class GrpcBystander:
    """A well-behaved grpcio client on its own connection: FetchMetadata every 100 ms, each
    within a generous deadline."""

    def __init__(self, gw: GatewayProcess, deadline_s: float = 5.0) -> None:
        host, port = gw.address("liftbridge")
        self.channel = grpc.insecure_channel(f"{host}:{port}")
        self.api = grpc_module().APIStub(self.channel)
        self.deadline_s = deadline_s
        self.answers = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.api.FetchMetadata(pb.FetchMetadataRequest(), timeout=self.deadline_s)
                self.answers += 1
            except grpc.RpcError as exc:
                took = time.monotonic() - started
                self.failures.append(f"{exc.code()} after {took:.2f} s")
            self._stop.wait(0.1)

    def __enter__(self) -> GrpcBystander:
        self.api.FetchMetadata(pb.FetchMetadataRequest(), timeout=self.deadline_s)  # warm up
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.channel.close()

    def check(self) -> None:
        assert self.answers, "the gRPC bystander got no answer at all"
        assert not self.failures, self.failures[:5]


def held_messages(calls: int, message_bytes: int, method: str, whole: bool) -> Iterator[bytes]:
    """On ``calls`` calls of ``method``: HEADERS, then one ``message_bytes`` message (all of it
    when ``whole``, else all but its last 16 KiB) in 16 KiB DATA frames, and never the end of
    the call; the gateway's flow-control windows are ignored."""
    encoder = hpack.Encoder()
    framed = b"\x00" + message_bytes.to_bytes(4, "big") + b"x" * message_bytes
    if not whole:
        framed = framed[:-16384]
    frames = [framed[i : i + 16384] for i in range(0, len(framed), 16384)]
    for k in range(calls):
        sid = 1 + 2 * k
        yield frame(1, 0x04, sid, call_headers(encoder, method))
        yield b"".join(frame(0, 0, sid, f) for f in frames)


@pytest.mark.parametrize(
    ("method", "whole"),
    [("PublishAsync", False), ("Publish", False), ("Publish", True)],
    ids=["unfinished-messages", "unfinished-unary", "finished-unary-never-ended"],
)
def test_requests_held_on_one_connection_are_capped(
    gateway: GatewayProcess, method: str, whole: bool
) -> None:
    baseline = Footprint.of(gateway)
    hits = limit_hits(gateway, "max_buffered_request_bytes")
    deadline = time.monotonic() + ATTACK_S
    with Bystander(gateway) as bystander:
        # 100 calls, each with an 11 MiB message: 1.1 GB held if nothing stopped it
        sock = connect(gateway)
        chunks = held_messages(100, 11 * MiB, method, whole)
        writer = threading.Thread(target=send_until_closed, args=(sock, chunks, deadline))
        writer.start()
        code = read_goaway(sock, deadline)
        sock.close()
        writer.join()
    assert code == ENHANCE_YOUR_CALM
    assert time.monotonic() < deadline
    bystander.check()
    Footprint.of(gateway).check_within(baseline, RSS_BOUND)
    assert limit_hits(gateway, "max_buffered_request_bytes") == hits + 1


def reset_storm(count: int) -> bytes:
    """``count`` calls opened and cancelled at once (HEADERS, RST_STREAM CANCEL)."""
    encoder = hpack.Encoder()
    out = []
    for k in range(count):
        sid = 1 + 2 * k
        out.append(frame(1, 0x04, sid, call_headers(encoder, "FetchMetadata")))
        out.append(frame(3, 0, sid, (8).to_bytes(4, "big")))
    return b"".join(out)


def test_rapid_reset_ends_the_connection_and_others_keep_answers(gateway: GatewayProcess) -> None:
    baseline = Footprint.of(gateway)
    hits = limit_hits(gateway, "max_resets_per_s")
    storm = reset_storm(20_000)
    deadline = time.monotonic() + ATTACK_S
    codes: list[int | None] = []
    with Bystander(gateway) as bystander, GrpcBystander(gateway) as grpc_bystander:
        # one connection after another, each cancelling 20,000 calls as fast as it can, for 3 s
        until = time.monotonic() + 3.0
        while time.monotonic() < until:
            sock = connect(gateway)
            writer = threading.Thread(
                target=send_until_closed, args=(sock, iter([storm]), deadline)
            )
            writer.start()
            codes.append(read_goaway(sock, deadline))
            sock.close()
            writer.join()
    assert codes and all(c == ENHANCE_YOUR_CALM for c in codes), codes[:5]
    assert time.monotonic() < deadline
    bystander.check()
    grpc_bystander.check()
    Footprint.of(gateway).check_within(baseline, RSS_BOUND)
    assert limit_hits(gateway, "max_resets_per_s") >= hits + len(codes)


def test_subscribers_that_never_read_are_not_buffered_for(gateway: GatewayProcess) -> None:
    host, port = gateway.address("liftbridge")
    channel = grpc.insecure_channel(f"{host}:{port}")
    api = grpc_module().APIStub(channel)
    api.CreateStream(pb.CreateStreamRequest(name="big", subject="big"), timeout=10)
    value = b"v" * MiB
    for _ in range(40):  # 40 MiB to read
        api.Publish(pb.PublishRequest(stream="big", value=value), timeout=10)
    baseline = Footprint.of(gateway)
    request = pb.SubscribeRequest(stream="big", startPosition=pb.EARLIEST).SerializeToString()
    framed = b"\x00" + len(request).to_bytes(4, "big") + request
    encoder = hpack.Encoder()
    # windows as large as HTTP/2 allows, 30 subscriptions from the start, and never a read:
    # 1.2 GB of answers if the gateway queued everything it may send
    out = [
        PREFACE,
        frame(4, 0, 0, (4).to_bytes(2, "big") + (2**31 - 1).to_bytes(4, "big")),
        frame(8, 0, 0, (2**31 - 1 - 65535).to_bytes(4, "big")),
    ]
    for k in range(30):
        sid = 1 + 2 * k
        out.append(frame(1, 0x04, sid, call_headers(encoder, "Subscribe")))
        out.append(frame(0, 0x01, sid, framed))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.connect((host, port))
    with Bystander(gateway) as bystander:
        sock.sendall(b"".join(out))
        time.sleep(3.0)
        Footprint.of(gateway).check_within(baseline, RSS_BOUND)
    sock.close()
    bystander.check()
    # and a subscriber that reads gets everything
    call = api.Subscribe(
        pb.SubscribeRequest(stream="big", startPosition=pb.EARLIEST, stopPosition=pb.STOP_LATEST),
        timeout=30,
    )
    got = []
    with pytest.raises(grpc.RpcError) as info:
        for m in call:
            got.append(m)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # "Stop offset reached"
    assert [len(m.value) for m in got[1:]] == [MiB] * 40
    channel.close()


def big_windows() -> bytes:
    """A client preface whose windows are as large as HTTP/2 allows (it never holds us back)."""
    return (
        PREFACE
        + frame(4, 0, 0, (4).to_bytes(2, "big") + (2**31 - 1).to_bytes(4, "big"))
        + frame(8, 0, 0, (2**31 - 1 - 65535).to_bytes(4, "big"))
    )


def test_a_publisher_that_never_reads_its_acks_is_slowed_not_buffered_for(
    gateway: GatewayProcess,
) -> None:
    gw = gateway
    host, port = gw.address("liftbridge")
    channel = grpc.insecure_channel(f"{host}:{port}")
    api = grpc_module().APIStub(channel)
    api.CreateStream(pb.CreateStreamRequest(name="acks", subject="acks"), timeout=10)
    baseline = Footprint.of(gw)
    request = pb.PublishRequest(
        stream="acks", value=b"v" * 100, correlationId="c" * 20, ackPolicy=pb.LEADER
    ).SerializeToString()
    framed = (b"\x00" + len(request).to_bytes(4, "big") + request) * 120  # ~16 KiB
    total = 120 * 500  # 60,000 requests, 8 MB, in one PublishAsync call: within its window
    data = b"".join(frame(0, 0, 1, framed) for _ in range(500))
    head = big_windows() + frame(1, 0x04, 1, call_headers(hpack.Encoder(), "PublishAsync"))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.connect((host, port))
    deadline = time.monotonic() + ATTACK_S
    writer = threading.Thread(
        target=send_until_closed, args=(sock, iter([head, data]), deadline), daemon=True
    )

    def stored() -> int:
        md = api.FetchPartitionMetadata(pb.FetchPartitionMetadataRequest(stream="acks"), timeout=10)
        return md.metadata.highWatermark + 1

    with Bystander(gw) as bystander:
        writer.start()
        time.sleep(1.5)
        # the gateway stopped taking requests while its acks wait (the rest waits, unread,
        # within the call's flow-control window)
        paused_at = stored()
        assert 0 < paused_at < total
        time.sleep(0.5)
        assert stored() == paused_at
        Footprint.of(gw).check_within(baseline, 150 * MiB)
        # once the client reads, everything is stored and acknowledged
        sock.settimeout(1.0)
        while time.monotonic() < deadline and stored() < total:
            try:
                while sock.recv(1 << 20):
                    pass
            except TimeoutError:
                pass
        assert stored() == total
    sock.close()
    writer.join()
    channel.close()
    bystander.check()
