"""NATS ingestion: nats-py publishes enveloped and plain messages to a stream's subject on a real
nats-server; a Liftbridge subscriber on the gateway receives them; an enveloped publish with an
ack inbox gets its ack; a broken envelope is rejected and counted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc

from gateway.protocols.liftbridge import envelope
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from tests.backends.servers import NatsServer
from tests.protocols.liftbridge.grpc_stub import grpc_module
from tests.support import GatewayProcess

NATS_PY = r"""
import asyncio, json, sys
import nats

async def main(url, messages):
    nc = await nats.connect(url)
    acks = []
    async def on_ack(msg):
        acks.append(msg.data.hex())
    await nc.subscribe("acks.lb", cb=on_ack)
    for subject, payload in messages:
        await nc.publish(subject, bytes.fromhex(payload))
    await nc.flush()
    for _ in range(100):
        if acks:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    print(json.dumps(acks))
    await nc.close()

asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
"""


def metric(gw: GatewayProcess, kind: str) -> float:
    text = urllib.request.urlopen(gw.admin_url + "/metrics", timeout=5).read().decode()
    m = re.search(
        rf'gateway_protocol_errors_total\{{kind="{kind}",protocol="liftbridge"\}} (\S+)', text
    )
    return float(m.group(1)) if m else 0.0


def test_nats_messages_land_in_the_stream(tmp_path: Path) -> None:
    with NatsServer(tmp_path / "nats") as nats_server:
        listener = {"nats": nats_server.url}
        with GatewayProcess(tmp_path / "gw", listeners={"liftbridge": listener}) as gw:
            host, port = gw.address("liftbridge")
            with grpc.insecure_channel(f"{host}:{port}") as ch:
                api = grpc_module().APIStub(ch)
                api.CreateStream(
                    pb.CreateStreamRequest(name="orders", subject="orders.in", partitions=2)
                )
                # the ingester picks up new streams by polling: wait until it subscribed
                deadline = time.monotonic() + 30
                while not {"orders.in", "orders.in.1"} <= nats_server.subscribed_subjects():
                    assert time.monotonic() < deadline, nats_server.subscribed_subjects()
                    time.sleep(0.05)
                enveloped = pb.Message(
                    key=b"k1",
                    value=b"enveloped",
                    headers={"h": b"v"},
                    ackInbox="acks.lb",
                    correlationId="c1",
                    ackPolicy=pb.LEADER,
                )
                bad_crc = bytearray(envelope.encode_publish(pb.Message(value=b"x"), with_crc=True))
                bad_crc[8] ^= 0xFF
                bad_version = bytearray(envelope.encode_publish(pb.Message(value=b"y")))
                bad_version[4] = 1
                messages = [
                    ("orders.in", b"plain nats message".hex()),
                    ("orders.in", envelope.encode_publish(enveloped, with_crc=True).hex()),
                    ("orders.in", bytes(bad_crc).hex()),
                    ("orders.in", bytes(bad_version).hex()),
                    ("orders.in.1", envelope.encode_publish(pb.Message(value=b"p1")).hex()),
                ]
                before = metric(gw, "envelope_crc"), metric(gw, "envelope_version")
                proc = subprocess.run(
                    [sys.executable, "-c", NATS_PY, nats_server.url, json.dumps(messages)],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert proc.returncode == 0, proc.stderr[-3000:]
                acks = [envelope.decode_ack(bytes.fromhex(a)) for a in json.loads(proc.stdout)]
                assert len(acks) == 1
                ack = acks[0]
                assert (ack.stream, ack.offset, ack.correlationId, ack.ackInbox) == (
                    "orders",
                    1,
                    "c1",
                    "acks.lb",
                )
                assert (ack.partitionSubject, ack.msgSubject) == ("orders.in", "orders.in")

                call = api.Subscribe(
                    pb.SubscribeRequest(
                        stream="orders",
                        startPosition=pb.EARLIEST,
                        stopPosition=pb.STOP_LATEST,
                    ),
                    timeout=10,
                )
                got = []
                try:
                    for m in call:
                        got.append(m)
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert [(m.offset, m.key, m.value) for m in got[1:]] == [
                    (0, b"", b"plain nats message"),
                    (1, b"k1", b"enveloped"),
                ]
                assert dict(got[2].headers) == {"h": b"v", "subject": b"orders.in", "reply": b""}
                assert got[1].subject == "orders.in"
                assert metric(gw, "envelope_crc") == before[0] + 1
                assert metric(gw, "envelope_version") == before[1] + 1

                call = api.Subscribe(
                    pb.SubscribeRequest(
                        stream="orders",
                        partition=1,
                        startPosition=pb.EARLIEST,
                        stopPosition=pb.STOP_LATEST,
                    ),
                    timeout=10,
                )
                got = []
                try:
                    for m in call:
                        got.append(m)
                except grpc.RpcError:
                    pass
                assert [m.value for m in got[1:]] == [b"p1"]
                assert got[1].subject == "orders.in.1"
