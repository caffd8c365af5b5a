"""A grpcio client generated from our .proto against a running gateway: consumer groups, pause,
readonly, stop positions, PublishToSubject, TLS, and bad input answered with gRPC statuses."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trustme

from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from tests.protocols.liftbridge.grpc_stub import grpc_module
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(
        tmp_path_factory.mktemp("lb"), listeners={"liftbridge": {}}, backend="memory"
    ) as gw:
        yield gw


@pytest.fixture(scope="module")
def channel(gateway: GatewayProcess) -> Iterator[grpc.Channel]:
    host, port = gateway.address("liftbridge")
    ch = grpc.insecure_channel(f"{host}:{port}")
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def api(channel: grpc.Channel):
    return grpc_module().APIStub(channel)


def code_of(fn, *args, **kw) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, **kw)
    return info.value.code()


def metric(gateway: GatewayProcess, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(gateway.admin_url + "/metrics", timeout=5).read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m and ",".join(sorted(m.group(1).split(","))) == want:
            return float(m.group(2))
    return 0.0


def subscribe_all(api, timeout: float = 5, **req) -> tuple[list[pb.Message], grpc.StatusCode]:
    call = api.Subscribe(pb.SubscribeRequest(**req), timeout=timeout)
    got = []
    try:
        for m in call:
            got.append(m)
        return got, grpc.StatusCode.OK
    except grpc.RpcError as exc:
        return got, exc.code()


def create(api, name: str, partitions: int = 1, subject: str | None = None) -> None:
    api.CreateStream(
        pb.CreateStreamRequest(name=name, subject=subject or name, partitions=partitions)
    )


# ------------------------------------------------------------------------ consumer groups
def test_consumer_groups(api) -> None:
    create(api, "cg", partitions=4)
    j1 = api.JoinConsumerGroup(
        pb.JoinConsumerGroupRequest(groupId="g", consumerId="a", streams=["cg"])
    )
    assert j1.coordinator and j1.consumerTimeout == 15_000_000_000
    a1 = api.FetchConsumerGroupAssignments(
        pb.FetchConsumerGroupAssignmentsRequest(groupId="g", consumerId="a", epoch=j1.epoch)
    )
    assert [(x.stream, list(x.partitions)) for x in a1.assignments] == [("cg", [0, 1, 2, 3])]
    j2 = api.JoinConsumerGroup(
        pb.JoinConsumerGroupRequest(groupId="g", consumerId="b", streams=["cg"])
    )
    assert j2.epoch > j1.epoch
    a = api.FetchConsumerGroupAssignments(
        pb.FetchConsumerGroupAssignmentsRequest(groupId="g", consumerId="a", epoch=j1.epoch)
    )
    b = api.FetchConsumerGroupAssignments(
        pb.FetchConsumerGroupAssignmentsRequest(groupId="g", consumerId="b", epoch=j2.epoch)
    )
    assert a.epoch == b.epoch == j2.epoch
    parts = sorted(p for r in (a, b) for x in r.assignments for p in x.partitions)
    assert parts == [0, 1, 2, 3] and a.assignments and b.assignments
    md = api.FetchMetadata(pb.FetchMetadataRequest(groups=["g", "nope"]))
    assert [(g.groupId, g.error, g.epoch) for g in md.groupMetadata] == [
        ("g", pb.ConsumerGroupMetadata.OK, j2.epoch),
        ("nope", pb.ConsumerGroupMetadata.UNKNOWN_GROUP, 0),
    ]
    api.ReportConsumerGroupCoordinator(
        pb.ReportConsumerGroupCoordinatorRequest(
            groupId="g", consumerId="a", coordinator=j1.coordinator, epoch=j2.epoch
        )
    )
    api.LeaveConsumerGroup(pb.LeaveConsumerGroupRequest(groupId="g", consumerId="b"))
    a = api.FetchConsumerGroupAssignments(
        pb.FetchConsumerGroupAssignmentsRequest(groupId="g", consumerId="a", epoch=j2.epoch)
    )
    assert a.epoch > j2.epoch and list(a.assignments[0].partitions) == [0, 1, 2, 3]
    req = pb.FetchConsumerGroupAssignmentsRequest
    assert (
        code_of(api.FetchConsumerGroupAssignments, req(groupId="x", consumerId="a"))
        == grpc.StatusCode.NOT_FOUND
    )
    assert (
        code_of(api.FetchConsumerGroupAssignments, req(groupId="g", consumerId="b"))
        == grpc.StatusCode.FAILED_PRECONDITION
    )
    assert (
        code_of(api.JoinConsumerGroup, pb.JoinConsumerGroupRequest(groupId="g", consumerId="c"))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    # a group member subscribes with its consumer; a member without id is refused
    consumer = pb.Consumer(groupId="g", groupEpoch=a.epoch, consumerId="")
    _, code = subscribe_all(api, stream="cg", consumer=consumer)
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# ------------------------------------------------------------------------ pause / readonly
def test_pause_ends_subscriptions_and_publish_resumes(api) -> None:
    create(api, "pz", partitions=2)
    api.Publish(pb.PublishRequest(stream="pz", value=b"a"))
    call = api.Subscribe(pb.SubscribeRequest(stream="pz", startPosition=pb.EARLIEST))
    it = iter(call)
    assert next(it) == pb.Message()  # handshake
    assert next(it).value == b"a"
    api.PauseStream(pb.PauseStreamRequest(name="pz", partitions=[0], resumeAll=True))
    with pytest.raises(grpc.RpcError) as info:
        next(it)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    md = api.FetchMetadata(pb.FetchMetadataRequest(streams=["pz"]))
    assert [md.streamMetadata[0].partitions[p].paused for p in (0, 1)] == [True, False]
    _, code = subscribe_all(api, stream="pz", startPosition=pb.EARLIEST)
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    # resume=true resumes it
    call = api.Subscribe(
        pb.SubscribeRequest(stream="pz", startPosition=pb.EARLIEST, resume=True), timeout=5
    )
    it = iter(call)
    assert next(it) == pb.Message() and next(it).value == b"a"
    call.cancel()
    # a publish resumes a paused partition (and, with resumeAll, the whole stream)
    api.PauseStream(pb.PauseStreamRequest(name="pz", resumeAll=True))
    api.Publish(pb.PublishRequest(stream="pz", partition=1, value=b"b"))
    for p in (0, 1):  # both take subscribers again
        call = api.Subscribe(
            pb.SubscribeRequest(stream="pz", partition=p, startPosition=pb.EARLIEST), timeout=5
        )
        assert next(iter(call)) == pb.Message()
        call.cancel()
    # as on the reference server, metadata still says paused; the pause timestamps moved on
    md = api.FetchMetadata(pb.FetchMetadataRequest(streams=["pz"]))
    parts = md.streamMetadata[0].partitions
    assert [parts[p].paused for p in (0, 1)] == [True, True]
    assert all(
        0 < parts[p].pauseTimestamps.firstTimestamp < parts[p].pauseTimestamps.latestTimestamp
        for p in (0, 1)
    )
    assert (
        code_of(api.PauseStream, pb.PauseStreamRequest(name="pz", partitions=[7]))
        == grpc.StatusCode.NOT_FOUND
    )


def test_readonly_refuses_publishes_and_ends_subscribers_at_the_end(api) -> None:
    create(api, "ro")
    api.Publish(pb.PublishRequest(stream="ro", value=b"x"))
    api.SetStreamReadonly(pb.SetStreamReadonlyRequest(name="ro", readonly=True))
    assert (
        code_of(api.Publish, pb.PublishRequest(stream="ro", value=b"y"))
        == grpc.StatusCode.FAILED_PRECONDITION
    )
    responses = list(
        api.PublishAsync(iter([pb.PublishRequest(stream="ro", value=b"y", correlationId="1")]))
    )
    assert [(r.correlationId, r.asyncError.code) for r in responses] == [
        ("1", pb.PublishAsyncError.READONLY)
    ]
    got, code = subscribe_all(api, stream="ro", startPosition=pb.EARLIEST)
    assert [m.value for m in got] == [b"", b"x"]
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    md = api.FetchPartitionMetadata(pb.FetchPartitionMetadataRequest(stream="ro", partition=0))
    assert md.metadata.readonly and md.metadata.highWatermark == 0
    api.SetStreamReadonly(pb.SetStreamReadonlyRequest(name="ro", readonly=False))
    api.Publish(pb.PublishRequest(stream="ro", value=b"z"))


# ------------------------------------------------------------------------ positions, publish
def test_stop_positions_and_statuses(api) -> None:
    create(api, "stops")
    got, code = subscribe_all(api, stream="stops", stopPosition=pb.STOP_LATEST)
    assert (got, code) == ([], grpc.StatusCode.RESOURCE_EXHAUSTED)  # empty stream
    for i in range(5):
        api.Publish(pb.PublishRequest(stream="stops", value=b"%d" % i))
    got, code = subscribe_all(
        api,
        stream="stops",
        startPosition=pb.OFFSET,
        startOffset=1,
        stopPosition=pb.STOP_OFFSET,
        stopOffset=3,
    )
    assert [m.offset for m in got[1:]] == [1, 2, 3] and code == grpc.StatusCode.RESOURCE_EXHAUSTED
    got, code = subscribe_all(
        api, stream="stops", startPosition=pb.EARLIEST, stopPosition=pb.STOP_LATEST
    )
    assert [m.offset for m in got[1:]] == [0, 1, 2, 3, 4]
    _, code = subscribe_all(
        api,
        stream="stops",
        startPosition=pb.OFFSET,
        startOffset=4,
        stopPosition=pb.STOP_OFFSET,
        stopOffset=2,
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    _, code = subscribe_all(api, stream="stops", startPosition=7)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    _, code = subscribe_all(api, stream="stops", partition=3)
    assert code == grpc.StatusCode.NOT_FOUND
    _, code = subscribe_all(api, stream="nope")
    assert code == grpc.StatusCode.NOT_FOUND


def test_publish_ack_fields_and_publish_to_subject(api) -> None:
    create(api, "acks", partitions=2, subject="acks.subj")
    r = api.Publish(
        pb.PublishRequest(
            stream="acks", partition=1, value=b"v", correlationId="c1", ackPolicy=pb.ALL
        ),
        timeout=5,
    )
    ack = r.ack
    assert (ack.stream, ack.partitionSubject, ack.msgSubject, ack.offset) == (
        "acks",
        "acks.subj",
        "acks.subj.1",
        0,
    )
    assert ack.correlationId == "c1" and ack.ackPolicy == pb.ALL
    assert ack.ackInbox.startswith("liftbridge-default.ack.")
    assert 0 < ack.receptionTimestamp <= ack.commitTimestamp
    assert api.Publish(pb.PublishRequest(stream="acks", value=b"n", ackPolicy=pb.NONE)).ack == (
        pb.Ack()
    )
    r = api.PublishToSubject(
        pb.PublishToSubjectRequest(subject="acks.subj.1", value=b"s", ackPolicy=pb.LEADER),
        timeout=5,
    )
    assert (r.ack.stream, r.ack.offset, r.ack.msgSubject) == ("acks", 1, "acks.subj.1")
    got, _ = subscribe_all(
        api,
        stream="acks",
        partition=1,
        startPosition=pb.OFFSET,
        startOffset=1,
        stopPosition=pb.STOP_OFFSET,
        stopOffset=1,
    )
    assert got[1].value == b"s" and got[1].headers["subject"] == b"acks.subj.1"
    r = api.PublishToSubject(pb.PublishToSubjectRequest(subject="nobody.listens", value=b"x"))
    assert not r.HasField("ack")
    assert (
        code_of(api.PublishToSubject, pb.PublishToSubjectRequest(subject="a..b"))
        == grpc.StatusCode.INVALID_ARGUMENT
    )


def test_publish_async_mixes_acks_and_errors(api) -> None:
    create(api, "pa")
    reqs = [
        pb.PublishRequest(stream="pa", value=b"1", correlationId="a"),
        pb.PublishRequest(stream="missing", value=b"2", correlationId="b"),
        pb.PublishRequest(stream="pa", value=b"3", correlationId="c", ackPolicy=pb.NONE),
        pb.PublishRequest(stream="pa", value=b"4", correlationId="d"),
    ]
    out = {r.correlationId: r for r in api.PublishAsync(iter(reqs), timeout=10)}
    assert sorted(out) == ["a", "b", "d"]
    assert (out["a"].ack.offset, out["a"].ack.correlationId) == (0, "a")
    assert (out["d"].ack.offset, out["d"].ack.correlationId) == (2, "d")
    assert out["b"].asyncError.code == pb.PublishAsyncError.NOT_FOUND


def test_create_stream_validation(api) -> None:
    req = pb.CreateStreamRequest
    assert code_of(api.CreateStream, req(name="", subject="s")) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(api.CreateStream, req(name="x", subject="")) == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        code_of(api.CreateStream, req(name="__cursors", subject="c"))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    assert (
        code_of(api.CreateStream, req(name="x", subject="x", replicationFactor=3))
        == grpc.StatusCode.INVALID_ARGUMENT
    )
    api.CreateStream(req(name="rf", subject="rf", replicationFactor=-1))
    assert code_of(api.CreateStream, req(name="rf", subject="rf")) == grpc.StatusCode.ALREADY_EXISTS


# ------------------------------------------------------------------------ bad input
def test_bad_input_gets_grpc_statuses_and_is_counted(gateway, channel, api) -> None:
    raw = channel.unary_unary("/proto.API/Publish")  # bytes in, bytes out
    before = metric(
        gateway, "gateway_protocol_errors_total", protocol="liftbridge", kind="malformed_protobuf"
    )
    assert code_of(raw, b"\x12\x05hel", timeout=5) == grpc.StatusCode.INTERNAL
    after = metric(
        gateway, "gateway_protocol_errors_total", protocol="liftbridge", kind="malformed_protobuf"
    )
    assert after == before + 1
    unknown = channel.unary_unary("/proto.API/AddPolicy")
    assert code_of(unknown, b"", timeout=5) == grpc.StatusCode.UNIMPLEMENTED
    assert (
        metric(
            gateway, "gateway_protocol_errors_total", protocol="liftbridge", kind="unknown_method"
        )
        >= 1
    )
    assert (
        code_of(api.Publish, pb.PublishRequest(stream="nope", value=b"x"))
        == grpc.StatusCode.NOT_FOUND
    )
    assert (
        metric(
            gateway,
            "gateway_requests_total",
            protocol="liftbridge",
            api="publish",
            outcome="not_found",
        )
        >= 1
    )
    # garbage instead of HTTP/2 on another connection: GOAWAY and close; others unaffected
    host, port = gateway.address("liftbridge")
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        assert b"\x07\x00\x00\x00\x00\x00" in data  # a GOAWAY frame header
    assert metric(gateway, "gateway_protocol_errors_total", protocol="liftbridge", kind="http2")
    assert api.FetchMetadata(pb.FetchMetadataRequest()).brokers
    assert "Traceback" not in gateway.log_text()


def test_a_deadline_is_deadline_exceeded_not_cancelled(api) -> None:
    create(api, "dl")
    call = api.Subscribe(pb.SubscribeRequest(stream="dl"), timeout=0.5)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as info:
        list(call)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 5


# ------------------------------------------------------------------------ TLS
def test_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.private_key_pem.write_to_path(str(key_file))
    for i, pem in enumerate(cert.cert_chain_pems):
        pem.write_to_path(str(cert_file), append=i > 0)
    listener = {"tls_cert": str(cert_file), "tls_key": str(key_file)}
    with GatewayProcess(tmp_path / "gw", listeners={"liftbridge": listener}) as gw:
        host, port = gw.address("liftbridge")
        creds = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
        with grpc.secure_channel(f"{host}:{port}", creds) as ch:
            api = grpc_module().APIStub(ch)
            create(api, "tls")
            r = api.Publish(pb.PublishRequest(stream="tls", value=b"secret"), timeout=5)
            assert r.ack.offset == 0
            got, _ = subscribe_all(
                api, stream="tls", startPosition=pb.EARLIEST, stopPosition=pb.STOP_LATEST
            )
            assert [m.value for m in got] == [b"", b"secret"]
        with grpc.insecure_channel(f"{host}:{port}") as plain:
            stub = grpc_module().APIStub(plain)
            assert code_of(stub.FetchMetadata, pb.FetchMetadataRequest(), timeout=3) in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
            )


# ------------------------------------------------------------------------ drain
def test_sigterm_ends_subscriptions_with_unavailable_and_exits_0(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, listeners={"liftbridge": {}}) as gw:
        host, port = gw.address("liftbridge")
        with grpc.insecure_channel(f"{host}:{port}") as ch:
            api = grpc_module().APIStub(ch)
            create(api, "drain")
            api.Publish(pb.PublishRequest(stream="drain", value=b"a"))
            it = iter(api.Subscribe(pb.SubscribeRequest(stream="drain", startPosition=pb.EARLIEST)))
            assert next(it) == pb.Message() and next(it).value == b"a"
            assert gw.stop() == 0
            with pytest.raises(grpc.RpcError) as info:
                next(it)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            # the call's own trailers after the GOAWAY, not a dropped socket
            assert info.value.details() == "server is shutting down"
    assert "connection_failed" not in gw.log_text()


def test_a_quiet_subscription_outlives_the_listener_timeouts(tmp_path: Path) -> None:
    listener = {"idle_timeout_s": 1.0, "read_timeout_s": 1.0}
    with GatewayProcess(tmp_path, listeners={"liftbridge": listener}) as gw:
        host, port = gw.address("liftbridge")
        with grpc.insecure_channel(f"{host}:{port}") as ch:
            api = grpc_module().APIStub(ch)
            create(api, "quiet")
            it = iter(api.Subscribe(pb.SubscribeRequest(stream="quiet"), timeout=20))
            assert next(it) == pb.Message()
            time.sleep(3.5)  # several idle/read timeouts long: the gateway PINGs meanwhile
            with grpc.insecure_channel(f"{host}:{port}") as other:
                grpc_module().APIStub(other).Publish(pb.PublishRequest(stream="quiet", value=b"x"))
            assert next(it).value == b"x"
        assert "timeout" not in gw.log_text().lower()


def test_optimistic_concurrency_control(api) -> None:
    """A stream created with optimisticConcurrencyControl stores a publish only at its
    expectedOffset (-1: anywhere): a miss is Unknown on Publish and INCORRECT_OFFSET on
    PublishAsync, with nothing stored; ackPolicy NONE is refused. Other streams ignore it."""
    api.CreateStream(
        pb.CreateStreamRequest(
            name="occ", subject="occ", optimisticConcurrencyControl=pb.NullableBool(value=True)
        )
    )
    publish = api.Publish
    req = pb.PublishRequest
    assert publish(req(stream="occ", value=b"a", expectedOffset=0), timeout=5).ack.offset == 0
    stale = req(stream="occ", value=b"x", expectedOffset=0)
    assert code_of(publish, stale, timeout=5) == grpc.StatusCode.UNKNOWN
    ahead = req(stream="occ", value=b"x", expectedOffset=5)
    assert code_of(publish, ahead, timeout=5) == grpc.StatusCode.UNKNOWN
    unacked = req(stream="occ", value=b"x", expectedOffset=1, ackPolicy=pb.NONE)
    assert code_of(publish, unacked, timeout=5) == grpc.StatusCode.INVALID_ARGUMENT
    assert publish(req(stream="occ", value=b"b", expectedOffset=-1), timeout=5).ack.offset == 1
    reqs = [
        req(stream="occ", value=b"c", correlationId="c", expectedOffset=2),
        req(stream="occ", value=b"x", correlationId="stale", expectedOffset=2),
        req(stream="occ", value=b"d", correlationId="d", expectedOffset=3),
        req(stream="occ", value=b"x", correlationId="none", expectedOffset=4, ackPolicy=pb.NONE),
    ]
    out = {r.correlationId: r for r in api.PublishAsync(iter(reqs), timeout=10)}
    assert (out["c"].ack.offset, out["c"].ack.correlationId) == (2, "c")
    assert (out["d"].ack.offset, out["d"].ack.correlationId) == (3, "d")
    assert out["stale"].asyncError.code == pb.PublishAsyncError.INCORRECT_OFFSET
    assert out["none"].asyncError.code == pb.PublishAsyncError.BAD_REQUEST
    got, _ = subscribe_all(
        api, timeout=2, stream="occ", startPosition=pb.EARLIEST, stopPosition=pb.STOP_LATEST
    )
    assert [m.value for m in got[1:]] == [b"a", b"b", b"c", b"d"]  # after the handshake
    # a stream without it: the expected offset is not looked at
    create(api, "plain-occ")
    assert publish(req(stream="plain-occ", value=b"a", expectedOffset=7), timeout=5).ack.offset == 0
