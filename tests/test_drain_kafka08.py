"""SIGTERM with a Kafka 0.8 long poll in flight: the poll gets its answer, idle connections are
closed at once, the process exits 0. The PROXY header's client address shows in /v1/status."""

from __future__ import annotations

import json
import signal
import socket
import threading
import urllib.request

from gateway.protocols.kafka08 import codec as c
from gateway.proxy_protocol import encode_v2
from tests.protocols.kafka08.conftest import RawClient, metric
from tests.support import GatewayProcess


def test_sigterm_answers_an_in_flight_long_poll_and_exits_0(tmp_path) -> None:
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}) as gw:
        raw = RawClient(gw.address("kafka08"))
        raw.call(3, 0, c.METADATA_REQUEST(["drain"]))  # auto-creates the topic
        idle = RawClient(gw.address("kafka08"))
        body = c.FETCH_REQUEST(
            -1, 2000, 1, [c.FETCH_TOPIC("drain", [c.FETCH_PARTITION(0, 0, 100)])]
        )
        raw.send(1, 0, body)
        for _ in range(200):
            if metric(gw, "gateway_long_poll_waits_total") >= 1:
                break
            threading.Event().wait(0.05)
        result: list = []
        waiter = threading.Thread(target=lambda: result.append(raw.receive()))
        waiter.start()
        assert gw.stop(signal.SIGTERM) == 0
        waiter.join(20)
        [p] = result[0].topics[0].partitions
        assert p.error == 0 and p.high_watermark == 0
        assert idle.closed_by_peer()


def test_status_shows_the_client_address_from_the_proxy_header(tmp_path) -> None:
    with GatewayProcess(tmp_path, listeners={"kafka08": {"proxy_protocol": "required"}}) as gw:
        sock = socket.create_connection(gw.address("kafka08"), timeout=10)
        sock.sendall(encode_v2(("198.51.100.20", 40000), ("10.0.0.5", 9092)))
        client = RawClient.__new__(RawClient)
        client.sock, client.conn = sock, c.ClientConnection("proxied")
        client.call(3, 0, c.METADATA_REQUEST([]))
        with urllib.request.urlopen(gw.admin_url + "/v1/status", timeout=10) as resp:
            status = json.loads(resp.read())
        [listener] = status["listeners"]
        assert listener["clients"] == ["198.51.100.20:40000"]
        assert '"peer": "198.51.100.20:40000"' in gw.log_text()
        sock.close()
