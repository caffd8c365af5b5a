"""ProduceWithSeqnum (and sparse bundles) racing other writers, through the real TANK listener of
a gateway process, on backends where a check-then-append races for real (NATS JetStream, Kafka
via Tansu: every step is a round trip) and on the local ones.

A mirroring tool names the sequence numbers its records must get. The gateway must store them
exactly there or answer "invalid sequence numbers" and store nothing; it must never answer OK
for records that landed at other sequence numbers because another writer got in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.protocols.tank import bundle as B
from gateway.protocols.tank import codec as C
from gateway.protocols.tank.client import TankClient
from tests.backends.servers import _tag, shared_nats, shared_tansu
from tests.protocols.tank import vectors as V
from tests.protocols.tank.test_golden import Raw
from tests.support import GatewayProcess

TS = 1_700_000_000_123
CLIENTS = 4
ROUNDS = 8


def backend_table(kind: str, where: Path) -> dict[str, dict[str, Any]]:
    tag = _tag(where)
    if kind == "nats":
        return {
            "default": {
                "type": "nats",
                "url": shared_nats().url,
                "stream_prefix": tag,
                "subject_prefix": tag,
                "kv_bucket": tag,
            }
        }
    if kind == "kafka":
        return {
            "default": {
                "type": "kafka",
                "bootstrap": shared_tansu().bootstrap,
                "kv_topic": f"__gw_kv_{tag}",
            }
        }
    return {"default": {"type": kind}}


@pytest.fixture(scope="module", params=["memory", "embedded", "nats", "kafka"])
def gateway(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[GatewayProcess]:
    tmp = tmp_path_factory.mktemp(f"tank-seqnum-{request.param}")
    backends = backend_table(request.param, tmp)
    with GatewayProcess(tmp, listeners={"tank": {}}, backends=backends) as gw:
        yield gw


async def test_racing_seqnum_produces_one_wins_the_rest_store_nothing(
    gateway: GatewayProcess,
) -> None:
    """Every round, CLIENTS connections send ProduceWithSeqnum for the same next sequence
    number at once (odd rounds as SPARSE bundles): exactly one gets OK, the others get
    P_INVALID_SEQNUMS, and the partition holds exactly the winners, each at its number."""
    host, port = gateway.address("tank")
    clients = [await TankClient.connect(host, port) for _ in range(CLIENTS)]
    try:
        assert await clients[0].create_topic("mirror", 1) == 0
        assert await clients[0].produce("mirror", 0, [(None, b"first", TS)]) == C.P_OK
        winners: list[bytes] = [b"first"]
        for rnd in range(ROUNDS):
            seq = rnd + 2  # the next sequence number (sequence numbers are offset + 1)
            statuses: dict[int, int | None] = {}

            async def send(i: int, seq: int = seq, rnd: int = rnd, out: Any = statuses) -> None:
                msg = (None, f"r{rnd}-c{i}".encode(), TS + rnd)
                out[i] = await clients[i].produce(
                    "mirror", 0, [msg], base_seqnum=seq, sparse=rnd % 2 == 1
                )

            async with trio.open_nursery() as nursery:
                for i in range(CLIENTS):
                    nursery.start_soon(send, i)
            ok = [i for i, status in statuses.items() if status == C.P_OK]
            assert len(ok) == 1, f"round {rnd}: statuses {statuses}"
            assert sorted(statuses.values()) == sorted(
                [C.P_OK] + [C.P_INVALID_SEQNUMS] * (CLIENTS - 1)
            )
            winners.append(f"r{rnd}-c{ok[0]}".encode())
        msgs, hw = await clients[0].consume("mirror", 0, 1)
        assert hw == ROUNDS + 1
        assert [(m.seq, m.content) for m in msgs] == list(enumerate(winners, 1))
    finally:
        for c in clients:
            await c.aclose()


def test_stale_and_gapped_seqnums_store_nothing(gateway: GatewayProcess) -> None:
    """Raw tank-cli frames: a ProduceWithSeqnum below the next sequence number (a stale mirror)
    or above it gets P_INVALID_SEQNUMS and stores nothing; the next one is stored there."""
    raw = Raw(gateway.address("tank"))
    try:
        assert raw.frame() == V.GREETING
        create = C.encode_request(C.CreateTopicRequest(1, "stale", 1, b""))
        assert raw.ask(create)[-1] == 0
        msgs = [(None, b"m%d" % i, V.TS_MS) for i in range(5)]
        assert raw.ask(V.produce_frame(b"stale", 0, B.encode_bundle(msgs)))[-1] == C.P_OK
        for base in (1, 5, 7):  # stale (twice) and a gap; 6 is next
            for sparse in (False, True):
                bundle = B.encode_bundle(
                    [(None, b"bad", V.TS_MS)], first_seq=base if sparse else None
                )
                got = raw.ask(V.produce_frame(b"stale", 0, bundle, base=base))
                assert got[-1] == C.P_INVALID_SEQNUMS, (base, sparse)
        resp = C.decode_response(0x02, raw.ask(V.consume_frame(b"stale", 0, 1))[5:])
        (part,) = resp.topics[0].partitions
        assert part.hwmark == 5
        assert [(m.seq, m.content) for m in part.messages()] == [
            (i + 1, b"m%d" % i) for i in range(5)
        ]
        bundle = B.encode_bundle([(None, b"good", V.TS_MS)], first_seq=6)
        assert raw.ask(V.produce_frame(b"stale", 0, bundle, base=6))[-1] == C.P_OK
        resp = C.decode_response(0x02, raw.ask(V.consume_frame(b"stale", 0, 6))[5:])
        (part,) = resp.topics[0].partitions
        assert part.hwmark == 6
        assert [(m.seq, m.content) for m in part.messages() if m.seq >= 6] == [(6, b"good")]
    finally:
        raw.close()
