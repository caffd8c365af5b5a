"""A small trio-native NATS client: just what the JetStream backend needs.

One connection, kept alive by :meth:`NatsClient.run` (a background task: connect, read, reconnect
with backoff after any loss). Requests use one wildcard inbox subscription; replies are routed by
the inbox's last token. Writes from all tasks are coalesced by one writer task, so a batch of
pipelined publishes goes out in one ``send_all``.

While the connection is down every call fails at once with ``ErrorCode.BACKEND_UNAVAILABLE``
(retriable); requests in flight when the connection drops fail the same way, so a caller never
mistakes an unacknowledged publish for an acknowledged one.
"""

from __future__ import annotations

import itertools
import secrets
import ssl
from collections.abc import Sequence
from typing import Any

import structlog
import trio

from gateway.backends.nats.auth import Credentials, Server, parse_servers
from gateway.backends.nats.protocol import (
    PING,
    PONG,
    ClientParser,
    Err,
    Info,
    Msg,
    NatsProtocolError,
    Ping,
    Pong,
    encode_connect,
    encode_pub,
    encode_sub,
    encode_unsub,
)
from gateway.model import ErrorCode, GatewayError

log = structlog.get_logger("gateway.backends.nats")

INBOX_SID = 1
STATUS_NO_RESPONDERS = 503
STATUS_END_OF_BATCH = 204


def unavailable(message: str) -> GatewayError:
    return GatewayError(ErrorCode.BACKEND_UNAVAILABLE, message)


class _Pending:
    __slots__ = ("event", "msgs", "multi", "error")

    def __init__(self, multi: bool) -> None:
        self.event = trio.Event()
        self.msgs: list[Msg] = []
        self.multi = multi
        self.error: GatewayError | None = None


class NatsClient:
    def __init__(
        self,
        url: str | Sequence[str],
        *,
        credentials: Credentials | None = None,
        ssl_context: ssl.SSLContext | None = None,
        tls_server_name: str = "",
        name: str = "gateway",
        connect_timeout: float = 2.0,
        request_timeout: float = 5.0,
        reconnect_wait: float = 0.2,
        reconnect_wait_max: float = 2.0,
        ping_interval: float = 5.0,
    ) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        self.servers = parse_servers(urls)  # tried in turn, from the one after the last used
        self._discovered: list[Server] = []  # the cluster's other servers, from INFO
        self._turn = 0
        self.host, self.port = self.servers[0].host, self.servers[0].port
        self.credentials = credentials or Credentials()
        self.ssl_context = ssl_context
        self.tls_server_name = tls_server_name
        self.url = ",".join(f"nats://{s.address}" for s in self.servers)  # no password in logs
        self.name = name
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.reconnect_wait = reconnect_wait
        self.reconnect_wait_max = reconnect_wait_max
        self.ping_interval = ping_interval
        self.server_info: dict[str, Any] = {}
        self.last_error = "not connected yet"
        self.reconnects = 0
        self._stream: trio.abc.Stream | None = None
        self._sock: trio.SocketStream
        self._connected = trio.Event()
        self._inbox = f"_INBOX.{secrets.token_hex(8)}."
        self._tokens = itertools.count(1)
        self._pending: dict[str, _Pending] = {}
        self._out: list[bytes] = []
        self._out_ready = trio.Event()
        self._pongs: list[trio.Event] = []
        self._closed = False
        self._scope = trio.CancelScope()
        # plain subscriptions (sid -> subject, queue), kept across reconnects; their messages
        # arrive in batches (one per read) on ``messages``
        self._subs: dict[int, tuple[str, str]] = {}
        self._sids = itertools.count(INBOX_SID + 1)
        self._msg_send, self.messages = trio.open_memory_channel[list[Msg]](64)

    @property
    def connected(self) -> bool:
        return self._stream is not None

    # ------------------------------------------------------------------ lifecycle
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve, reconnect; forever (cancel to stop). Reports started after the first
        attempt, connected or not, so a gateway starts even while NATS is down."""
        with trio.CancelScope() as self._scope:
            await self._run(task_status)

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        wait = self.reconnect_wait
        started = False
        while not self._closed:
            try:
                stream = await self._connect(self._next_server())
            except (
                OSError,
                GatewayError,
                NatsProtocolError,
                trio.TooSlowError,
                trio.BrokenResourceError,
            ) as exc:
                self._failed(exc)
                if not started:
                    started = True
                    task_status.started()
                await trio.sleep(wait)
                wait = min(wait * 2, self.reconnect_wait_max)
                continue
            wait = self.reconnect_wait
            if not started:
                started = True
                task_status.started()
            try:
                await self._serve(stream)
            except* (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as group:
                self.last_error = f"connection lost: {group.exceptions[0]!r}"
            except* NatsProtocolError as group:
                self.last_error = f"protocol error: {group.exceptions[0]}"
            finally:
                self._drop(stream)
            if not self._closed:
                log.warning("nats connection lost", url=self.url, reason=self.last_error)
                await trio.sleep(wait)

    def _next_server(self) -> Server:
        every = self.servers + [s for s in self._discovered if s not in self.servers]
        server = every[self._turn % len(every)]
        self._turn += 1
        self.host, self.port = server.host, server.port
        return server

    def _failed(self, exc: BaseException) -> None:
        """Remember why the last attempt failed; log it once per distinct cause."""
        cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else None
        reason = f"{exc}" + (f" ({cause})" if cause is not None else "")
        error = f"connect to {self.host}:{self.port} failed: {reason or type(exc).__name__}"
        if error != self.last_error:
            log.warning("nats connect failed", url=self.url, reason=error)
        self.last_error = error

    async def _connect(self, server: Server) -> trio.abc.Stream:
        with trio.fail_after(self.connect_timeout):
            sock = await trio.open_tcp_stream(server.host, server.port)
            stream: trio.abc.Stream = sock
            try:
                parser = ClientParser()
                info: dict[str, Any] | None = None
                while info is None:
                    data = await stream.receive_some(65536)
                    if not data:
                        raise unavailable("connection closed during handshake")
                    parser.receive_data(bytes(data))  # no copy when it is bytes already
                    for ev in parser.events():
                        if isinstance(ev, Info):
                            info = ev.data
                if info.get("tls_required") or self.ssl_context is not None:
                    if self.ssl_context is None:
                        raise unavailable("the server requires TLS: set tls = true")
                    stream = trio.SSLStream(
                        sock,
                        self.ssl_context,
                        server_hostname=self.tls_server_name or server.host,
                    )
                    await stream.do_handshake()
                options = {
                    "verbose": False,
                    "pedantic": False,
                    "headers": True,
                    "no_responders": True,
                    "protocol": 1,
                    "lang": "python-trio",
                    "version": "0.1",
                    "name": self.name,
                }
                options.update(self.credentials.connect_options(server, info.get("nonce")))
                subs = b"".join(encode_sub(subj, sid, q) for sid, (subj, q) in self._subs.items())
                await stream.send_all(
                    encode_connect(options) + encode_sub(self._inbox + "*", INBOX_SID) + subs + PING
                )
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        raise unavailable("connection closed during handshake")
                    parser.receive_data(bytes(data))  # no copy when it is bytes already
                    events = parser.events()
                    for ev in events:
                        if isinstance(ev, Err):
                            raise unavailable(f"server refused connection: {ev.message}")
                    if any(isinstance(ev, Pong) for ev in events):
                        break
            except BaseException:
                await trio.aclose_forcefully(sock)
                raise
        self.server_info = info
        self._learn_servers(info)
        self._parser = parser
        self._sock = sock
        return stream

    def _learn_servers(self, info: dict[str, Any]) -> None:
        """The other servers of the cluster (INFO ``connect_urls``), tried after the
        configured ones when a server goes away."""
        urls = info.get("connect_urls") or []
        self._discovered = parse_servers(urls[:32])

    async def _serve(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._connected.set()
        self.last_error = ""
        log.info("nats connected", url=self.url, server=self.server_info.get("version"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._writer, stream)
            nursery.start_soon(self._pinger, stream)
            try:
                await self._reader(stream)
            finally:
                nursery.cancel_scope.cancel()

    def _drop(self, stream: trio.abc.Stream) -> None:
        self._stream = None
        self._connected = trio.Event()
        self._out.clear()
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.error = unavailable(f"NATS connection lost ({self.last_error})")
            p.event.set()
        for ev in self._pongs:
            ev.set()
        self._pongs = []
        self._sock.socket.close()

    async def aclose(self) -> None:
        self._closed = True
        self._scope.cancel()

    async def _reader(self, stream: trio.abc.Stream) -> None:
        parser = self._parser
        inbox = self._inbox
        ilen = len(inbox)
        pending = self._pending
        while True:
            data = await stream.receive_some(1 << 18)
            if not data:
                raise trio.BrokenResourceError("server closed the connection")
            parser.receive_data(bytes(data))  # no copy when it is bytes already
            delivered: list[Msg] = []
            for ev in parser.events():
                if isinstance(ev, Msg):
                    if ev.sid != INBOX_SID and ev.sid in self._subs:
                        delivered.append(ev)
                    elif ev.subject.startswith(inbox):
                        p = pending.get(ev.subject[ilen:])
                        if p is not None:
                            p.msgs.append(ev)
                            if not p.multi or ev.status:
                                p.event.set()
                elif isinstance(ev, Ping):
                    self._write(PONG)
                elif isinstance(ev, Pong):
                    if self._pongs:
                        self._pongs.pop(0).set()
                elif isinstance(ev, Err):
                    self.last_error = f"server error: {ev.message}"
                    log.warning("nats server error", message=ev.message)
                    low = ev.message.lower()
                    if "permissions violation" not in low and "invalid subject" not in low:
                        raise trio.BrokenResourceError(ev.message)
                elif isinstance(ev, Info):
                    self.server_info.update(ev.data)
            if delivered:
                await self._msg_send.send(delivered)

    async def _writer(self, stream: trio.abc.Stream) -> None:
        while True:
            await self._out_ready.wait()
            self._out_ready = trio.Event()
            if not self._out:
                continue
            data = b"".join(self._out)
            self._out.clear()
            await stream.send_all(data)

    async def _pinger(self, stream: trio.abc.Stream) -> None:
        while True:
            await trio.sleep(self.ping_interval)
            try:
                await self.ping(timeout=self.ping_interval * 2)
            except GatewayError:
                self.last_error = "no PONG from server"
                await trio.aclose_forcefully(stream)
                return

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self._out_ready.set()

    def _check(self) -> None:
        if self._stream is None:
            raise unavailable(
                f"NATS at {self.host}:{self.port} is not reachable: {self.last_error}"
            )

    # ------------------------------------------------------------------ calls
    async def wait_connected(self, timeout: float) -> bool:
        with trio.move_on_after(timeout):
            await self._connected.wait()
            return True
        return False

    async def ping(self, timeout: float = 2.0) -> float:
        self._check()
        ev = trio.Event()
        self._pongs.append(ev)
        start = trio.current_time()
        self._write(PING)
        with trio.move_on_after(timeout):
            await ev.wait()
            self._check()
            return trio.current_time() - start
        raise GatewayError(ErrorCode.TIMEOUT, f"no PONG from NATS within {timeout}s")

    def subscribe(self, subject: str, queue: str = "") -> int:
        """A plain (or queue) subscription, renewed after reconnects; returns its sid. Its
        messages arrive on ``self.messages`` (lists of Msg, one list per socket read)."""
        sid = next(self._sids)
        self._subs[sid] = (subject, queue)
        if self._stream is not None:
            self._write(encode_sub(subject, sid, queue))
        return sid

    def unsubscribe(self, sid: int) -> None:
        if self._subs.pop(sid, None) is not None and self._stream is not None:
            self._write(encode_unsub(sid))

    def publish(self, subject: str, payload: bytes, headers: bytes = b"") -> None:
        """Fire and forget (core NATS)."""
        self._check()
        self._write(encode_pub(subject, payload, "", headers))

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        headers: bytes = b"",
        timeout: float | None = None,
    ) -> Msg:
        return (await self.request_many([(subject, payload, headers)], timeout))[0]

    async def request_many(
        self,
        requests: Sequence[tuple[str, bytes, bytes]],
        timeout: float | None = None,
        need_reply: Sequence[bool] | None = None,
    ) -> list[Msg]:
        """Send every request at once (pipelined), return their first replies in order.
        With ``need_reply``, the messages marked False are published without a reply subject
        (and have no entry in the result)."""
        self._check()
        tokens = []
        waits = []
        out = []
        for i, (subject, payload, headers) in enumerate(requests):
            if need_reply is not None and not need_reply[i]:
                out.append(encode_pub(subject, payload, "", headers))
                continue
            token = str(next(self._tokens))
            p = _Pending(False)
            self._pending[token] = p
            tokens.append(token)
            waits.append(p)
            out.append(encode_pub(subject, payload, self._inbox + token, headers))
        self._write(b"".join(out))
        try:
            with trio.move_on_after(timeout or self.request_timeout) as scope:
                for p in waits:
                    await p.event.wait()
            if scope.cancelled_caught:
                raise GatewayError(
                    ErrorCode.TIMEOUT, f"NATS did not answer {requests[0][0]} in time"
                )
        finally:
            for t in tokens:
                self._pending.pop(t, None)
        replies = []
        for p in waits:
            if p.error is not None:
                raise p.error
            replies.append(p.msgs[0])
        return replies

    async def request_stream(
        self,
        subject: str,
        payload: bytes = b"",
        headers: bytes = b"",
        timeout: float | None = None,
    ) -> list[Msg]:
        """A request with many replies that ends with a status message (JetStream batch
        direct get: data messages, then ``204 EOB``; or one ``404``). Returns all of them."""
        self._check()
        token = str(next(self._tokens))
        p = _Pending(True)
        self._pending[token] = p
        self._write(encode_pub(subject, payload, self._inbox + token, headers))
        try:
            with trio.move_on_after(timeout or self.request_timeout) as scope:
                await p.event.wait()
            if scope.cancelled_caught:
                raise GatewayError(ErrorCode.TIMEOUT, f"NATS did not answer {subject} in time")
        finally:
            self._pending.pop(token, None)
        if p.error is not None:
            raise p.error
        return p.msgs
