"""A retried idempotent produce is stored once: a relay between librdkafka and the gateway drops
the answer to the first Produce (it closes the connection instead of forwarding it), so the
client retries the batch with the same producer id and sequence; the gateway answers the retry
with the batch's first offsets and the partition holds every record exactly once."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

from tests.protocols.kafka.conftest import confluent, expected, metric
from tests.support import GatewayProcess

PRODUCE = 0


def _read_frame(sock: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(min(65536, size - len(body)))
        if not chunk:
            return None
        body += chunk
    return head + body


def _close(sock: socket.socket) -> None:
    """Shut down first: a plain close() leaves a recv() blocked in another thread (and the
    peer) waiting."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class DropFirstProduceAnswer:
    """A TCP relay (threads, blocking sockets: test code) that forwards Kafka frames both ways,
    except that it closes the connection in place of forwarding the first Produce answer."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target: tuple[str, int] | None = None
        self.dropped = threading.Event()
        self._lock = threading.Lock()

    def start(self, target: tuple[str, int]) -> None:
        self.target = target
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            assert self.target is not None
            upstream = socket.create_connection(self.target)
            produces: set[int] = set()
            threading.Thread(
                target=self._up, args=(client, upstream, produces), daemon=True
            ).start()
            threading.Thread(
                target=self._down, args=(client, upstream, produces), daemon=True
            ).start()

    def _up(self, client: socket.socket, upstream: socket.socket, produces: set[int]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, _version, corr = struct.unpack_from(">hhi", frame, 4)
                if api_key == PRODUCE:
                    produces.add(corr)
                upstream.sendall(frame)
        except OSError:
            pass
        finally:
            _close(upstream)

    def _down(self, client: socket.socket, upstream: socket.socket, produces: set[int]) -> None:
        try:
            while (frame := _read_frame(upstream)) is not None:
                (corr,) = struct.unpack_from(">i", frame, 4)
                with self._lock:
                    drop = corr in produces and not self.dropped.is_set()
                    if drop:
                        self.dropped.set()
                if drop:
                    break  # the batch is stored; the client never hears so
                client.sendall(frame)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)

    def close(self) -> None:
        self.listener.close()


def test_retried_idempotent_batch_is_stored_once(tmp_path: Any) -> None:
    relay = DropFirstProduceAnswer()
    try:
        # clients must come back through the relay: the gateway advertises the relay's port
        listener = {"advertised_port": relay.port}
        with GatewayProcess(tmp_path, listeners={"kafka08": listener}) as gw:
            relay.start(gw.address("kafka08"))
            out = confluent(
                {
                    "bootstrap": f"127.0.0.1:{relay.port}",
                    "topic": "retried",
                    "count": 40,
                    "produce": {"enable.idempotence": True, "linger.ms": 50},
                }
            )
            assert relay.dropped.is_set()
            assert out["delivery_errors"] == [] and out["unflushed"] == 0
            assert out["errors"] == []
            assert out["records"] == expected(40)  # each record once, in order
            assert sorted(out["offsets"]) == list(range(40))
            ok = metric(gw, "gateway_requests_total", api="produce", outcome="ok")
            assert ok >= 2  # the first send and its retry both answered as stored
    finally:
        relay.close()
