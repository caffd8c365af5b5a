"""The Liftbridge session through the connection driver over in-memory streams: a unary call
answered with its message and OK trailers; bytes that are not HTTP/2 get a GOAWAY, close the
connection and are counted."""

from __future__ import annotations

from typing import Any

from gateway.protocols.liftbridge import codec as lc
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from tests.protocols.driving import Driven, driven, protocol_errors


async def call_events(conn: Driven, client: lc.GrpcConnection, sid: int) -> list[Any]:
    """The client's events until the call ``sid`` ends."""
    events: list[Any] = []

    def ended(got: bytes) -> bool:
        if got:
            events.extend(client.receive_data(got))
            ended.seen += len(got)
        return any(isinstance(e, lc.CallEnded) and e.stream_id == sid for e in events)

    ended.seen = 0  # type: ignore[attr-defined]
    buffered = b""
    while not ended(buffered):
        buffered = await conn.receive(lambda got: bool(got))
        await conn.client.send_all(client.data_to_send())  # window updates, ping acks
    return events


async def test_a_unary_call_is_answered_then_garbage_gets_goaway() -> None:
    async with driven("liftbridge") as conn:
        client = lc.GrpcConnection(client=True)
        client.initiate()
        sid = client.start_call("CreateStream")
        client.send_message(sid, pb.CreateStreamRequest(name="s", subject="s"))
        client.end_call(sid)
        await conn.client.send_all(client.data_to_send())
        events = await call_events(conn, client, sid)
        [end] = [e for e in events if isinstance(e, lc.CallEnded)]
        assert end.status == lc.Status.OK, end
        assert any(isinstance(e, lc.MessageReceived) and e.stream_id == sid for e in events)

    async with driven("liftbridge") as conn:
        before = protocol_errors("liftbridge", "http2")
        await conn.client.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await conn.closed()
        assert protocol_errors("liftbridge", "http2") == before + 1
