"""The TANK session through the connection driver over in-memory streams: the greeting, a
request answered; a frame with an unknown message id closes the connection (as the broker does)
and is counted."""

from __future__ import annotations

from gateway.protocols.tank import codec as tc
from tests.protocols.driving import driven, protocol_errors


async def test_create_topic_is_answered_then_an_unknown_message_closes() -> None:
    async with driven("tank") as conn:
        assert await conn.receive(lambda got: len(got) >= 5) == tc.GREETING
        client = tc.TankConnection(tc.Role.CLIENT)
        await conn.client.send_all(client.send(tc.CreateTopicRequest(7, "orders", 2)))
        answer = await conn.receive(lambda got: len(got) >= 5 + int.from_bytes(got[1:5], "little"))
        client.receive_data(answer)
        assert client.next_event() == tc.CreateTopicResponse(7, "orders", tc.CT_OK)
        before = protocol_errors("tank", "unknown_msg")
        await conn.client.send_all(b"\x7f\x00\x00\x00\x00")
        await conn.closed()
        assert protocol_errors("tank", "unknown_msg") == before + 1
