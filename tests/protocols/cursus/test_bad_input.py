"""Bad input gets the broker's reply or close, is counted, and leaves other connections alone."""

from __future__ import annotations

import struct

import pytest

from gateway.observability import PROTOCOL_ERRORS
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Message

from .conftest import cursus_gateway


def errors(kind: str) -> float:
    return PROTOCOL_ERRORS.labels(protocol="cursus", kind=kind)._value.get()


def batch_body(count_field: int | None = None, messages=None, acks="1") -> bytes:
    messages = messages if messages is not None else [Message(seq=1, payload=b"hi")]
    b = codec.make_batch("t", 0, messages, acks=acks)
    body = codec.encode_batch(b)
    if count_field is not None:
        at = 2 + 2 + 1 + 4 + 1 + len(acks) + 1 + 16
        body = body[:at] + struct.pack(">i", count_field) + body[at + 4 :]
    return body


GOOD = Message(seq=1, payload=b"hi")


@pytest.mark.parametrize(
    ("body", "reply", "kind"),
    [
        (batch_body()[:-1], "ERROR: failed to read message[0] metadata length: unexpected EOF",
         "malformed_batch"),
        (batch_body(count_field=2), "ERROR: failed to read message[1] offset: EOF",
         "malformed_batch"),
        (batch_body(count_field=-3), "ERROR: invalid negative message count: -3",
         "malformed_batch"),
        (batch_body(count_field=100_001),
         "ERROR: message count too high: 100001 (max: 100000)", "malformed_batch"),
        (batch_body()[:60] + b"\x00\x00\xff\xf0" + batch_body()[64:],
         "ERROR: failed to read message[0] payload bytes: unexpected EOF", "malformed_batch"),
        (batch_body(acks="2"), "ERROR: invalid acks value in batch: 2. Expected -1 (all), 0, or 1",
         "bad_acks"),
        (codec.encode_text("NOPE_COMMAND x=1"), "ERROR: malformed input - missing topic or payload",
         "malformed_input"),
        (codec.encode_text("CREATEX topic=t"), "ERROR: unknown command: CREATEX topic=t",
         "unknown_command"),
    ],
)  # fmt: skip
async def test_bad_input_is_answered_counted_and_isolated(tmp_path, body, reply, kind):
    async with cursus_gateway(tmp_path) as addr:
        async with (
            await CursusClient.connect(*addr) as bystander,
            await CursusClient.connect(*addr) as bad,
        ):
            await bystander.text("CREATE topic=t partitions=1")
            before = errors(kind)
            await bad.send_body(body)
            assert (await bad.read_frame()).decode() == reply
            assert errors(kind) == before + 1
            if kind == "malformed_input":
                assert await bad.read_frame() is None  # and the connection is closed
            else:  # the connection goes on
                assert await bad.text("LIST") == "t"
            assert (await bystander.produce("t", 0, [GOOD])).status == "OK"
            assert await bystander.text("LIST") == "t"


async def test_oversized_frame_closes_only_that_connection(tmp_path):
    async with cursus_gateway(tmp_path, max_frame_bytes=1024) as addr:
        async with (
            await CursusClient.connect(*addr) as bystander,
            await CursusClient.connect(*addr) as bad,
        ):
            before = errors("frame_too_large")
            await bad.stream.send_all(struct.pack(">I", 1025) + b"x" * 100)
            assert await bad.read_frame() is None
            assert errors("frame_too_large") == before + 1
            assert await bystander.text("LIST") == "(no topics)"


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4"])
async def test_compressed_listener_and_bad_compression(tmp_path, compression):
    async with cursus_gateway(tmp_path, compression=compression) as addr:
        async with await CursusClient.connect(*addr, compression=compression) as c:
            assert await c.text("CREATE topic=t partitions=1") == "Topic 't' now has 1 partitions"
            assert (await c.produce("t", 0, [GOOD])).status == "OK"
            assert '"hwm": 1' in await c.text("DESCRIBE topic=t")  # replies are never compressed
        async with (
            await CursusClient.connect(*addr, compression=compression) as bystander,
            await CursusClient.connect(*addr) as bad,
        ):
            before = errors("bad_compression")
            await bad.send_body(
                codec.encode_text("LIST")
            )  # not compressed: dropped, like the broker
            assert await bad.read_frame() is None
            assert errors("bad_compression") == before + 1
            assert await bystander.text("LIST") == "t"
