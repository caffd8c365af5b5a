"""Golden vectors of the Cursus wire format in both roles, malformed batches, round trips."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.model import Record
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.block import CURSUS_BLOCK, patch_offsets
from gateway.protocols.cursus.codec import (
    Ack,
    BatchDecodeError,
    FrameBuffer,
    Keepalive,
    Message,
    RemoteProtocolError,
    TextCommand,
)

# no deadline: the suite runs on busy shared machines; these check results, not speed
RELAXED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(" ".join(line.split("  ")[0] for line in text.strip().splitlines()))


FETCH_OFFSET_VECTOR = hexbytes(
    """
00 00 00 2a 00 00 46 45 54 43 48 5f 4f 46 46 53 45 54 20 74 6f 70 69 63 3d 74 20 70 61 72 74
69 74 69 6f 6e 3d 30 20 67 72 6f 75 70 3d 67
"""
)
CREATE_VECTOR = hexbytes(
    """
00 00 00 22 00 05 61 64 6d 69 6e 43 52 45 41 54 45 20 74 6f 70 69 63 3d 74 20 70 61 72 74 69
74 69 6f 6e 73 3d 31
"""
)
BATCH_VECTOR = hexbytes(
    """
00 00 00 53                      frame length 83
ba 7c                            magic
00 01 74                         topic "t"
00 00 00 00                      partition 0
01 31                            acks "1"
00                               idempotent 0
00 00 00 00 00 00 00 01          seq_start 1
00 00 00 00 00 00 00 01          seq_end 1
00 00 00 01                      count 1
00 00 00 00 00 00 00 00          offset 0
00 00 00 00 00 00 00 01          seq 1
00 01 70                         producer_id "p"
00 00                            key ""
00 00 00 00 00 00 00 00          epoch 0
00 00 00 02 68 69                payload "hi"
00 00                            event_type ""
00 00 00 00                      schema_version 0
00 00 00 00 00 00 00 00          aggregate_version 0
00 00                            metadata ""
"""
)
VECTOR_MESSAGE = Message(offset=0, seq=1, producer_id=b"p", payload=b"hi")


def one_frame(data: bytes) -> bytes:
    buf = FrameBuffer()
    buf.feed(data)
    body = buf.next_frame()
    assert body is not None and buf.next_frame() is None and len(buf) == 0
    return body


# --------------------------------------------------------------------------- server role


def test_server_decodes_fetch_offset_vector():
    body = one_frame(FETCH_OFFSET_VECTOR)
    assert not codec.is_batch(body)
    assert codec.decode_text(body) == TextCommand("FETCH_OFFSET topic=t partition=0 group=g", "")


def test_server_decodes_create_vector():
    body = one_frame(CREATE_VECTOR)
    assert codec.decode_text(body) == TextCommand("CREATE topic=t partitions=1", "admin")


def test_server_decodes_batch_vector():
    assert len(BATCH_VECTOR) == 4 + 83
    body = one_frame(BATCH_VECTOR)
    assert codec.is_batch(body)
    batch = codec.decode_batch(body)
    assert (batch.topic, batch.partition, batch.acks, batch.idempotent) == ("t", 0, "1", False)
    assert (batch.seq_start, batch.seq_end, batch.count) == (1, 1, 1)
    assert batch.messages() == [VECTOR_MESSAGE]
    assert list(batch.starts) == [0]


def test_keepalive_vector_is_an_empty_frame():
    assert one_frame(codec.KEEPALIVE) == b""
    assert codec.decode_reply(b"") == Keepalive()
    assert codec.frame(b"") == codec.KEEPALIVE


def test_frames_arrive_in_pieces():
    data = FETCH_OFFSET_VECTOR + BATCH_VECTOR + CREATE_VECTOR
    buf = FrameBuffer()
    bodies = []
    for i in range(len(data)):
        buf.feed(data[i : i + 1])
        while (body := buf.next_frame()) is not None:
            bodies.append(body)
    assert bodies == [FETCH_OFFSET_VECTOR[4:], BATCH_VECTOR[4:], CREATE_VECTOR[4:]]


def test_oversized_frame_is_refused_before_it_is_read():
    buf = FrameBuffer(max_frame_bytes=64 << 20)
    buf.feed(struct.pack(">I", (64 << 20) + 1))
    with pytest.raises(RemoteProtocolError) as exc:
        buf.next_frame()
    assert exc.value.kind == "frame_too_large"


# --------------------------------------------------------------------------- client role


def test_client_encodes_fetch_offset_vector():
    cmd = "FETCH_OFFSET topic=t partition=0 group=g"
    assert codec.frame(codec.encode_text(cmd)) == FETCH_OFFSET_VECTOR


def test_client_encodes_create_vector():
    assert codec.frame(codec.encode_text("CREATE topic=t partitions=1", "admin")) == CREATE_VECTOR


def test_client_encodes_batch_vector():
    batch = codec.make_batch("t", 0, [VECTOR_MESSAGE], acks="1")
    assert codec.frame(codec.encode_batch(batch)) == BATCH_VECTOR


def test_client_reads_a_batch_reply():
    reply = codec.decode_reply(BATCH_VECTOR[4:])
    assert isinstance(reply, codec.Batch) and reply.messages() == [VECTOR_MESSAGE]
    assert codec.decode_reply(b"OK offset=3") == "OK offset=3"


def test_ack_json_field_order_and_omitted_fields():
    ack = Ack("OK", 3, 1776000000, "p1", 1, 3)
    assert codec.encode_ack(ack) == (
        b'{"status":"OK","last_offset":3,"producer_epoch":1776000000,'
        b'"producer_id":"p1","seq_start":1,"seq_end":3}'
    )
    assert codec.decode_ack(codec.encode_ack(ack)) == ack
    err = Ack("ERROR", error="boom")
    assert codec.encode_ack(err).endswith(b',"error":"boom"}')
    with pytest.raises(RemoteProtocolError):
        codec.decode_ack(b"OK")


def test_ack_strings_are_escaped_as_json_dumps_would() -> None:
    """The ack is written field by field: strings with quotes, backslashes, control
    characters and non-ASCII text come out as json.dumps writes them, and read back equal."""
    odd = 'p"1\\\n\u00e9\u2603\x01'
    ack = Ack("OK", 7, 2, odd, 5, 9, leader='h"ost:1', error="")
    reference = json.dumps(
        {
            "status": "OK",
            "last_offset": 7,
            "producer_epoch": 2,
            "producer_id": odd,
            "seq_start": 5,
            "seq_end": 9,
            "leader": 'h"ost:1',
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    assert codec.encode_ack(ack) == reference
    assert codec.decode_ack(reference) == ack


# --------------------------------------------------------------------------- text commands


def test_params_any_order_and_message_swallows_the_rest():
    p = codec.parse_params("acks=1 topic=t producerId=p message=a b=c  d ")
    assert p == {"acks": "1", "topic": "t", "producerId": "p", "message": "a b=c  d"}
    assert codec.parse_params("partition=0 topic=x junk") == {"partition": "0", "topic": "x"}


def test_bare_command_without_envelope():
    # "LI" reads as a huge topic length: the envelope does not fit, the body is the command
    assert codec.decode_text(b"LIST") == TextCommand("LIST", None)
    assert codec.decode_text(b"\x00\x00LIST\n") == TextCommand("LIST", "")


def test_short_magic_body_is_text_not_batch():
    assert not codec.is_batch(b"\xba\x7c\x00\x00\x00\x00\x00")  # topic length 0
    assert not codec.is_batch(b"\xba\x7c\x00\x09abc")  # topic does not fit


# --------------------------------------------------------------------------- malformed batches


def header(count: int) -> bytes:
    return codec.batch_header("t", 0, "1", False, 1, 1, count)


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (header(1), "failed to read message[0] offset: EOF"),
        (header(1) + b"\x00" * 12, "failed to read message[0] seqNum: unexpected EOF"),
        (header(2) + BATCH_VECTOR[4 + 32 :], "failed to read message[1] offset: EOF"),
        (BATCH_VECTOR[4:-1], "failed to read message[0] metadata length: unexpected EOF"),
        (
            header(1) + b"\x00" * 16 + b"\x00\x05pp",
            "failed to read message[0] producerID bytes: unexpected EOF",
        ),
        (
            BATCH_VECTOR[4 : 4 + 61] + b"\x00\x00\x01\x00hi",
            "failed to read message[0] payload bytes: unexpected EOF",
        ),
        (header(-1), "invalid negative message count: -1"),
        (header(100_001), "message count too high: 100001 (max: 100000)"),
        (b"\xba\x7c\x00\x01t\x00\x00", "failed to read partition: unexpected EOF"),
        (b"\xba\x7c\x00\x01t\x00\x00\x00\x00", "failed to read acks length: EOF"),
        (b"\xba\x7c\x00\x01t\x00\x00\x00\x00\x02", "failed to read acks bytes: EOF"),
    ],
)
def test_malformed_batches_give_the_go_decoder_errors(body, error):
    with pytest.raises(BatchDecodeError) as exc:
        codec.decode_batch(body)
    assert str(exc.value) == error
    assert exc.value.kind == "malformed_batch"


def test_trailing_bytes_after_the_messages_are_ignored():
    batch = codec.decode_batch(BATCH_VECTOR[4:] + b"junk")
    assert batch.messages() == [VECTOR_MESSAGE]
    assert len(batch.body) == 83 - 32


# --------------------------------------------------------------------------- round trips

text = st.binary(max_size=40)
u64 = st.integers(0, 2**64 - 1)
messages = st.builds(
    Message,
    offset=u64,
    seq=u64,
    producer_id=text,
    key=text,
    epoch=st.integers(-(2**63), 2**63 - 1),
    payload=st.binary(max_size=300),
    event_type=text,
    schema_version=st.integers(0, 2**32 - 1),
    aggregate_version=u64,
    metadata=text,
)


@RELAXED
@given(st.lists(messages, max_size=20), st.integers(-(2**31), 2**31 - 1), st.booleans())
def test_batch_round_trip(msgs, partition, idempotent):
    batch = codec.make_batch("topic-x", partition, msgs, acks="-1", idempotent=idempotent)
    back = codec.decode_batch(codec.encode_batch(batch))
    assert back.messages() == msgs
    assert (back.partition, back.acks, back.idempotent, back.count) == (
        partition,
        "-1",
        idempotent,
        len(msgs),
    )


@RELAXED
@given(st.lists(messages, min_size=1, max_size=20), st.integers(0, 2**40))
def test_block_keeps_messages_and_patches_offsets(msgs, base):
    batch = codec.decode_batch(codec.encode_batch(codec.make_batch("t", 0, msgs)))
    block = CURSUS_BLOCK.block(batch.body, batch.starts, 1234)
    body, count, first, last = patch_offsets(block, base)
    assert (count, first, last) == (len(msgs), msgs[0].seq, msgs[-1].seq)
    assert codec.decode_messages(body, count) == [
        m._replace(offset=base + i) for i, m in enumerate(msgs)
    ]
    records = CURSUS_BLOCK.decode(block, base)
    assert [r.offset for r in records] == list(range(base, base + len(msgs)))
    assert [codec.record_to_message(r) for r in records] == [
        m._replace(offset=base + i) for i, m in enumerate(msgs)
    ]


def test_foreign_records_become_messages_and_back():
    r = Record(b"k", b"v", (("x-other", b"dropped"), (codec.H_EVENT_TYPE, b"Created")), 5, 7)
    m = codec.record_to_message(r)
    assert m == Message(offset=7, key=b"k", payload=b"v", event_type=b"Created")
    block = CURSUS_BLOCK.encode([r])
    [back] = CURSUS_BLOCK.decode(block, 7)
    assert back == Record(b"k", b"v", ((codec.H_EVENT_TYPE, b"Created"),), 5, 7)


@RELAXED
@given(st.lists(messages, min_size=1, max_size=12), st.data())
def test_block_window_patch(msgs, data):
    batch = codec.decode_batch(codec.encode_batch(codec.make_batch("t", 0, msgs)))
    block = CURSUS_BLOCK.block(batch.body, batch.starts, 1)
    start = data.draw(st.integers(0, len(msgs) - 1))
    stop = data.draw(st.integers(start + 1, len(msgs)))
    body, count, first, last = patch_offsets(block, 100, start, stop)
    want = [m._replace(offset=100 + i) for i, m in enumerate(msgs)][start:stop]
    assert codec.decode_messages(body, count) == want
    assert (first, last) == (want[0].seq, want[-1].seq)
    assert codec.message_ids(batch.body, batch.starts[-1]) == (
        msgs[-1].seq,
        msgs[-1].producer_id,
        msgs[-1].epoch,
    )


def uniform(n: int, payload: bytes = b"x" * 10) -> list[Message]:
    return [
        Message(seq=i, producer_id=b"pp", key=b"k%d" % (i % 10), payload=payload, metadata=b"m")
        for i in range(n)
    ]


@RELAXED
@given(st.integers(2, 30), st.data())
def test_uniform_batches_take_the_strided_path(n, data):
    msgs = uniform(n)
    batch = codec.decode_batch(codec.encode_batch(codec.make_batch("t", 0, msgs)))
    assert isinstance(batch.starts, range) and batch.messages() == msgs
    block = CURSUS_BLOCK.block(batch.body, batch.starts, 1)
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    body, count, first, last = patch_offsets(block, 2**40, start, stop)
    want = [m._replace(offset=2**40 + i) for i, m in enumerate(msgs)][start:stop]
    assert codec.decode_messages(body, count) == want and (first, last) == (
        want[0].seq,
        want[-1].seq,
    )
    assert [r.offset for r in CURSUS_BLOCK.decode(block, 5)] == list(range(5, 5 + n))


@pytest.mark.parametrize("field", ["producer_id", "key", "payload", "event_type", "metadata"])
def test_one_different_length_is_not_uniform(field):
    msgs = uniform(6)
    msgs[4] = msgs[4]._replace(**{field: getattr(msgs[4], field) + b"!"})
    batch = codec.decode_batch(codec.encode_batch(codec.make_batch("t", 0, msgs)))
    assert not isinstance(batch.starts, range)
    assert batch.messages() == msgs
    body, count, _, _ = patch_offsets(CURSUS_BLOCK.block(batch.body, batch.starts, 1), 0)
    assert codec.decode_messages(body, count) == [m._replace(offset=i) for i, m in enumerate(msgs)]


def test_uniform_batch_cut_short_still_reports_the_go_error():
    body = codec.encode_batch(codec.make_batch("t", 0, uniform(3)))
    with pytest.raises(BatchDecodeError) as exc:
        codec.decode_batch(body[:-1])
    assert str(exc.value) == "failed to read message[2] metadata: EOF"


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4"])
def test_incoming_compression_round_trip(compression):
    body = codec.encode_batch(codec.make_batch("t", 0, uniform(50)))
    packed = codec.compress(body, compression)
    assert packed != body and codec.decompress(packed, compression) == body
    with pytest.raises(RemoteProtocolError) as exc:
        codec.decompress(b"\x00\x05LIST plain", compression)
    assert exc.value.kind == "bad_compression"


def test_xerial_framed_snappy_is_read_like_go_xerial_snappy():
    import cramjam

    data = b"JOIN_GROUP topic=t group=g member=m" * 50
    chunks = [data[:700], data[700:]]
    framed = (
        codec.XERIAL_MAGIC
        + b"\x00\x00\x00\x01\x00\x00\x00\x01"
        + b"".join(
            struct.pack(">I", len(c)) + bytes(c)
            for c in (cramjam.snappy.compress_raw(chunk) for chunk in chunks)
        )
    )
    assert codec.decompress(framed, "snappy") == data
    with pytest.raises(RemoteProtocolError):
        codec.decompress(framed[:-3], "snappy")
