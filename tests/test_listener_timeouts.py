"""Every listener's idle timeout closes a quiet connection and is counted as ``idle_timeout``
for its protocol, never logged as a failed connection (a timeout raised inside a session's
nursery arrives in an exception group; the server unwraps it)."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

from gateway.server import sole_exception
from gateway.streams import ConnectionTimeout
from tests.support import GatewayProcess

PROTOCOLS = ("kafka08", "iggy", "tank", "liftbridge", "cursus")


def timeouts(gw: GatewayProcess) -> dict[str, float]:
    with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        sample.labels["protocol"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gateway_protocol_errors_total"
        and sample.labels.get("kind") == "idle_timeout"
    }


def test_a_quiet_connection_times_out_on_every_listener(tmp_path: Path) -> None:
    listeners = {p: {"idle_timeout_s": 0.3} for p in PROTOCOLS}
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        socks = [socket.create_connection(gw.address(p), timeout=10) for p in PROTOCOLS]
        try:
            for s in socks:  # the gateway closes each one: end of stream or a reset
                try:
                    while s.recv(1 << 16):  # Liftbridge sends its HTTP/2 SETTINGS first
                        pass
                except ConnectionResetError:
                    pass
            deadline = time.monotonic() + 10
            while set(timeouts(gw)) != set(PROTOCOLS) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert timeouts(gw) == {p: 1.0 for p in PROTOCOLS}
        finally:
            for s in socks:
                s.close()
        assert "connection_failed" not in gw.log_text()


def test_sole_exception_unwraps_single_exception_groups_only() -> None:
    timeout = ConnectionTimeout("idle", 1.0)
    assert sole_exception(timeout) is timeout
    assert sole_exception(ExceptionGroup("a", [ExceptionGroup("b", [timeout])])) is timeout
    two = ExceptionGroup("a", [timeout, trio.BrokenResourceError()])
    assert sole_exception(two) is two


def test_a_steady_acks_0_stream_is_not_a_slow_request(tmp_path: Path) -> None:
    """Kafka 0.8 produces with acks 0 get no answer: a producer streaming them, each read ending
    inside a frame, always has part of a request in the gateway's buffer. The read timeout
    (0.5 s) bounds each request from its first byte, not the stream: 3 s of it stays open."""
    from gateway.model import Record
    from gateway.protocols.kafka08 import codec as c
    from gateway.protocols.kafka08.messageset import encode_message_set
    from tests.protocols.kafka08.conftest import RawClient
    from tests.protocols.kafka08.test_bad_input import new_topic

    listeners = {"kafka08": {"read_timeout_s": 0.5, "idle_timeout_s": 60}}
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        raw = RawClient(gw.address("kafka08"))
        topic = new_topic(raw)
        data = encode_message_set([Record(b"k", b"v" * 100)])
        body = c.PRODUCE_REQUEST(0, 1000, [c.PRODUCE_TOPIC(topic, [c.PRODUCE_PARTITION(0, data)])])
        frame = raw.conn.send_request(0, 0, body)
        frames = 30
        wire = frame * frames
        half = len(frame) // 2
        raw.send_raw(wire[:half])
        for start in range(half, len(wire), len(frame)):  # every write ends mid-frame
            time.sleep(0.1)
            raw.send_raw(wire[start : start + len(frame)])
        acks1 = c.PRODUCE_REQUEST(1, 1000, [c.PRODUCE_TOPIC(topic, [c.PRODUCE_PARTITION(0, data)])])
        answer = raw.call(0, 0, acks1)
        assert answer.topics[0].partitions[0].offset == frames  # every acks-0 set was stored
        raw.sock.close()
        assert "read_timeout" not in gw.log_text()
