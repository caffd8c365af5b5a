"""The server's HPACK decoder keeps a decoded request header block by its bytes only while the
dynamic table is unchanged: the same bytes decode to other headers once a block has changed the
table, and blocks that change it are always decoded."""

from __future__ import annotations

import hpack
import pytest

from gateway.protocols.liftbridge.codec import CallStarted, GrpcConnection

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000 04 00 00000000")
PATH = b"/proto.API/PublishAsync"
# :method POST, :scheme http (indexed); :path, :authority and content-type as literals
# without indexing
COMMON = (
    b"\x83\x86\x04"
    + bytes([len(PATH)])
    + PATH
    + b"\x01\x09localhost"
    + b"\x0f\x10"
    + bytes([len(b"application/grpc")])
    + b"application/grpc"
)


def _insert(value: bytes) -> bytes:
    """A literal ``x-n: value`` with incremental indexing (a new dynamic table entry)."""
    return b"\x40\x03x-n" + bytes([len(value)]) + value


NEWEST = b"\xbe"  # indexed field 62: the newest dynamic table entry


def _headers(stream_id: int, block: bytes) -> bytes:
    n = len(block)
    return (
        bytes([n >> 16, (n >> 8) & 0xFF, n & 0xFF, 0x01, 0x04])
        + stream_id.to_bytes(4, "big")
        + block
    )


def _metadata(events: list[object]) -> list[tuple[bytes, bytes]]:
    (ev,) = [e for e in events if isinstance(e, CallStarted)]
    assert ev.method.name == "PublishAsync"
    return list(ev.metadata)


def test_a_block_is_reused_only_while_the_table_is_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    decoded: list[bytes] = []
    original = hpack.Decoder.decode

    def counting(self: hpack.Decoder, data: bytes, raw: bool = False) -> object:
        decoded.append(bytes(data))
        return original(self, data, raw)

    monkeypatch.setattr(hpack.Decoder, "decode", counting)
    server = GrpcConnection()
    server.initiate()
    server.receive_data(PREFACE)
    steps = [
        (1, COMMON + _insert(b"1"), [(b"x-n", b"1")]),  # table: x-n 1
        (3, COMMON + NEWEST, [(b"x-n", b"1")]),  # table unchanged: kept
        (5, COMMON + NEWEST, [(b"x-n", b"1")]),  # reused
        (7, COMMON + _insert(b"2"), [(b"x-n", b"2")]),  # table: x-n 2, x-n 1
        (9, COMMON + NEWEST, [(b"x-n", b"2")]),  # same bytes as 3 and 5, other headers
        (11, COMMON + NEWEST, [(b"x-n", b"2")]),  # reused
        (13, COMMON + _insert(b"2"), [(b"x-n", b"2")]),  # the same insertion again: decoded
        (15, COMMON + b"\xbf", [(b"x-n", b"2")]),  # index 63: the x-n 2 of stream 7
        (17, COMMON + b"\xc0", [(b"x-n", b"1")]),  # index 64: the x-n 1 of stream 1
    ]
    for sid, block, want in steps:
        assert _metadata(server.receive_data(_headers(sid, block))) == want, sid
    blocks = [block for _, block, _ in steps]
    # every block was decoded except the repeats of 3 and 9 while the table had not changed
    assert decoded == [b for i, b in enumerate(blocks) if i not in (2, 5)]


def test_a_table_size_update_is_not_skipped() -> None:
    server = GrpcConnection()
    server.initiate()
    server.receive_data(PREFACE)
    server.receive_data(_headers(1, COMMON + _insert(b"1")))
    assert _metadata(server.receive_data(_headers(3, COMMON + NEWEST))) == [(b"x-n", b"1")]
    # a size update to 0 empties the table, then the same block refers to nothing
    events = server.receive_data(_headers(5, b"\x20" + COMMON))
    assert _metadata(events) == []
    with pytest.raises(Exception, match="HTTP/2 protocol error"):
        server.receive_data(_headers(7, COMMON + NEWEST))
