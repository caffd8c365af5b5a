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

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.utilities

from gateway.protocols.errors import LocalProtocolError, RemoteProtocolError
from gateway.protocols.liftbridge.grpc_wire import (
    GRPC_PREFIX,
    METHODS,
    METHODS_BY_NAME,
    SERVICE,
    CallEnded,
    CallError,
    CallReset,
    CallStarted,
    ConnectionClosed,
    Event,
    HalfClosed,
    MessageReceived,
    MethodSpec,
    ResponseStarted,
    Status,
    _status_of,
    decode_grpc_message,
    encode_grpc_message,
    encode_timeout,
    frame_message,
    parse_timeout,
)
from gateway.protocols.liftbridge.h2fast import (
    _GOAWAY,
    _MAX_WINDOW,
    _REQUEST_FLAGS,
    _RESPONSE_HEADERS_BLOCK,
    _RST_STREAM,
    _TRAILER_FLAGS,
    _VALID_HEADERS,
    _VALID_HEADERS_KEPT,
    H2FastPath,
    _Stream,
    _trailers_block,
    _window_update,
)

if TYPE_CHECKING:
    from google.protobuf.message import Message

# the gRPC layer is part of this module's API (callers import it from here)
__all__ = [
    "ACK_BATCH",
    "DEFAULT_MAX_BUFFERED_BYTES",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_MAX_RESETS_PER_S",
    "GRPC_PREFIX",
    "METHODS",
    "METHODS_BY_NAME",
    "SERVICE",
    "CallEnded",
    "CallError",
    "CallReset",
    "CallStarted",
    "ConnectionClosed",
    "Event",
    "GrpcConnection",
    "HalfClosed",
    "LocalProtocolError",
    "MessageReceived",
    "MethodSpec",
    "RemoteProtocolError",
    "ResponseStarted",
    "Status",
    "decode_grpc_message",
    "encode_grpc_message",
    "encode_timeout",
    "frame_message",
    "parse_timeout",
]

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


class GrpcConnection(H2FastPath):
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
        self._blocked: dict[int, _Stream] = {}  # streams waiting for the peer's window
        self._can_detach = False
        self._install()

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
            # type(ev) per branch (not once in a local) so that mypy narrows ``ev``; the
            # usual event, DataReceived, is the first test either way
            if type(ev) is h2.events.DataReceived:
                self._on_data(ev, out)
            elif type(ev) is h2.events.RequestReceived:
                self._on_request(ev, out)
            elif type(ev) is h2.events.StreamEnded:
                self._on_stream_ended(ev.stream_id, out)
            elif type(ev) is h2.events.WindowUpdated or type(ev) is h2.events.RemoteSettingsChanged:
                flush = True
            elif type(ev) is h2.events.ResponseReceived:
                st = self._streams.get(ev.stream_id)
                headers = tuple(ev.headers)
                if st is not None and not self._trailers_only(st, headers, out):
                    out.append(ResponseStarted(ev.stream_id, headers))
            elif type(ev) is h2.events.TrailersReceived:
                if not self.client:
                    self._check_inbound(ev.headers, _TRAILER_FLAGS)
                st = self._streams.get(ev.stream_id)
                if st is not None:
                    status, message = _status_of(tuple(ev.headers))
                    st.end_after = None
                    out.append(CallEnded(ev.stream_id, status, message))
            elif type(ev) is h2.events.StreamReset:
                if self._forget(ev.stream_id) is not None:
                    out.append(CallReset(ev.stream_id, int(ev.error_code or 0)))
            elif type(ev) is h2.events.ConnectionTerminated:
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
        held = st.buf
        buf: bytes | bytearray | memoryview
        if not held and len(data) >= 5:
            # common case: the frame holds whole messages; parse in place, keep the rest
            buf = data
        else:
            held += data
            if len(held) < 5:
                return
            buf = held
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
        if buf is held:
            if pos:
                del held[:pos]
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
    def send_message(self, stream_id: int, message: bytes | bytearray | Message) -> None:
        """Queue one message (a protobuf object or its serialized bytes)."""
        payload = message if isinstance(message, bytes | bytearray) else message.SerializeToString()
        self.send_raw(stream_id, GRPC_PREFIX.pack(0, len(payload)) + payload)

    def send_messages(
        self, stream_id: int, messages: Sequence[bytes | bytearray | Message]
    ) -> None:
        """Queue several messages as one block (one DATA frame when the window allows)."""
        parts: list[bytes | bytearray] = []
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

    def _flush_all(self) -> None:
        """After the peer opened its windows: what waited for them goes out with the next
        ``data_to_send``."""
        self._dirty.update(self._blocked)
        self._blocked = {}
