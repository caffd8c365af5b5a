"""The Iggy session through the connection driver over in-memory streams: a request answered, a
request failing validation answered with its status (the connection stays), and a frame with an
impossible length closed without an answer (as the reference server does) and counted."""

from __future__ import annotations

import struct

from gateway.protocols.iggy import codec as c
from tests.protocols.driving import driven, protocol_errors


def whole(got: bytes) -> bool:
    return len(got) >= 8 and len(got) >= 8 + struct.unpack_from("<I", got, 4)[0]


async def test_requests_answered_then_a_bad_length_closes() -> None:
    async with driven("iggy") as conn:
        client = c.ClientConnection()
        await conn.client.send_all(client.send(c.CreateStream(1, "s1")))
        client.receive_data(await conn.receive(whole))
        assert client.next_response().status == 0
        await conn.client.send_all(client.send(c.CreateStream(0, "s")))
        client.receive_data(await conn.receive(whole))
        assert client.next_response().status == c.Status.INVALID_STREAM_ID
        before = protocol_errors("iggy", "bad_length")
        await conn.client.send_all(struct.pack("<II", 2, 1))
        await conn.closed()
        assert protocol_errors("iggy", "bad_length") == before + 1
