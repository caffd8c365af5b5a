"""A Fetch answer never holds more than the listener's ``max_answer_bytes`` of message sets,
whatever MaxBytes asks and however many partitions are listed; a partition listed twice is
answered once (the 0.8 broker reads the partitions into a map: the later entry wins)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.config import ConfigError, parse_config
from gateway.model import Record
from gateway.protocols.kafka08 import codec as c
from gateway.protocols.kafka08.messageset import decode_message_set, encode_message_set
from tests.protocols.kafka08.conftest import RawClient, metric, protocol_errors
from tests.protocols.kafka08.test_bad_input import new_topic, produce
from tests.support import GatewayProcess

BUDGET = 4000
ENTRY = 12 + 14 + 100  # a magic-0 entry of a 100-byte value without a key
HUGE = 2**31 - 1


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    listener = {"max_answer_bytes": BUDGET, "message_max_bytes": BUDGET - 12}
    with GatewayProcess(tmp_path_factory.mktemp("gw"), listeners={"kafka08": listener}) as gw:
        yield gw


def hits(gw: GatewayProcess) -> float:
    return metric(gw, "gateway_limit_hits_total", limit="max_answer_bytes", protocol="kafka08")


def filled(raw: RawClient, count: int = 100) -> str:
    topic = new_topic(raw)
    values = [Record(None, bytes([65 + i % 26]) * 100) for i in range(count)]
    assert produce(raw, topic, encode_message_set(values)).error == 0
    return topic


def fetch_many(raw: RawClient, entries: list[tuple[str, int, int]]) -> list[tuple[str, object]]:
    """Fetch (topic, offset, max_bytes) entries of partition 0, each its own topic entry."""
    topics = [c.FETCH_TOPIC(t, [c.FETCH_PARTITION(0, off, mb)]) for t, off, mb in entries]
    resp = raw.call(1, 0, c.FETCH_REQUEST(-1, 0, 1, topics))
    return [(t.topic, p) for t in resp.topics for p in t.partitions]


def test_max_bytes_beyond_the_budget_gets_the_budget(gateway: GatewayProcess, raw: RawClient):
    topic = filled(raw)
    before = hits(gateway)
    [(_, p)] = fetch_many(raw, [(topic, 0, HUGE)])
    assert p.error == 0 and p.high_watermark == 100
    assert len(p.message_set) == BUDGET  # cut at the budget like at MaxBytes
    got = decode_message_set(p.message_set)
    assert [r.offset for r in got] == list(range(BUDGET // ENTRY))
    assert hits(gateway) == before + 1
    # within the budget nothing is counted
    [(_, p)] = fetch_many(raw, [(topic, 0, ENTRY * 3)])
    assert [r.offset for r in decode_message_set(p.message_set)] == [0, 1, 2]
    assert hits(gateway) == before + 1


def test_partitions_share_one_budget(gateway: GatewayProcess, raw: RawClient) -> None:
    a, b, d = filled(raw), filled(raw), filled(raw)
    before = hits(gateway)
    got = fetch_many(raw, [(a, 0, ENTRY * 20), (b, 0, ENTRY * 20), (d, 0, HUGE)])
    sizes = {t: len(p.message_set) for t, p in got}
    assert sum(sizes.values()) <= BUDGET
    assert sizes[a] == ENTRY * 20  # first come, first served: whole
    # b gets what is left, cut like at MaxBytes; d finds nothing left: an empty set, not the
    # start of a message a client would take for one too large to fetch
    assert sizes[b] == BUDGET - ENTRY * 20 and sizes[d] == 0
    answers = {t: p for t, p in got}
    assert [r.offset for r in decode_message_set(answers[b].message_set)] == list(
        range((BUDGET - ENTRY * 20) // ENTRY)
    )
    assert all(p.error == 0 and p.high_watermark == 100 for _, p in got)
    assert hits(gateway) == before + 1  # one answer, one hit


def test_a_partition_listed_twice_is_answered_once(gateway: GatewayProcess, raw: RawClient):
    topic = filled(raw)
    before = protocol_errors(gateway, "duplicate_partition")
    parts = [c.FETCH_PARTITION(0, off, ENTRY * 2) for off in (0, 10, 50)]
    resp = raw.call(1, 0, c.FETCH_REQUEST(-1, 0, 1, [c.FETCH_TOPIC(topic, parts)]))
    [t] = resp.topics
    [p] = t.partitions  # once, with the last entry's offset and size
    assert [r.offset for r in decode_message_set(p.message_set)] == [50, 51]
    # the same partition under two topic entries: still once
    resp = raw.call(
        1,
        0,
        c.FETCH_REQUEST(
            -1,
            0,
            1,
            [
                c.FETCH_TOPIC(topic, [c.FETCH_PARTITION(0, 0, ENTRY)]),
                c.FETCH_TOPIC(topic, [c.FETCH_PARTITION(0, 7, ENTRY)]),
            ],
        ),
    )
    assert [(t.topic, len(t.partitions)) for t in resp.topics] == [(topic, 1)]
    assert [r.offset for r in decode_message_set(resp.topics[0].partitions[0].message_set)] == [7]
    assert protocol_errors(gateway, "duplicate_partition") == before + 2


def test_a_budget_smaller_than_a_message_is_refused() -> None:
    backends = {"backends": {"m": {"type": "memory"}}}
    listener = {"max_answer_bytes": 1000, "message_max_bytes": 2000}
    with pytest.raises(ConfigError) as info:
        parse_config({**backends, "listeners": {"kafka08": listener}})
    assert (
        "listeners.kafka08.max_answer_bytes: got 1000, expected >= message_max_bytes + 12 (2012)"
        in "\n".join(info.value.problems)
    )
    parse_config({**backends, "listeners": {"kafka08": {**listener, "max_answer_bytes": 2012}}})
