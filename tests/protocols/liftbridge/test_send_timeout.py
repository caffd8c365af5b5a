"""``send_timeout_s`` counts only a write the client takes nothing of: a Subscribe stream that
is merely quiet (nothing to send) for many times the timeout stays open and still delivers."""

from __future__ import annotations

from pathlib import Path

import trio

from gateway.config import parse_config
from gateway.observability import LIMIT_HITS
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.client import LiftbridgeClient
from tests.support import make_config, serving

SEND_TIMEOUT_S = 0.2


def send_timeouts() -> float:
    return LIMIT_HITS.labels("send_timeout_s", "liftbridge")._value.get()


async def test_a_quiet_subscription_outlives_the_send_timeout(tmp_path: Path) -> None:
    cfg = parse_config(make_config(tmp_path, {"liftbridge": {"send_timeout_s": SEND_TIMEOUT_S}}))
    before = send_timeouts()
    async with serving(cfg) as server:
        host, port = server.addresses()["liftbridge"]
        async with (
            await LiftbridgeClient.connect(host, port) as sub,
            await LiftbridgeClient.connect(host, port) as pub,
        ):
            await pub.call("CreateStream", pb.CreateStreamRequest(name="s", subject="s"))
            got: list[bytes] = []
            with trio.fail_after(20):
                async with trio.open_nursery() as nursery:

                    async def subscribe() -> None:
                        request = pb.SubscribeRequest(stream="s", startPosition=pb.NEW_ONLY)
                        async for m in sub.subscribe(request):
                            got.append(m.value)
                            if len(got) == 2:
                                return

                    nursery.start_soon(subscribe)
                    await trio.sleep(10 * SEND_TIMEOUT_S)  # quiet, the stream open
                    await pub.call("Publish", pb.PublishRequest(stream="s", value=b"one"))
                    await trio.sleep(10 * SEND_TIMEOUT_S)
                    await pub.call("Publish", pb.PublishRequest(stream="s", value=b"two"))
    assert got == [b"one", b"two"]
    assert send_timeouts() == before
