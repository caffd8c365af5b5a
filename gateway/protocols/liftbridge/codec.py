"""Sans-IO gRPC over HTTP/2 for the Liftbridge API, in both roles.

Bytes in, events out; calls in, bytes out. No sockets, no trio. HTTP/2 itself is the sans-IO
``h2`` library; this module adds what gRPC puts on top of it (docs/protocols/liftbridge.md):

- the call: ``POST /proto.API/<Method>`` with ``content-type: application/grpc``, an optional
  ``grpc-timeout``; the response ``:status 200`` headers, messages, then trailers ``grpc-status``
  and ``grpc-message`` (percent-encoded), or one trailers-only HEADERS frame;
- message framing: 1 byte compressed flag, 4 bytes big-endian length, the protobuf bytes, cut out
  of DATA frames however the peer split them, and decoded with the method's protobuf class;
- flow control: outgoing messages wait in a per-stream queue until the peer's window allows them
  (``pending_bytes`` lets the I/O layer stop producing); received DATA is acknowledged (the
  peer's windows reopened) only once the message it belongs to is complete and handed over as an
  event, and for a client-streaming call only once the session has taken it (``release``), so
  what a peer can make us buffer is bounded by our windows. Unfinished messages are capped per
  connection (``max_buffered_bytes``): past that, or past the connection's window, the
  connection ends with GOAWAY ENHANCE_YOUR_CALM.
- rapid reset (CVE-2023-44487): more than ``max_resets_per_s`` RST_STREAM frames from the peer
  within one second end the connection with GOAWAY ENHANCE_YOUR_CALM.

Blame is kept apart as in h11: a peer's bad HTTP/2 raises :class:`RemoteProtocolError` (the
connection is finished; a GOAWAY is waiting in ``data_to_send``); a bad call or message arrives as a
:class:`CallError` event for that stream only; sending something impossible raises
:class:`LocalProtocolError`.
"""

from __future__ import annotations

import enum
import functools
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
import h2.utilities
import hpack

from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb

SERVICE = "proto.API"
GRPC_PREFIX = struct.Struct(">BI")
# GOAWAY, stream 0, last stream 0, PROTOCOL_ERROR (RFC 7540 6.8)
_GOAWAY_PROTOCOL_ERROR = bytes.fromhex("000008 07 00 00000000 00000000 00000001")
DEFAULT_MAX_MESSAGE_BYTES = 16 << 20
DEFAULT_MAX_BUFFERED_BYTES = 64 << 20  # unfinished request messages held per connection
DEFAULT_MAX_RESETS_PER_S = 100  # RST_STREAM frames a peer may send per second
# Received bytes are acknowledged in batches of up to this much per stream and per connection.
# Our receive windows are that much larger than what they must let through (one whole message
# per stream, the buffered cap per connection), so the batching can never stall a peer.
ACK_BATCH = 1 << 20
_ENHANCE_YOUR_CALM = 0x0B  # RFC 7540 7
_MAX_WINDOW = 2**31 - 1  # RFC 7540 6.9.1
_REQUEST_FLAGS = h2.utilities.HeaderValidationFlags(
    is_client=False, is_trailer=False, is_response_header=False, is_push_promise=False
)
_TRAILER_FLAGS = _REQUEST_FLAGS._replace(is_trailer=True)
# header lists (with their flags) that passed validation, shared by every server connection
_VALID_HEADERS: dict[tuple[Any, ...], None] = {}
_VALID_HEADERS_KEPT = 256
_DETACHED_CALLS = 100  # calls in progress above which a new one goes through h2 (its stream limit)
_DETACH_STATES = frozenset(
    {h2.connection.ConnectionState.IDLE, h2.connection.ConnectionState.SERVER_OPEN}
)
# stream states in which h2 lets us send DATA
_SEND_STATES = frozenset({h2.stream.StreamState.OPEN, h2.stream.StreamState.HALF_CLOSED_REMOTE})
# stream states in which h2 applies a received WINDOW_UPDATE to the stream's window
_WINDOW_STATES = frozenset(
    {
        h2.stream.StreamState.OPEN,
        h2.stream.StreamState.HALF_CLOSED_LOCAL,
        h2.stream.StreamState.HALF_CLOSED_REMOTE,
    }
)


class Status(enum.IntEnum):
    """gRPC status codes."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class MethodSpec(NamedTuple):
    name: str
    request: type[Any]
    response: type[Any]
    client_streaming: bool = False
    server_streaming: bool = False

    @property
    def path(self) -> str:
        return f"/{SERVICE}/{self.name}"


def _methods() -> dict[str, MethodSpec]:
    specs = [
        MethodSpec("CreateStream", pb.CreateStreamRequest, pb.CreateStreamResponse),
        MethodSpec("DeleteStream", pb.DeleteStreamRequest, pb.DeleteStreamResponse),
        MethodSpec("PauseStream", pb.PauseStreamRequest, pb.PauseStreamResponse),
        MethodSpec("SetStreamReadonly", pb.SetStreamReadonlyRequest, pb.SetStreamReadonlyResponse),
        MethodSpec("Subscribe", pb.SubscribeRequest, pb.Message, server_streaming=True),
        MethodSpec("FetchMetadata", pb.FetchMetadataRequest, pb.FetchMetadataResponse),
        MethodSpec(
            "FetchPartitionMetadata",
            pb.FetchPartitionMetadataRequest,
            pb.FetchPartitionMetadataResponse,
        ),
        MethodSpec("Publish", pb.PublishRequest, pb.PublishResponse),
        MethodSpec(
            "PublishAsync",
            pb.PublishRequest,
            pb.PublishResponse,
            client_streaming=True,
            server_streaming=True,
        ),
        MethodSpec("PublishToSubject", pb.PublishToSubjectRequest, pb.PublishToSubjectResponse),
        MethodSpec("SetCursor", pb.SetCursorRequest, pb.SetCursorResponse),
        MethodSpec("FetchCursor", pb.FetchCursorRequest, pb.FetchCursorResponse),
        MethodSpec("JoinConsumerGroup", pb.JoinConsumerGroupRequest, pb.JoinConsumerGroupResponse),
        MethodSpec(
            "LeaveConsumerGroup", pb.LeaveConsumerGroupRequest, pb.LeaveConsumerGroupResponse
        ),
        MethodSpec(
            "FetchConsumerGroupAssignments",
            pb.FetchConsumerGroupAssignmentsRequest,
            pb.FetchConsumerGroupAssignmentsResponse,
        ),
        MethodSpec(
            "ReportConsumerGroupCoordinator",
            pb.ReportConsumerGroupCoordinatorRequest,
            pb.ReportConsumerGroupCoordinatorResponse,
        ),
    ]
    return {s.path: s for s in specs}


METHODS: dict[str, MethodSpec] = _methods()
METHODS_BY_NAME: dict[str, MethodSpec] = {s.name: s for s in METHODS.values()}


# ------------------------------------------------------------------------------------- events


@dataclass(slots=True)
class CallStarted:
    """Server role: a new call. ``timeout_s`` is the peer's grpc-timeout (None: no deadline)."""

    stream_id: int
    method: MethodSpec
    timeout_s: float | None
    metadata: tuple[tuple[bytes, bytes], ...]


@dataclass(slots=True)
class ResponseStarted:
    """Client role: the server's response headers."""

    stream_id: int
    headers: tuple[tuple[bytes, bytes], ...]


@dataclass(slots=True)
class MessageReceived:
    """Decoded messages (requests in the server role, responses in the client role), in order:
    consecutive messages of one stream in one ``receive_data`` arrive as one event."""

    stream_id: int
    messages: list[Any]
    nbytes: int = 0  # their framed size on the wire, for the session's accounting

    @property
    def message(self) -> Any:
        """The first message (for calls that carry exactly one)."""
        return self.messages[0]


@dataclass(slots=True)
class HalfClosed:
    """Server role: the client ended its side of the call (no more request messages)."""

    stream_id: int


@dataclass(slots=True)
class CallEnded:
    """Client role: the server's trailers (status and message)."""

    stream_id: int
    status: int
    message: str


@dataclass(slots=True)
class CallReset:
    """The peer reset the stream (a cancelled call)."""

    stream_id: int
    error_code: int


@dataclass(slots=True)
class CallError:
    """A bad call or message on one stream (unknown method, bad framing, malformed protobuf,
    message too large). Server role: answer it with ``send_trailers(status, message)``.
    ``kind`` names it for the error counter."""

    stream_id: int
    status: Status
    message: str
    kind: str


@dataclass(slots=True)
class ConnectionClosed:
    """The peer sent GOAWAY."""

    error_code: int
    last_stream_id: int


Event = (
    CallStarted
    | ResponseStarted
    | MessageReceived
    | HalfClosed
    | CallEnded
    | CallReset
    | CallError
    | ConnectionClosed
)

# ------------------------------------------------------------------------------------- helpers

_TIMEOUT_UNITS = {
    ord("H"): 3600.0,
    ord("M"): 60.0,
    ord("S"): 1.0,
    ord("m"): 1e-3,
    ord("u"): 1e-6,
    ord("n"): 1e-9,
}


def parse_timeout(value: bytes) -> float:
    """``grpc-timeout`` (1-8 ASCII digits and a unit) in seconds. Raises ValueError."""
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit():
        raise ValueError(f"bad grpc-timeout {value!r}")
    unit = _TIMEOUT_UNITS.get(value[-1])
    if unit is None:
        raise ValueError(f"bad grpc-timeout unit in {value!r}")
    return int(value[:-1]) * unit


def encode_timeout(seconds: float) -> bytes:
    """A grpc-timeout value for ``seconds`` (millisecond or coarser resolution)."""
    ms = max(1, int(seconds * 1000))
    if ms < 100_000_000:
        return b"%dm" % ms
    return b"%dS" % min(99_999_999, ms // 1000)


_UNRESERVED = frozenset(range(0x20, 0x7F)) - {ord("%")}


def encode_grpc_message(text: str) -> bytes:
    """Percent-encode a status message as gRPC requires (UTF-8, then %XX outside 0x20-0x7E)."""
    raw = text.encode("utf-8")
    if all(b in _UNRESERVED for b in raw):
        return raw
    return b"".join(bytes((b,)) if b in _UNRESERVED else b"%%%02X" % b for b in raw)


def decode_grpc_message(raw: bytes) -> str:
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i] == 0x25 and i + 2 < len(raw) and _is_hex(raw[i + 1 : i + 3]):
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "replace")


def _is_hex(b: bytes) -> bool:
    return len(b) == 2 and all(c in b"0123456789abcdefABCDEF" for c in b)


def frame_message(payload: bytes) -> bytes:
    """One gRPC length-prefixed message (uncompressed)."""
    return GRPC_PREFIX.pack(0, len(payload)) + payload


# ------------------------------------------------------------------------------------- the codec


class _Stream:
    __slots__ = (
        "stream_id",
        "method",
        "buf",
        "out",
        "out_len",
        "end_after",
        "headers_sent",
        "failed",
        "closed",
        "remote_closed",
        "consumed",
        "detached",
        "send_window",
        "held",
        "held_h2",
        "lends",
        "lent",
    )

    def __init__(self, stream_id: int, method: MethodSpec | None) -> None:
        self.stream_id = stream_id
        self.method = method
        self.buf = bytearray()
        self.out: deque[bytes | memoryview] = deque()
        self.out_len = 0
        # what ends our side once ``out`` is flushed: trailers (server) or END_STREAM (client)
        self.end_after: list[tuple[bytes, bytes]] | bool | None = None
        self.headers_sent = False
        self.failed = False  # a CallError was reported: ignore further data
        self.closed = False
        self.remote_closed = False  # the peer ended its side
        self.consumed = 0  # bytes taken on the fast path not yet granted back
        # a call h2 never saw (``GrpcConnection._detach``): its frames in and out are ours,
        # with the peer's window for it in ``send_window``
        self.detached = False
        self.send_window = 0
        # received flow-controlled bytes not acknowledged yet (== len(buf) between frames: the
        # unfinished message), and how many of them came through h2 (acknowledged through h2)
        self.held = 0
        self.held_h2 = 0
        # a client-streaming call (server role): its complete messages stay unacknowledged
        # until the session has taken them (``release``); ``lent`` bytes are out so far
        self.lends = False
        self.lent = 0


class _CachingDecoder(hpack.Decoder):
    """h2's HPACK decoder, with the decoded header list of a block kept by the block's bytes
    while the dynamic table stays as it was. A client repeats the same request headers on
    every call; once they are in its table they come as the same indexed fields (the same
    bytes) each time, and decoding them again was a large part of a one-message call. A block
    is kept only when decoding it left the table unchanged (indexed fields, literals without
    indexing); any block that changes the table (an insertion, an eviction, a size update)
    empties the cache, so a kept block is only reused against the table it was decoded with.
    The limits a decode checks (list size, table size) are part of the key."""

    _CACHE_BLOCKS = 32

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size)
        self._cache: dict[tuple[bytes, bool], tuple[tuple[int, int, int], list[Any]]] = {}

    @staticmethod
    def fits(stock: Any) -> bool:
        """The cache reads hpack's table internals (``dynamic_entries``, ``_current_size``,
        hpack 4.x): with another hpack the stock decoder stays, uncached."""
        table = getattr(stock, "header_table", None)
        return isinstance(stock, hpack.Decoder) and all(
            hasattr(table, name) for name in ("dynamic_entries", "_current_size", "maxsize")
        )

    def cached(self, data: bytes | memoryview) -> list[Any] | None:
        """The raw header list of a block kept against the current table, else None; nothing
        changes either way."""
        hit = self._cache.get((bytes(data), True))
        if hit is None or hit[0] != self._limits():
            return None
        return list(hit[1])

    def _limits(self) -> tuple[int, int, int]:
        """What a decode checks against, part of a kept block's key."""
        return (self.max_header_list_size, self.max_allowed_table_size, self.header_table.maxsize)

    def decode(self, data: bytes, raw: bool = False) -> list[Any]:  # type: ignore[override]
        key = (bytes(data), raw)
        table = self.header_table
        limits = self._limits()
        hit = self._cache.get(key)
        if hit is not None and hit[0] == limits:
            return list(hit[1])
        entries = table.dynamic_entries
        count = len(entries)
        newest = entries[0] if count else None
        size = table._current_size
        headers = list(super().decode(data, raw))
        if (
            len(entries) != count
            or (entries[0] if entries else None) is not newest
            or table._current_size != size
            or table.maxsize != limits[2]
        ):
            self._cache.clear()
        else:
            if len(self._cache) >= self._CACHE_BLOCKS:
                self._cache.clear()
            self._cache[key] = (limits, headers)
            headers = list(headers)
        return headers


class GrpcConnection:
    """One HTTP/2 connection carrying gRPC calls. ``client=False`` serves, ``True`` calls."""

    def __init__(
        self,
        *,
        client: bool = False,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        methods: dict[str, MethodSpec] | None = None,
        max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
        max_resets_per_s: int = DEFAULT_MAX_RESETS_PER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.max_message_bytes = max_message_bytes
        self.max_buffered_bytes = max_buffered_bytes
        self.max_resets_per_s = max_resets_per_s
        self._clock = clock
        # receive windows: a stream's lets one whole message through (it is acknowledged only
        # when complete), the connection's the buffered cap (past it the connection ends)
        self.stream_window = min(_MAX_WINDOW, max_message_bytes + 5 + ACK_BATCH)
        self.conn_window = min(_MAX_WINDOW, max_buffered_bytes + ACK_BATCH + 65536)
        self._buffered = 0  # sum of held over the streams
        self._lent = 0  # sum of lent over the streams (and the calls gone with bytes lent)
        self._gone: dict[int, _Stream] = {}  # calls ended with bytes still lent
        self._resets = 0  # RST_STREAM frames received in the current second
        self._resets_since = clock()
        self.methods = METHODS if methods is None else methods
        # a server validates request headers itself, once per distinct header list
        # (_check_inbound); h2 validates every block again, a sixth of a one-message call
        config = h2.config.H2Configuration(
            client_side=client, header_encoding=None, validate_inbound_headers=client
        )
        self._h2 = h2.connection.H2Connection(config=config)
        stock = self._h2.decoder
        if _CachingDecoder.fits(stock):
            self._h2.decoder = _CachingDecoder(stock.max_header_list_size)
            self._h2.decoder.max_allowed_table_size = stock.max_allowed_table_size
        self._streams: dict[int, _Stream] = {}
        self._closed = False  # h2 is closed (the peer's GOAWAY, a protocol error)
        self._goaway_sent = False  # our GOAWAY (drain)
        self._out_extra = bytearray()  # our own frames, written before what h2 queued since
        self._inbuf = bytearray()
        self._broken = False
        self._preface_left = 0 if client else 24
        self._max_in_frame = 16384  # SETTINGS_MAX_FRAME_SIZE we advertise (the default)
        self._conn_consumed = 0
        self._flush_needed = False
        self._dirty: dict[int, _Stream] = {}  # streams with queued output not yet given to h2
        # calls may bypass h2 (see _detach) only with the internals that path reads
        self._can_detach = (
            not client
            and isinstance(self._h2.decoder, _CachingDecoder)
            and hasattr(self._h2.encoder, "_encode_table_size_change")
            and hasattr(self._h2.encoder.header_table, "resized")
            and hasattr(self._h2.incoming_buffer, "_headers_buffer")
        )
        self._blocked: dict[int, _Stream] = {}  # streams waiting for the peer's window

    # ------------------------------------------------------------------ connection
    def initiate(self) -> None:
        """Queue our preface/SETTINGS (call once, first)."""
        h2c = self._h2
        h2c.local_settings = h2.settings.Settings(
            client=self.client,
            initial_values={
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.stream_window,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 64 * 1024,
            },
        )
        h2c.initiate_connection()
        h2c.increment_flow_control_window(self.conn_window - 65535)

    def data_to_send(self) -> bytes:
        """Everything to write now. Messages queued since the last call go out here, so all
        the messages of one stream queued between two writes share DATA frames (as many per
        frame as the peer's frame size and window allow) instead of one frame each."""
        if self._dirty:
            dirty = self._dirty
            self._dirty = {}
            streams = self._streams
            for sid, st in dirty.items():
                if streams.get(sid) is st:
                    self._flush(st)
        if self._out_extra:
            data = bytes(self._out_extra) + self._h2.data_to_send()
            self._out_extra.clear()
            return data
        return self._h2.data_to_send()

    def unsend(self, data: bytes | memoryview) -> None:
        """Put back the unwritten tail of what :meth:`data_to_send` returned: it goes out first
        next time."""
        self._out_extra[:0] = data

    def goaway(self, error_code: int = 0) -> None:
        """Tell the peer we take no new calls (drain); in-flight calls go on.

        The GOAWAY frame is written here, not by h2: h2 moves to its CLOSED state when it sends
        one and refuses every later frame, so the calls in progress could not send their
        messages and trailers, while RFC 7540 6.8 lets them finish. h2 stays open for them."""
        if not self._closed and not self._goaway_sent:
            self._goaway_sent = True
            last = self._h2.highest_inbound_stream_id or 0
            self._out_extra += self._h2.data_to_send() + _GOAWAY.pack(
                0, 8, 0x07, 0, 0, last & 0x7FFFFFFF, error_code
            )

    def ping(self, payload: bytes = b"gateway!") -> None:
        """Queue a PING (keepalive; the peer answers with an ACK)."""
        if not self._closed:
            self._h2.ping(payload)

    @property
    def open_calls(self) -> int:
        return len(self._streams)

    @property
    def buffered_bytes(self) -> int:
        """Bytes of unfinished request messages held (not yet acknowledged to the peer)."""
        return self._buffered

    @property
    def lent_bytes(self) -> int:
        """Bytes of complete client-streaming requests handed over and not yet released."""
        return self._lent

    def release(self, stream_id: int, nbytes: int) -> None:
        """The session is done with ``nbytes`` of the messages it was handed for
        ``stream_id`` (``MessageReceived.nbytes``): for a client-streaming call, lent until
        now, the peer's windows reopen by that much. Anything else: nothing to do. So the
        requests a PublishAsync call has not taken yet are bounded by the HTTP/2 windows,
        without the reader ever waiting for the call (it must go on reading WINDOW_UPDATEs)."""
        st = self._streams.get(stream_id) or self._gone.get(stream_id)
        if st is None or not st.lent:
            return
        n = min(nbytes, st.lent)
        st.lent -= n
        self._lent -= n
        if not st.lent:
            self._gone.pop(stream_id, None)
        self._acknowledge(st, n)

    def pending_bytes(self, stream_id: int) -> int:
        """Bytes queued on a stream waiting for the peer's flow-control window."""
        st = self._streams.get(stream_id)
        return st.out_len if st is not None else 0

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    # ------------------------------------------------------------------ receiving
    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes from the peer; returns the gRPC events they complete.

        Plain DATA frames (no flags) of calls in progress are cut here without h2: per message,
        h2's generic frame machinery costs several times what the rest of a publish does.
        Every other frame goes through h2, in order. Window updates for the bytes taken on the
        fast path are ours to send (h2 never saw them)."""
        if self._broken:
            return []
        buf = self._inbuf
        buf += data
        if self._preface_left:
            take = min(self._preface_left, len(buf))
            self._preface_left -= take
            out = self._h2_feed(bytes(buf[:take]))
            del buf[:take]
        else:
            out = []
        pos = 0
        end = len(buf)
        run = -1  # start of frames to hand to h2
        streams = self._streams
        max_frame = self._max_in_frame
        while end - pos >= 9:
            length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2]
            if end - pos - 9 < length:
                break
            kind = buf[pos + 3]
            if kind == 3:
                self._count_reset()
            if kind == 1 and self._can_detach and buf[pos + 4] & 0xFA == 0 and buf[pos + 4] & 4:
                if run >= 0:
                    out += self._h2_feed(bytes(buf[run:pos]))
                    run = -1
                if self._detach(buf, pos, length, end, out):
                    pos += 9 + length
                    continue
            elif kind == 0 and buf[pos + 4] and buf[pos + 4] & 0xF6 == 0 and length <= max_frame:
                # END_STREAM and/or PADDED: ours only on a call h2 never saw
                sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                st = streams.get(sid)
                if st is not None and st.detached and not st.remote_closed:
                    flags = buf[pos + 4]
                    start, stop = pos + 9, pos + 9 + length
                    if flags & 0x08:
                        if not length or buf[start] >= length:
                            raise self._connection_error("DATA frame padding is too long")
                        stop -= buf[start]
                        start += 1
                    if run >= 0:
                        out += self._h2_feed(bytes(buf[run:pos]))
                        run = -1
                    self._take(st, memoryview(buf)[start:stop], length, out)
                    if flags & 0x01:
                        self._on_stream_ended(sid, out)
                    pos += 9 + length
                    continue
            elif kind == 3 and length == 4:
                sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                st = streams.get(sid)
                if st is not None and st.detached:
                    if run >= 0:
                        out += self._h2_feed(bytes(buf[run:pos]))
                        run = -1
                    self._drop(sid)
                    out.append(CallReset(sid, int.from_bytes(buf[pos + 9 : pos + 13], "big")))
                    pos += 13
                    continue
            elif kind == 0 and buf[pos + 4] == 0 and length <= max_frame:
                sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
                st = streams.get(sid)
                if st is None and run >= 0:
                    # the call may open in the frames before this one (its HEADERS in the
                    # same read, the usual for a one-message call): let h2 see them first
                    out += self._h2_feed(bytes(buf[run:pos]))
                    run = -1
                    st = streams.get(sid)
                if st is not None and not st.remote_closed:
                    if run >= 0:
                        out += self._h2_feed(bytes(buf[run:pos]))
                        run = -1
                        st = streams.get(sid)
                    if st is not None and not st.remote_closed:
                        self._take(st, memoryview(buf)[pos + 9 : pos + 9 + length], length, out)
                        pos += 9 + length
                        continue
            elif kind == 8 and length == 4 and not self._closed:
                if run >= 0:
                    out += self._h2_feed(bytes(buf[run:pos]))
                    run = -1
                if not self._closed and self._window_updated(
                    int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF,
                    int.from_bytes(buf[pos + 9 : pos + 13], "big") & 0x7FFFFFFF,
                ):
                    pos += 13
                    continue
            elif kind == 7 and length >= 8 and not self._closed:
                if buf[pos + 5] | buf[pos + 6] | buf[pos + 7] | buf[pos + 8] == 0:
                    # the peer's GOAWAY, kept from h2 for the same reason as in goaway(): h2
                    # would refuse the frames of the calls still in progress, both ways
                    if run >= 0:
                        out += self._h2_feed(bytes(buf[run:pos]))
                        run = -1
                    if not self._closed:
                        last = int.from_bytes(buf[pos + 9 : pos + 13], "big") & 0x7FFFFFFF
                        code = int.from_bytes(buf[pos + 13 : pos + 17], "big")
                        out.append(ConnectionClosed(code, last))
                        pos += 9 + length
                        continue
            if run < 0:
                run = pos
            pos += 9 + length
        if run >= 0:
            out += self._h2_feed(bytes(buf[run:pos]))
        if pos:
            del buf[:pos]
        if self._flush_needed:
            self._flush_needed = False
            self._flush_all()
        return out

    def _window_updated(self, sid: int, increment: int) -> bool:
        """A WINDOW_UPDATE for the connection or an open stream, applied to h2's own outbound
        window counters exactly as h2's handler does (the connection state machine has nothing
        to do for it in the open state). Done here because grpcio sends one or two for every
        DATA frame it receives (about one per ack) and h2's generic frame path costs several
        times a whole publish. False: not handled (zero increment, overflow, a stream h2 does
        not have open): the frame goes to h2, which raises or ignores it as the RFC says."""
        if increment == 0:
            return False
        h2c = self._h2
        if sid == 0:
            window = h2c.outbound_flow_control_window + increment
            if window > _MAX_WINDOW:
                return False
            h2c.outbound_flow_control_window = window
            if self._blocked:
                self._flush_needed = True
            return True
        h2s = h2c.streams.get(sid)
        if h2s is None:
            st = self._streams.get(sid)
            if st is None or not st.detached or st.send_window + increment > _MAX_WINDOW:
                return False
            st.send_window += increment
            if sid in self._blocked:
                self._flush_needed = True
            return True
        if h2s.state_machine.state not in _WINDOW_STATES:
            return False
        window = h2s.outbound_flow_control_window + increment
        if window > _MAX_WINDOW:
            return False
        h2s.outbound_flow_control_window = window
        if sid in self._blocked:
            self._flush_needed = True
        return True

    def _take(self, st: _Stream, data: bytes | memoryview, length: int, out: list[Event]) -> None:
        """A DATA frame's payload ``data`` (``length`` flow-controlled bytes, with padding) for
        ``st``: cut out its complete messages, then acknowledge every byte not still held in
        an unfinished message. Past the buffered cap the connection ends."""
        lent = st.lent
        if not st.failed:
            self._consume(st, data, out)
        held = 0 if st.failed else len(st.buf)
        done = st.held + length - held - (st.lent - lent)
        self._buffered += held - st.held
        st.held = held
        if done:
            self._acknowledge(st, done)
        if self._buffered > self.max_buffered_bytes:
            raise self.enhance_your_calm(
                "max_buffered_request_bytes",
                f"{self._buffered} bytes of unfinished request messages held "
                f"(max_buffered_request_bytes {self.max_buffered_bytes})",
            )
        if self._buffered + self._lent > self.conn_window:
            # more than our window lets through: the peer ignores flow control
            raise self.enhance_your_calm(
                "max_buffered_request_bytes",
                f"{self._buffered + self._lent} bytes of requests held, past the "
                f"connection's flow-control window ({self.conn_window})",
            )

    def _acknowledge(self, st: _Stream, n: int) -> None:
        """Reopen the peer's windows by ``n`` bytes of ``st``: those h2 counted through h2, the
        others (the fast path's) with our own WINDOW_UPDATE frames, in batches."""
        k = min(n, st.held_h2)
        if k:
            st.held_h2 -= k
            n -= k
            if not self._closed:
                try:
                    self._h2.acknowledge_received_data(k, st.stream_id)
                except h2.exceptions.ProtocolError:
                    pass
        if n:
            self._conn_consumed += n
            if self._streams.get(st.stream_id) is st and not st.remote_closed:
                st.consumed += n
                if st.consumed >= ACK_BATCH:
                    self._out_extra += _window_update(st.stream_id, st.consumed)
                    st.consumed = 0
            if self._conn_consumed >= ACK_BATCH:
                self._out_extra += _window_update(0, self._conn_consumed)
                self._conn_consumed = 0

    def _forget(self, sid: int) -> _Stream | None:
        """Remove a call; what it still held is dropped and given back to the connection's
        window."""
        st = self._streams.pop(sid, None)
        if st is not None and st.held:
            held = st.held
            self._buffered -= held
            st.held = 0
            st.buf = bytearray()
            self._acknowledge(st, held)
        if st is not None and st.lent:
            self._gone[sid] = st  # until the session releases them
        return st

    def _count_reset(self) -> None:
        """One RST_STREAM from the peer: past ``max_resets_per_s`` in the current second the
        connection ends (HTTP/2 rapid reset, CVE-2023-44487)."""
        now = self._clock()
        if now - self._resets_since >= 1.0:
            self._resets_since = now
            self._resets = 0
        self._resets += 1
        if self._resets > self.max_resets_per_s:
            raise self.enhance_your_calm(
                "max_resets_per_s",
                f"more than {self.max_resets_per_s} stream resets in one second",
            )

    def enhance_your_calm(self, limit: str, message: str) -> RemoteProtocolError:
        """End the connection for the budget ``limit`` (its config key): GOAWAY
        ENHANCE_YOUR_CALM after whatever is queued; nothing more is read or sent. The caller
        raises (or handles) what this returns."""
        if not self._closed:
            last = self._h2.highest_inbound_stream_id or 0
            self._out_extra += self._h2.data_to_send() + _GOAWAY.pack(
                0, 8, 0x07, 0, 0, last & 0x7FFFFFFF, _ENHANCE_YOUR_CALM
            )
        self._closed = self._broken = True
        return RemoteProtocolError(message, kind="limit", limit=limit)

    def _h2_feed(self, data: bytes) -> list[Event]:
        try:
            h2_events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            queued = self._h2.data_to_send()
            if not (len(queued) >= 17 and queued[-14] == 0x07):
                # h2 queued no GOAWAY (a bad connection preface): write one ourselves
                queued += _GOAWAY_PROTOCOL_ERROR
            self._out_extra += queued
            self._closed = self._broken = True
            raise RemoteProtocolError(f"HTTP/2 protocol error: {exc}", "http2") from exc
        out: list[Event] = []
        flush = False
        for ev in h2_events:
            t = type(ev)
            if t is h2.events.DataReceived:
                self._on_data(ev, out)
            elif t is h2.events.RequestReceived:
                self._on_request(ev, out)
            elif t is h2.events.StreamEnded:
                self._on_stream_ended(ev.stream_id, out)
            elif t is h2.events.WindowUpdated or t is h2.events.RemoteSettingsChanged:
                flush = True
            elif t is h2.events.ResponseReceived:
                st = self._streams.get(ev.stream_id)
                headers = tuple(ev.headers)
                if st is not None and not self._trailers_only(st, headers, out):
                    out.append(ResponseStarted(ev.stream_id, headers))
            elif t is h2.events.TrailersReceived:
                if not self.client:
                    self._check_inbound(ev.headers, _TRAILER_FLAGS)
                st = self._streams.get(ev.stream_id)
                if st is not None:
                    status, message = _status_of(tuple(ev.headers))
                    st.end_after = None
                    out.append(CallEnded(ev.stream_id, status, message))
            elif t is h2.events.StreamReset:
                if self._forget(ev.stream_id) is not None:
                    out.append(CallReset(ev.stream_id, int(ev.error_code or 0)))
            elif t is h2.events.ConnectionTerminated:
                self._closed = True
                out.append(ConnectionClosed(int(ev.error_code or 0), ev.last_stream_id or 0))
        if flush:
            self._flush_needed = True
        return out

    def _trailers_only(
        self, st: _Stream, headers: tuple[tuple[bytes, bytes], ...], out: list[Event]
    ) -> bool:
        if not any(k == b"grpc-status" for k, _ in headers):
            return False
        status, message = _status_of(headers)
        out.append(CallEnded(st.stream_id, status, message))
        return True

    def _check_inbound(self, headers: list[Any], flags: h2.utilities.HeaderValidationFlags) -> None:
        """h2's own validation of a received header list (RFC 7540 8.1.2), run once per
        distinct list and flags: clients send the same request headers on every call. A list
        that fails ends the connection as h2 does with validation on: GOAWAY PROTOCOL_ERROR,
        then RemoteProtocolError."""
        key = (tuple(headers), flags)
        if key in _VALID_HEADERS:
            return
        try:
            for _ in h2.utilities.validate_headers(key[0], flags):
                pass
        except h2.exceptions.ProtocolError as exc:
            raise self._connection_error(str(exc)) from exc
        if len(_VALID_HEADERS) >= _VALID_HEADERS_KEPT:
            _VALID_HEADERS.clear()
        _VALID_HEADERS[key] = None

    def _connection_error(self, message: str) -> RemoteProtocolError:
        """End the connection as h2 does on a protocol error (GOAWAY PROTOCOL_ERROR); the
        caller raises what this returns."""
        self._h2.close_connection(error_code=h2.errors.ErrorCodes.PROTOCOL_ERROR)
        self._out_extra += self._h2.data_to_send()
        self._closed = self._broken = True
        return RemoteProtocolError(f"HTTP/2 protocol error: {message}", "http2")

    def _detach(self, buf: bytearray, pos: int, length: int, end: int, out: list[Event]) -> bool:
        """Take a new call at the HEADERS frame at ``pos`` without h2, when h2 would only
        repeat what is known already: its header block is one the decoder keeps (the same
        bytes against the same table, so decoding it changes nothing) and that passed
        validation, and the whole request (the HEADERS, then only DATA frames of this stream
        up to END_STREAM) is in the buffer, so no later frame of the call can reach h2. The
        call's frames out are then written here too (``_Stream.detached``). h2's frame,
        stream and event machinery for a call's HEADERS and END_STREAM was most of what a
        one-message publish cost in the codec. False: h2 takes the frame."""
        h2c = self._h2
        sid = int.from_bytes(buf[pos + 5 : pos + 9], "big") & 0x7FFFFFFF
        if (
            self._closed
            or self._goaway_sent
            or not sid & 1
            or sid <= h2c.highest_inbound_stream_id
            or sid in h2c.streams
            or len(self._streams) >= _DETACHED_CALLS
            or h2c.state_machine.state not in _DETACH_STATES
            or h2c.incoming_buffer._headers_buffer
        ):
            return False
        if not buf[pos + 4] & 0x01:
            # the rest of the request: DATA frames of this stream, the last with END_STREAM
            at = pos + 9 + length
            while True:
                if end - at < 9:
                    return False
                size = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2]
                if (
                    end - at - 9 < size
                    or buf[at + 3] != 0
                    or buf[at + 4] & 0xF6
                    or size > self._max_in_frame
                    or int.from_bytes(buf[at + 5 : at + 9], "big") & 0x7FFFFFFF != sid
                ):
                    return False
                if buf[at + 4] & 0x01:
                    break
                at += 9 + size
        headers = h2c.decoder.cached(bytes(buf[pos + 9 : pos + 9 + length]))
        if headers is None or (tuple(headers), _REQUEST_FLAGS) not in _VALID_HEADERS:
            return False
        for k, _ in headers:
            if k == b"content-length":
                return False  # h2 checks the body against it
        h2c.state_machine.process_input(h2.connection.ConnectionInputs.RECV_HEADERS)
        h2c.highest_inbound_stream_id = sid
        st = self._open_call(sid, headers, out)
        st.detached = True
        st.send_window = h2c.remote_settings.initial_window_size
        if buf[pos + 4] & 0x01:
            self._on_stream_ended(sid, out)
        return True

    def _drop(self, sid: int) -> None:
        """Forget a call (reset by the peer)."""
        self._forget(sid)
        self._dirty.pop(sid, None)
        self._blocked.pop(sid, None)

    def _on_request(self, ev: h2.events.RequestReceived, out: list[Event]) -> None:
        self._check_inbound(ev.headers, _REQUEST_FLAGS)
        self._open_call(ev.stream_id, ev.headers, out)

    def _open_call(self, sid: int, headers: list[Any], out: list[Event]) -> _Stream:
        """A new call from its validated request headers: CallStarted, or CallError for a
        request gRPC refuses."""
        method = path = content_type = None
        timeout: float | None = None
        metadata: list[tuple[bytes, bytes]] = []
        bad_timeout = False
        for k, v in headers:
            if k == b":path":
                path = v
            elif k == b":method":
                method = v
            elif k == b"content-type":
                content_type = v
            elif k == b"grpc-timeout":
                try:
                    timeout = parse_timeout(v)
                except ValueError:
                    bad_timeout = True
            elif k == b"grpc-encoding":
                metadata.append((k, v))
            elif not k.startswith(b":"):
                metadata.append((k, v))
        st = _Stream(sid, None)
        self._streams[sid] = st
        name = path.decode("latin-1") if path else ""
        if method != b"POST":
            self._reject(
                st, Status.UNIMPLEMENTED, f"method {method!r} is not POST", "bad_call", out
            )
            return st
        if content_type is None or not content_type.startswith(b"application/grpc"):
            self._reject(
                st, Status.UNKNOWN, f"invalid gRPC content-type {content_type!r}", "bad_call", out
            )
            return st
        if bad_timeout:
            self._reject(st, Status.INTERNAL, "malformed grpc-timeout", "bad_call", out)
            return st
        spec = self.methods.get(name)
        if spec is None:
            self._reject(
                st,
                Status.UNIMPLEMENTED,
                f"unknown method {name.rsplit('/', 1)[-1]} for service {SERVICE}"
                if name.startswith(f"/{SERVICE}/")
                else f"unknown service or method {name}",
                "unknown_method",
                out,
            )
            return st
        st.method = spec
        st.lends = spec.client_streaming
        out.append(CallStarted(sid, spec, timeout, tuple(metadata)))
        return st

    def _reject(
        self, st: _Stream, status: Status, message: str, kind: str, out: list[Event]
    ) -> None:
        st.failed = True
        out.append(CallError(st.stream_id, status, message, kind))

    def _on_data(self, ev: h2.events.DataReceived, out: list[Event]) -> None:
        sid = ev.stream_id
        length = ev.flow_controlled_length or 0
        st = self._streams.get(sid)
        if st is None:
            if length:  # nobody wants it: given back at once
                try:
                    self._h2.acknowledge_received_data(length, sid)
                except h2.exceptions.ProtocolError:
                    pass
            return
        st.held_h2 += length
        self._take(st, ev.data, length, out)

    def _consume(self, st: _Stream, data: bytes | memoryview, out: list[Event]) -> None:
        """Append DATA payload to the stream and cut out the complete gRPC messages."""
        sid = st.stream_id
        buf = st.buf
        if not buf and len(data) >= 5:
            # common case: the frame holds whole messages; parse in place, keep the rest
            buf = data
        else:
            buf += data
            if len(buf) < 5:
                return
        spec = st.method
        cls = (spec.response if self.client else spec.request) if spec is not None else None
        pos = 0
        end = len(buf)
        limit = self.max_message_bytes
        while end - pos >= 5:
            flag, length = GRPC_PREFIX.unpack_from(buf, pos)
            if flag != 0:
                self._reject(
                    st,
                    Status.UNIMPLEMENTED if flag == 1 else Status.INTERNAL,
                    "compressed messages are not supported (no grpc-encoding accepted)"
                    if flag == 1
                    else f"bad compressed flag {flag}",
                    "bad_framing",
                    out,
                )
                st.buf = bytearray()
                return
            if length > limit:
                self._reject(
                    st,
                    Status.RESOURCE_EXHAUSTED,
                    f"received message larger than max ({length} vs. {limit})",
                    "message_too_large",
                    out,
                )
                st.buf = bytearray()
                return
            if end - pos - 5 < length:
                break
            payload = bytes(buf[pos + 5 : pos + 5 + length])
            pos += 5 + length
            if cls is None:
                continue
            try:
                msg = cls.FromString(payload)
            except Exception as exc:  # protobuf's DecodeError and friends
                self._reject(
                    st,
                    Status.INTERNAL,
                    f"grpc: error unmarshalling request: {exc}",
                    "malformed_protobuf",
                    out,
                )
                st.buf = bytearray()
                return
            last = out[-1] if out else None
            if type(last) is MessageReceived and last.stream_id == sid:
                last.messages.append(msg)
                last.nbytes += 5 + length
            else:
                out.append(MessageReceived(sid, [msg], 5 + length))
            if st.lends:
                st.lent += 5 + length
                self._lent += 5 + length
        if buf is st.buf:
            if pos:
                del buf[:pos]
        elif pos < end:
            st.buf = bytearray(buf[pos:])

    def _on_stream_ended(self, sid: int, out: list[Event]) -> None:
        st = self._streams.get(sid)
        if st is None:
            return
        st.remote_closed = True
        if st.buf and not st.failed:
            self._reject(
                st, Status.INTERNAL, "truncated gRPC message at end of stream", "bad_framing", out
            )
            return
        if self.client:
            # the server ended the stream (after its trailers): the call is over
            self._forget(sid)
        elif not st.failed:
            out.append(HalfClosed(sid))

    # ------------------------------------------------------------------ sending
    def send_message(self, stream_id: int, message: Any) -> None:
        """Queue one message (a protobuf object or its serialized bytes)."""
        payload = message if isinstance(message, bytes | bytearray) else message.SerializeToString()
        self.send_raw(stream_id, GRPC_PREFIX.pack(0, len(payload)) + payload)

    def send_messages(self, stream_id: int, messages: list[Any]) -> None:
        """Queue several messages as one block (one DATA frame when the window allows)."""
        parts: list[bytes] = []
        pack = GRPC_PREFIX.pack
        for m in messages:
            payload = m if isinstance(m, bytes | bytearray) else m.SerializeToString()
            parts.append(pack(0, len(payload)))
            parts.append(payload)
        self.send_raw(stream_id, b"".join(parts))

    def send_raw(self, stream_id: int, framed: bytes) -> None:
        """Queue already framed gRPC messages."""
        st = self._streams.get(stream_id)
        if st is None:
            return  # the call is gone (reset by the peer): drop silently
        if st.end_after is not None:
            raise LocalProtocolError(f"stream {stream_id}: message after the end of our side")
        if not st.headers_sent:
            self._send_response_headers(st)
        st.out.append(framed)
        st.out_len += len(framed)
        self._dirty[stream_id] = st

    def _send_response_headers(self, st: _Stream) -> None:
        if self.client:
            raise LocalProtocolError("a client sends its headers with start_call")
        if st.detached:
            self._write_headers(st.stream_id, _RESPONSE_HEADERS_BLOCK, False)
        elif not self._send_headers_block(st.stream_id, _RESPONSE_HEADERS_BLOCK, False):
            self._h2.send_headers(
                st.stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")]
            )
        st.headers_sent = True

    def _send_headers_block(self, sid: int, block: bytes, end_stream: bool) -> bool:
        """Write a HEADERS frame of a header block we encoded ourselves (constant response
        headers, trailers: literals without indexing, so neither side's HPACK dynamic table
        changes) with h2's connection and stream state moved exactly as its ``send_headers``
        moves them. h2's path (header validation, HPACK encoding, frame objects) was the largest
        part of a one-message call. False: not possible here (a stream h2 would not let us send
        on, a pending HPACK table size update, a block above the frame size): use h2."""
        h2c = self._h2
        h2s = h2c.streams.get(sid)
        if (
            self._closed
            or h2s is None
            or h2s.state_machine.state not in _SEND_STATES
            or h2c.encoder.header_table.resized
            or len(block) > h2c.max_outbound_frame_size
        ):
            return False
        h2c.state_machine.process_input(h2.connection.ConnectionInputs.SEND_HEADERS)
        machine = h2s.state_machine
        machine.process_input(h2.stream.StreamInputs.SEND_HEADERS)
        flags = 0x04  # END_HEADERS
        if end_stream:
            machine.process_input(h2.stream.StreamInputs.SEND_END_STREAM)
            flags = 0x05  # END_HEADERS | END_STREAM
        size = len(block)
        extra = self._out_extra
        extra += h2c.data_to_send()  # after what h2 queued before
        extra += _FRAME_HEAD.pack(size >> 8, size & 0xFF, 0x01, flags, sid)
        extra += block
        return True

    def _write_headers(self, sid: int, block: bytes, end_stream: bool) -> None:
        """HEADERS (and CONTINUATION) frames of a detached call: what h2's ``send_headers``
        writes, with the HPACK table size update h2's encoder owes first, if any."""
        if self._closed:
            return
        h2c = self._h2
        encoder = h2c.encoder
        if encoder.header_table.resized:
            block = encoder._encode_table_size_change() + block
            encoder.header_table.resized = False
        h2c.state_machine.process_input(h2.connection.ConnectionInputs.SEND_HEADERS)
        extra = self._out_extra
        extra += h2c.data_to_send()
        limit = h2c.max_outbound_frame_size
        kind = 0x01
        flags = 0x01 if end_stream else 0
        while True:
            chunk, block = block[:limit], block[limit:]
            size = len(chunk)
            last = 0x04 if not block else 0  # END_HEADERS
            extra += _FRAME_HEAD.pack(size >> 8, size & 0xFF, kind, flags | last, sid)
            extra += chunk
            if not block:
                return
            kind, flags = 0x09, 0  # CONTINUATION

    def send_trailers(self, stream_id: int, status: int = 0, message: str = "") -> None:
        """Server role: end the call with a status (after the queued messages)."""
        if self.client:
            raise LocalProtocolError("only a server sends trailers")
        st = self._streams.get(stream_id)
        if st is None:
            return
        trailers = [(b"grpc-status", str(int(status)).encode())]
        if message:
            trailers.append((b"grpc-message", encode_grpc_message(message)))
        if not st.headers_sent and st.detached:
            self._write_headers(
                stream_id, _RESPONSE_HEADERS_BLOCK + _trailers_block(trailers), True
            )
            self._forget(stream_id)
            return
        if not st.headers_sent:
            # trailers-only response
            self._h2.send_headers(
                stream_id,
                [(b":status", b"200"), (b"content-type", b"application/grpc"), *trailers],
                end_stream=True,
            )
            self._forget(stream_id)
            return
        st.end_after = trailers
        self._dirty[stream_id] = st

    def reset(self, stream_id: int, error_code: int = h2.errors.ErrorCodes.CANCEL) -> None:
        """Abort a stream (RST_STREAM)."""
        st = self._forget(stream_id)
        if st is not None and st.detached:
            if not self._closed:
                self._out_extra += self._h2.data_to_send()
                self._out_extra += _RST_STREAM.pack(0, 4, 0x03, 0, stream_id, error_code)
        elif st is not None:
            try:
                self._h2.reset_stream(stream_id, error_code)
            except h2.exceptions.StreamClosedError:
                pass

    # client role
    def start_call(
        self,
        method: str | MethodSpec,
        *,
        timeout_s: float | None = None,
        authority: str = "localhost",
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> int:
        """Client role: open a call; returns its stream id."""
        if not self.client:
            raise LocalProtocolError("only a client starts calls")
        spec = method if isinstance(method, MethodSpec) else METHODS_BY_NAME[method]
        sid = self._h2.get_next_available_stream_id()
        headers = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", spec.path.encode()),
            (b":authority", authority.encode()),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
        if timeout_s is not None:
            headers.append((b"grpc-timeout", encode_timeout(timeout_s)))
        headers.extend((k.encode(), v.encode()) for k, v in metadata)
        self._h2.send_headers(sid, headers)
        st = _Stream(sid, spec)
        st.headers_sent = True
        self._streams[sid] = st
        return sid

    def end_call(self, stream_id: int) -> None:
        """Client role: half-close (no more request messages) after the queued ones."""
        st = self._streams.get(stream_id)
        if st is None:
            return
        st.end_after = True
        self._dirty[stream_id] = st

    # ------------------------------------------------------------------ flow control
    def _flush(self, st: _Stream) -> None:
        h2c = self._h2
        sid = st.stream_id
        out = st.out
        detached = st.detached
        while out:
            window = min(
                min(h2c.outbound_flow_control_window, st.send_window)
                if detached
                else h2c.local_flow_control_window(sid),
                h2c.max_outbound_frame_size,
            )
            if window <= 0:
                self._blocked[sid] = st
                return
            first = out[0]
            size = len(first)
            if size > window:
                view = memoryview(first)
                chunk: bytes | memoryview = view[:window]
                out[0] = view[window:]
                size = window
            else:
                out.popleft()
                chunk = first
                if out and size + len(out[0]) <= window:
                    # several queued blocks in one DATA frame
                    parts = [first]
                    while out and size + len(out[0]) <= window:
                        part = out.popleft()
                        parts.append(part)
                        size += len(part)
                    chunk = b"".join(parts)
            h2s = None if detached else h2c.streams.get(sid)
            if detached or (
                h2s is not None and h2s.state_machine.state in _SEND_STATES and not self._closed
            ):
                # What h2's send_data does for a plain DATA frame on a stream it would let us
                # send on (the window and frame size were checked above): take the bytes from
                # both windows and write the frame, after everything h2 queued before it.
                # h2's path (state machines, a frame object, serialize) costs more than the
                # acks the frame carries. A detached call's window is ours; after h2 closed
                # the connection its data is dropped.
                if not self._closed:
                    h2c.outbound_flow_control_window -= size
                    if h2s is None:
                        st.send_window -= size
                    else:
                        h2s.outbound_flow_control_window -= size
                    extra = self._out_extra
                    extra += h2c.data_to_send()
                    extra += _DATA_HEAD.pack(size >> 8, size & 0xFF, 0, 0, sid)
                    extra += chunk
            else:
                h2c.send_data(sid, chunk)
            st.out_len -= size
        end = st.end_after
        if end is None or st.closed:
            return
        st.closed = True
        if end is True:
            h2c.end_stream(sid)
            return
        assert isinstance(end, list)
        if detached:
            self._write_headers(sid, _trailers_block(end), True)
        elif not self._send_headers_block(sid, _trailers_block(end), True):
            h2c.send_headers(sid, end, end_stream=True)
        self._forget(sid)

    def _flush_all(self) -> None:
        """After the peer opened its windows: what waited for them goes out with the next
        ``data_to_send``."""
        self._dirty.update(self._blocked)
        self._blocked = {}


def _hpack_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1) with ``first``'s high bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_literal(name: bytes, value: bytes) -> bytes:
    """Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    return b"\x00" + _hpack_int(len(name), 7) + name + _hpack_int(len(value), 7) + value


# ":status: 200" (static index 8), "content-type: application/grpc" (static name 31, literal
# value without indexing)
_RESPONSE_HEADERS_BLOCK = b"\x88" + _hpack_int(31, 4) + _hpack_int(16, 7) + b"application/grpc"
_TRAILERS_OK_BLOCK = _hpack_literal(b"grpc-status", b"0")


def _trailers_block(trailers: list[tuple[bytes, bytes]]) -> bytes:
    if len(trailers) == 1 and trailers[0] == (b"grpc-status", b"0"):
        return _TRAILERS_OK_BLOCK
    return b"".join(_hpack_literal(k, v) for k, v in trailers)


def _window_update(stream_id: int, increment: int) -> bytes:
    return _WINDOW_UPDATE.pack(0, 4, 0x08, 0, stream_id, increment)


_WINDOW_UPDATE = struct.Struct(">HBBBII")  # 24-bit length as H+B, type, flags, stream, increment
_DATA_HEAD = struct.Struct(">HBBBI")  # 24-bit length as H+B, type 0, no flags, stream
_FRAME_HEAD = struct.Struct(">HBBBI")  # 24-bit length as H+B, type, flags, stream
_GOAWAY = struct.Struct(">HBBBIII")  # length, type, flags, stream 0, last stream id, error code
_RST_STREAM = struct.Struct(">HBBBII")  # length, type 3, flags, stream, error code


def _status_of(headers: tuple[tuple[bytes, bytes], ...]) -> tuple[int, str]:
    status = int(Status.UNKNOWN)
    message = ""
    for k, v in headers:
        if k == b"grpc-status":
            try:
                status = int(v)
            except ValueError:
                status = int(Status.UNKNOWN)
        elif k == b"grpc-message":
            message = decode_grpc_message(v)
    return status, message


# ------------------------------------------------------------------------------------- acks


def _varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return bytes((n,))
    if n < 0:
        n &= 0xFFFFFFFFFFFFFFFF  # negative int32/enum values: ten bytes, as protobuf writes them
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string_field(tag: int, value: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(value)) + value if value else b""


@functools.lru_cache(maxsize=4096)
def _ack_head(stream: str, partition_subject: str, msg_subject: str) -> bytes:
    """Fields 1-3 of an Ack, the same for every ack of a partition: encoded once per partition
    (a one-message call made a new encoder, and encoded them again, for every publish)."""
    return (
        _string_field(0x0A, stream.encode())
        + _string_field(0x12, partition_subject.encode())
        + _string_field(0x1A, msg_subject.encode())
    )


class PublishAckEncoder:
    """Framed ``PublishResponse{ack, correlationId}`` messages for a run of PublishAsync requests
    of one partition, encoded by hand: the fields that are the same for the whole run are
    encoded once, so each ack costs a few byte concatenations instead of building two protobuf
    objects. The bytes are what protobuf itself writes (fields in number order, defaults
    omitted; the tests compare against ``SerializeToString``)."""

    __slots__ = ("_head", "_inbox", "_times")

    def __init__(
        self,
        stream: str,
        partition_subject: str,
        msg_subject: str,
        ack_inbox: str,
        reception_ns: int,
        commit_ns: int,
    ) -> None:
        self._head = _ack_head(stream, partition_subject, msg_subject)
        self._inbox = _string_field(0x2A, ack_inbox.encode())
        times = b""
        if reception_ns:
            times += b"\x40" + _varint(reception_ns)
        if commit_ns:
            times += b"\x48" + _varint(commit_ns)
        self._times = times

    def frame(self, offset: int, correlation_id: str, ack_policy: int) -> bytes:
        cid = _string_field(0x32, correlation_id.encode()) if correlation_id else b""
        ack = (
            self._head
            + (b"\x20" + _varint(offset) if offset else b"")
            + self._inbox
            + cid
            + (b"\x38" + _varint(ack_policy) if ack_policy else b"")
            + self._times
        )
        body = b"\x0a" + _varint(len(ack)) + ack
        if cid:
            body += b"\x1a" + cid[1:]
        return GRPC_PREFIX.pack(0, len(body)) + body

    def frames(self, base_offset: int, requests: Sequence[Any], skip_policy: int) -> bytes:
        """The framed acks of a run of requests stored at ``base_offset``, ``base_offset + 1``,
        ...: one per request whose ackPolicy is not ``skip_policy`` (NONE), in order, as one
        block. The same bytes as ``frame`` for each, without a function call per field (the
        varints of offsets and lengths are written inline for the common sizes)."""
        head = self._head
        inbox = self._inbox
        times = self._times
        pack = GRPC_PREFIX.pack
        parts: list[bytes] = []
        append = parts.append
        offset = base_offset - 1
        for r in requests:
            offset += 1
            policy = r.ackPolicy
            if policy == skip_policy:
                continue
            correlation_id = r.correlationId
            if correlation_id:
                raw = correlation_id.encode()
                n = len(raw)
                cid = (bytes((0x32, n)) if n < 0x80 else b"\x32" + _varint(n)) + raw
            else:
                cid = b""
            if offset < 0x80:
                off = bytes((0x20, offset)) if offset else b""
            elif offset < 0x4000:
                off = bytes((0x20, (offset & 0x7F) | 0x80, offset >> 7))
            elif offset < 0x200000:
                off = bytes(
                    (0x20, (offset & 0x7F) | 0x80, ((offset >> 7) & 0x7F) | 0x80, offset >> 14)
                )
            else:
                off = b"\x20" + _varint(offset)
            ack = head + off + inbox + cid + (_policy_field(policy) if policy else b"") + times
            n = len(ack)
            body = (bytes((0x0A, n)) if n < 0x80 else b"\x0a" + _varint(n)) + ack
            if cid:
                body += b"\x1a" + cid[1:]
            append(pack(0, len(body)))
            append(body)
        return b"".join(parts)


_POLICY_FIELDS = {p: b"\x38" + _varint(p) for p in range(1, 3)}


def _policy_field(policy: int) -> bytes:
    field = _POLICY_FIELDS.get(policy)
    return field if field is not None else b"\x38" + _varint(policy)
