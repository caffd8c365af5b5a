"""Kafka 0.8 semantics at byte level against a running gateway (our codec in its client role):
pipelining and acks 0, the fetch cut, long polls, Offsets, group offsets, ConsumerMetadata.
The real clients (test_real_clients.py) are the main tests; these pin the corners."""

from __future__ import annotations

import itertools
import threading

from gateway.model import Record
from gateway.protocols.kafka08 import codec as c
from gateway.protocols.kafka08.messageset import decode_message_set, encode_message_set
from tests.protocols.kafka08.conftest import RawClient
from tests.protocols.kafka08.test_bad_input import fetch, new_topic, produce
from tests.support import GatewayProcess

_n = itertools.count()


def records(n: int, size: int = 10) -> list[Record]:
    return [Record(b"k%d" % i, bytes([65 + i % 26]) * size) for i in range(n)]


def test_pipelined_requests_answered_in_order_and_acks_0_silent(raw: RawClient) -> None:
    topic = new_topic(raw)
    data = encode_message_set(records(3))
    acks0 = c.PRODUCE_REQUEST(0, 1000, [c.PRODUCE_TOPIC(topic, [c.PRODUCE_PARTITION(0, data)])])
    acks1 = c.PRODUCE_REQUEST(1, 1000, [c.PRODUCE_TOPIC(topic, [c.PRODUCE_PARTITION(0, data)])])
    wire = b"".join(
        [
            raw.conn.send_request(0, 0, acks0),  # no answer
            raw.conn.send_request(3, 0, c.METADATA_REQUEST([topic])),
            raw.conn.send_request(0, 0, acks1),
            raw.conn.send_request(10, 0, c.CONSUMER_METADATA_REQUEST("g")),
        ]
    )
    raw.send_raw(wire)  # one write: the gateway reads all four at once
    assert raw.receive().topics[0].topic == topic  # ClientConnection checks correlation ids
    assert raw.receive().topics[0].partitions[0].offset == 3  # after the acks-0 set
    assert raw.receive().error == 0


def test_pipelined_produces_are_stored_and_answered_in_order(raw: RawClient) -> None:
    """Produces with acks 1 are parsed ahead while the previous one is stored (PRODUCE_PIPELINE):
    they must still be stored in request order, answered in order, a bad one must not stop the
    others, and a request of another kind waits for the produces before it."""
    topic = new_topic(raw)
    sizes = [5, 1, 7, 3, 2, 4, 6, 1]
    bad = bytearray(encode_message_set(records(2)))
    bad[13] ^= 0xFF  # the first message's CRC
    wire = []
    for i, n in enumerate(sizes):
        data = bytes(bad) if i == 3 else encode_message_set(records(n, size=n))
        body = c.PRODUCE_REQUEST(1, 1000, [c.PRODUCE_TOPIC(topic, [c.PRODUCE_PARTITION(0, data)])])
        wire.append(raw.conn.send_request(0, 0, body))
        if i == 5:
            latest = c.OFFSETS_TOPIC(topic, [c.OFFSETS_PARTITION(0, -1, 1)])
            wire.append(raw.conn.send_request(2, 0, c.OFFSETS_REQUEST(-1, [latest])))
    raw.send_raw(b"".join(wire))
    expected_next = 0
    for i, n in enumerate(sizes):
        [p] = raw.receive().topics[0].partitions  # ClientConnection checks correlation ids
        if i == 3:
            assert p.error == 2
            continue
        assert (p.error, p.offset) == (0, expected_next)
        expected_next += n
        if i == 5:  # the Offsets answer sees every produce before it
            [o] = raw.receive().topics[0].partitions
            assert o.offsets == [expected_next]
    got = decode_message_set(fetch(raw, topic, 0).message_set)
    stored = [n for i, n in enumerate(sizes) if i != 3]
    assert [r.value for r in got] == [r.value for n in stored for r in records(n, size=n)]


def test_fetch_cut_at_max_bytes_keeps_the_partial_last_message(raw: RawClient) -> None:
    topic = new_topic(raw)
    produce(raw, topic, encode_message_set(records(10)))
    whole = fetch(raw, topic, 0)
    entry = len(bytes(whole.message_set)) // 10
    cut = entry * 3 + 7  # three entries and 7 bytes of the fourth
    p = fetch(raw, topic, 0, max_bytes=cut)
    assert len(p.message_set) == cut
    assert bytes(p.message_set) == bytes(whole.message_set)[:cut]
    assert [r.offset for r in decode_message_set(p.message_set)] == [0, 1, 2]
    # from the middle of a stored batch: the window is cut out of the stored block
    mid = fetch(raw, topic, 4, max_bytes=entry * 2)
    got = decode_message_set(mid.message_set)
    assert [(r.offset, r.key) for r in got] == [(4, b"k4"), (5, b"k5")]
    assert fetch(raw, topic, 0, max_bytes=0).message_set.tobytes() == b""


def test_fetch_long_poll_wakes_on_append(gateway: GatewayProcess, raw: RawClient) -> None:
    topic = new_topic(raw)
    body = c.FETCH_REQUEST(-1, 30_000, 1, [c.FETCH_TOPIC(topic, [c.FETCH_PARTITION(0, 0, 1000)])])
    raw.send(1, 0, body)
    result: list = []
    waiter = threading.Thread(target=lambda: result.append(raw.receive()))
    waiter.start()
    other = RawClient(gateway.address("kafka08"))
    produce(other, topic, encode_message_set([Record(None, b"wake")]))
    other.close()
    waiter.join(20)
    assert not waiter.is_alive()
    [p] = result[0].topics[0].partitions
    assert [r.value for r in decode_message_set(p.message_set)] == [b"wake"]


def test_fetch_many_partitions_waits_for_any(gateway: GatewayProcess, raw: RawClient) -> None:
    a, b = new_topic(raw), new_topic(raw)
    body = c.FETCH_REQUEST(
        -1,
        30_000,
        1,
        [
            c.FETCH_TOPIC(a, [c.FETCH_PARTITION(0, 0, 1000)]),
            c.FETCH_TOPIC(b, [c.FETCH_PARTITION(0, 0, 1000)]),
        ],
    )
    raw.send(1, 0, body)
    result: list = []
    waiter = threading.Thread(target=lambda: result.append(raw.receive()))
    waiter.start()
    other = RawClient(gateway.address("kafka08"))
    produce(other, b, encode_message_set([Record(None, b"in-b")]))
    other.close()
    waiter.join(20)
    assert not waiter.is_alive()
    got = {t.topic: decode_message_set(t.partitions[0].message_set) for t in result[0].topics}
    assert [r.value for r in got[b]] == [b"in-b"]
    assert got[a] == []


def test_fetch_v1_layout_has_throttle_time(raw: RawClient) -> None:
    topic = new_topic(raw)
    produce(raw, topic, encode_message_set([Record(None, b"v1")]))
    body = c.FETCH_REQUEST(-1, 0, 1, [c.FETCH_TOPIC(topic, [c.FETCH_PARTITION(0, 0, 1000)])])
    resp = raw.call(1, 1, body)
    assert resp.throttle_ms == 0
    assert [r.value for r in decode_message_set(resp.topics[0].partitions[0].message_set)] == [
        b"v1"
    ]


def test_offsets_latest_earliest_and_time(raw: RawClient) -> None:
    topic = new_topic(raw)

    def offsets(time: int, max_offsets: int = 1) -> list[int]:
        body = c.OFFSETS_REQUEST(
            -1, [c.OFFSETS_TOPIC(topic, [c.OFFSETS_PARTITION(0, time, max_offsets)])]
        )
        [p] = raw.call(2, 0, body).topics[0].partitions
        assert p.error == 0
        return p.offsets

    assert offsets(-1) == [0]
    assert offsets(-2) == [0]
    produce(raw, topic, encode_message_set(records(5)))
    assert offsets(-1) == [5]
    assert offsets(-1, 10) == [5, 0]  # descending: log end, then the segment base
    assert offsets(-2, 10) == [0]
    assert offsets(-1, 0) == []
    assert offsets(0) == [0]  # every record is newer than the epoch
    assert offsets(4_000_000_000_000) == [5]  # none that new: the log end


def test_group_offsets_v0_and_v1(raw: RawClient) -> None:
    topic = new_topic(raw)
    group = f"grp-{next(_n)}"

    def fetch_offset(version: int):
        body = c.OFFSET_FETCH_REQUEST(group, [c.OFFSET_FETCH_TOPIC(topic, [0])])
        [p] = raw.call(9, version, body).topics[0].partitions
        return p.offset, p.metadata, p.error

    assert fetch_offset(1) == (-1, "", 0)  # nothing committed: v1 answers 0
    assert fetch_offset(0) == (-1, "", 3)  # v0 (ZooKeeper) answers 3
    v1 = c.COMMIT_REQUEST_V1(
        group, -1, "", [c.COMMIT_TOPIC_V1(topic, [c.COMMIT_PARTITION_V1(0, 42, -1, "meta")])]
    )
    assert raw.call(8, 1, v1).topics[0].partitions[0].error == 0
    assert fetch_offset(1) == (42, "meta", 0)
    v0 = c.COMMIT_REQUEST_V0(group, [c.COMMIT_TOPIC_V0(topic, [c.COMMIT_PARTITION_V0(0, 7, None)])])
    assert raw.call(8, 0, v0).topics[0].partitions[0].error == 0
    assert fetch_offset(0) == (7, "", 0)
    big = c.COMMIT_REQUEST_V0(
        group, [c.COMMIT_TOPIC_V0(topic, [c.COMMIT_PARTITION_V0(0, 9, "x" * 5000)])]
    )
    assert raw.call(8, 0, big).topics[0].partitions[0].error == 12  # OffsetMetadataTooLarge
    assert fetch_offset(1)[0] == 7


def test_consumer_metadata_names_the_gateway(gateway: GatewayProcess, raw: RawClient) -> None:
    host, port = gateway.address("kafka08")
    resp = raw.call(10, 0, c.CONSUMER_METADATA_REQUEST("any-group"))
    assert (resp.error, resp.node_id, resp.host, resp.port) == (0, 0, host, port)


def test_metadata_all_topics_and_auto_create_off(tmp_path) -> None:
    with GatewayProcess(
        tmp_path, listeners={"kafka08": {}}, server={"auto_create_topics": False}
    ) as gw:
        client = RawClient(gw.address("kafka08"))
        md = client.call(3, 0, c.METADATA_REQUEST(["nope"]))
        assert [(t.error, t.topic, t.partitions) for t in md.topics] == [(3, "nope", [])]
        assert client.call(3, 0, c.METADATA_REQUEST([])).topics == []
        host, port = gw.address("kafka08")
        assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(0, host, port)]
        client.close()


def test_sigterm_answers_the_long_poll_in_hand_then_closes(tmp_path) -> None:
    with GatewayProcess(tmp_path, listeners={"kafka08": {}}) as gw:
        idle = RawClient(gw.address("kafka08"))
        idle.call(3, 0, c.METADATA_REQUEST([]))
        polling = RawClient(gw.address("kafka08"))
        topic = new_topic(polling)
        body = c.FETCH_REQUEST(-1, 1000, 1, [c.FETCH_TOPIC(topic, [c.FETCH_PARTITION(0, 0, 100)])])
        # one write: a Metadata request, then the long poll. Answers are flushed before a Fetch
        # is handled, so once the Metadata answer is here the Fetch is the request in hand.
        polling.send_raw(
            polling.conn.send_request(3, 0, c.METADATA_REQUEST([topic]))
            + polling.conn.send_request(1, 0, body)
        )
        assert polling.receive().topics[0].topic == topic
        result: list = []
        waiter = threading.Thread(target=lambda: result.append(polling.receive()))
        waiter.start()
        assert gw.stop() == 0
        waiter.join(20)
        assert result and result[0].topics[0].partitions[0].error == 0  # answered, not dropped
        assert polling.closed_by_peer()
        assert idle.closed_by_peer()
        idle.close()
        polling.close()
