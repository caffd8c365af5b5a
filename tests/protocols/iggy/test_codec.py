"""Golden vectors of the Iggy wire format (byte-exact frames), replayed in both roles."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocols.iggy import codec as c


def hx(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", "").replace("\n", ""))


ID1 = c.Identifier(1)
PING = hx("04 00 00 00 01 00 00 00")
OK_EMPTY = hx("00 00 00 00 00 00 00 00")
ERR_1009 = hx("f1 03 00 00 00 00 00 00")
CREATE_STREAM = hx("0b 00 00 00 ca 00 00 00 01 00 00 00 02 73 31")
CREATE_TOPIC_OLD = hx(
    "19 00 00 00 2e 01 00 00 01 04 01 00 00 00 01 00 00 00 01 00 00 00 00 00 00 00 02 74 31"
)
SEND = (
    hx("33 00 00 00 65 00 00 00 01 04 01 00 00 00 01 04 01 00 00 00 02 04 01 00 00 00")
    + bytes(16)
    + hx("00 00 00 00 05 00 00 00 68 65 6c 6c 6f")
)
POLL_OLD = hx(
    "27 00 00 00 64 00 00 00 01 01 00 00 00 01 04 01 00 00 00 01 04 01 00 00 00 01 00 00 00"
    " 05 00 00 00 00 00 00 00 00 0a 00 00 00 01"
)
POLL_V06 = hx(
    "29 00 00 00 64 00 00 00 01 01 04 01 00 00 00 01 04 01 00 00 00 01 04 01 00 00 00 01 00 00"
    " 00 05 00 00 00 00 00 00 00 00 0a 00 00 00 01"
)
LOGIN = hx(
    "1d 00 00 00 26 00 00 00 04 69 67 67 79 04 69 67 67 79 07 00 00 00 30 2e 36 2e 32 30 32 00"
    " 00 00 00"
)
LOGIN_REPLY = hx("00 00 00 00 04 00 00 00 01 00 00 00")
CREATE_TOPIC_V06 = hx(
    "27 00 00 00 2e 01 00 00 01 04 01 00 00 00 01 00 00 00 01 00 00 00 01 ff ff ff ff ff ff ff"
    " ff 00 00 00 00 00 00 00 00 00 02 74 31"
)
POLL_REPLY = hx(
    "00 00 00 00 42 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00"
    " 00 00 00 00 00 00 00 00 01 00 40 1e 18 24 0a 06 00"
    " 07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 86 a6 10 36 00 00 00 00"
    " 05 00 00 00 68 65 6c 6c 6f"
)
STREAM_REPLY = hx(
    "00 00 00 00 23 00 00 00 01 00 00 00 00 40 1e 18 24 0a 06 00 00 00 00 00 00 00 00 00 00 00"
    " 00 00 00 00 00 00 00 00 00 00 02 73 31"
)
TOPIC_OLD = hx(
    "01 00 00 00 00 40 1e 18 24 0a 06 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    " 00 00 00 00 00 00 02 74 31"
)
TOPIC_V06_REPLY = hx(
    "00 00 00 00 5d 00 00 00"
    " 01 00 00 00 00 40 1e 18 24 0a 06 00 01 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00"
    " 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02 74 31"
    " 01 00 00 00 00 40 1e 18 24 0a 06 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
    " 00 00 00 00 00 00 00 00 00 00"
)
TS = 1700000000000000

REQUEST_VECTORS = [
    (PING, c.Dialect.OLD, c.Ping()),
    (CREATE_STREAM, c.Dialect.OLD, c.CreateStream(1, "s1")),
    (CREATE_STREAM, c.Dialect.V06, c.CreateStream(1, "s1")),
    (CREATE_TOPIC_OLD, c.Dialect.OLD, c.CreateTopic(ID1, 1, 1, 0, "t1")),
    (
        SEND,
        c.Dialect.OLD,
        c.SendMessages(ID1, ID1, c.Partitioning.partition_id(1), [c.Message(0, b"hello")]),
    ),
    (
        POLL_OLD,
        c.Dialect.OLD,
        c.PollMessages(c.Consumer(1, ID1), ID1, ID1, 1, c.PollingKind.NEXT, 0, 10, True),
    ),
    (
        POLL_V06,
        c.Dialect.V06,
        c.PollMessages(c.Consumer(1, ID1), ID1, ID1, 1, c.PollingKind.NEXT, 0, 10, True),
    ),
    (
        CREATE_TOPIC_V06,
        c.Dialect.V06,
        c.CreateTopic(ID1, 1, 1, c.U64_MAX, "t1", 1, 0, 0),
    ),
]


@pytest.mark.parametrize("wire,dialect,req", REQUEST_VECTORS)
def test_request_vectors_server_role(wire: bytes, dialect: c.Dialect, req: c.Request) -> None:
    server = c.ServerConnection()
    server.dialect = dialect
    # byte by byte: framing must cope with any split
    got = None
    for i in range(len(wire)):
        server.receive_data(wire[i : i + 1])
        got = server.next_request()
        if i < len(wire) - 1:
            assert got is None
    assert got == req if not isinstance(req, c.SendMessages) else got is not None
    if isinstance(req, c.SendMessages):
        assert isinstance(got, c.SendMessages)
        assert got.messages == [(bytes(16), b"", b"hello")]
        assert got.partitioning == req.partitioning


@pytest.mark.parametrize("wire,dialect,req", REQUEST_VECTORS)
def test_request_vectors_client_role(wire: bytes, dialect: c.Dialect, req: c.Request) -> None:
    assert c.encode_request(req, dialect) == wire


def test_login_switches_the_server_to_the_06_dialect() -> None:
    server = c.ServerConnection()
    server.receive_data(LOGIN + POLL_V06)
    assert server.next_request() == c.LoginUser("iggy", "iggy", "0.6.202", "")
    assert server.dialect is c.Dialect.V06
    assert isinstance(server.next_request(), c.PollMessages)
    assert server.send_response(c.Code.LOGIN_USER, c.LoginResult(1)) == LOGIN_REPLY
    client = c.ClientConnection()
    assert client.send(c.LoginUser("iggy", "iggy", "0.6.202", "")) == LOGIN
    client.receive_data(LOGIN_REPLY)
    assert client.next_response() == c.Response(c.Code.LOGIN_USER, 0, c.LoginResult(1))


def test_the_06_poll_payload_misparses_as_old_so_the_login_flag_decides() -> None:
    server = c.ServerConnection()
    server.receive_data(POLL_V06)
    with pytest.raises(c.RemoteProtocolError):
        server.next_request()


def test_ok_and_error_frames() -> None:
    server = c.ServerConnection()
    assert server.send_response(c.Code.PING) == OK_EMPTY
    assert server.send_error(c.Status.STREAM_ID_NOT_FOUND) == ERR_1009
    client = c.ClientConnection()
    client.send(c.GetStream(ID1))
    client.receive_data(ERR_1009)
    assert client.next_response() == c.Response(c.Code.GET_STREAM, 1009)


def test_poll_reply_vector_both_roles() -> None:
    msg = c.PolledMessage(0, 1, TS, 7, 0x3610A686, b"", b"hello")
    server = c.ServerConnection()
    assert server.send_response(c.Code.POLL_MESSAGES, c.PolledMessages(1, 0, (msg,))) == (
        POLL_REPLY
    )
    client = c.ClientConnection()
    client.send(c.PollMessages(c.Consumer(1, ID1), ID1, ID1, 1, 5, 0, 10, True))
    client.receive_data(POLL_REPLY)
    assert client.next_response().result == c.PolledMessages(1, 0, (msg,))


def test_stream_and_topic_record_vectors_both_roles() -> None:
    stream = c.StreamDetails(c.StreamRecord(1, TS, 0, 0, 0, "s1"))
    server = c.ServerConnection()
    server.dialect = c.Dialect.V06
    assert server.send_response(c.Code.CREATE_STREAM, stream) == STREAM_REPLY
    server.dialect = c.Dialect.OLD
    assert server.send_response(c.Code.GET_STREAMS, [stream.stream]) == STREAM_REPLY
    topic_old = c.TopicRecord(1, TS, 1, 0, 0, 0, "t1")
    assert c.encode_fields(topic_old, c.TopicRecord.LAYOUT) == TOPIC_OLD
    details = c.TopicDetails(
        c.TopicRecord(1, TS, 1, 0, 0, 0, "t1", 1, 0, 1), (c.PartitionRecord(1, TS, 1, 0, 0, 0),)
    )
    server.dialect = c.Dialect.V06
    assert server.send_response(c.Code.CREATE_TOPIC, details) == TOPIC_V06_REPLY
    client = c.ClientConnection(dialect=c.Dialect.V06)
    client.send(c.CreateTopic(ID1, 1, 1, c.U64_MAX, "t1"))
    client.receive_data(TOPIC_V06_REPLY)
    assert client.next_response().result == details
    client = c.ClientConnection()
    client.send(c.GetStreams())
    client.receive_data(STREAM_REPLY)
    assert client.next_response().result == [stream.stream]
    assert c.zlib.crc32(b"hello") == 0x3610A686


@pytest.mark.parametrize(
    "wire,kind",
    [
        (hx("03 00 00 00 01 00 00 00"), "bad_length"),
        (hx("04 00 00 00 63 00 00 00"), "unknown_code"),
        (hx("05 00 00 00 c8 00 00 00 01"), "truncated"),
        (hx("0a 00 00 00 c8 00 00 00 01 03 01 00 00 00"), "bad_identifier"),
        (hx("0a 00 00 00 c8 00 00 00 03 04 01 00 00 00"), "bad_identifier"),
        (hx("0b 00 00 00 c8 00 00 00 01 04 01 00 00 00 00"), "trailing_bytes"),
        (hx("ff ff ff 7f 01 00 00 00"), "oversized"),
        (LOGIN, "unknown_code"),
    ],
)
def test_undecodable_frames_raise_remote_errors(wire: bytes, kind: str) -> None:
    server = c.ServerConnection(max_frame_bytes=1 << 20, accept_login=False)
    server.receive_data(wire)
    with pytest.raises(c.RemoteProtocolError) as info:
        server.next_request()
    assert info.value.kind == kind
    with pytest.raises(c.RemoteProtocolError):
        server.next_request()  # the connection stays failed


def _send(messages: list[c.Message], partitioning: c.Partitioning | None = None) -> bytes:
    req = c.SendMessages(ID1, ID1, partitioning or c.Partitioning.balanced(), messages)
    return c.encode_request(req)


@pytest.mark.parametrize(
    "wire,status",
    [
        (_send([]), c.Status.INVALID_MESSAGES_COUNT),
        (_send([c.Message(0, b""), c.Message(0, b"")]), c.Status.EMPTY_MESSAGE_PAYLOAD),
        (
            _send([c.Message(0, b"x", b"h" * (c.MAX_HEADERS_SIZE + 1))]),
            c.Status.TOO_BIG_HEADERS_PAYLOAD,
        ),
        (_send([c.Message(0, b"x")], c.Partitioning(3, b"")), c.Status.INVALID_KEY_VALUE_LENGTH),
        (
            _send([c.Message(0, b"x")], c.Partitioning(2, b"\x01")),
            c.Status.INVALID_KEY_VALUE_LENGTH,
        ),
        (c.encode_request(c.CreateStream(0, "s")), c.Status.INVALID_STREAM_ID),
        (c.encode_request(c.CreateStream(1, "")), c.Status.INVALID_STREAM_NAME),
        (c.encode_request(c.CreateTopic(ID1, 0, 1, 0, "t")), c.Status.INVALID_TOPIC_ID),
        (c.encode_request(c.CreateTopic(ID1, 1, 100_001, 0, "t")), c.Status.TOO_MANY_PARTITIONS),
        (
            c.encode_request(c.PollMessages(c.Consumer(1, ID1), ID1, ID1, 1, 5, 0, 0, False)),
            c.Status.INVALID_MESSAGES_COUNT,
        ),
    ],
)
def test_invalid_requests_raise_validation_errors(wire: bytes, status: int) -> None:
    server = c.ServerConnection()
    server.receive_data(wire + PING)
    with pytest.raises(c.ValidationError) as info:
        server.next_request()
    assert info.value.status == status
    assert server.next_request() == c.Ping()  # a validation error keeps the connection


def test_headers_of_every_kind_round_trip() -> None:
    entries = [("raw", 1, b"\x00\xff"), ("s", 2, b"text"), ("b", 3, b"\x01")]
    for kind in range(4, 16):
        size = c.HEADER_VALUE_SIZES[c.HeaderKind(kind)]
        entries.append((f"k{kind}", kind, bytes(range(1, size + 1))))
    assert c.decode_headers(c.encode_headers(entries)) == entries
    with pytest.raises(c.ValidationError) as info:
        c.decode_headers(c.encode_headers([("i", 6, b"\x01\x02")]))
    assert info.value.status == c.Status.INVALID_HEADER_VALUE
    with pytest.raises(c.ValidationError) as info:
        c.decode_headers(struct.pack("<I", 0) + b"\x01" + struct.pack("<I", 1) + b"x")
    assert info.value.status == c.Status.INVALID_HEADER_KEY


@given(
    st.lists(
        st.tuples(st.integers(0, (1 << 128) - 1), st.binary(max_size=64)), min_size=1, max_size=8
    ),
    st.one_of(st.integers(1, 2**32 - 1), st.text(min_size=1, max_size=20)),
)
def test_send_messages_round_trip(msgs: list[tuple[int, bytes]], stream: int | str) -> None:
    req = c.SendMessages(
        c.Identifier(stream),
        ID1,
        c.Partitioning.messages_key(b"k"),
        [c.Message(i, p) for i, p in msgs],
    )
    server = c.ServerConnection()
    server.receive_data(c.encode_request(req))
    try:
        got = server.next_request()
    except c.ValidationError:
        assert all(not p for _, p in msgs)
        return
    assert isinstance(got, c.SendMessages)
    assert got.stream == req.stream
    assert [(int.from_bytes(i, "little"), p) for i, _, p in got.messages] == msgs


@given(st.binary(max_size=200))
def test_fuzzed_frames_never_raise_anything_else(data: bytes) -> None:
    server = c.ServerConnection(max_frame_bytes=1 << 16)
    server.receive_data(data)
    try:
        while server.next_request() is not None:
            pass
    except (c.RemoteProtocolError, c.ValidationError):
        pass
