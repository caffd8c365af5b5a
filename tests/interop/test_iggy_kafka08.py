"""Iggy <-> Kafka 0.8 through one gateway: iggy-py and the in-repo Iggy client on one side, kcat
(librdkafka, a real 0.8 client) on the other. Kafka 0.8 has no headers: Iggy headers are dropped
on the way out and come back empty."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import trio

from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from tests.protocols.iggy.test_iggy_py import USERS, drive
from tests.support import GatewayProcess

KCAT_08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]


def kcat(*args: str, stdin: str | None = None) -> str:
    exe = shutil.which("kcat")
    assert exe, "kcat missing: run .ci/deps/kafka08.sh"
    proc = subprocess.run(
        [exe, *args, *KCAT_08], input=stdin, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_iggy_and_kafka08_share_topics(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, listeners={"iggy": {"users": USERS}, "kafka08": {}}) as gw:
        iggy = gw.address("iggy")
        broker = "%s:%d" % gw.address("kafka08")  # noqa: UP031

        # iggy-py (stream 1 "s1", topic 1 "t1") -> Kafka topic "s1.t1"
        drive(iggy, "setup")
        lines = kcat("-b", broker, "-C", "-t", "s1.t1", "-p", "0", "-o", "beginning", "-e")
        assert lines.split() == ["m0", "m1", "m2", "m3", "m4"]

        async def iggy_side() -> None:
            async with await IggyClient.connect(*iggy) as cl:
                # the in-repo client: stream "default" holds the undotted Kafka topics
                await cl.call(c.CreateStream(7, "default"))
                await cl.call(c.CreateTopic(c.Identifier("default"), 1, 1, 0, "i2k"))
                headers = c.encode_headers([("trace", c.HeaderKind.STRING, b"abc")])
                await cl.send_messages(
                    "default",
                    "i2k",
                    [c.Message(0, b"one", headers), c.Message(5, b"two")],
                    c.Partitioning.messages_key(b"k"),
                )

        trio.run(iggy_side)
        lines = kcat("-b", broker, "-C", "-t", "i2k", "-p", "0", "-o", "beginning", "-e", "-K:")
        assert lines.split() == ["k:one", "k:two"]

        # Kafka 0.8 -> Iggy
        kcat("-b", broker, "-P", "-t", "k2i", "-p", "0", "-K:", stdin="a:hello\nb:world\n")

        async def iggy_reads() -> c.PolledMessages:
            async with await IggyClient.connect(*iggy) as cl:
                streams = {s.name for s in await cl.call(c.GetStreams())}
                assert {"default", "s1"} <= streams
                return await cl.poll("default", "k2i", 1, c.PollingKind.FIRST, count=10)

        polled = trio.run(iggy_reads)
        assert [m.payload for m in polled.messages] == [b"hello", b"world"]
        assert [m.offset for m in polled.messages] == [0, 1]
        ids = [m.id for m in polled.messages]
        assert len(set(ids)) == 2 and 0 not in ids
        for m in polled.messages:
            assert m.headers == b""  # Kafka 0.8 carries no headers
            assert m.timestamp > 1_600_000_000_000_000  # microseconds
            assert m.checksum == c.zlib.crc32(m.payload)
