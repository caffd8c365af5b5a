"""A subscription reads the log at most ``max_answer_bytes`` at a time (and 1 MiB at most), so
what one read can make the gateway hold does not depend on the client; every message still
comes, one read at least one message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.model import Fetch
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.client import GrpcStatusError, LiftbridgeClient
from gateway.protocols.liftbridge.service import Service
from tests.support import make_config, serving


@pytest.mark.parametrize(("max_answer_bytes", "asked"), [(3000, 3000), (64 << 20, 1 << 20)])
async def test_subscribe_reads_at_most_max_answer_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_answer_bytes: int, asked: int
) -> None:
    fetched: list[int] = []
    original = Service._execute

    async def recording(self: Service, command: Any) -> Any:
        if isinstance(command, Fetch):
            fetched.append(command.max_bytes)
        return await original(self, command)

    monkeypatch.setattr(Service, "_execute", recording)
    cfg = parse_config(
        make_config(tmp_path, {"liftbridge": {"max_answer_bytes": max_answer_bytes}})
    )
    async with serving(cfg) as server:
        host, port = server.addresses()["liftbridge"]
        async with await LiftbridgeClient.connect(host, port) as lb:
            await lb.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
            for i in range(5):
                await lb.call("Publish", pb.PublishRequest(stream="s", value=b"%d" % i * 2000))
            got = []
            with pytest.raises(GrpcStatusError) as info:
                async for m in lb.subscribe(
                    pb.SubscribeRequest(
                        stream="s", startPosition=pb.EARLIEST, stopPosition=pb.STOP_LATEST
                    )
                ):
                    got.append(m.value)
            assert info.value.message == "Stop offset reached"
    assert got == [b"%d" % i * 2000 for i in range(5)]
    assert fetched and set(fetched) == {asked}
