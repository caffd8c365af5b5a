"""The CONSUME/STREAM reply frame and its byte budget, for stored Cursus blocks and for records
stored by other protocols (re-encoded)."""

from __future__ import annotations

from gateway.model import Record, RecordBatch
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.block import CURSUS_BLOCK
from gateway.protocols.cursus.codec import Message
from gateway.protocols.cursus.replies import build_reply_frame


def record_batch(n: int, size: int) -> RecordBatch:
    return RecordBatch([Record(None, b"x" * size, (), 1, i) for i in range(n)]).stored_at(0)


def cursus_batch(n: int, size: int) -> RecordBatch:
    body = codec.encode_messages(Message(seq=i + 1, payload=b"y" * size) for i in range(n))
    starts, _ = codec.walk_messages(body, 0, n)
    block = CURSUS_BLOCK.block(body, starts, 1)
    return RecordBatch(encoded=block, codec=CURSUS_BLOCK, count=n, max_timestamp_us=1).stored_at(0)


def offsets(frame: bytearray) -> list[int]:
    reply = codec.decode_reply(bytes(frame[4:]))
    assert not isinstance(reply, str)
    return [m.offset for m in reply.messages()]


def test_within_the_budget_everything_is_sent():
    for batch in (record_batch(10, 100), cursus_batch(10, 100)):
        reply = build_reply_frame("t", 0, (batch,), 1 << 20)
        assert (reply.count, reply.last_offset, reply.capped) == (10, 9, False)
        assert offsets(reply.frame) == list(range(10))


def test_over_the_budget_the_frame_is_cut_between_messages():
    for batch in (record_batch(10, 1000), cursus_batch(10, 1000)):
        reply = build_reply_frame("t", 0, (batch,), 4000)
        assert len(reply.frame) <= 4000
        assert reply.capped and reply.count == 3 and reply.last_offset == 2
        assert offsets(reply.frame) == [0, 1, 2]


def test_a_second_batch_that_does_not_fit_is_left_out():
    first, second = cursus_batch(2, 1000), cursus_batch(5, 1000)
    second = RecordBatch(encoded=second.encode(CURSUS_BLOCK), codec=CURSUS_BLOCK, count=5,
                         max_timestamp_us=1).stored_at(2)  # fmt: skip
    reply = build_reply_frame("t", 0, (first, second), 2200)
    assert (reply.count, reply.last_offset, reply.capped) == (2, 1, True)
    assert len(reply.frame) <= 2200


def test_one_message_larger_than_the_budget_still_goes_alone():
    for batch in (record_batch(3, 5000), cursus_batch(3, 5000)):
        reply = build_reply_frame("t", 0, (batch,), 1000)
        assert (reply.count, reply.last_offset, reply.capped) == (1, 0, True)
