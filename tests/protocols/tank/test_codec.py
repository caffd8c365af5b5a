"""The TANK codec replays every tank-cli <-> tank 4.0 wire capture, as a server and as a client.

There is no installable TANK client or broker : the captures of the real
tank-cli <-> tank 4.0 exchange, replayed in both roles, are the proof that the codec reads and
writes TANK as the real programs do.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.protocols.tank import bundle as B
from gateway.protocols.tank import codec as C
from tests.protocols.tank import vectors as V


def server_decode(frame: bytes):
    conn = C.TankConnection(C.Role.SERVER)
    conn.receive_data(frame)
    event = conn.next_event()
    assert conn.next_event() is C.NEED_DATA and conn.buffered == 0
    return event


def client_decode(frame: bytes, request=None):
    conn = C.TankConnection(C.Role.CLIENT)
    if request is not None:
        conn.send(request)
    conn.receive_data(frame)
    return conn.next_event()


# ----------------------------------------------------------------------------- server role


def test_greeting_is_an_empty_ping() -> None:
    assert C.GREETING == V.GREETING
    assert isinstance(client_decode(V.GREETING), C.Ping)


def test_server_create_topic() -> None:
    req = server_decode(V.CREATE_ORDERS)
    assert req == C.CreateTopicRequest(1, "orders", 2, b"")
    assert C.encode_response(C.CreateTopicResponse(1, "orders", 0)) == V.CREATE_ORDERS_OK


def test_server_produce_abc() -> None:
    req = server_decode(V.PRODUCE_ABC)
    assert isinstance(req, C.ProduceRequest) and not req.with_seqnum
    assert (req.client_version, req.request_id, req.client_id) == (2, 1, b"c++")
    (topic,) = req.topics
    (part,) = topic.partitions
    assert topic.name == "orders" and part.partition == 0 and part.bundle == V.BUNDLE_ABC
    assert part.info is not None and part.info.header.message_count == 1
    assert part.info.max_ts_ms == V.TS_MS
    _, msgs = B.decode_bundle(part.bundle, base_seq=1)
    assert msgs == [B.TankMessage(1, V.TS_MS, None, b"abc")]
    resp = C.ProduceResponse(1, [C.ProduceTopicResult("orders", [C.P_OK])])
    assert C.encode_response(resp) == V.PRODUCE_OK


def test_server_bundle_variants() -> None:
    _, msgs = B.decode_bundle(V.BUNDLE_THREE, base_seq=2)
    assert msgs == [
        B.TankMessage(2, V.TS_MS, None, b"m1"),
        B.TankMessage(3, V.TS_MS, None, b"m2"),
        B.TankMessage(4, V.TS_MS, None, b"m3"),
    ]
    _, msgs = B.decode_bundle(V.BUNDLE_KEYED, base_seq=5)
    assert msgs == [B.TankMessage(5, V.TS_MS, b"key", b"val")]
    header, msgs = B.decode_bundle(V.BUNDLE_SPARSE_100)
    assert header.sparse and header.first_seq == 100 == header.last_seq
    assert msgs == [B.TankMessage(100, V.TS_MS, None, b"sparse1")]


def test_server_produce_with_seqnum() -> None:
    frame = V.produce_frame(b"orders", 0, V.BUNDLE_SPARSE_100, base=100)
    assert V.PWS_PARTITION_ENTRY + V.BUNDLE_SPARSE_100 in frame
    req = server_decode(frame)
    assert req.with_seqnum and req.topics[0].partitions[0].base_seqnum == 100
    assert req.topics[0].partitions[0].info.header.first_seq == 100
    resp = C.ProduceResponse(1, [C.ProduceTopicResult("orders", [C.P_OK])], with_seqnum=True)
    assert C.encode_response(resp) == V.PWS_ANSWER_OK  # framed 0x01, like the real broker


@pytest.mark.parametrize(
    ("answer", "status"), [(V.PWS_ANSWER_OK, C.P_OK), (V.PWS_ANSWER_INVALID, C.P_INVALID_SEQNUMS)]
)
def test_client_decodes_the_answers_to_produce_with_seqnum(answer: bytes, status: int) -> None:
    """Client role: the 0x01 answers the real broker gives a `produce -S` request."""
    conn = C.TankConnection(C.Role.CLIENT)
    req = C.ProduceRequest(
        1,
        [C.ProduceTopic("orders", [C.ProducePartition(0, V.BUNDLE_SPARSE_S1, 1)])],
        with_seqnum=True,
        client_id=b"c++",
    )
    assert conn.send(req) == V.produce_frame(b"orders", 0, V.BUNDLE_SPARSE_S1, base=1)
    conn.receive_data(answer)
    got = conn.next_event()
    assert got == C.ProduceResponse(1, [C.ProduceTopicResult("orders", [status])], True)


def test_server_consume_from_zero() -> None:
    req = server_decode(V.CONSUME_ORDERS_0)
    assert req == C.ConsumeRequest(
        1,
        [C.ConsumeTopic("orders", [C.ConsumePartitionRequest(0, 0, 0x08000000)])],
        0,
        0,
        2,
        b"",
        0,
    )
    chunk = [b"\x0e", V.BUNDLE_ABC, b"\x15", V.BUNDLE_THREE, b"\x12", V.BUNDLE_KEYED]
    resp = C.ConsumeResponse(
        1,
        [C.ConsumeTopicResult("orders", [C.ConsumePartitionResult(0, C.C_OK, 1, 5, chunk)], 1)],
    )
    assert C.encode_response(resp) == V.CONSUME_ORDERS_0_HEADER + V.CONSUME_ORDERS_0_CHUNK


def test_server_consume_client_version_3_has_flags() -> None:
    req = C.ConsumeRequest(
        9, [C.ConsumeTopic("t", [C.ConsumePartitionRequest(1, 7, 100)])], 5, 6, 3, b"id", 1
    )
    frame = C.encode_request(req)
    v2 = C.encode_request(C.ConsumeRequest(9, req.topics, 5, 6, 2, b"id", 0))
    assert len(frame) == len(v2) + 1
    assert server_decode(frame) == req


def test_server_error_fragments() -> None:
    unknown = C.encode_response(C.ConsumeResponse(1, [C.ConsumeTopicResult("nosuch", None, 1)]))
    assert unknown.endswith(V.CONSUME_UNKNOWN_TOPIC_PART)
    boundary = C.encode_response(
        C.ConsumeResponse(
            1,
            [
                C.ConsumeTopicResult(
                    "orders",
                    [C.ConsumePartitionResult(0, C.C_BOUNDARY, hwmark=100, first_available=1)],
                )
            ],
        )
    )
    assert boundary.endswith(V.BOUNDARY_FAULT_PART)
    bad_part = C.encode_response(
        C.ConsumeResponse(
            1,
            [C.ConsumeTopicResult("orders", [C.ConsumePartitionResult(7, C.C_UNKNOWN_PARTITION)])],
        )
    )
    assert bad_part.endswith(V.UNKNOWN_PARTITION_7_PART)
    resp = C.ProduceResponse(1, [C.ProduceTopicResult("nosuch", None)])
    assert C.encode_response(resp) == V.PRODUCE_UNKNOWN_TOPIC


def test_server_discovery_and_status() -> None:
    assert server_decode(V.DISCOVER_PARTITIONS_ORDERS) == C.DiscoverPartitionsRequest(1, "orders")
    resp = C.DiscoverPartitionsResponse(
        1, "orders", [C.PartitionWatermarks(1, 5), C.PartitionWatermarks(0, 0)]
    )
    assert C.encode_response(resp) == V.DISCOVER_PARTITIONS_ORDERS_RESP
    topics = C.DiscoverTopicsResponse(
        1, [C.TopicEntry("orders", True, 2), C.TopicEntry("events", True, 1)]
    )
    assert C.encode_response(topics) == V.DISCOVER_TOPICS_RESP
    status = C.encode_response(C.StatusResponse(1, 2, 3, 3, 0, 0x01020304))
    assert status == V.STATUS_RESP_PREFIX + bytes([4, 3, 2, 1]) + V.STATUS_RESP_SUFFIX
    assert C.encode_response(C.DiscoverTopologyResponse(1)) == V.DISCOVER_TOPOLOGY_RESP
    assert server_decode(C.encode_request(C.StatusRequest(1))) == C.StatusRequest(1)
    assert server_decode(C.encode_request(C.DiscoverTopicsRequest(1))) == C.DiscoverTopicsRequest(1)
    assert server_decode(
        C.encode_request(C.DiscoverTopologyRequest(1))
    ) == C.DiscoverTopologyRequest(1)


# ----------------------------------------------------------------------------- client role


def test_client_encodes_the_captured_requests() -> None:
    assert C.encode_request(C.CreateTopicRequest(1, "orders", 2)) == V.CREATE_ORDERS
    produce = C.ProduceRequest(
        1,
        [C.ProduceTopic("orders", [C.ProducePartition(0, V.BUNDLE_ABC)])],
        client_id=b"c++",
    )
    assert C.encode_request(produce) == V.PRODUCE_ABC
    consume = C.ConsumeRequest(
        1, [C.ConsumeTopic("orders", [C.ConsumePartitionRequest(0, 0, 0x08000000)])]
    )
    assert C.encode_request(consume) == V.CONSUME_ORDERS_0 == V.consume_frame(b"orders", 0, 0)
    assert C.encode_request(C.DiscoverPartitionsRequest(1, "orders")) == (
        V.DISCOVER_PARTITIONS_ORDERS
    )
    pws = C.ProduceRequest(
        1,
        [C.ProduceTopic("orders", [C.ProducePartition(0, V.BUNDLE_SPARSE_100, 100)])],
        with_seqnum=True,
        client_id=b"c++",
    )
    assert C.encode_request(pws) == V.produce_frame(b"orders", 0, V.BUNDLE_SPARSE_100, base=100)


def test_client_encodes_the_captured_bundles() -> None:
    assert B.encode_bundle([(None, b"abc", V.TS_MS)]) == V.BUNDLE_ABC
    three = [(None, b"m1", V.TS_MS), (None, b"m2", V.TS_MS), (None, b"m3", V.TS_MS)]
    assert B.encode_bundle(three) == V.BUNDLE_THREE
    assert B.encode_bundle([(b"key", b"val", V.TS_MS)]) == V.BUNDLE_KEYED
    assert B.encode_bundle([(None, b"sparse1", V.TS_MS)], first_seq=100) == V.BUNDLE_SPARSE_100


def test_snappy_bundle_like_the_capture() -> None:
    """Capture: 2 x 600-byte messages -> flags 09 (codec 1, count 2), raw Snappy starting be 09
    (1214 bytes uncompressed). The content of the capture is not known, so the length differs."""
    msgs = [(None, bytes([i % 7 + 97]) * 600, V.TS_MS) for i in range(2)]
    bundle = B.encode_bundle(msgs)
    assert bundle[0] == 0x09 and bundle[1:3] == bytes.fromhex("be09")
    _, back = B.decode_bundle(bundle, base_seq=1)
    assert [(m.key, m.content, m.timestamp_ms) for m in back] == msgs
    assert len(bundle) < 100


def test_client_decodes_the_captured_responses() -> None:
    assert client_decode(V.CREATE_ORDERS_OK) == C.CreateTopicResponse(1, "orders", 0)
    produce = C.ProduceRequest(1, [C.ProduceTopic("orders", [C.ProducePartition(0, b"")])])
    assert client_decode(V.PRODUCE_OK, produce) == C.ProduceResponse(
        1, [C.ProduceTopicResult("orders", [0])]
    )
    nosuch = C.ProduceRequest(1, [C.ProduceTopic("nosuch", [C.ProducePartition(0, b"")])])
    assert client_decode(V.PRODUCE_UNKNOWN_TOPIC, nosuch) == C.ProduceResponse(
        1, [C.ProduceTopicResult("nosuch", None)]
    )
    consume = client_decode(V.CONSUME_ORDERS_0_HEADER + V.CONSUME_ORDERS_0_CHUNK)
    (part,) = consume.topics[0].partitions
    assert (part.partition, part.err, part.base_seq, part.hwmark) == (0, 0, 1, 5)
    assert [(m.seq, m.key, m.content, m.timestamp_ms) for m in part.messages()] == [
        (1, None, b"abc", V.TS_MS),
        (2, None, b"m1", V.TS_MS),
        (3, None, b"m2", V.TS_MS),
        (4, None, b"m3", V.TS_MS),
        (5, b"key", b"val", V.TS_MS),
    ]
    dp = client_decode(V.DISCOVER_PARTITIONS_ORDERS_RESP)
    assert dp == C.DiscoverPartitionsResponse(
        1, "orders", [C.PartitionWatermarks(1, 5), C.PartitionWatermarks(0, 0)]
    )
    dt = client_decode(V.DISCOVER_TOPICS_RESP)
    assert [(t.name, t.enabled, t.partitions) for t in dt.topics] == [
        ("orders", True, 2),
        ("events", True, 1),
    ]
    st_ = client_decode(V.STATUS_RESP_PREFIX + b"\x01\x02\x03\x04" + V.STATUS_RESP_SUFFIX)
    assert (st_.topics, st_.partitions, st_.open_partitions, st_.version) == (2, 3, 3, 400)
    assert st_.startup_ts == 0x04030201
    assert client_decode(V.DISCOVER_TOPOLOGY_RESP) == C.DiscoverTopologyResponse(1, None)


def test_client_decodes_error_fragments() -> None:
    def consume_resp(header_tail: bytes) -> bytes:
        header = b"\x01\x00\x00\x00\x01" + header_tail
        payload = len(header).to_bytes(4, "little") + header
        return b"\x02" + len(payload).to_bytes(4, "little") + payload

    r = client_decode(consume_resp(V.CONSUME_UNKNOWN_TOPIC_PART))
    assert r.topics == [C.ConsumeTopicResult("nosuch", None, 1)]
    r = client_decode(consume_resp(V.ORDERS + b"\x01" + V.BOUNDARY_FAULT_PART))
    p = r.topics[0].partitions[0]
    assert (p.err, p.hwmark, p.first_available) == (C.C_BOUNDARY, 100, 1)
    r = client_decode(consume_resp(V.ORDERS + b"\x01" + V.UNKNOWN_PARTITION_7_PART))
    p = r.topics[0].partitions[0]
    assert (p.partition, p.err) == (7, C.C_UNKNOWN_PARTITION)


def test_client_drops_a_cut_last_bundle() -> None:
    chunk = V.CONSUME_ORDERS_0_CHUNK
    msgs = C.decode_chunk(chunk[:-5], 1)
    assert [m.content for m in msgs] == [b"abc", b"m1", b"m2", b"m3"]
    assert C.decode_chunk(chunk[:3], 1) == []


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("frame", "kind"),
    [
        (bytes.fromhex("04 00000000"), "unknown_msg"),  # obsolete RegReplica
        (bytes.fromhex("09 00000000"), "unknown_msg"),  # ConsumePeer: broker to broker only
        (bytes.fromhex("7f 00000000"), "unknown_msg"),
        # produce whose bundle_len varint never ends
        (V.PRODUCE_ABC[:31] + b"\xff\xff\xff\xff\xff\xff" + V.PRODUCE_ABC[37:], "bad_varint"),
        # produce whose bundle claims more bytes than the frame holds
        (V.PRODUCE_ABC[:31] + b"\x40" + V.PRODUCE_ABC[32:], "bundle_too_long"),
        # a message inside the bundle claims a longer content than the bundle has
        (V.PRODUCE_ABC[:-4] + b"\x09abc", "bad_bundle"),
        # codec 3 does not exist
        (V.PRODUCE_ABC[:32] + b"\x07" + V.PRODUCE_ABC[33:], "bad_bundle"),
        # create_topic cut in the middle of its topic name
        (b"\x07\x08\x00\x00\x00" + V.CREATE_ORDERS[5:13], "truncated"),
        # consume with bytes after the last partition
        (b"\x02\x2b\x00\x00\x00" + V.CONSUME_ORDERS_0[5:] + b"\x00", "trailing_bytes"),
    ],
)
def test_bad_input_is_a_remote_protocol_error(frame: bytes, kind: str) -> None:
    with pytest.raises(C.RemoteProtocolError) as exc:
        server_decode(frame)
    assert exc.value.kind == kind


def test_frame_larger_than_the_limit() -> None:
    conn = C.TankConnection(C.Role.SERVER, max_frame_bytes=1000)
    conn.receive_data(b"\x01" + (1001).to_bytes(4, "little"))
    with pytest.raises(C.RemoteProtocolError) as exc:
        conn.next_event()
    assert exc.value.kind == "frame_too_large"


def test_frames_split_anywhere() -> None:
    stream = V.CREATE_ORDERS + V.PRODUCE_ABC + V.CONSUME_ORDERS_0 + V.GREETING
    conn = C.TankConnection(C.Role.SERVER)
    events = []
    for i in range(len(stream)):
        conn.receive_data(stream[i : i + 1])
        while (e := conn.next_event()) is not C.NEED_DATA:
            events.append(type(e).__name__)
    assert events == ["CreateTopicRequest", "ProduceRequest", "ConsumeRequest", "Ping"]


# ----------------------------------------------------------------------------- properties

messages = st.lists(
    st.tuples(
        st.one_of(st.none(), st.binary(max_size=255)),
        st.binary(max_size=300),
        st.integers(min_value=0, max_value=2**63),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(messages, st.one_of(st.none(), st.booleans()), st.one_of(st.none(), st.integers(1, 2**40)))
def test_bundle_round_trip(msgs, compress, first_seq) -> None:
    bundle = B.encode_bundle(msgs, compress=compress, first_seq=first_seq)
    info = B.scan_bundle(bundle)
    assert info.header.message_count == len(msgs) and info.contiguous
    assert info.max_ts_ms == max(ts for _, _, ts in msgs)
    header, back = B.decode_bundle(bundle, base_seq=7)
    assert [(m.key, m.content, m.timestamp_ms) for m in back] == msgs
    start = first_seq if first_seq is not None else 7
    assert [m.seq for m in back] == list(range(start, start + len(msgs)))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([1, 2, 5, 6, 7, 8, 10, 11, 12]), st.binary(max_size=80))
def test_fuzzed_requests_fail_cleanly(msg_id: int, payload: bytes) -> None:
    conn = C.TankConnection(C.Role.SERVER)
    conn.receive_data(bytes([msg_id]) + len(payload).to_bytes(4, "little") + payload)
    try:
        conn.next_event()
    except C.RemoteProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_fuzzed_bundles_fail_cleanly(data: bytes) -> None:
    try:
        B.scan_bundle(data)
    except B.BundleError:
        pass


def rich_producer_bundle() -> bytes:
    """flags 0x84 (extra flags follow, count 1), extra 0x01 (rich producer info: leader epoch
    u32, producer id u64, producer epoch u16), then one message."""
    rich = (7).to_bytes(4, "little") + (123456).to_bytes(8, "little") + (3).to_bytes(2, "little")
    return b"\x84\x01" + rich + b"\x00" + V.TS + b"\x04rich"


def test_rich_producer_extra_flags_are_accepted() -> None:
    bundle = rich_producer_bundle()
    header, msgs = B.decode_bundle(bundle, base_seq=1)
    assert header.producer == (7, 123456, 3) and header.message_count == 1
    assert msgs == [B.TankMessage(1, V.TS_MS, None, b"rich")]
    req = server_decode(V.produce_frame(b"orders", 0, bundle))
    assert req.topics[0].partitions[0].info.header.producer == (7, 123456, 3)
    # extra flags without the rich-producer bit: nothing else follows
    _, msgs = B.decode_bundle(b"\x84\x00\x00" + V.TS + b"\x01x", base_seq=1)
    assert [m.content for m in msgs] == [b"x"]


def sparse_with_gap(first: int = 10) -> bytes:
    """SPARSE, 3 messages, seqs 10, 12, 13 (from ``first``): last-first-1 = 2; the middle
    message has flag 4 clear and a seq delta of 1 (12 = 10 + 1 + 1)."""
    return (
        b"\x4c"
        + first.to_bytes(8, "little")
        + b"\x02"
        + (b"\x00" + V.TS + b"\x01a")
        + (b"\x02\x01\x01b")
        + (b"\x02\x01c")
    )


def test_sparse_bundle_with_a_gap() -> None:
    header, msgs = B.decode_bundle(sparse_with_gap())
    assert (header.first_seq, header.last_seq) == (10, 13)
    assert [(m.seq, m.content) for m in msgs] == [(10, b"a"), (12, b"b"), (13, b"c")]
    assert not B.scan_bundle(sparse_with_gap()).contiguous
