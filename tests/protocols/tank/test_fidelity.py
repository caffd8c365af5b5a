"""Where the gateway must answer exactly as the real TANK broker does, replayed as vectors
against the session (server role): ``tank-cli produce -S`` exchanges and TANK's topic-name rule.
The client role of the same bytes is in test_codec.py."""

from __future__ import annotations

import types

import pytest
import structlog
import trio

from gateway.backends.memory import MemoryBackend
from gateway.core.engine import Core
from gateway.protocols.tank import TankListenerConfig
from gateway.protocols.tank import codec as C
from gateway.protocols.tank.session import TankSession, valid_topic_name
from tests.protocols.tank import vectors as V


def session() -> TankSession:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    ctx = types.SimpleNamespace(
        core=core, log=structlog.get_logger(), shutdown=trio.Event(), listener=TankListenerConfig()
    )
    return TankSession(ctx)  # type: ignore[arg-type]


async def answer(s: TankSession, frame: bytes) -> bytes:
    """The bytes the session answers a request frame with."""
    conn = C.TankConnection(C.Role.SERVER)
    conn.receive_data(frame)
    return C.encode_response(await s.handle(conn.next_event()))


def pws(seq: int) -> bytes:
    """`tank-cli -t orders -p 0 produce -S <seq> s1`."""
    bundle = V.BUNDLE_SPARSE_S1[:1] + seq.to_bytes(8, "little") + V.BUNDLE_SPARSE_S1[9:]
    return V.produce_frame(b"orders", 0, bundle, base=seq)


async def test_produce_with_seqnum_answers_like_the_real_broker() -> None:
    s = session()
    assert await answer(s, V.CREATE_ORDERS) == V.CREATE_ORDERS_OK
    assert pws(1) == V.produce_frame(b"orders", 0, V.BUNDLE_SPARSE_S1, base=1)
    assert await answer(s, pws(1)) == V.PWS_ANSWER_OK  # stored at 1, answered 0x01
    # at or below the high watermark: 0x0a ("invalid request") in the same 0x01 frame
    assert await answer(s, pws(1)) == V.PWS_ANSWER_INVALID
    # a gap (the real broker stores it at 100): refused as the real broker refuses a request,
    # because the gateway's backends keep dense offsets
    assert await answer(s, pws(100)) == V.PWS_ANSWER_INVALID
    assert await answer(s, pws(2)) == V.PWS_ANSWER_OK
    watermarks = await s.discover_partitions(C.DiscoverPartitionsRequest(1, "orders"))
    assert [(w.first_available, w.hwmark) for w in watermarks.partitions] == [(1, 2), (0, 0)]


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        (b"orders", True),
        (b"a-b_c9", True),
        (b"A", True),
        (b"x" * 64, True),
        (b"x" * 65, False),
        (b"", False),
        (b"a.b", False),
        (b"--", False),
        (b"_", False),
        (b"-a", False),
        (b"a_", False),
        (b"a b", False),
        (b"a/b", False),
        ("é".encode(), False),
    ],
)
async def test_create_topic_follows_tanks_name_rule(name: bytes, valid: bool) -> None:
    assert valid_topic_name(name) is valid
    s = session()
    payload = b"\x01\x00\x00\x00" + bytes([len(name)]) + name + b"\x01\x00\x00"
    got = await answer(s, b"\x07" + len(payload).to_bytes(4, "little") + payload)
    status = C.CT_OK if valid else C.CT_INVALID  # tank-cli prints "Invalid Request" for 10
    body = payload[:-3] + bytes([status])  # request id, topic, error byte
    assert got == b"\x07" + len(body).to_bytes(4, "little") + body


async def test_topics_made_elsewhere_stay_readable_over_tank() -> None:
    from gateway.model import CreateTopic

    s = session()
    await s.core.execute(CreateTopic("a.b", 1))
    resp = await s.consume(
        C.ConsumeRequest(1, [C.ConsumeTopic("a.b", [C.ConsumePartitionRequest(0, 0, 1024)])])
    )
    assert resp.topics[0].partitions[0].err == C.C_OK
