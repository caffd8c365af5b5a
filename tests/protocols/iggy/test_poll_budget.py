"""A PollMessages answer holds at most the listener's ``max_answer_bytes``, whatever ``count``
(up to 2^32 - 1) asks for: whole messages, stopping before the one that would go past it."""

from __future__ import annotations

from pathlib import Path

from gateway.model import RecordBatch
from gateway.observability import LIMIT_HITS
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from gateway.protocols.iggy.messages import poll_reply, send_batch
from tests.protocols.iggy.test_session import gateway

TS = 1_700_000_000_000_000
U32_MAX = 2**32 - 1
ENTRY = 45 + 100  # an Iggy poll entry of a 100-byte payload without headers


def hits() -> float:
    return LIMIT_HITS.labels("max_answer_bytes", "iggy")._value.get()


def test_poll_reply_stops_before_the_message_past_max_bytes() -> None:
    wire = [(b"\x00" * 16, b"", b"%03d" % i + b"p" * 97) for i in range(50)]
    window = send_batch(wire, None, TS).stored_at(0)
    records = RecordBatch(list(window.records))  # the generic path, over decoded records
    records.base_offset = 0
    for batch in (window, records):
        payload, n, last = poll_reply("s.t", 0, 49, [batch], 16 + ENTRY * 10 + 50)
        assert (n, last) == (10, 9)
        assert len(payload) == 16 + ENTRY * 10
        assert [m.offset for m in c.decode_polled(payload).messages] == list(range(10))
        # the first message goes out whatever its size
        payload, n, last = poll_reply("s.t", 0, 49, [batch.slice(3)], 20)
        assert (n, last) == (1, 3)
        # the budget runs out inside the second window: the rest of it stays out
        payload, n, last = poll_reply("s.t", 0, 49, [batch.slice(0, 5), batch.slice(5)], 1000)
        assert (n, last) == (6, 5) and len(payload) == 16 + ENTRY * 6


async def test_a_poll_of_u32_max_messages_gets_the_budget(tmp_path: Path) -> None:
    budget = 16 + ENTRY * 30
    async with gateway(tmp_path, max_answer_bytes=budget) as addr:
        async with await IggyClient.connect(*addr) as cl:
            await cl.login("iggy", "iggy")
            await cl.call(c.CreateStream(1, "s1"))
            await cl.call(c.CreateTopic(c.Identifier(1), 1, 1, 0, "t1"))
            messages = [c.Message(0, b"%03d" % i + b"p" * 97) for i in range(100)]
            await cl.send_messages(1, 1, messages, c.Partitioning.partition_id(1))
            before = hits()
            polled = await cl.poll(1, 1, 1, c.PollingKind.OFFSET, 0, count=U32_MAX)
            assert [m.offset for m in polled.messages] == list(range(30))
            assert polled.messages[29].payload == b"029" + b"p" * 97
            assert hits() == before + 1
            # a count within the budget: no hit
            polled = await cl.poll(1, 1, 1, c.PollingKind.OFFSET, 90, count=U32_MAX)
            assert [m.offset for m in polled.messages] == list(range(90, 100))
            assert hits() == before + 1
