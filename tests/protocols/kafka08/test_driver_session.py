"""The Kafka 0.8 session through the connection driver over in-memory streams: a request is
answered; a frame with a bad size closes the connection (as the 0.8 broker does) and is counted."""

from __future__ import annotations

import struct

from gateway.protocols.kafka08 import codec as kc
from tests.protocols.driving import driven, protocol_errors


async def test_metadata_is_answered_then_a_bad_size_closes() -> None:
    async with driven("kafka08") as conn:
        client = kc.ClientConnection("driver-test")
        await conn.client.send_all(client.send_request(3, 0, kc.METADATA_REQUEST([])))
        answer = await conn.receive(
            lambda got: len(got) >= 4 and len(got) >= 4 + int.from_bytes(got[:4], "big")
        )
        client.receive_data(answer)
        api_key, body = client.next_response()
        assert api_key == 3
        assert [b.port for b in body.brokers] == [1]
        before = protocol_errors("kafka08", "wrong_size")
        await conn.client.send_all(struct.pack(">i", -1) + b"junk")
        await conn.closed()
        assert protocol_errors("kafka08", "wrong_size") == before + 1
