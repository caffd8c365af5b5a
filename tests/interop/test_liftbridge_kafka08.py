"""Liftbridge <-> Kafka 0.8 through one gateway: gufo-liftbridge (a real Liftbridge client) on
one side, kcat (librdkafka, a real 0.8 client) on the other. Kafka 0.8 has no headers: Liftbridge
headers are dropped on the way to Kafka; messages from Kafka get the Liftbridge server-added
``subject``/``reply`` headers only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.interop.test_iggy_kafka08 import kcat
from tests.support import GatewayProcess

GUFO = r"""
import asyncio, json, sys
from gufo.liftbridge.client import LiftbridgeClient
from gufo.liftbridge.types import StartPosition

async def main(port, mode):
    async with LiftbridgeClient([f"127.0.0.1:{port}"]) as client:
        if mode == "publish":
            await client.create_stream("lb2k", subject="lb2k.subj", partitions=1)
            await client.publish(b"hello", stream="lb2k", partition=0, key=b"k1",
                                 headers={"h": b"v"})
            reqs = [client.get_publish_request(b"bulk-%d" % i, stream="lb2k", partition=0,
                                               correlation_id=str(i)) for i in range(2)]
            [r async for r in client.publish_bulk(reqs)]
            print("[]")
        else:
            got = []
            async def sub():
                async for m in client.subscribe("k2lb", partition=0,
                                                start_position=StartPosition.EARLIEST):
                    got.append([m.offset, m.key.decode(), m.value.decode(),
                                sorted(m.headers)])
                    if len(got) == 2:
                        return
            await asyncio.wait_for(sub(), 15)
            print(json.dumps(got))

asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
"""


def gufo(port: int, mode: str) -> list:
    proc = subprocess.run(
        [sys.executable, "-c", GUFO, str(port), mode], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_liftbridge_and_kafka08_share_topics(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, listeners={"liftbridge": {}, "kafka08": {}}) as gw:
        _, lb_port = gw.address("liftbridge")
        broker = "%s:%d" % gw.address("kafka08")  # noqa: UP031

        # Liftbridge -> Kafka 0.8
        gufo(lb_port, "publish")
        out = kcat("-b", broker, "-C", "-t", "lb2k", "-p", "0", "-o", "beginning", "-e", "-K:")
        assert out.split() == ["k1:hello", ":bulk-0", ":bulk-1"]

        # Kafka 0.8 -> Liftbridge (the topic is auto-created by the Kafka side)
        kcat("-b", broker, "-P", "-t", "k2lb", "-p", "0", "-K:", stdin="a:one\nb:two\n")
        got = gufo(lb_port, "subscribe")
        assert got == [
            [0, "a", "one", ["reply", "subject"]],
            [1, "b", "two", ["reply", "subject"]],
        ]
