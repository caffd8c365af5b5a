"""A Kafka 0.8 Produce of a large message set (plain, or one gzip wrapper of many small
messages), through the session in-process (tests.protocols.driving): while it is read, other
tasks of the event loop keep running (steps of ``max_records_per_step`` messages), every
message is stored, and the stepped set is counted under that key."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from gateway.config import ConfigError, parse_config
from gateway.observability import LIMIT_HITS
from gateway.protocols.kafka08 import codec as kc
from gateway.protocols.kafka08 import compression
from gateway.protocols.kafka08.messageset import encode_message
from tests.protocols.driving import driven

TOPIC = "big"
MESSAGES = 200_000
STEP = 500


def message_set(n: int, codec: int, first: int = 0) -> bytes:
    inner = b"".join(encode_message(None, b"v", first + i) for i in range(n))
    if codec == compression.NONE:
        return inner
    return encode_message(None, compression.compress(codec, inner), first + n - 1, 0, codec)


def whole(got: bytes) -> bool:
    return len(got) >= 4 and len(got) >= 4 + int.from_bytes(got[:4], "big")


def steps_counted() -> float:
    return LIMIT_HITS.labels("max_records_per_step", "kafka08")._value.get()


async def call(conn: Any, client: kc.ClientConnection, api: int, body: Any) -> Any:
    await conn.client.send_all(client.send_request(api, 0, body))
    client.receive_data(await conn.receive(whole))
    api_key, answer = client.next_response()
    assert api_key == api
    return answer


def produce(message_set: bytes) -> Any:
    return kc.PRODUCE_REQUEST(
        1, 5000, [kc.PRODUCE_TOPIC(TOPIC, [kc.PRODUCE_PARTITION(0, message_set)])]
    )


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP])
async def test_other_tasks_run_while_a_large_set_is_read(codec: int) -> None:
    data = message_set(MESSAGES, codec)
    before = steps_counted()
    async with driven("kafka08", max_records_per_step=STEP) as conn:
        client = kc.ClientConnection("steps-test")
        await call(conn, client, 3, kc.METADATA_REQUEST([TOPIC]))  # creates the topic
        ran = 0
        answered = False

        async def another_task() -> None:
            nonlocal ran
            while not answered:
                await trio.lowlevel.checkpoint()
                ran += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(another_task)
            got = await call(conn, client, 0, produce(data))
            answered = True
        then = await call(conn, client, 0, produce(message_set(1, codec)))
    results = [(p.error, p.offset) for a in (got, then) for t in a.topics for p in t.partitions]
    assert results == [(0, 0), (0, MESSAGES)]  # every message stored, once
    # 400 steps, the other task scheduled between two; in one go it only runs while the
    # request's bytes arrive and the answer leaves (about 70 times for the 5 MB plain set)
    assert ran >= 300, ran
    assert steps_counted() == before + 1


def test_a_step_below_one_record_is_a_config_error() -> None:
    backends = {"backends": {"m": {"type": "memory"}}}
    with pytest.raises(ConfigError) as info:
        parse_config({**backends, "listeners": {"kafka08": {"max_records_per_step": 0}}})
    assert "listeners.kafka08.max_records_per_step: got 0, expected >= 1" in info.value.problems
    config = parse_config({**backends, "listeners": {"kafka08": {}}})
    assert config.listeners["kafka08"].max_records_per_step == 10_000
