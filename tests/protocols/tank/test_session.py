"""Properties of the TANK session on the model (no sockets): whatever bundles are produced, a
consume from any sequence number gives back exactly the messages from there on, in order, with
sequence numbers offset + 1, across bundle boundaries and fetch sizes that cut bundles."""

from __future__ import annotations

import types

import structlog
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.backends.memory import MemoryBackend
from gateway.core.engine import Core
from gateway.protocols.tank import TankListenerConfig
from gateway.protocols.tank import codec as C
from gateway.protocols.tank.bundle import encode_bundle
from gateway.protocols.tank.client import TAIL
from gateway.protocols.tank.session import TankSession

message = st.tuples(
    st.one_of(st.none(), st.binary(max_size=20)),
    st.binary(max_size=200),
    st.integers(min_value=0, max_value=2**50),
)
bundles = st.lists(
    st.tuples(st.lists(message, min_size=1, max_size=30), st.one_of(st.none(), st.booleans())),
    min_size=1,
    max_size=6,
)


def session() -> TankSession:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    ctx = types.SimpleNamespace(
        core=core, log=structlog.get_logger(), shutdown=trio.Event(), listener=TankListenerConfig()
    )
    return TankSession(ctx)  # type: ignore[arg-type]


async def consume_all(s: TankSession, seq: int, fetch_size: int) -> tuple[list, int]:
    """Like TankClient.consume over many requests: from ``seq`` until nothing new arrives."""
    out: list = []
    hwmark = 0
    rid = 0
    while True:
        rid += 1
        req = C.ConsumeRequest(
            rid, [C.ConsumeTopic("t", [C.ConsumePartitionRequest(0, seq, fetch_size)])]
        )
        # what a real client decodes: the encoded answer
        resp = C.decode_response(C.MsgId.CONSUME, C.encode_response(await s.consume(req))[5:])
        part = resp.topics[0].partitions[0]
        assert part.err == 0
        hwmark = part.hwmark
        msgs = [m for m in part.messages() if m.seq >= max(seq, 1)]
        if not msgs:
            if len(part.chunk) >= fetch_size and fetch_size < 1 << 24:
                fetch_size *= 2  # a cut bundle larger than the fetch size: ask for more
                continue
            return out, hwmark
        out.extend(msgs)
        seq = msgs[-1].seq + 1


@settings(max_examples=60, deadline=None)
@given(bundles, st.integers(min_value=0, max_value=200), st.integers(min_value=1, max_value=3000))
def test_consume_returns_what_was_produced(produced, start, fetch_size) -> None:
    async def main() -> None:
        s = session()
        await s.create_topic(C.CreateTopicRequest(1, "t", 1))
        flat = []
        for i, (msgs, compress) in enumerate(produced):
            bundle = encode_bundle(msgs, compress=compress)
            req = C.decode_request(
                C.MsgId.PRODUCE,
                C.encode_request(
                    C.ProduceRequest(i, [C.ProduceTopic("t", [C.ProducePartition(0, bundle)])])
                )[5:],
            )
            resp = await s.produce(req)
            assert resp.topics[0].statuses == [C.P_OK]
            flat.extend(msgs)
        seq = min(start, len(flat) + 1)
        got, hwmark = await consume_all(s, seq, fetch_size)
        assert hwmark == len(flat)
        first = max(seq, 1)
        assert [(m.seq, m.key, m.content, m.timestamp_ms) for m in got] == [
            (first + i, k, c, ts) for i, (k, c, ts) in enumerate(flat[first - 1 :])
        ]
        tail, _ = await consume_all(s, TAIL, fetch_size)
        assert tail == []

    trio.run(main)
