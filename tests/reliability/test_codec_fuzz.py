"""Codec fuzzing: random and mutated frames (from each protocol's test vectors) fed to every
codec's server role. Decoding either succeeds or raises the codec's own error type, never
anything else (an IndexError or struct.error here would take a connection down the wrong way).

Longer runs outside CI: ``make fuzz`` (more examples) and the atheris targets in ``fuzz/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.protocols.cursus import codec as cursus
from gateway.protocols.errors import ProtocolError
from gateway.protocols.iggy import codec as iggy
from gateway.protocols.kafka08 import codec as kafka08
from gateway.protocols.liftbridge import codec as liftbridge
from gateway.protocols.tank import codec as tank
from tests.protocols.cursus.test_codec import BATCH_VECTOR, CREATE_VECTOR, FETCH_OFFSET_VECTOR
from tests.protocols.iggy.test_codec import CREATE_STREAM, CREATE_TOPIC_OLD, PING
from tests.protocols.kafka08.test_vectors import METADATA_REQUEST, PRODUCE_REQUEST
from tests.protocols.liftbridge.test_codec import vector
from tests.protocols.tank.vectors import CREATE_ORDERS, PRODUCE_ABC

EXAMPLES = int(os.environ.get("GATEWAY_FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def feed_kafka08(data: bytes) -> None:
    conn = kafka08.ServerConnection(max_frame_bytes=1 << 20)
    conn.receive_data(data)
    while conn.next_request() is not None:
        pass


def feed_iggy(data: bytes) -> None:
    conn = iggy.ServerConnection(max_frame_bytes=1 << 20)
    conn.receive_data(data)
    while (frame := conn.next_frame()) is not None:
        try:
            conn.decode(frame)
        except iggy.ValidationError:
            pass  # answered with an error status, the connection goes on


def feed_tank(data: bytes) -> None:
    conn = tank.TankConnection()
    conn.receive_data(data)
    while conn.next_event() is not tank.NEED_DATA:
        pass


def feed_cursus(data: bytes) -> None:
    frames = cursus.FrameBuffer(max_frame_bytes=1 << 20)
    frames.feed(data)
    while (body := frames.next_frame()) is not None:
        if body[:2] == b"\xba\x7c":
            cursus.decode_batch(body)
        else:
            cursus.decode_text(body)


def feed_liftbridge(data: bytes) -> None:
    conn = liftbridge.GrpcConnection(client=False, max_message_bytes=1 << 20)
    conn.receive_data(data)


CASES: dict[str, tuple[Callable[[bytes], None], tuple[type[BaseException], ...], list[bytes]]] = {
    "kafka08": (feed_kafka08, (kafka08.RemoteProtocolError,), [METADATA_REQUEST, PRODUCE_REQUEST]),
    "iggy": (feed_iggy, (iggy.RemoteProtocolError,), [PING, CREATE_STREAM, CREATE_TOPIC_OLD]),
    "tank": (feed_tank, (tank.RemoteProtocolError,), [CREATE_ORDERS, PRODUCE_ABC]),
    "cursus": (
        feed_cursus,
        (ProtocolError,),
        [FETCH_OFFSET_VECTOR, CREATE_VECTOR, BATCH_VECTOR],
    ),
    "liftbridge": (
        feed_liftbridge,
        (liftbridge.RemoteProtocolError,),
        [vector("grpcio_publish.hex"), vector("grpcio_subscribe.hex")],
    ),
}


def check(protocol: str, data: bytes) -> None:
    feed, errors, _ = CASES[protocol]
    try:
        feed(data)
    except errors:
        pass


def test_seeds_decode_cleanly() -> None:
    for feed, _, seeds in CASES.values():
        for seed in seeds:
            feed(seed)  # the unmutated vectors are valid: no error at all


@st.composite
def mutated(draw: st.DrawFn, protocol: str) -> bytes:
    seeds = CASES[protocol][2]
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "dup"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[i] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif op == "cut":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=16))
        else:
            data += data[i:]
    return bytes(data)


def make_tests(protocol: str) -> tuple[Callable[..., None], Callable[..., None]]:
    @FUZZ
    @given(st.binary(max_size=512))
    def random_bytes(data: bytes) -> None:
        check(protocol, data)

    @FUZZ
    @given(mutated(protocol))
    def mutations(data: bytes) -> None:
        check(protocol, data)

    return random_bytes, mutations


for _name in CASES:
    globals()[f"test_{_name}_random_bytes"], globals()[f"test_{_name}_mutated_vectors"] = (
        make_tests(_name)
    )
