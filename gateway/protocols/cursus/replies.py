"""The CONSUME and STREAM reply: fetched record batches as one framed Cursus batch."""

from __future__ import annotations

from gateway.model import RecordBatch
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.codec import CURSUS_BLOCK


def build_reply_frame(topic: str, partition: int, batches: tuple[RecordBatch, ...]) -> bytearray:
    """A CONSUME/STREAM reply, framed: stored Cursus blocks pass through with offsets patched
    (one copy into the frame); other formats are decoded and re-encoded."""
    head_len = len(codec.batch_header(topic, partition, "1", False, 0, 0, 0))
    out = bytearray(4 + head_len)
    count = 0
    first_seq = last_seq = 0
    for b in batches:
        window = b.encoded_window(CURSUS_BLOCK)
        if window is not None:
            block, start, stop = window
            n, fs, ls = codec.append_patched(out, block, b.base_offset, start, stop)
        else:
            msgs = [codec.record_to_message(r) for r in b.records]
            out += codec.encode_messages(msgs)
            n = len(msgs)
            fs, ls = (msgs[0].seq, msgs[-1].seq) if msgs else (0, 0)
        if not n:
            continue
        if not count:
            first_seq = fs
        last_seq = ls
        count += n
    out[0:4] = (len(out) - 4).to_bytes(4, "big")
    out[4 : 4 + head_len] = codec.batch_header(
        topic, partition, "1", False, first_seq, last_seq, count
    )
    return out
