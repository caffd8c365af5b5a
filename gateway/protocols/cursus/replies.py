"""The CONSUME and STREAM reply: fetched record batches as one framed Cursus batch, never larger
than the listener's ``max_answer_bytes``."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.model import RecordBatch
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.block import CURSUS_BLOCK, CursusBlockCodec, append_patched


@dataclass
class ReplyFrame:
    frame: bytearray
    count: int  # messages in the frame
    last_offset: int  # offset of the last message in it (-1 when empty)
    capped: bool  # messages were left out to stay within the byte budget


def _fit(block: bytes | memoryview, start: int, stop: int, budget: int, first: bool) -> int:
    """The largest ``end`` in ``start .. stop`` whose messages ``[start, end)`` take at most
    ``budget`` bytes; for the ``first`` messages of a reply at least ``start + 1`` (a reply always
    makes progress, even past the budget with one message larger than it)."""
    count, _, starts, messages = CursusBlockCodec.split(block)

    def at(i: int) -> int:
        return starts[i] if i < count else len(messages)

    if at(stop) - at(start) <= budget:
        return stop
    lo, hi = (start + 1 if first else start), stop  # lo fits, or is the floor
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if at(mid) - at(start) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def build_reply_frame(
    topic: str, partition: int, batches: tuple[RecordBatch, ...], max_bytes: int
) -> ReplyFrame:
    """A CONSUME/STREAM reply, framed: stored Cursus blocks pass through with offsets patched
    (one copy into the frame); other formats are decoded and re-encoded. Messages that would
    take the frame past ``max_bytes`` are left for the next request (at least one is sent)."""
    head_len = len(codec.batch_header(topic, partition, "1", False, 0, 0, 0))
    out = bytearray(4 + head_len)
    count = 0
    first_seq = last_seq = 0
    last_offset = -1
    capped = False
    for b in batches:
        budget = max_bytes - len(out)
        if count and budget <= 0:
            capped = True
            break
        window = b.encoded_window(CURSUS_BLOCK)
        if window is not None:
            block, start, stop = window
            end = _fit(block, start, stop, budget, not count)
            capped = end < stop
            n, fs, ls = append_patched(out, block, b.base_offset, start, end)
            offset = b.base_offset + end - 1
        else:
            msgs = [codec.record_to_message(r) for r in b.records]
            n = 0
            for m in msgs:
                encoded = codec.encode_messages((m,))
                if (count or n) and len(out) + len(encoded) > max_bytes:
                    capped = True
                    break
                out += encoded
                n += 1
            fs, ls = (msgs[0].seq, msgs[n - 1].seq) if n else (0, 0)
            offset = msgs[n - 1].offset if n else -1
        if not n:
            if capped:
                break
            continue
        if not count:
            first_seq = fs
        last_seq = ls
        count += n
        last_offset = offset
        if capped:
            break
    out[0:4] = (len(out) - 4).to_bytes(4, "big")
    out[4 : 4 + head_len] = codec.batch_header(
        topic, partition, "1", False, first_seq, last_seq, count
    )
    return ReplyFrame(out, count, last_offset, capped)
