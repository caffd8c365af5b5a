"""The admin endpoint's connections: HTTP/1.1 (h11) over trio, with the listeners' kind of
limits, every connection's failure contained.

- ``[admin] max_connections``: at the limit a new connection takes the place of the one that
  has waited longest for its next request (so idle keep-alive connections cannot lock probes
  out); with none waiting, the new one is closed at once. Both counted and logged.
- ``max_header_bytes``: a request line plus headers larger than this gets 431 and a close.
- ``read_timeout_s``: a request's line and headers must arrive within this once its first byte
  has (slow senders get 408 and a close); each piece of a body must come within it too.
- ``idle_timeout_s``: a kept-alive connection with no new request is closed.
- ``max_body_bytes``: a larger body gets 413 before it is read.

Malformed requests get 400 and a close. Nothing a client sends, and no bug in answering one
request, ends more than that client's connection.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import h11
import structlog
import trio

from gateway.admin import AdminAccess, Answer, answer, precheck, request_path
from gateway.admin_auth import OFF_MESSAGE, AdminAuth, TokenError, make_admin_ssl_context
from gateway.core.acl import AclCore, TopicAcl
from gateway.observability import (
    CONNECTIONS_OPEN,
    CONNECTIONS_REFUSED,
    CONNECTIONS_TOTAL,
    PROTOCOL_ERRORS,
    limit_hit,
)
from gateway.streams import accept_connection

log = structlog.get_logger("gateway.admin")

PROTOCOL = "admin"
RECEIVE_SIZE = 65536
QUIET_CLOSES = frozenset({"closed", "idle_timeout", "peer_reset", "unread_body", "evicted"})
LINGER_S = 1.0  # after an answer that ends a connection, read (and drop) what the client still
LINGER_BYTES = 1 << 20  # sends for this long, so that it sees the answer instead of a reset


class Ended(Exception):
    """The connection ends here: ``reason`` for the close log line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class AdminEndpoint:
    """The admin endpoint's state while it serves."""

    config: Any  # AdminConfig
    access: AdminAccess
    ssl_context: ssl.SSLContext | None
    open_connections: int = 0
    idle: dict[Any, trio.CancelScope] = field(default_factory=dict)
    """The waits for a next request, longest first: at max_connections the first is ended."""

    @classmethod
    def build(cls, server: Any) -> AdminEndpoint:
        cfg = server.config.admin
        try:
            auth = AdminAuth.from_config(cfg)
        except TokenError as exc:  # checked with the config; unreadable since: fail closed
            log.error("admin_token_unreadable", token_file=cfg.token_file, expected=str(exc))
            auth = AdminAuth(token=None, client_ca=False, loopback=False)
        acl = TopicAcl(cfg.read_allow, cfg.read_deny, cfg.write_allow, cfg.write_deny)
        core = server.core if acl.is_open else AclCore(server.core, acl, PROTOCOL, False, log)
        return cls(cfg, AdminAccess(auth, core), make_admin_ssl_context(cfg))


async def serve_admin_http(server: Any, listeners: list[trio.SocketListener]) -> None:
    endpoint = AdminEndpoint.build(server)
    auth = endpoint.access.auth
    if auth.off:
        log.warning("admin_data_api_off", detail=OFF_MESSAGE)
    else:
        log.info("admin_data_api", access=auth.describe(), tls=endpoint.ssl_context is not None)
    async with trio.open_nursery() as nursery:
        for sock in listeners:
            nursery.start_soon(_accept_loop, server, endpoint, sock, nursery)


async def _accept_loop(
    server: Any, endpoint: AdminEndpoint, sock: trio.SocketListener, nursery: trio.Nursery
) -> None:
    limit = endpoint.config.max_connections
    while True:
        stream = await accept_connection(sock, PROTOCOL, log)
        if endpoint.open_connections >= limit:
            if endpoint.idle:  # end the longest wait for a next request, serve the new one
                endpoint.idle.pop(next(iter(endpoint.idle))).cancel()
                limit_hit("max_connections", PROTOCOL, log, max_connections=limit)
            else:
                CONNECTIONS_REFUSED.labels(protocol=PROTOCOL, reason="max_connections").inc()
                limit_hit("max_connections", PROTOCOL, log, max_connections=limit)
                with trio.CancelScope(shield=True):
                    await stream.aclose()
                continue
        endpoint.open_connections += 1
        nursery.start_soon(_connection, server, endpoint, stream)


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _connection(server: Any, endpoint: AdminEndpoint, stream: trio.SocketStream) -> None:
    conn_log = log.bind(protocol=PROTOCOL, peer=_peer(stream))
    CONNECTIONS_TOTAL.labels(protocol=PROTOCOL).inc()
    CONNECTIONS_OPEN.labels(protocol=PROTOCOL).inc()
    inner: trio.abc.Stream = stream
    reason = "closed"
    try:
        client_cert = False
        if endpoint.ssl_context is not None:
            inner = trio.SSLStream(stream, endpoint.ssl_context, server_side=True)
            client_cert = await _handshake(inner, endpoint.config.read_timeout_s)
        await _serve_http(server, endpoint, inner, client_cert, conn_log)
    except Ended as end:
        reason = end.reason
        if not reason.startswith(("tls", "handshake")):
            await _linger(inner)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        reason = "peer_reset"
    except Exception as raised:  # a bug in one connection never takes the endpoint down
        reason = "error"
        PROTOCOL_ERRORS.labels(protocol=PROTOCOL, kind="error").inc()
        conn_log.exception("connection_failed", error=repr(raised))
    finally:
        endpoint.open_connections -= 1
        CONNECTIONS_OPEN.labels(protocol=PROTOCOL).dec()
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 2):
            try:
                await inner.aclose()  # TLS: close_notify, which a stuck peer may never read
            except Exception:
                pass
        if inner is not stream:
            await trio.aclose_forcefully(stream)
        if reason not in QUIET_CLOSES:
            _log_close(conn_log, reason)


_CLOSE_LOGGED: dict[str, float] = {}
CLOSE_LOG_INTERVAL_S = 60.0


def _log_close(conn_log: Any, reason: str) -> None:
    """One line for a connection a client's bad input ended: the first of its kind, then at
    most one a minute per kind (every one is counted in the metrics), so a client cannot flood
    the log."""
    kind = reason.split(":", 1)[0]
    now = time.monotonic()
    last = _CLOSE_LOGGED.get(kind)
    if last is not None and now - last < CLOSE_LOG_INTERVAL_S:
        return
    _CLOSE_LOGGED[kind] = now
    conn_log.warning("connection_close", reason=reason)


async def _linger(stream: trio.abc.Stream) -> None:
    """End our side, then drop what the client still sends for a moment: closing a socket with
    unread bytes would reset the connection and could lose the answer just sent."""
    with trio.move_on_after(LINGER_S):
        try:
            if isinstance(stream, trio.abc.HalfCloseableStream):
                await stream.send_eof()
            drained = 0
            while drained < LINGER_BYTES:
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return
                drained += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            return


async def _handshake(tls: trio.SSLStream[trio.SocketStream], timeout_s: float) -> bool:
    """The TLS handshake within ``timeout_s``; whether the client presented a certificate the
    client CA verified (a presented one that does not verify fails the handshake)."""
    try:
        with trio.fail_after(timeout_s):
            await tls.do_handshake()
    except trio.TooSlowError:
        CONNECTIONS_REFUSED.labels(protocol=PROTOCOL, reason="handshake_timeout").inc()
        raise Ended("handshake_timeout") from None
    except trio.BrokenResourceError as exc:
        CONNECTIONS_REFUSED.labels(protocol=PROTOCOL, reason="tls").inc()
        raise Ended(f"tls: {exc.__cause__ or exc}") from None
    return bool(tls.getpeercert())


async def _serve_http(
    server: Any, endpoint: AdminEndpoint, stream: trio.abc.Stream, client_cert: bool, conn_log: Any
) -> None:
    cfg = endpoint.config
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=cfg.max_header_bytes)
    try:
        while True:
            try:
                event = await _next_head(conn, stream, cfg, endpoint.idle)
            except Ended as end:
                if end.reason == "read_timeout":
                    PROTOCOL_ERRORS.labels(protocol=PROTOCOL, kind="read_timeout").inc()
                    await _send_final(stream, conn, 408, "the request did not arrive in time")
                raise
            if isinstance(event, h11.ConnectionClosed):
                return
            assert isinstance(event, h11.Request), event
            await _exchange(server, endpoint, stream, conn, event, client_cert)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:  # in a head or a body
        await _bad_request(stream, conn, exc, cfg)


async def _next_head(
    conn: h11.Connection, stream: trio.abc.Stream, cfg: Any, idle: dict[Any, trio.CancelScope]
) -> Any:
    """The next request head (or ConnectionClosed): the idle timeout until its first byte, then
    the read timeout for the whole head. The wait for the first byte is listed in ``idle``,
    where the accept loop may end it."""
    now = trio.current_time()
    idle_deadline = now + cfg.idle_timeout_s
    head_deadline = now + cfg.read_timeout_s if conn.trailing_data[0] else None
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        deadline = idle_deadline if head_deadline is None else head_deadline
        # h11 checks its limit only on a head still incomplete: never buffer more than one
        # byte over it, so a head over the limit is refused however fast it arrives
        room = cfg.max_header_bytes + 1 - len(conn.trailing_data[0])
        waiting = head_deadline is None
        with trio.move_on_at(deadline) as scope:
            if waiting:
                idle[conn] = scope
            try:
                data = await stream.receive_some(min(RECEIVE_SIZE, max(1, room)))
            finally:
                listed = idle.pop(conn, None) is not None
            if data and waiting:
                head_deadline = trio.current_time() + cfg.read_timeout_s
            conn.receive_data(bytes(data))  # bytes(): no copy when it is bytes already
            continue
        if waiting and not listed:
            raise Ended("evicted")  # the accept loop took it off the list for a new connection
        raise Ended("idle_timeout" if waiting else "read_timeout")


async def _read_body(conn: h11.Connection, stream: trio.abc.Stream, cfg: Any) -> bytes:
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            with trio.move_on_after(cfg.read_timeout_s):
                conn.receive_data(bytes(await stream.receive_some(RECEIVE_SIZE)))
                continue
            PROTOCOL_ERRORS.labels(protocol=PROTOCOL, kind="read_timeout").inc()
            await _send_final(stream, conn, 408, "the request body did not arrive in time")
            raise Ended("read_timeout")
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > cfg.max_body_bytes:
                limit_hit("max_body_bytes", PROTOCOL, log, max_body_bytes=cfg.max_body_bytes)
                await _send_final(stream, conn, 413, "body too large")
                raise Ended("max_body_bytes")
            continue
        if isinstance(event, h11.EndOfMessage):
            return bytes(body)
        raise Ended("closed mid-body")  # ConnectionClosed


async def _exchange(
    server: Any,
    endpoint: AdminEndpoint,
    stream: trio.abc.Stream,
    conn: h11.Connection,
    request: h11.Request,
    client_cert: bool,
) -> None:
    """Answer one request (its body read only when it may be used)."""
    method = request.method.decode("ascii", "replace")
    target = request.target.decode("ascii", "replace")
    headers = dict(request.headers)  # h11 lowercases names
    cfg = endpoint.config
    done, full = precheck(
        endpoint.access, method, request_path(target), headers.get(b"authorization"), client_cert
    )
    if done is None and int(headers.get(b"content-length", b"0") or 0) > cfg.max_body_bytes:
        limit_hit("max_body_bytes", PROTOCOL, log, max_body_bytes=cfg.max_body_bytes)
        done = Answer(413, "application/json", b'{"error": "body too large"}')
    if done is not None:
        # a body the answer does not need is not read: the connection ends after the answer
        unread = b"transfer-encoding" in headers or headers.get(b"content-length", b"0") != b"0"
        if not unread:
            await _read_body(conn, stream, cfg)  # only the end of the message
        await _respond(stream, conn, done, head_only=method == "HEAD", close=unread)
        if unread:
            raise Ended("unread_body")
        return
    if conn.they_are_waiting_for_100_continue:
        await stream.send_all(conn.send(h11.InformationalResponse(status_code=100, headers=[])))
    body = await _read_body(conn, stream, cfg)
    server.admin_inflight += 1
    try:  # counted until the whole answer is written: a drain waits for it
        result = await answer(server, endpoint.access, method, target, body, full)
        await _respond(stream, conn, result, head_only=method == "HEAD")
    finally:
        server.admin_inflight -= 1


async def _respond(
    stream: trio.abc.Stream,
    conn: h11.Connection,
    result: Answer,
    head_only: bool = False,
    close: bool = False,
) -> None:
    """Send ``result``; for HEAD the same headers without the body."""
    headers = [
        ("content-type", result.ctype),
        ("content-length", str(len(result.body))),
        *result.headers,
    ]
    if close:
        headers.append(("connection", "close"))
    out = conn.send(h11.Response(status_code=result.status, headers=headers))
    if not head_only and result.body:
        out += conn.send(h11.Data(data=result.body))
    out += conn.send(h11.EndOfMessage())
    await stream.send_all(out)


async def _send_final(stream: trio.abc.Stream, conn: h11.Connection, status: int, msg: str) -> None:
    """An error answer that ends the connection, if an answer can still be sent on it."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = ('{"error": "' + msg + '"}').encode()
    headers = [
        ("content-type", "application/json"),
        ("content-length", str(len(body))),
        ("connection", "close"),
    ]
    try:
        out = conn.send(h11.Response(status_code=status, headers=headers))
        out += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    except h11.LocalProtocolError:
        return
    with trio.move_on_after(5):
        await stream.send_all(out)


async def _bad_request(
    stream: trio.abc.Stream, conn: h11.Connection, exc: h11.RemoteProtocolError, cfg: Any
) -> None:
    """400 (431 for a head over ``max_header_bytes``) and the end of the connection."""
    status = exc.error_status_hint
    if status == 431:
        limit_hit("max_header_bytes", PROTOCOL, log, max_header_bytes=cfg.max_header_bytes)
        kind, message = "max_header_bytes", "request line and headers too large"
    else:
        status = 400
        kind, message = "malformed", "malformed HTTP request"
    PROTOCOL_ERRORS.labels(protocol=PROTOCOL, kind=kind).inc()
    await _send_final(stream, conn, status, message)
    raise Ended(f"{kind}: {exc}")
