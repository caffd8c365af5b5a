"""PublishAsync with many messages per DATA frame and per read (the in-repo client sends them in
blocks): acks come back in request order with their correlation ids, consecutive requests for
one partition are stored as one batch at dense offsets, an error inside a run of good requests
answers those requests only (refusals are answered whatever the ackPolicy, as the reference's
publishAsyncSession does; a stored request with ackPolicy NONE gets no response)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gateway.config import parse_config
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.client import LiftbridgeClient
from tests.support import make_config, serving


@pytest.mark.parametrize("backend", ["memory", "embedded"])
async def test_acks_and_errors_in_request_order_with_many_messages_per_frame(
    tmp_path: Path, backend: str
) -> None:
    cfg = parse_config(make_config(tmp_path, {"liftbridge": {}}, backend=backend))
    async with serving(cfg) as server:
        host, port = server.addresses()["liftbridge"]
        async with await LiftbridgeClient.connect(host, port) as lb:
            for name, partitions in (("one", 1), ("two", 2), ("ro", 1)):
                await lb.call(
                    "CreateStream",
                    pb.CreateStreamRequest(name=name, subject=name, partitions=partitions),
                )
            await lb.call(
                "SetStreamReadonly", pb.SetStreamReadonlyRequest(name="ro", readonly=True)
            )
            targets = [
                ("one", 0, None),
                ("two", 1, None),
                ("two", 0, None),
                ("missing", 0, pb.PublishAsyncError.NOT_FOUND),
                ("one", 3, pb.PublishAsyncError.NOT_FOUND),  # no such partition
                ("ro", 0, pb.PublishAsyncError.READONLY),
            ]
            rng = random.Random(6)
            requests: list[pb.PublishRequest] = []
            expected: list[tuple[str, object]] = []  # (correlation id, offset or error code)
            next_offset: dict[tuple[str, int], int] = {}
            while len(requests) < 3000:
                stream, partition, error = targets[rng.randrange(len(targets))]
                for _ in range(rng.choice([1, 1, 2, 5, 40, 300])):  # runs of one partition
                    i = len(requests)
                    # (NONE only where it is stored: the client counts on one response per
                    # non-NONE request, and refusals are answered whatever the policy)
                    policy = pb.NONE if error is None and rng.random() < 0.1 else pb.LEADER
                    requests.append(
                        pb.PublishRequest(
                            stream=stream,
                            partition=partition,
                            value=b"%d" % i,
                            correlationId=f"c{i}",
                            ackPolicy=policy,
                        )
                    )
                    if error is None:
                        offset = next_offset.get((stream, partition), 0)
                        next_offset[(stream, partition)] = offset + 1
                    if error is not None:
                        expected.append((f"c{i}", error))
                    elif policy != pb.NONE:
                        expected.append((f"c{i}", offset))  # stored; NONE gets no ack
            responses = await lb.publish_async(requests)
            got = [
                (r.correlationId, r.asyncError.code if r.HasField("asyncError") else r.ack.offset)
                for r in responses
            ]
            assert got == expected
            for r in responses:
                if not r.HasField("asyncError"):
                    assert r.ack.correlationId == r.correlationId
                    assert r.ack.stream in ("one", "two")
            # what was stored, per partition, is the valid requests in request order
            for (stream, partition), count in next_offset.items():
                want = [r.value for r in requests if (r.stream, r.partition) == (stream, partition)]
                assert len(want) == count
                values = []
                async for m in lb.subscribe(
                    pb.SubscribeRequest(
                        stream=stream,
                        partition=partition,
                        startPosition=pb.EARLIEST,
                        stopPosition=pb.STOP_LATEST,
                    )
                ):
                    values.append(m.value)
                    if len(values) == count:
                        break
                assert values == want
