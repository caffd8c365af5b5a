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
