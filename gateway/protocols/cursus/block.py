"""The stored form of a produced Cursus batch (a model ``BatchCodec``, stored under the name
``cursus``): the messages exactly as received behind a small index, and the copy with offsets
patched that a Cursus consumer gets back. Sans-IO. The block's layout is an on-disk format of
the embedded backend: a change to it needs a new codec name."""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

from gateway.model import Record
from gateway.protocols.cursus.codec import (
    _U64,
    Starts,
    decode_messages,
    encode_messages,
    message_to_record,
    record_to_message,
    walk_messages,
)

_BLOCK_HEAD = struct.Struct("<Iqi")  # count, timestamp_us, stride (0: a u32 LE start table)
_LITTLE = sys.byteorder == "little"


def _starts_bytes(starts: array[int]) -> bytes:
    if _LITTLE:
        return starts.tobytes()
    swapped = array("I", starts)
    swapped.byteswap()
    return swapped.tobytes()


class CursusBlockCodec:
    """How a produced Cursus batch is kept in the model: its messages exactly as received, behind
    a small index (count, append timestamp, message starts or the common message size), so a
    Cursus consumer gets them back with only the offsets patched and no per-record objects.
    Other protocols decode it to records with the Cursus-only fields as reserved headers."""

    name = "cursus"

    @staticmethod
    def block(messages: bytes, starts: Starts, timestamp_us: int) -> bytes:
        if isinstance(starts, range) and len(starts) > 1:
            head = _BLOCK_HEAD.pack(len(starts), timestamp_us, starts.step)
            return head + messages
        table = starts if isinstance(starts, array) else array("I", starts)
        head = _BLOCK_HEAD.pack(len(table), timestamp_us, 0)
        return b"".join((head, _starts_bytes(table), messages))

    @staticmethod
    def split(block: bytes | memoryview) -> tuple[int, int, Starts, memoryview]:
        """(count, timestamp_us, starts, messages) of a block."""
        count, ts, stride = _BLOCK_HEAD.unpack_from(block, 0)
        head = _BLOCK_HEAD.size
        if stride:
            return count, ts, range(0, stride * count, stride), memoryview(block)[head:]
        starts = array("I")
        starts.frombytes(bytes(block[head : head + 4 * count]))
        if not _LITTLE:
            starts.byteswap()
        return count, ts, starts, memoryview(block)[head + 4 * count :]

    def encode(self, records: Sequence[Record]) -> bytes:
        body = encode_messages(record_to_message(r) for r in records)
        starts, _ = walk_messages(body, 0, len(records))
        ts = max((r.timestamp_us for r in records), default=-1)
        return self.block(body, starts, ts)

    def decode(self, data: bytes | memoryview, base_offset: int) -> list[Record]:
        count, ts, starts, messages = self.split(data)
        msgs = decode_messages(messages, count, starts.step if isinstance(starts, range) else 0)
        if base_offset < 0:
            return [message_to_record(m, ts) for m in msgs]
        return [message_to_record(m, ts, base_offset + i) for i, m in enumerate(msgs)]


CURSUS_BLOCK = CursusBlockCodec()


def patch_offsets(
    block: bytes | memoryview, base_offset: int, start: int = 0, stop: int | None = None
) -> tuple[bytearray, int, int, int]:
    """Messages ``[start, stop)`` of a stored block with their offsets set (message ``i`` of the
    block gets ``base_offset + i``): (messages, count, first seq, last seq)."""
    out = bytearray()
    n, first, last = append_patched(out, block, base_offset, start, stop)
    return out, n, first, last


def append_patched(
    out: bytearray,
    block: bytes | memoryview,
    base_offset: int,
    start: int = 0,
    stop: int | None = None,
) -> tuple[int, int, int]:
    """Append messages ``[start, stop)`` of a stored block to ``out`` (one copy) with their
    offsets set: (count, first seq, last seq)."""
    count, _, starts, messages = CursusBlockCodec.split(block)
    stop = count if stop is None else min(stop, count)
    if start >= stop:
        return 0, 0, 0
    n = stop - start
    begin = starts[start]
    end = starts[stop] if stop < count else len(messages)
    at = len(out)
    out += messages[begin:end]
    if isinstance(starts, range):  # equal sizes: write the offsets column by column
        size = starts.step
        offsets = array("Q", range(base_offset + start, base_offset + stop))
        if _LITTLE:
            offsets.byteswap()
        raw = offsets.tobytes()
        limit = at + n * size
        for k in range(8):
            out[at + k : limit : size] = raw[k::8]
        first = _U64.unpack_from(out, at + 8)[0]
        last = _U64.unpack_from(out, at + (n - 1) * size + 8)[0]
        return n, first, last
    pack_into = _U64.pack_into
    offset = base_offset + start
    window = starts[start:stop]
    shift = at - begin
    for s in window:
        pack_into(out, s + shift, offset)
        offset += 1
    first = _U64.unpack_from(out, window[0] + shift + 8)[0]
    last = _U64.unpack_from(out, window[-1] + shift + 8)[0]
    return n, first, last
