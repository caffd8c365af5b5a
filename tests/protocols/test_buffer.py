"""The shared receive buffer: frames cut whole across any split, consumed bytes compacted."""

from __future__ import annotations

import struct

import pytest

from gateway.protocols.buffer import ReceiveBuffer, SizePrefixedFrames
from gateway.protocols.errors import RemoteProtocolError

HEAD = struct.Struct(">I")


def frames(buf: ReceiveBuffer) -> list[bytes]:
    out = []
    while (head := buf.peek(HEAD)) is not None and len(buf) >= 4 + head[0]:
        buf.skip(4)
        out.append(buf.take(head[0]))
    return out


@pytest.mark.parametrize("step", [1, 3, 7, 1000])
def test_length_prefixed_frames_survive_any_split(step: int) -> None:
    bodies = [b"a" * n for n in (0, 1, 5, 300, 2)]
    wire = b"".join(HEAD.pack(len(b)) + b for b in bodies)
    buf = ReceiveBuffer()
    got = []
    for i in range(0, len(wire), step):
        buf.feed(wire[i : i + step])
        got += frames(buf)
    assert got == bodies
    assert len(buf) == 0


def test_consumed_head_is_dropped_once_it_is_more_than_half() -> None:
    buf = ReceiveBuffer()
    buf.feed(b"x" * 100)
    buf.take(60)
    buf.feed(b"y" * 10)  # 60 of 110 consumed: compacted before appending
    assert buf.pos == 0
    assert bytes(buf.data) == b"x" * 40 + b"y" * 10
    buf.take(10)
    buf.feed(b"z")  # 10 of 50 consumed: kept, no memmove
    assert buf.pos == 10
    assert buf.take(len(buf)) == b"x" * 30 + b"y" * 10 + b"z"
    assert buf.pos == 0 and not buf.data  # all taken: cleared


def test_take_until_a_delimiter_and_its_bound() -> None:
    buf = ReceiveBuffer()
    buf.feed(b"PING\r\nPO")
    assert buf.take_until(b"\r\n", 16) == b"PING"
    assert buf.take_until(b"\r\n", 16) is None
    buf.feed(b"NG\r\n")
    assert buf.take_until(b"\r\n", 16) == b"PONG"
    buf.feed(b"z" * 20)
    with pytest.raises(ValueError, match="within 16 bytes"):
        buf.take_until(b"\r\n", 16)


def test_size_prefixed_frames_cut_whole_bodies_and_refuse_sizes_out_of_range() -> None:
    frames = SizePrefixedFrames(10, signed=True, min_size=1, kind="wrong_size")
    frames.feed(b"\x00\x00\x00\x03ab")
    assert frames.next_frame() is None  # a body not all there yet
    frames.feed(b"c\x00\x00\x00\x01z")
    assert (frames.next_frame(), frames.next_frame(), frames.next_frame()) == (b"abc", b"z", None)
    for size in (b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x00\x00\x00\x0b"):
        bad = SizePrefixedFrames(10, signed=True, min_size=1, kind="wrong_size")
        bad.feed(size)
        with pytest.raises(RemoteProtocolError) as err:
            bad.next_frame()
        assert err.value.kind == "wrong_size"
    unsigned = SizePrefixedFrames(1 << 20)
    unsigned.feed(b"\xff\xff\xff\xff")  # 4 GiB as a uint32: over the limit, not negative
    with pytest.raises(RemoteProtocolError, match="4294967295"):
        unsigned.next_frame()
