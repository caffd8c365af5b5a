"""The session writes answers from its reader when the socket takes them at once
(``Session._send_now``), and never blocks its reader on a send: a client that writes all its
calls before it reads a byte (its receive buffer long full) still has every call stored, and
then gets every answer, in order, once it reads."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio

from gateway.config import parse_config
from gateway.model import ListOffsets
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.client import LiftbridgeClient
from gateway.protocols.liftbridge.codec import CallEnded, GrpcConnection, MessageReceived
from gateway.streams import GuardedStream
from tests.support import make_config, serving

# 20,000 acks, ~3 MB: more than the socket buffers hold; the calls (at most CALL_BYTES each,
# framed) fit in the gateway's 4 MiB HTTP/2 receive window, so the client never has to read
CALLS = 1_000
PER_CALL = 20
CALL_BYTES = 2_400


async def test_reader_never_blocks_on_a_client_that_does_not_read(tmp_path: Path) -> None:
    cfg = parse_config(make_config(tmp_path, {"liftbridge": {}}))
    async with serving(cfg) as server:
        host, port = server.addresses()["liftbridge"]
        async with await LiftbridgeClient.connect(host, port) as lb:
            await lb.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
        sock = trio.socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await sock.connect((host, port))
        client = GrpcConnection(client=True)
        client.initiate()
        try:
            await sock.send(client.data_to_send())
            # the gateway's SETTINGS and WINDOW_UPDATE (4 MiB windows), so that all the calls
            # fit in the send window without reading again
            with trio.fail_after(10):
                while client._h2.outbound_flow_control_window < CALL_BYTES * CALLS:
                    client.receive_data(await sock.recv(1 << 16))
            await sock.send(client.data_to_send())
            for c in range(CALLS):
                sid = client.start_call("PublishAsync")
                client.send_messages(
                    sid,
                    [
                        pb.PublishRequest(
                            stream="s",
                            value=b"v" * 100,
                            correlationId=f"{c}.{i}",
                            ackPolicy=pb.LEADER,
                        )
                        for i in range(PER_CALL)
                    ],
                )
                client.end_call(sid)
                data = memoryview(client.data_to_send())
                while data:
                    with trio.fail_after(20):  # a gateway that stopped reading fails here
                        data = data[await sock.send(data) :]
            # every call stored while the client has read nothing
            with trio.fail_after(30):
                while (
                    await server.core.execute(ListOffsets("s", 0))
                ).high_watermark < CALLS * PER_CALL:
                    await trio.sleep(0.05)
            acks: list[str] = []
            ended = 0
            with trio.fail_after(30):
                while ended < CALLS:
                    chunk = await sock.recv(1 << 16)
                    assert chunk, "the gateway closed the connection"
                    for ev in client.receive_data(chunk):
                        if type(ev) is MessageReceived:
                            acks.extend(m.correlationId for m in ev.messages)
                        elif type(ev) is CallEnded:
                            assert ev.status == 0, ev.message
                            ended += 1
                    out = client.data_to_send()
                    if out:
                        await sock.send(out)
            assert acks == [f"{c}.{i}" for c in range(CALLS) for i in range(PER_CALL)]
        finally:
            sock.close()


async def test_a_failed_direct_send_leaves_the_answer_to_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send error met by ``_send_now`` (in the reader or a call's task) is not raised there:
    the writer task sends (or meets the error itself, ending the connection from one task, as
    before). Here every direct send fails and every answer still arrives through the writer."""

    def broken(self: GuardedStream, data: bytes) -> int:
        raise trio.BrokenResourceError("simulated")

    monkeypatch.setattr(GuardedStream, "try_send", broken)
    cfg = parse_config(make_config(tmp_path, {"liftbridge": {}}))
    async with serving(cfg) as server:
        host, port = server.addresses()["liftbridge"]
        async with await LiftbridgeClient.connect(host, port) as lb:
            await lb.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
            with trio.fail_after(20):
                for i in range(20):
                    acks = await lb.publish_async(
                        [pb.PublishRequest(stream="s", value=b"v", correlationId=str(i))]
                    )
                    assert [a.ack.offset for a in acks] == [i]
