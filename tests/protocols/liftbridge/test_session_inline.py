"""A whole PublishAsync call in one read with nothing else in flight is handled in the session's
reader (no task of its own); anything else takes the call's task. Both give the same answers:
acks in order, async errors, OK trailers; a call left open (pending) while other calls run
makes those take the task path and all of them are answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.client import Call, GrpcStatusError, LiftbridgeClient
from gateway.protocols.liftbridge.session import Session
from tests.support import make_config, serving


@pytest.fixture
def task_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the calls that went through a task (``Session._run_call``)."""
    seen: list[str] = []
    original = Session._run_call

    async def counting(self: Session, call: Any) -> None:
        seen.append(call.spec.name)
        await original(self, call)

    monkeypatch.setattr(Session, "_run_call", counting)
    return seen


async def _whole_call(lb: LiftbridgeClient, requests: list[pb.PublishRequest]) -> list[Any]:
    """One PublishAsync call written in one go (HEADERS, DATA, END_STREAM); its responses and
    final item (None for OK trailers, else GrpcStatusError)."""
    call = lb.open_call("PublishAsync")
    if requests:
        lb.conn.send_messages(call.stream_id, requests)
    await call.end()
    return await _rest(call)


async def _rest(call: Call) -> list[Any]:
    """The call's items up to its end (None: OK trailers; GrpcStatusError: another status)."""
    out = []
    while True:
        try:
            item = await call.receive()
        except GrpcStatusError as exc:
            item = exc
        out.append(item)
        if not isinstance(item, pb.PublishResponse):
            return out


def _req(stream: str, value: bytes, cid: str, policy: int = pb.LEADER) -> pb.PublishRequest:
    return pb.PublishRequest(stream=stream, value=value, correlationId=cid, ackPolicy=policy)


async def test_one_message_calls_inline(tmp_path: Path, task_calls: list[str]) -> None:
    cfg = parse_config(make_config(tmp_path, {"liftbridge": {}}))
    async with serving(cfg) as server:
        host, port = server.addresses()["liftbridge"]
        async with await LiftbridgeClient.connect(host, port) as lb:
            await lb.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
            task_calls.clear()
            for i in range(20):
                got = await _whole_call(lb, [_req("s", b"%d" % i, f"c{i}")])
                assert len(got) == 2 and got[-1] is None
                assert got[0].correlationId == f"c{i}"
                assert got[0].ack.offset == i
            # several messages, an async error, NONE policy, no message at all
            got = await _whole_call(
                lb,
                [
                    _req("s", b"a", "x1"),
                    _req("missing", b"b", "x2"),
                    _req("s", b"c", "x3", pb.NONE),
                    _req("s", b"d", "x4"),
                ],
            )
            assert got[-1] is None
            assert [(r.correlationId, r.HasField("asyncError")) for r in got[:-1]] == [
                ("x1", False),
                ("x2", True),
                ("x4", False),
            ]
            assert got[1].asyncError.code == pb.PublishAsyncError.NOT_FOUND
            assert (got[0].ack.offset, got[2].ack.offset) == (20, 22)
            assert await _whole_call(lb, []) == [None]
            assert task_calls == []  # all of them inline
            values = []
            async for m in lb.subscribe(
                pb.SubscribeRequest(
                    stream="s", startPosition=pb.EARLIEST, stopPosition=pb.STOP_LATEST
                )
            ):
                values.append(m.value)
                if len(values) == 23:
                    break
            assert values == [b"%d" % i for i in range(20)] + [b"a", b"c", b"d"]


async def test_pending_call_interleaved_with_others(tmp_path: Path, task_calls: list[str]) -> None:
    cfg = parse_config(make_config(tmp_path, {"liftbridge": {}}))
    async with serving(cfg) as server:
        host, port = server.addresses()["liftbridge"]
        async with await LiftbridgeClient.connect(host, port) as lb:
            await lb.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
            task_calls.clear()
            # call A stays open: its first message is answered, its end comes later
            call_a = lb.open_call("PublishAsync")
            await call_a.send([_req("s", b"a0", "a0")])
            first = await call_a.receive()
            assert (first.correlationId, first.ack.offset) == ("a0", 0)
            # whole calls while A is open take the task path and are answered
            for i in range(3):
                got = await _whole_call(lb, [_req("s", b"b%d" % i, f"b{i}")])
                assert got[-1] is None
                assert (got[0].correlationId, got[0].ack.offset) == (f"b{i}", 1 + i)
            # A goes on, then ends
            await call_a.send([_req("s", b"a1", "a1")])
            await call_a.end()
            rest = await _rest(call_a)
            assert [(r.correlationId, r.ack.offset) for r in rest if r is not None] == [("a1", 4)]
            assert task_calls == ["PublishAsync"] * 4
            task_calls.clear()
            # nothing in flight again: inline
            got = await _whole_call(lb, [_req("s", b"c", "c")])
            assert got[0].ack.offset == 5 and got[-1] is None
            assert task_calls == []


async def test_call_with_timeout_takes_the_task(tmp_path: Path, task_calls: list[str]) -> None:
    cfg = parse_config(make_config(tmp_path, {"liftbridge": {}}))
    async with serving(cfg) as server:
        host, port = server.addresses()["liftbridge"]
        async with await LiftbridgeClient.connect(host, port) as lb:
            await lb.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
            task_calls.clear()
            call = lb.open_call("PublishAsync", 30.0)
            lb.conn.send_messages(call.stream_id, [_req("s", b"v", "t")])
            await call.end()
            items = await _rest(call)
            assert items[0].ack.offset == 0 and items[-1] is None
            assert task_calls == ["PublishAsync"]
