"""Exchanges with the reference Liftbridge server (v1.9.0), replayed in both roles.

``vectors/reference_v1_9_0.json`` lists requests in order with the status, message and response
fields the reference server answers them with.

- Server role: a fresh gateway gets the same requests from a grpcio client and must answer each
  with the same status and message (and response fields).
- Client role: each answer as the reference server (grpc-go) puts it on the wire: a trailers-only
  HEADERS frame for an error, else HEADERS, the message, trailers; HPACK-encoded here with the
  ``hpack`` library (not by our codec) and percent-encoded as grpc-go does. The codec, as a
  client, must read back the same status, message and response.

Plus the metadata the reference server reports (broker counts over the whole cluster, the three
timestamp pairs always present).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import hpack
import pytest
from google.protobuf import json_format

from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.codec import (
    METHODS_BY_NAME,
    CallEnded,
    GrpcConnection,
    MessageReceived,
    Status,
)
from tests.protocols.liftbridge.grpc_stub import grpc_module
from tests.support import GatewayProcess

VECTORS = json.loads((Path(__file__).parent / "vectors" / "reference_v1_9_0.json").read_text())
STEPS: list[dict[str, Any]] = VECTORS["steps"]
BROKER = "b1"


def step_id(step: dict[str, Any]) -> str:
    return f"{step['method']}-{step['status']}-{step.get('message', '')[:40]}"


def request_of(step: dict[str, Any]) -> Any:
    spec = METHODS_BY_NAME[step["method"]]
    return json_format.ParseDict(step["request"], spec.request())


def response_fields(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def subset(want: Any, got: Any) -> bool:
    """Every field of ``want`` is in ``got`` with the same value (dicts compared recursively)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(subset(v, got.get(k)) for k, v in want.items())
    return bool(want == got)


# ------------------------------------------------------------------------ server role
@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with GatewayProcess(
        tmp_path_factory.mktemp("lb-ref"),
        listeners={"liftbridge": {"broker_id": BROKER}},
        backend="memory",
    ) as gw:
        host, port = gw.address("liftbridge")
        channel = grpc.insecure_channel(f"{host}:{port}")
        yield grpc_module().APIStub(channel)
        channel.close()


def call(api: Any, step: dict[str, Any]) -> tuple[str, str, list[Any]]:
    """(status name, message, response messages) of one step against the gateway."""
    method = getattr(api, step["method"])
    timeout = step.get("timeout", 10)
    try:
        if step["method"] == "Subscribe":
            got = list(method(request_of(step), timeout=timeout))
        else:
            got = [method(request_of(step), timeout=timeout)]
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or "", []
    return "OK", "", got


def test_the_gateway_answers_as_the_reference_server(api: Any) -> None:
    # one test, in order: later steps depend on earlier ones (streams, cursors, groups)
    mismatches = []
    for k, step in enumerate(STEPS):
        status, message, responses = call(api, step)
        want = (step["status"], step.get("message", ""))
        if (status, message) != want:
            mismatches.append((k, step["method"], step["request"], want, (status, message)))
        elif "response" in step and not subset(step["response"], response_fields(responses[-1])):
            mismatches.append((k, step["method"], step["response"], response_fields(responses[-1])))
    assert not mismatches, "\n".join(map(str, mismatches))


def test_metadata_as_the_reference_server_reports_it(api: Any) -> None:
    api.CreateStream(pb.CreateStreamRequest(name="md1", subject="md1", partitions=3))
    api.CreateStream(pb.CreateStreamRequest(name="md2", subject="md2"))
    everything = api.FetchMetadata(pb.FetchMetadataRequest())
    total = sum(len(s.partitions) for s in everything.streamMetadata)
    one = api.FetchMetadata(pb.FetchMetadataRequest(streams=["md2"]))
    # a broker's counts are the cluster's, whichever streams were asked for
    for md in (everything, one):
        assert [(b.id, b.partitionCount, b.leaderCount) for b in md.brokers] == [
            (BROKER, total, total)
        ]
    part = one.streamMetadata[0].partitions[0]
    # the three timestamp pairs are always there, zero when nothing happened
    for name in ("messagesReceivedTimestamps", "pauseTimestamps", "readonlyTimestamps"):
        assert part.HasField(name)
        assert (getattr(part, name).firstTimestamp, getattr(part, name).latestTimestamp) == (0, 0)
    single = api.FetchPartitionMetadata(pb.FetchPartitionMetadataRequest(stream="md2"))
    assert single.metadata.HasField("pauseTimestamps") and not single.metadata.paused


def test_where_the_reference_server_is_plainly_wrong_the_gateway_keeps_its_answer(
    api: Any,
) -> None:
    # the reference server crashes on a negative partition count and accepts "a/b" (a name no
    # other protocol could use); the gateway refuses both (docs/protocols/liftbridge.md)
    for req, message in (
        (
            pb.CreateStreamRequest(name="neg", subject="neg", partitions=-1),
            "invalid partitions -1",
        ),
        (
            pb.CreateStreamRequest(name="a/b", subject="ab"),
            "invalid topic name 'a/b': only ASCII letters, digits, '.', '_' and '-'",
        ),
    ):
        with pytest.raises(grpc.RpcError) as info:
            api.CreateStream(req, timeout=10)
        assert (info.value.code(), info.value.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            message,
        )
    md = api.FetchMetadata(pb.FetchMetadataRequest(streams=["neg", "a/b"]))
    assert [s.error for s in md.streamMetadata] == [pb.StreamMetadata.UNKNOWN_STREAM] * 2


# ------------------------------------------------------------------------ client role
def _grpc_go_message(text: str) -> bytes:
    """grpc-message as grpc-go percent-encodes it (bytes outside 0x20-0x7E, and '%')."""
    return b"".join(
        bytes((b,)) if 0x20 <= b <= 0x7E and b != 0x25 else b"%%%02X" % b
        for b in text.encode("utf-8")
    )


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes((kind, flags))
        + stream_id.to_bytes(4, "big")
        + payload
    )


def reference_answer(step: dict[str, Any], stream_id: int, encoder: hpack.Encoder) -> bytes:
    """The reference server's answer to ``step`` on ``stream_id``, as grpc-go writes it."""
    status = Status[step["status"]]
    if status != Status.OK:
        block = encoder.encode(
            [
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("grpc-status", str(int(status))),
                ("grpc-message", _grpc_go_message(step["message"]).decode("ascii")),
            ]
        )
        return _frame(1, 0x05, stream_id, block)  # END_HEADERS | END_STREAM
    spec = METHODS_BY_NAME[step["method"]]
    body = json_format.ParseDict(step.get("response", {}), spec.response()).SerializeToString()
    headers = encoder.encode([(":status", "200"), ("content-type", "application/grpc")])
    trailers = encoder.encode([("grpc-status", "0"), ("grpc-message", "")])
    return (
        _frame(1, 0x04, stream_id, headers)
        + _frame(0, 0, stream_id, b"\x00" + len(body).to_bytes(4, "big") + body)
        + _frame(1, 0x05, stream_id, trailers)
    )


@pytest.mark.parametrize("step", STEPS, ids=[step_id(s) for s in STEPS])
def test_the_codec_reads_the_reference_servers_answers(step: dict[str, Any]) -> None:
    client = GrpcConnection(client=True)
    client.initiate()
    client.data_to_send()
    # the reference server's SETTINGS (empty: its defaults) and the ack of ours
    client.receive_data(_frame(4, 0, 0, b"") + _frame(4, 0x01, 0, b""))
    sid = client.start_call(step["method"])
    client.send_message(sid, request_of(step))
    client.end_call(sid)
    client.data_to_send()
    events = client.receive_data(reference_answer(step, sid, hpack.Encoder()))
    ended = [e for e in events if isinstance(e, CallEnded)]
    assert ended == [CallEnded(sid, int(Status[step["status"]]), step.get("message", ""))]
    got = [m for e in events if isinstance(e, MessageReceived) for m in e.messages]
    if step["status"] == "OK":
        assert len(got) == 1
        assert subset(step.get("response", {}), response_fields(got[0]))
    else:
        assert got == []
