"""Long polls and the answer pool (``[server] max_answer_memory``): a Fetch waiting at the log
end for a huge MaxBytes holds at most WAIT_BYTES of the pool while it waits (idle consumers
cannot take it from answers that have data), is answered when a record comes, and every share
is given back once the answers are sent."""

from __future__ import annotations

from pathlib import Path

import trio

from gateway.config import parse_config
from gateway.model import Record
from gateway.protocols import answers
from gateway.protocols.answers import WAIT_BYTES
from gateway.protocols.kafka08.client import Kafka08Client
from tests.support import make_config, serving

POLLERS = 4
HUGE = 2**31 - 1


async def test_idle_long_polls_hold_little_of_the_pool(tmp_path: Path) -> None:
    cfg = parse_config(make_config(tmp_path, {"kafka08": {}}))
    async with serving(cfg) as server:
        host, port = server.addresses()["kafka08"]
        producer = await Kafka08Client.connect(host, port)
        await producer.metadata(["t"])  # creates it
        got: list[list[Record]] = []

        async def poll() -> None:
            client = await Kafka08Client.connect(host, port)
            try:
                records, _ = await client.fetch("t", 0, 0, max_bytes=HUGE, max_wait_ms=10_000)
                got.append(records)
            finally:
                await client.aclose()

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for _ in range(POLLERS):
                    nursery.start_soon(poll)
                while answers.MEMORY.held < POLLERS * WAIT_BYTES:
                    await trio.sleep(0.05)  # until every poll waits at the log end
                await trio.sleep(0.2)
                assert not got  # still waiting
                # without the cap each would hold max_answer_bytes (64 MiB) while it waits
                assert answers.MEMORY.held <= POLLERS * WAIT_BYTES
                await producer.produce("t", 0, [Record(None, b"hello")])
        await producer.aclose()
    assert [[r.value for r in records] for records in got] == [[b"hello"]] * POLLERS
    assert answers.MEMORY.held == 0
