"""The server's HPACK decoder keeps a decoded request header block by its bytes only while the
dynamic table is unchanged: the same bytes decode to other headers once a block has changed the
table, and blocks that change it are always decoded."""

from __future__ import annotations

import h2.utilities
import hpack
import pytest

from gateway.protocols.liftbridge.codec import CallStarted, GrpcConnection, RemoteProtocolError

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


def _literal(name: bytes, value: bytes) -> bytes:
    """A literal header field without indexing, new name."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def _goaway_code(data: bytes) -> int:
    pos = 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 3], "big")
        if data[pos + 3] == 0x07:
            return int.from_bytes(data[pos + 13 : pos + 17], "big")
        pos += 9 + n
    raise AssertionError("no GOAWAY")


@pytest.mark.parametrize(
    "bad",
    [
        _literal(b"X-Upper", b"1"),  # uppercase name
        _literal(b"connection", b"keep-alive"),  # connection-specific header
        _literal(b"te", b"gzip"),  # te other than trailers
        _literal(b"x-n", b"a\nb"),  # illegal character
    ],
)
def test_invalid_request_headers_end_the_connection_each_time(bad: bytes) -> None:
    """Validation runs once per distinct header list; a list that fails is never kept, so a
    second connection sending it is refused too (GOAWAY PROTOCOL_ERROR)."""
    for _ in range(2):
        server = GrpcConnection()
        server.initiate()
        server.receive_data(PREFACE)
        server.data_to_send()
        assert _metadata(server.receive_data(_headers(1, COMMON))) == []
        with pytest.raises(RemoteProtocolError, match="HTTP/2 protocol error"):
            server.receive_data(_headers(3, COMMON + bad))
        assert _goaway_code(server.data_to_send()) == 1  # PROTOCOL_ERROR
        assert server.receive_data(_headers(5, COMMON)) == []  # nothing after it


def test_valid_request_headers_are_validated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[object] = []
    original = h2.utilities.validate_headers

    def counting(headers: object, flags: object) -> object:
        checked.append(flags)
        return original(headers, flags)  # type: ignore[arg-type]

    monkeypatch.setattr(h2.utilities, "validate_headers", counting)
    block = COMMON + _literal(b"x-once", b"1")
    for _ in range(2):  # two connections, three calls each
        server = GrpcConnection()
        server.initiate()
        server.receive_data(PREFACE)
        for sid in (1, 3, 5):
            assert _metadata(server.receive_data(_headers(sid, block))) == [(b"x-once", b"1")]
    assert len(checked) == 1
