"""Calls the server codec takes without h2 (``GrpcConnection._detach``): a whole request in one
read whose header block the decoder already keeps and validated. The client side is h2 (our
client role), which checks every frame the server writes; the server's h2 is asserted never to
have seen the detached streams."""

from __future__ import annotations

import h2.settings
import pytest

from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.codec import (
    CallEnded,
    CallReset,
    CallStarted,
    GrpcConnection,
    HalfClosed,
    MessageReceived,
    RemoteProtocolError,
    ResponseStarted,
    Status,
)

from .test_codec import frame, frames_of, pair

REQUEST = pb.PublishRequest(stream="s", value=b"v" * 100, correlationId="1")


def one_read_call(client: GrpcConnection, method: str = "PublishAsync") -> tuple[int, bytes]:
    sid = client.start_call(method)
    client.send_message(sid, REQUEST)
    client.end_call(sid)
    return sid, client.data_to_send()


def answer(server: GrpcConnection, sid: int, payload: bytes = b"\x0a\x00") -> bytes:
    server.send_message(sid, payload)
    server.send_trailers(sid)
    return server.data_to_send()


def warm(client: GrpcConnection, server: GrpcConnection) -> None:
    """Two calls through h2: the first puts the request headers in the HPACK table, the second
    refers to them (a block that leaves the table as it is), which the server keeps, validated."""
    for _ in range(2):
        sid, wire = one_read_call(client)
        server.receive_data(wire)
        assert sid in server._h2.streams
        client.receive_data(answer(server, sid))


def pair_with_window(size: int) -> tuple[GrpcConnection, GrpcConnection]:
    """A pair whose client grants the server ``size`` bytes per stream (INITIAL_WINDOW_SIZE)."""
    client, server = pair()
    client._h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: size})
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    return client, server


def warmed() -> tuple[GrpcConnection, GrpcConnection]:
    client, server = pair()
    warm(client, server)
    return client, server


def test_a_repeated_one_read_call_bypasses_h2_and_the_client_accepts_the_answer() -> None:
    client, server = warmed()
    for _ in range(3):
        sid, wire = one_read_call(client)
        events = server.receive_data(wire)
        assert [type(e) for e in events] == [CallStarted, MessageReceived, HalfClosed]
        assert events[1].messages == [REQUEST]
        assert sid not in server._h2.streams
        out = answer(server, sid)
        kinds = [(f[0], f[1], f[2]) for f in frames_of(out)]
        assert kinds[:1] == [(1, 0x04, sid)]  # response headers, END_HEADERS
        assert (1, 0x05, sid) == kinds[-1]  # trailers, END_HEADERS | END_STREAM
        got = client.receive_data(out)
        assert [type(e) for e in got] == [ResponseStarted, MessageReceived, CallEnded]
        assert got[-1].status == Status.OK
        assert not server.is_open(sid)
    assert server._h2.highest_inbound_stream_id == sid


def test_our_goaway_names_the_last_detached_call() -> None:
    client, server = warmed()
    sid, wire = one_read_call(client)
    server.receive_data(wire)
    assert sid not in server._h2.streams
    server.goaway()
    (goaway,) = [f for f in frames_of(server.data_to_send()) if f[0] == 7]
    assert int.from_bytes(goaway[3][:4], "big") == sid


def test_a_call_split_over_reads_goes_through_h2() -> None:
    client, server = warmed()
    sid, wire = one_read_call(client)
    cut = 9 + int.from_bytes(wire[:3], "big")  # the HEADERS frame alone first
    events = server.receive_data(wire[:cut]) + server.receive_data(wire[cut:])
    assert [type(e) for e in events] == [CallStarted, MessageReceived, HalfClosed]
    assert sid in server._h2.streams
    assert [type(e) for e in client.receive_data(answer(server, sid))][-1] is CallEnded


def test_an_unknown_method_is_refused_on_a_detached_call() -> None:
    client, server = pair()
    for _ in range(3):  # the third one is detached
        sid, wire = one_read_call(client, "FetchMetadata")
        server.receive_data(wire)
        server.send_trailers(sid, Status.UNIMPLEMENTED, "no")  # trailers-only
        got = client.receive_data(server.data_to_send())
        assert isinstance(got[-1], CallEnded) and got[-1].status == Status.UNIMPLEMENTED
    assert sid not in server._h2.streams


def test_the_peers_window_holds_a_detached_answer_until_it_grows() -> None:
    client, server = pair_with_window(8)
    for _ in range(3):  # the last one is detached
        sid, wire = one_read_call(client)
        server.receive_data(wire)
        payload = b"\x1a\x20" + b"a" * 32  # 34 bytes + 5 of gRPC prefix > the 8-byte window
        out = answer(server, sid, payload)
        data = [f for f in frames_of(out) if f[0] == 0]
        assert sum(len(f[3]) for f in data) == 8
        got = client.receive_data(out)
        assert not any(isinstance(e, CallEnded) for e in got)
        # our client role grants window in large steps only: the grant is written by hand
        assert server.receive_data(frame(8, 0, sid, (100).to_bytes(4, "big"))) == []
        got += client.receive_data(server.data_to_send())
        (msg,) = [m for e in got if isinstance(e, MessageReceived) for m in e.messages]
        assert msg.SerializeToString() == payload
    assert sid not in server._h2.streams


def test_a_reset_detached_call_is_reported_and_forgotten() -> None:
    client, server = pair_with_window(1)
    for _ in range(2):
        server.receive_data(one_read_call(client)[1])  # via h2, then detached:
    sid, wire = one_read_call(client)
    server.receive_data(wire)
    assert sid not in server._h2.streams
    server.send_message(sid, b"\x0a\x00" * 10)
    server.data_to_send()  # one byte out, the rest waits for a window
    events = server.receive_data(frame(3, 0, sid, (8).to_bytes(4, "big")))
    assert events == [CallReset(sid, 8)]
    assert not server.is_open(sid)
    assert server.receive_data(frame(8, 0, sid, (100).to_bytes(4, "big"))) == []
    assert server.data_to_send() == b""


def test_padded_end_stream_data_on_a_detached_call() -> None:
    client, server = warmed()
    sid, wire = one_read_call(client)
    frames = frames_of(wire)
    (headers,) = [f for f in frames if f[0] == 1]
    body = b"".join(f[3] for f in frames if f[0] == 0)
    padded = bytes([3]) + body + b"\0\0\0"
    events = server.receive_data(
        frame(1, headers[1], sid, headers[3]) + frame(0, 0x09, sid, padded)
    )
    assert sid not in server._h2.streams
    assert [type(e) for e in events] == [CallStarted, MessageReceived, HalfClosed]
    sid, wire = one_read_call(client)
    (headers,) = [f for f in frames_of(wire) if f[0] == 1]
    with pytest.raises(RemoteProtocolError, match="padding"):
        server.receive_data(frame(1, headers[1], sid, headers[3]) + frame(0, 0x09, sid, b"\x09"))
    assert [f[0] for f in frames_of(server.data_to_send())][-1] == 7  # GOAWAY


def test_a_stream_id_below_a_detached_call_is_a_connection_error() -> None:
    client, server = warmed()
    sid, wire = one_read_call(client)
    server.receive_data(wire)
    assert sid not in server._h2.streams
    (headers,) = [f for f in frames_of(wire) if f[0] == 1]
    with pytest.raises(RemoteProtocolError):
        server.receive_data(frame(1, 0x05, sid, headers[3]))  # the same stream id again


def test_a_table_size_update_the_encoder_owes_goes_first() -> None:
    client, server = warmed()
    client._h2.update_settings({h2.settings.SettingCodes.HEADER_TABLE_SIZE: 0})
    sid, wire = one_read_call(client)
    events = server.receive_data(client.data_to_send() + wire)
    assert sid not in server._h2.streams
    assert [type(e) for e in events] == [CallStarted, MessageReceived, HalfClosed]
    out = answer(server, sid)
    (first, *_) = [f for f in frames_of(out) if f[0] == 1]
    assert first[3][0] & 0xE0 == 0x20  # a dynamic table size update opens the block
    assert [type(e) for e in client.receive_data(out)][-1] is CallEnded
