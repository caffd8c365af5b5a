"""Sans-IO codec for Iggy's binary TCP protocol, both roles, old (56bee28ca) and 0.6 dialects.

Hand-written: no Python library implements this wire format (the only SDK is a Rust extension
module). Messages are declared once as layouts (:mod:`gateway.protocols.layout`): requests in
``requests.py``, responses in ``responses.py``, the shared wire types in ``wire.py``; this module
is the framing and re-exports the three, so ``from gateway.protocols.iggy import codec as c``
reaches everything. The two hot paths (send and poll message sets) are hand-tuned with
``struct.Struct``.

Reference: ``docs/protocols/iggy.md``. Framing, little endian::

    request   length u32 (= 4 + payload) | code u32 | payload
    response  status u32 | length u32 (payload only) | payload

Dialects: a connection starts in :data:`Dialect.OLD`; the server connection switches itself to
:data:`Dialect.V06` on LOGIN_USER (38), the first non-PING command any 0.6 client sends and a code
the pre-authentication generation never has (docs/protocols/iggy.md, wire notes).
"""

from __future__ import annotations

import struct
import zlib  # noqa: F401 - re-exported (tests check checksums with it)
from dataclasses import dataclass, field
from typing import Any

from gateway.protocols.buffer import ReceiveBuffer
from gateway.protocols.iggy.requests import (  # noqa: F401 - re-exported
    DIALECT_VERSION,
    LAYOUTS,
    REQUESTS,
    CreateConsumerGroup,
    CreatePartitions,
    CreateStream,
    CreateTopic,
    DeleteConsumerGroup,
    DeletePartitions,
    DeleteStream,
    DeleteTopic,
    Fields,
    GetClient,
    GetClients,
    GetConsumerGroup,
    GetConsumerGroups,
    GetConsumerOffset,
    GetMe,
    GetStats,
    GetStream,
    GetStreams,
    GetTopic,
    GetTopics,
    JoinConsumerGroup,
    LeaveConsumerGroup,
    LoginUser,
    Message,
    Ping,
    PollMessages,
    Request,
    SendMessages,
    StoreConsumerOffset,
    decode_request,
    encode_request,
)
from gateway.protocols.iggy.responses import (  # noqa: F401 - re-exported
    CLIENT_BRIEF,
    CLIENT_GROUP,
    CONSUMER_OFFSET,
    GROUP,
    GROUP_DETAILS,
    GROUP_MEMBER,
    LOGIN,
    PARTITION,
    RESPONSES,
    STATS,
    STREAM,
    TOPIC,
    AsTuple,
    ClientRecord,
    ClientWithGroups,
    ConsumerOffsetRecord,
    GroupDetails,
    GroupRecord,
    LoginResult,
    PartitionRecord,
    Polled,
    PolledMessage,
    PolledMessages,
    StatsRecord,
    StreamDetails,
    StreamRecord,
    TopicDetails,
    TopicRecord,
    decode_polled,
    decode_response_payload,
    encode_polled,
    encode_response_payload,
    topic_layout,
)
from gateway.protocols.iggy.wire import (  # noqa: F401 - re-exported
    BOOL8,
    CONSUMER_OLD,
    CONSUMER_V06,
    F32,
    HEADER_VALUE_SIZES,
    IDENT,
    MAX_HEADERS_SIZE,
    MAX_PARTITIONS,
    MAX_PAYLOAD_SIZE,
    PARTITIONING,
    POLLING_KIND,
    STATE_AVAILABLE,
    STR8,
    STR32,
    U8,
    U32,
    U64,
    U64_MAX,
    WIRE,
    Checked,
    Code,
    Consumer,
    ConsumerKind,
    ConsumerType,
    Dialect,
    HeaderKind,
    Identifier,
    IdentifierType,
    LocalProtocolError,
    Partitioning,
    PartitioningKind,
    PartitioningType,
    PollingKind,
    Reader,
    RemoteProtocolError,
    Status,
    ValidationError,
    decode_headers,
    encode_fields,
    encode_headers,
)

# ------------------------------------------------------------------------------ connections

_FRAME_HEAD = struct.Struct("<II")


@dataclass(frozen=True, slots=True)
class RawRequest:
    """A request frame whose payload is not decoded (``ServerConnection.next_frame``)."""

    code: int
    payload: bytes


class ServerConnection:
    """The server role: bytes in, requests out; responses in, bytes out.

    ``next_request()`` returns the next complete request, ``None`` when more bytes are needed,
    and raises RemoteProtocolError (close the connection) or ValidationError (answer with
    ``send_error(exc.status)`` and go on)."""

    def __init__(self, max_frame_bytes: int = 100 << 20, accept_login: bool = True) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.accept_login = accept_login
        self.dialect = Dialect.OLD
        self._buf = ReceiveBuffer()
        self.broken = False

    def receive_data(self, data: bytes | bytearray) -> None:
        self._buf.feed(data)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet part of a returned frame."""
        return len(self._buf)

    def next_frame(self) -> RawRequest | None:
        if self.broken:
            raise RemoteProtocolError("connection already failed", "broken")
        head = self._buf.peek(_FRAME_HEAD)
        if head is None:
            return None
        length, code = head
        if length < 4:
            self.broken = True
            raise RemoteProtocolError(f"request length {length} < 4", "bad_length")
        if length + 4 > self.max_frame_bytes:
            self.broken = True
            raise RemoteProtocolError(
                f"request of {length} bytes over the {self.max_frame_bytes} limit", "oversized"
            )
        if len(self._buf) < length + 4:
            return None
        self._buf.skip(8)
        payload = self._buf.take(length - 4)
        return RawRequest(code, payload)

    def next_request(self) -> Request | None:
        frame = self.next_frame()
        if frame is None:
            return None
        return self.decode(frame)

    def decode(self, frame: RawRequest) -> Request:
        code = frame.code
        try:
            if code == Code.LOGIN_USER:
                if not self.accept_login:
                    raise RemoteProtocolError("LOGIN_USER in the old dialect", "unknown_code")
                self.dialect = Dialect.V06
            req = decode_request(code, frame.payload, self.dialect)
        except RemoteProtocolError:
            self.broken = True
            raise
        req.validate(self.dialect)
        return req

    def send_response(self, code: int, result: Any = None) -> bytes:
        payload = encode_response_payload(code, result, self.dialect)
        if len(payload) == 1:
            raise LocalProtocolError("an OK payload of exactly 1 byte is read as empty by clients")
        return _FRAME_HEAD.pack(0, len(payload)) + payload

    @staticmethod
    def send_error(status: int) -> bytes:
        if status == 0:
            raise LocalProtocolError("an error status must not be 0")
        return _FRAME_HEAD.pack(status, 0)


@dataclass(slots=True)
class Response:
    """A response as the client role sees it: ``status`` 0 and ``result`` or an error status."""

    code: int
    status: int
    result: Any = None


@dataclass
class ClientConnection:
    """The client role: requests in, bytes out; bytes in, responses out (in request order)."""

    dialect: Dialect = Dialect.OLD
    _buf: ReceiveBuffer = field(default_factory=ReceiveBuffer)
    _pending: list[int] = field(default_factory=list)
    max_frame_bytes: int = 100 << 20

    def send(self, req: Request) -> bytes:
        if req.CODE == Code.LOGIN_USER:
            self.dialect = Dialect.V06
        self._pending.append(req.CODE)
        return encode_request(req, self.dialect)

    def receive_data(self, data: bytes | bytearray) -> None:
        self._buf.feed(data)

    def next_response(self) -> Response | None:
        head = self._buf.peek(_FRAME_HEAD)
        if head is None:
            return None
        status, length = head
        if length > self.max_frame_bytes:
            raise RemoteProtocolError(f"response of {length} bytes", "oversized")
        if len(self._buf) < length + 8:
            return None
        if not self._pending:
            raise RemoteProtocolError("a response without a request", "unexpected")
        code = self._pending.pop(0)
        self._buf.skip(8)
        payload = self._buf.take(length)
        if status != 0:
            return Response(code, status)
        return Response(code, 0, decode_response_payload(code, payload, self.dialect))
