"""The HTTP/2 fast path of the Liftbridge codec: the frames of a call handled without going
through ``h2``'s generic machinery, with ``h2``'s own state moved exactly as ``h2`` would move it.

Per message, ``h2``'s frame objects, state machines, header validation and HPACK coding cost
several times what the rest of a publish does, so :class:`H2FastPath` (a part of
:class:`~gateway.protocols.liftbridge.codec.GrpcConnection`) does the common cases itself:

- plain DATA frames of calls in progress are cut out of the read buffer directly, and the
  WINDOW_UPDATEs for those bytes are written here (``h2`` never saw them);
- WINDOW_UPDATE frames from the peer are applied to ``h2``'s outbound window counters;
- a whole one-message request whose header block the HPACK decoder already knows is taken
  without ``h2`` at all (a *detached* call, :meth:`H2FastPath._detach`): its frames both ways
  are written here;
- response headers, trailers and DATA frames are written as bytes we encode ourselves, after
  whatever ``h2`` queued before them;
- the HPACK decoder keeps the decoded header list of a block while the dynamic table is
  unchanged (:class:`_CachingDecoder`).

Why ``h2`` is pinned to 4.4.x (``h2>=4.4.1,<4.5`` in pyproject.toml): all of this reads and
writes ``h2`` internals that are not part of its public API: ``H2Connection.state_machine`` and
``H2Stream.state_machine`` (states and inputs), ``outbound_flow_control_window`` of the
connection and its streams, ``highest_inbound_stream_id``, ``incoming_buffer._headers_buffer``,
the encoder's ``header_table.resized`` and ``_encode_table_size_change()``, and ``hpack``'s
table internals (``dynamic_entries``, ``_current_size``). A release that renames or changes any
of them could break flow control or the stream states silently; the pin makes an upgrade a
deliberate step (run tests/protocols/liftbridge, which drive real grpcio and gufo clients
against this codec). Where an internal is missing, the codec falls back to ``h2``'s public path
(``_install``: no header cache, no detached calls), so the window and state counters are what
remains tied to the version.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import TYPE_CHECKING, Any

import h2.connection
import h2.exceptions
import h2.stream
import h2.utilities
import hpack

from gateway.protocols.liftbridge.grpc_wire import (
    CallReset,
    ConnectionClosed,
    Event,
    MethodSpec,
)

if TYPE_CHECKING:
    from gateway.protocols.errors import RemoteProtocolError

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

    def decode(self, data: bytes, raw: bool = False) -> list[Any]:
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


class H2FastPath:
    """The fast-path methods of :class:`~gateway.protocols.liftbridge.codec.GrpcConnection`
    (a mixin: they use its state and its slow path, ``_h2_feed``, ``_take``, ``_open_call``,
    ``_on_stream_ended``, ``_forget``, ``_count_reset``, ``_connection_error``)."""

    if TYPE_CHECKING:  # what GrpcConnection provides (set in its __init__, defined there)
        client: bool
        _h2: h2.connection.H2Connection
        _streams: dict[int, _Stream]
        _blocked: dict[int, _Stream]
        _closed: bool
        _broken: bool
        _goaway_sent: bool
        _can_detach: bool
        _flush_needed: bool
        _out_extra: bytearray
        _inbuf: bytearray
        _preface_left: int
        _max_in_frame: int

        def _h2_feed(self, data: bytes) -> list[Event]: ...
        def _take(
            self, st: _Stream, data: bytes | memoryview, length: int, out: list[Event]
        ) -> None: ...
        def _open_call(self, sid: int, headers: list[Any], out: list[Event]) -> _Stream: ...
        def _on_stream_ended(self, sid: int, out: list[Event]) -> None: ...
        def _forget(self, sid: int) -> _Stream | None: ...
        def _drop(self, sid: int) -> None: ...
        def _count_reset(self) -> None: ...
        def _connection_error(self, message: str) -> RemoteProtocolError: ...
        def _flush_all(self) -> None: ...

    def _install(self) -> None:
        """Swap in the caching HPACK decoder and decide whether calls may bypass h2 (see
        ``_detach``): both only with the internals they read."""
        stock = self._h2.decoder
        if _CachingDecoder.fits(stock):
            self._h2.decoder = _CachingDecoder(stock.max_header_list_size)
            self._h2.decoder.max_allowed_table_size = stock.max_allowed_table_size
        self._can_detach = (
            not self.client
            and isinstance(self._h2.decoder, _CachingDecoder)
            and hasattr(self._h2.encoder, "_encode_table_size_change")
            and hasattr(self._h2.encoder.header_table, "resized")
            and hasattr(self._h2.incoming_buffer, "_headers_buffer")
        )

    def receive_data(self, data: bytes | bytearray) -> list[Event]:
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
        decoder = h2c.decoder
        assert isinstance(decoder, _CachingDecoder)  # _can_detach says so (see _install)
        headers = decoder.cached(bytes(buf[pos + 9 : pos + 9 + length]))
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
