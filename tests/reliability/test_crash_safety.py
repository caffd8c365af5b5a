"""Crash safety: producers over all five protocols with acks=all against the embedded
backend (fsync "always"); the gateway is killed with SIGKILL at random moments and restarted.
After every restart each acknowledged record is present exactly once and in order, and the
committed offsets are never ahead of the data.

A SIGKILL cannot tell whether fsync happened (the page cache survives the process); the fsync
ordering itself is proved with an injectable fsync in tests/backends/test_embedded.py.

``GATEWAY_CRASH_ROUNDS`` (default 20) sets the number of kills; ``make soak`` runs more.
"""

from __future__ import annotations

import json
import os
import random
import urllib.request
from dataclasses import dataclass, field

import trio

from gateway.model import Record
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Ack, Message
from gateway.protocols.iggy import codec as iggy
from gateway.protocols.iggy.client import IggyClient
from gateway.protocols.kafka08 import codec as k
from gateway.protocols.kafka08.messageset import encode_message_set
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.client import GrpcStatusError, LiftbridgeClient
from gateway.protocols.tank.client import TankClient
from tests.support import GatewayProcess

ROUNDS = int(os.environ.get("GATEWAY_CRASH_ROUNDS", "20"))
PROTOCOLS = ("kafka08", "tank", "cursus", "iggy", "liftbridge")
# canonical topic per producer: Iggy's stream "default" holds undotted names
# (docs/protocols/iggy.md)
TOPICS = {p: f"crash.{p}" for p in PROTOCOLS} | {"iggy": "crash_iggy"}
GROUP = "crash-group"


@dataclass
class Ledger:
    """What the gateway acknowledged, per protocol (each topic has one partition)."""

    acked: dict[str, list[bytes]] = field(default_factory=lambda: {p: [] for p in PROTOCOLS})
    next_n: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PROTOCOLS})
    committed: int = -1  # the highest Kafka 0.8 commit the gateway acknowledged

    def value(self, protocol: str) -> bytes:
        n = self.next_n[protocol]
        self.next_n[protocol] = n + 1
        return f"{protocol}-{n:08d}".encode()


async def k08_call(stream: trio.SocketStream, conn: k.ClientConnection, api: int, body) -> object:
    await stream.send_all(conn.send_request(api, 0, body))
    while True:
        got = conn.next_response()
        if got is not None:
            return got[1]
        data = await stream.receive_some(65536)
        if not data:
            raise trio.BrokenResourceError("closed")
        conn.receive_data(data)


async def produce_kafka08(addr: tuple[str, int], ledger: Ledger) -> None:
    stream = await trio.open_tcp_stream(*addr)
    conn = k.ClientConnection("crash")
    while True:
        values = [ledger.value("kafka08") for _ in range(random.randint(1, 20))]
        mset = encode_message_set([Record(None, v) for v in values])
        body = k.PRODUCE_REQUEST(
            -1, 5000, [k.PRODUCE_TOPIC("crash.kafka08", [k.PRODUCE_PARTITION(0, mset)])]
        )
        resp = await k08_call(stream, conn, 0, body)
        part = resp.topics[0].partitions[0]
        assert part.error == 0, part
        ledger.acked["kafka08"].extend(values)
        offset = part.offset + len(values)  # next offset to read after this batch
        commit = k.COMMIT_REQUEST_V0(
            GROUP, [k.COMMIT_TOPIC_V0("crash.kafka08", [k.COMMIT_PARTITION_V0(0, offset, "")])]
        )
        resp = await k08_call(stream, conn, 8, commit)
        assert resp.topics[0].partitions[0].error == 0
        ledger.committed = max(ledger.committed, offset)


async def produce_tank(addr: tuple[str, int], ledger: Ledger) -> None:
    client = await TankClient.connect(*addr)
    while True:
        values = [ledger.value("tank") for _ in range(random.randint(1, 20))]
        status = await client.produce(
            "crash.tank", 0, [(None, v, 1_700_000_000_000) for v in values]
        )
        assert status == 0, status
        ledger.acked["tank"].extend(values)


async def produce_cursus(addr: tuple[str, int], ledger: Ledger) -> None:
    client = await CursusClient.connect(*addr)
    while True:
        values = [ledger.value("cursus") for _ in range(random.randint(1, 20))]
        ack = await client.produce(
            "crash.cursus", 0, [Message(payload=v) for v in values], acks="all"
        )
        assert isinstance(ack, Ack) and ack.status == "OK", ack
        ledger.acked["cursus"].extend(values)


async def produce_iggy(addr: tuple[str, int], ledger: Ledger) -> None:
    async with await IggyClient.connect(*addr) as client:
        while True:
            values = [ledger.value("iggy") for _ in range(random.randint(1, 20))]
            await client.send_messages(
                "default",
                TOPICS["iggy"],
                [iggy.Message(0, v) for v in values],
                iggy.Partitioning.partition_id(1),
            )
            ledger.acked["iggy"].extend(values)


async def produce_liftbridge(addr: tuple[str, int], ledger: Ledger) -> None:
    async with LiftbridgeClient(await trio.open_tcp_stream(*addr)) as client:
        while True:
            value = ledger.value("liftbridge")
            request = pb.PublishRequest(
                stream=TOPICS["liftbridge"], value=value, ackPolicy=pb.AckPolicy.ALL
            )
            response = await client.call("Publish", request)
            assert response.ack.stream == TOPICS["liftbridge"], response
            ledger.acked["liftbridge"].append(value)


CONNECTION_LOST = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    OSError,
    EOFError,
    GrpcStatusError,
)

PRODUCERS = {
    "kafka08": produce_kafka08,
    "tank": produce_tank,
    "cursus": produce_cursus,
    "iggy": produce_iggy,
    "liftbridge": produce_liftbridge,
}


def admin(gw: GatewayProcess, path: str, body: object | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        gw.admin_url + path, data=data, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def stored_values(gw: GatewayProcess, topic: str) -> list[bytes]:
    import base64

    out: list[bytes] = []
    offset = 0
    while True:
        res = admin(gw, f"/v1/topics/{topic}/records?partition=0&offset={offset}&max=5000")
        if not res["records"]:
            return out
        out.extend(base64.b64decode(r["value"]) for r in res["records"])
        offset = res["records"][-1]["offset"] + 1


def check(gw: GatewayProcess, ledger: Ledger) -> None:
    for protocol in PROTOCOLS:
        stored = stored_values(gw, TOPICS[protocol])
        assert len(stored) == len(set(stored)), f"{protocol}: a record is stored twice"
        assert stored == sorted(stored), f"{protocol}: records out of order"
        acked = ledger.acked[protocol]
        missing = set(acked) - set(stored)
        assert not missing, f"{protocol}: acknowledged records lost: {sorted(missing)[:5]}"
        # acknowledged records keep their relative order and come before unacknowledged ones
        at = {v: i for i, v in enumerate(stored)}  # values are unique (checked above)
        positions = [at[v] for v in acked]
        assert positions == sorted(positions)
    hw = {
        p["partition"]: p["high_watermark"] for p in admin(gw, "/v1/topics/crash.kafka08/offsets")
    }
    committed = admin_committed(gw)
    assert committed <= hw[0], f"committed offset {committed} is ahead of the data ({hw[0]})"
    assert committed >= ledger.committed, "an acknowledged commit was lost"


def admin_committed(gw: GatewayProcess) -> int:
    import socket

    sock = socket.create_connection(gw.address("kafka08"), timeout=10)
    conn = k.ClientConnection("check")
    sock.sendall(
        conn.send_request(
            9, 0, k.OFFSET_FETCH_REQUEST(GROUP, [k.OFFSET_FETCH_TOPIC("crash.kafka08", [0])])
        )
    )
    while (got := conn.next_response()) is None:
        conn.receive_data(sock.recv(65536))
    sock.close()
    return got[1].topics[0].partitions[0].offset


async def run_round(gw: GatewayProcess, ledger: Ledger, seconds: float) -> None:
    async def guarded(protocol: str) -> None:
        try:
            await PRODUCERS[protocol](gw.address(protocol), ledger)
        except* CONNECTION_LOST:
            pass  # the gateway was killed under us: the request in flight is unacknowledged

    async with trio.open_nursery() as nursery:
        for protocol in PROTOCOLS:
            nursery.start_soon(guarded, protocol)
        await trio.sleep(seconds)
        gw.proc.kill()  # SIGKILL, mid-request
        with trio.move_on_after(10):
            while gw.proc.poll() is None:
                await trio.sleep(0.01)


def test_acknowledged_records_survive_sigkill(tmp_path) -> None:
    rng = random.Random(int(os.environ.get("GATEWAY_CRASH_SEED", "1234")))
    ledger = Ledger()
    listeners = {p: {} for p in PROTOCOLS}
    listeners["iggy"]["users"] = []  # the pre-authentication dialect: no login
    backends = {"default": {"type": "embedded", "fsync": "always"}}
    gw = GatewayProcess(tmp_path, listeners=listeners, backends=backends)
    gw.start()
    for protocol in PROTOCOLS:
        admin(gw, "/v1/topics", {"name": TOPICS[protocol], "partitions": 1})
    for _ in range(ROUNDS):
        trio.run(run_round, gw, ledger, rng.uniform(0.05, 0.6))
        gw._close()
        gw = GatewayProcess(tmp_path, listeners=listeners, backends=backends)
        gw.start()
        check(gw, ledger)
    assert all(len(v) > ROUNDS for v in ledger.acked.values()), ledger.next_n
    assert gw.stop() == 0
