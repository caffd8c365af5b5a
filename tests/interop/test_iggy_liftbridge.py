"""Iggy <-> Liftbridge through one gateway: the in-repo Iggy client and gufo-liftbridge 0.2.0 (a
real Liftbridge client). Both protocols have headers: they travel both ways."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from tests.support import GatewayProcess

DRIVER = Path(__file__).with_name("gufo_iggy_driver.py")


def gufo(port: int, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(DRIVER), str(port), *args],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_iggy_and_liftbridge_share_streams_and_headers(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, listeners={"iggy": {}, "liftbridge": {}}) as gw:
        iggy = gw.address("iggy")
        lb_port = gw.address("liftbridge")[1]
        entries = [
            ("trace", c.HeaderKind.STRING, b"abc"),
            ("n", c.HeaderKind.UINT32, b"\x07\0\0\0"),
        ]

        async def iggy_sends() -> None:
            async with await IggyClient.connect(*iggy) as cl:
                await cl.call(c.CreateStream(3, "default"))
                await cl.call(c.CreateTopic(c.Identifier("default"), 1, 1, 0, "i2l"))
                await cl.send_messages(
                    "default",
                    "i2l",
                    [c.Message(0, b"one", c.encode_headers(entries)), c.Message(9, b"two")],
                    c.Partitioning.messages_key(b"key"),
                )

        trio.run(iggy_sends)
        got = gufo(lb_port, "consume", "i2l", "2")["messages"]
        assert [bytes.fromhex(m["value"]) for m in got] == [b"one", b"two"]
        assert [m["offset"] for m in got] == [0, 1]
        assert all(bytes.fromhex(m["key"]) == b"key" for m in got)
        headers = got[0]["headers"]
        assert bytes.fromhex(headers["trace"]) == b"abc"
        assert bytes.fromhex(headers["n"]) == b"\x07\0\0\0"
        assert got[0]["ts"] > 1_600_000_000 * 10**9  # nanoseconds on the Liftbridge side

        gufo(lb_port, "publish", "l2i")

        async def iggy_polls() -> c.PolledMessages:
            async with await IggyClient.connect(*iggy) as cl:
                return await cl.poll("default", "l2i", 1, c.PollingKind.FIRST, count=10)

        polled = trio.run(iggy_polls)
        assert [m.payload for m in polled.messages] == [b"hello", b"world"]
        first = dict((k, (kind, v)) for k, kind, v in c.decode_headers(polled.messages[0].headers))
        assert first["h"] == (c.HeaderKind.RAW, b"v")
        assert first["bin"] == (c.HeaderKind.RAW, b"\x00\x01")
        assert not any(k.startswith("_gw.") for k in first)
        assert all(m.id != 0 for m in polled.messages)
