"""One listener in ``dialect = "auto"`` serving both client generations at once: cursus-client
0.1.1 (PyPI, the older dialect) produces and consumes in its own group while the in-repo client,
speaking the current SDK's commands, consumes the same topic in another group; and the in-repo
client in the older dialect gets the older replies."""

from __future__ import annotations

import pytest
import trio
from cursus.types import ConsumerMode

from gateway.protocols.cursus.client import CursusClient, CursusError
from gateway.protocols.cursus.codec import Batch

from .conftest import cursus_gateway
from .test_cursus_client import consume_all, produce


async def current_sdk_consumer(c: CursusClient, topic: str, want: int) -> list[bytes]:
    """The current Go SDK's consumer, step by step: CREATE (switches the connection to the 2026-08
    dialect), JOIN_GROUP, SYNC_GROUP, FETCH_OFFSET, CONSUME ... batch=, BATCH_COMMIT, HEARTBEAT,
    LEAVE_GROUP with generation."""
    created = await c.create_topic(topic, 2)
    assert created.startswith(f"OK topic={topic} partitions=2 "), created
    joined = await c.join_group(topic, "g-current", "go")
    assert await c.sync_group(topic, "g-current", joined.member, joined.generation) == [0, 1]
    got: list[bytes] = []
    offsets = {p: await c.fetch_offset(topic, p, "g-current") for p in (0, 1)}
    with trio.fail_after(20):
        while len(got) < want:
            for p in (0, 1):
                reply = await c.consume(
                    topic, p, offsets[p], joined.member, group="g-current",
                    generation=joined.generation, batch=100,
                )  # fmt: skip
                assert isinstance(reply, Batch), reply
                for m in reply.messages():
                    got.append(m.payload)
                    offsets[p] = m.offset + 1
    assert await c.batch_commit(
        topic, "g-current", joined.generation, joined.member, offsets
    ) == "OK batched=2"  # fmt: skip
    beat = await c.heartbeat(topic, "g-current", joined.member, joined.generation)
    assert beat == f"OK member={joined.member} generation={joined.generation}"
    left = await c.leave_group(topic, "g-current", joined.member, joined.generation)
    assert left == f"OK group=g-current member={joined.member} left=true"
    return got


async def test_both_generations_on_one_auto_listener(tmp_path):
    async with cursus_gateway(tmp_path) as (host, port):
        addr = f"{host}:{port}"
        async with await CursusClient.connect(host, port, dialect="2026-08") as current:
            await current.create_topic("mixed", 2)
            acked = await trio.to_thread.run_sync(produce, addr, "mixed", 10, 2)
            assert acked == 10
            got = await current_sdk_consumer(current, "mixed", 10)
        assert sorted(got) == sorted(b"msg-%d" % i for i in range(10))
        old = await trio.to_thread.run_sync(consume_all, addr, "mixed", ConsumerMode.POLLING, 10)
        assert sorted(p for _, _, p, _ in old) == sorted(f"msg-{i}" for i in range(10))


async def test_in_repo_client_in_the_older_dialect(tmp_path):
    async with cursus_gateway(tmp_path) as (host, port):
        async with await CursusClient.connect(host, port, dialect="2026-04") as c:
            assert await c.create_topic("old", 2) == "Topic 'old' now has 2 partitions"
            joined = await c.join_group("old", "g", "java")
            assert await c.sync_group("old", "g", joined.member, joined.generation) == [0, 1]
            assert await c.heartbeat("old", "g", joined.member, joined.generation) == "OK"
            assert await c.commit_offset("old", 1, "g", 4, joined.generation, joined.member) == "OK"
            assert await c.fetch_offset("old", 1, "g") == 4
            with pytest.raises(CursusError) as err:
                await c.heartbeat("old", "g", "ghost", joined.generation)
            assert err.value.code == "member_not_found"
            left = await c.leave_group("old", "g", joined.member, joined.generation)
            assert left == "\u2705 Left group 'g'"


async def test_cursus_client_also_works_on_a_2026_08_listener(tmp_path):
    async with cursus_gateway(tmp_path, dialect="2026-08") as (host, port):
        addr = f"{host}:{port}"
        assert await trio.to_thread.run_sync(produce, addr, "t", 10, 2) == 10
        for mode in (ConsumerMode.POLLING, ConsumerMode.STREAMING):
            got = await trio.to_thread.run_sync(consume_all, addr, "t", mode, 10)
            assert sorted(p for _, _, p, _ in got) == sorted(f"msg-{i}" for i in range(10))
