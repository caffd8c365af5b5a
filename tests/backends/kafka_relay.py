"""A TCP relay between the Kafka backend and a broker (test code: threads, blocking sockets) that
forwards Kafka frames both ways and can (a) close the connection in place of forwarding the first
(or every) Produce answer, as a network failure after the broker stored the batch, and (b) lower
the highest InitProducerId version the broker advertises in its ApiVersions (v0) answer, as an
older broker."""

from __future__ import annotations

import socket
import struct
import threading

from tests.protocols.kafka.test_idempotent_retry import _close, _read_frame

PRODUCE = 0
API_VERSIONS = 18
INIT_PRODUCER_ID = 22


class KafkaRelay:
    def __init__(
        self,
        drop_first_produce_answer: bool = False,
        init_producer_id_max: int = -1,
        drop_every_produce_answer: bool = False,
    ):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.drop = drop_first_produce_answer or drop_every_produce_answer
        self.drop_all = drop_every_produce_answer
        self.init_max = init_producer_id_max  # -1: as the broker says
        self.target: tuple[str, int] | None = None
        self.dropped = threading.Event()
        self.produces = 0  # Produce requests forwarded
        self._lock = threading.Lock()

    def start(self, target: tuple[str, int]) -> KafkaRelay:
        self.target = target
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            assert self.target is not None
            upstream = socket.create_connection(self.target)
            apis: dict[int, int] = {}  # correlation id -> api key
            threading.Thread(target=self._up, args=(client, upstream, apis), daemon=True).start()
            threading.Thread(target=self._down, args=(client, upstream, apis), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, apis: dict[int, int]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, _version, corr = struct.unpack_from(">hhi", frame, 4)
                apis[corr] = api_key
                if api_key == PRODUCE:
                    with self._lock:
                        self.produces += 1
                upstream.sendall(frame)
        except OSError:
            pass
        finally:
            _close(upstream)

    def _down(self, client: socket.socket, upstream: socket.socket, apis: dict[int, int]) -> None:
        try:
            while (frame := _read_frame(upstream)) is not None:
                (corr,) = struct.unpack_from(">i", frame, 4)
                api = apis.pop(corr, None)
                if api == PRODUCE and self.drop:
                    with self._lock:
                        drop = self.drop_all or not self.dropped.is_set()
                        self.dropped.set()
                    if drop:
                        break  # the batch is stored; the backend never hears so
                if api == API_VERSIONS and self.init_max >= 0:
                    frame = self._cap(frame)
                client.sendall(frame)
        except OSError:
            pass
        finally:
            _close(client)
            _close(upstream)

    def _cap(self, frame: bytes) -> bytes:
        """ApiVersions v0 answer: size | corr | error i16 | count i32 | (key, min, max) i16*3."""
        out = bytearray(frame)
        (count,) = struct.unpack_from(">i", out, 10)
        for i in range(count):
            at = 14 + 6 * i
            key, lo, hi = struct.unpack_from(">hhh", out, at)
            if key == INIT_PRODUCER_ID:
                struct.pack_into(">hhh", out, at, key, lo, min(hi, self.init_max))
        return bytes(out)

    def close(self) -> None:
        self.listener.close()
