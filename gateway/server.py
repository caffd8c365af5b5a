"""The server: backends, the core, one trio listener per enabled protocol and the admin endpoint,
all in one nursery tree.

Shutdown (SIGTERM/SIGINT or :meth:`Server.request_stop`): readiness turns false, listeners stop
accepting, every connection's ``shutdown`` event is set so it finishes the request in hand, the
connections get ``shutdown_grace_s`` to end before they are cancelled, then the backends are
flushed and closed.
"""

from __future__ import annotations

import dataclasses
import gc
import signal
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio
from prometheus_client import Gauge

from gateway import proxy_protocol
from gateway.allocator import tune_allocator
from gateway.backends import get_backend_spec
from gateway.backends.base import Backend
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.core.acl import AclCore, TopicAcl
from gateway.core.engine import Core
from gateway.model import GatewayError
from gateway.observability import (
    CONNECTIONS_OPEN,
    CONNECTIONS_REFUSED,
    CONNECTIONS_TOTAL,
    PROTOCOL_ERRORS,
    REGISTRY,
    limit_hit,
)
from gateway.protocols import get_protocol
from gateway.protocols.answers import MEMORY as ANSWER_MEMORY
from gateway.protocols.base import ConnectionContext, ListenerConfig
from gateway.reuseport import open_reuseport_listeners
from gateway.streams import (
    ConnectionTimeout,
    GuardedStream,
    PrefixedStream,
    accept_connection,
    sweep_interval,
)
from gateway.tls import build_contexts

log = structlog.get_logger("gateway.server")

CONNECTIONS_HANDSHAKING = Gauge(
    "gateway_connections_handshaking",
    "Accepted connections still in their PROXY header or TLS handshake (they count toward "
    "max_connections)",
    ["protocol"],
    registry=REGISTRY,
)


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass
class ListenerState:
    name: str
    config: ListenerConfig
    host: str = ""
    port: int = 0
    advertised_host: str = ""
    advertised_port: int = 0
    connections: set[ConnectionContext] = field(default_factory=set)
    accepted: int = 0
    refused: int = 0
    ssl_context: ssl.SSLContext | None = None
    streams: set[GuardedStream] = field(default_factory=set)
    handshaking: int = 0  # accepted, still in the PROXY header / TLS handshake
    # the core as this listener's ACL lets it see it (set again by Server._apply_acl)
    core: Core | AclCore = field(kw_only=True)


def sole_exception(exc: BaseException) -> BaseException:
    """What a handler raised, out of the exception groups of the nurseries it passed through
    (a timeout inside a session's nursery arrives wrapped); a group of several stays a group."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class RefusedConnection(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def build_backends(config: GatewayConfig) -> dict[str, Backend]:
    backends: dict[str, Backend] = {}
    for name, bc in config.backends.items():
        spec = get_backend_spec(bc.type)
        backends[name] = spec.factory(name, bc.options, config)
    return backends


def build_core(config: GatewayConfig, backends: dict[str, Backend]) -> Core:
    return Core(
        backends,
        [(r.topic, r.backend) for r in config.routes],
        auto_create_topics=config.server.auto_create_topics,
        default_partitions=config.server.default_partitions,
        max_topics=config.server.max_topics,
        max_partitions_per_topic=config.server.max_partitions_per_topic,
        max_partitions_total=config.server.max_partitions_total,
        max_topics_created_per_s=config.server.max_topics_created_per_s,
        group_assignment=config.server.group_assignment,
        group_lease_ms=config.server.group_lease_ms,
        max_group_members=config.server.max_group_members,
        max_kafka_groups=config.server.max_kafka_groups,
        max_producer_states=config.server.max_producer_states,
    )


class Server:
    def __init__(self, config: GatewayConfig, reuse_port: bool = False) -> None:
        self.config = config
        self.reuse_port = reuse_port  # SO_REUSEPORT sockets: one of `serve --workers N`
        enabled = {name: lc for name, lc in config.listeners.items() if lc.enabled}
        contexts, problems = build_contexts(enabled)
        if problems:  # a certificate changed between the config check and now
            raise SystemExit("; ".join(problems))
        self.backends = build_backends(config)
        self.core = build_core(config, self.backends)
        ANSWER_MEMORY.configure(config.server.max_answer_memory)
        self.listeners: dict[str, ListenerState] = {
            name: ListenerState(name, lc, ssl_context=contexts[name], core=self.core)
            for name, lc in enabled.items()
        }
        self.admin_inflight = 0
        for name, state in self.listeners.items():
            self._apply_acl(name, state)
        self.admin_address: tuple[str, int] | None = None
        self.started_at = time.time()
        self.draining = False
        self.ready = False
        self._stop = trio.Event()

    def _apply_acl(self, name: str, state: ListenerState) -> None:
        cfg = state.config
        acl = TopicAcl(cfg.read_allow, cfg.read_deny, cfg.write_allow, cfg.write_deny)
        if isinstance(state.core, AclCore):
            state.core.acl = acl  # keep the object: protocols key per-core state on it
        elif acl.is_open:
            state.core = self.core
        else:
            hide = not get_protocol(name).authorization_error
            state.core = AclCore(self.core, acl, name, hide, log)

    # ------------------------------------------------------------------ control
    def request_stop(self) -> None:
        self.draining = True
        self.ready = False
        self._stop.set()

    def addresses(self) -> dict[str, tuple[str, int]]:
        out = {name: (st.host, st.port) for name, st in self.listeners.items()}
        if self.admin_address is not None:
            out = {"admin": self.admin_address, **out}
        return out

    def listening_line(self) -> str:
        parts = [f"{name}={format_address(*addr)}" for name, addr in self.addresses().items()]
        return "listening " + " ".join(parts)

    # ------------------------------------------------------------------ running
    async def run(
        self,
        *,
        handle_signals: bool = True,
        announce: bool = True,
        freeze_heap: bool = False,
        task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until stopped. ``freeze_heap``: the process exists to serve (see
        :func:`freeze_startup_heap`)."""
        async with trio.open_nursery() as background:
            for backend in self.backends.values():
                try:
                    await backend.open(background)
                except GatewayError as exc:  # a refused start: one clear line, no traceback
                    raise SystemExit(f"backends.{backend.name}: {exc.message}") from None
            for name, state in self.listeners.items():
                get_protocol(name).load_session()  # not in the first connection's time
                task = get_protocol(name).background
                if task is not None:  # a protocol's listener-wide task (e.g. NATS ingestion)
                    background.start_soon(task, self.core, state.config)
            background.start_soon(self._sweep_timeouts)
            background.start_soon(self.core.groups.run)  # shared groups: lease renewal
            try:
                await self._serve(background, handle_signals, announce, freeze_heap, task_status)
            finally:
                with trio.CancelScope(shield=True):
                    await self._close_backends()
                background.cancel_scope.cancel()

    async def _sweep_timeouts(self) -> None:
        """End the waits for bytes whose idle or read timeout ran out, for every connection,
        from this one task (see GuardedStream's ``swept``). The interval follows the
        listeners' timeouts, read again each round so a reload's new values apply."""
        while True:
            await trio.sleep(
                sweep_interval(
                    t
                    for state in self.listeners.values()
                    for t in (
                        state.config.idle_timeout_s,
                        state.config.read_timeout_s,
                        state.config.send_timeout_s,
                    )
                )
            )
            now = trio.current_time()
            for state in self.listeners.values():
                for guarded in state.streams:
                    guarded.expire_if_due(now)

    async def _close_backends(self) -> None:
        for backend in self.backends.values():
            try:
                await backend.flush()
                await backend.close()
            except Exception as exc:  # keep closing the others
                log.error("backend_close_failed", backend=backend.name, error=str(exc))

    async def _open_listeners(self, port: int, host: str) -> list[trio.SocketListener]:
        if self.reuse_port:
            return await open_reuseport_listeners(port, host)
        return await trio.open_tcp_listeners(port, host=host)

    async def _bind(self) -> dict[str, list[trio.SocketListener]]:
        bound: dict[str, list[trio.SocketListener]] = {}
        for name, state in self.listeners.items():
            cfg = state.config
            try:
                socks = await self._open_listeners(cfg.port, cfg.host)
            except OSError as exc:
                raise SystemExit(
                    f"listeners.{name}: cannot bind {format_address(cfg.host, cfg.port)}: {exc}"
                ) from None
            bound[name] = socks
            host, port = socks[0].socket.getsockname()[:2]
            state.host, state.port = host, port
            state.advertised_host = cfg.advertised_host or host
            state.advertised_port = cfg.advertised_port or port
        return bound

    async def _serve(
        self,
        background: trio.Nursery,
        handle_signals: bool,
        announce: bool,
        freeze_heap: bool,
        task_status: trio.TaskStatus[Server],
    ) -> None:
        from gateway.admin_http import serve_admin_http

        bound = await self._bind()
        admin_socks: list[trio.SocketListener] = []
        if self.config.admin.enabled:
            try:
                admin_socks = await self._open_listeners(
                    self.config.admin.port, self.config.admin.host
                )
            except OSError as exc:
                raise SystemExit(
                    f"admin: cannot bind "
                    f"{format_address(self.config.admin.host, self.config.admin.port)}: {exc}"
                ) from None
            self.admin_address = tuple(admin_socks[0].socket.getsockname()[:2])

        async with trio.open_nursery() as admin_nursery:
            if admin_socks:
                admin_nursery.start_soon(serve_admin_http, self, admin_socks)
            async with trio.open_nursery() as connections:
                async with trio.open_nursery() as acceptors:
                    for name, socks in bound.items():
                        for sock in socks:
                            acceptors.start_soon(self._accept_loop, name, sock, connections)
                    if handle_signals:
                        await acceptors.start(self._watch_signals)
                    if freeze_heap:
                        freeze_startup_heap()
                        tune_allocator(log)  # the serving process: large buffers reused
                    self.ready = True
                    line = self.listening_line()
                    if announce:
                        print(line, flush=True)
                    log.info("started", listeners=line.removeprefix("listening "))
                    task_status.started(self)
                    await self._stop.wait()
                    acceptors.cancel_scope.cancel()
                for sock in [s for socks in bound.values() for s in socks]:
                    await sock.aclose()
                open_count = sum(len(s.connections) for s in self.listeners.values())
                log.info(
                    "draining", connections=open_count, grace_s=self.config.server.shutdown_grace_s
                )
                for state in self.listeners.values():
                    for ctx in state.connections:
                        ctx.shutdown.set()
                    for guarded in state.streams:
                        guarded.drain()
                grace_deadline = trio.current_time() + self.config.server.shutdown_grace_s
                connections.cancel_scope.deadline = grace_deadline
            with trio.move_on_at(grace_deadline):
                while self.admin_inflight:
                    await trio.sleep(0.01)
            admin_nursery.cancel_scope.cancel()
        log.info("stopped")

    async def _watch_signals(self, task_status: trio.TaskStatus[None]) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                log.info("signal", signal=signal.Signals(signum).name)
                if signum == signal.SIGHUP:
                    self.reload()
                    continue
                self.request_stop()
                return

    def reload(self) -> bool:
        """Re-read the config file and apply routes and listener limits (SIGHUP). Addresses,
        protocols and backends need a restart; a file that changes them, or is invalid, is
        refused as a whole and the running config stays."""
        try:
            new = load_config(self.config.source)
        except ConfigError as exc:
            log.error("config_reload_refused", problems=exc.problems)
            return False
        problems = []
        if {n: (b.type, b.options) for n, b in new.backends.items()} != {
            n: (b.type, b.options) for n, b in self.config.backends.items()
        }:
            problems.append("backends changed: restart the gateway to apply")
        if new.admin.served() != self.config.admin.served():  # credential, ACLs: fixed at start
            problems.append("admin changed: restart the gateway to apply")
        for name, state in self.listeners.items():
            new_cfg = new.listeners.get(name)
            if new_cfg is None or not new_cfg.enabled:
                problems.append(f"listeners.{name} removed or disabled: restart to apply")
            elif (new_cfg.host, new_cfg.port) != (state.config.host, state.config.port):
                problems.append(f"listeners.{name} address changed: restart to apply")
        if set(n for n, c in new.listeners.items() if c.enabled) - set(self.listeners):
            problems.append("new listeners: restart to apply")
        contexts: dict[str, ssl.SSLContext | None] = {}
        if not problems:  # every TLS pair loads before any is applied
            contexts, tls_problems = build_contexts({n: new.listeners[n] for n in self.listeners})
            problems.extend(tls_problems)
        if problems:
            log.error("config_reload_refused", problems=problems)
            return False
        changes = []
        old_routes = [(r.topic, r.backend) for r in self.config.routes]
        new_routes = [(r.topic, r.backend) for r in new.routes]
        if old_routes != new_routes:
            self.core.router.set_rules(new_routes)
            changes.append(f"routes: {old_routes} -> {new_routes}")
        for name, state in self.listeners.items():
            new_cfg = new.listeners[name]
            for f in dataclasses.fields(new_cfg):
                before, after = getattr(state.config, f.name), getattr(new_cfg, f.name)
                if before != after:
                    changes.append(f"listeners.{name}.{f.name}: {before!r} -> {after!r}")
            state.config = new_cfg
            state.ssl_context = contexts[name]
            self._apply_acl(name, state)
        self.config = dataclasses.replace(new, listeners=new.listeners)
        log.info("config_reloaded", changes=changes or ["nothing changed"])
        return True

    async def _accept_loop(
        self, name: str, sock: trio.SocketListener, connections: trio.Nursery
    ) -> None:
        state = self.listeners[name]
        while True:
            stream = await accept_connection(sock, name, log)
            # connections still in their PROXY header or TLS handshake count too: a client
            # that never finishes one must not hold file descriptors past the bound
            if len(state.connections) + state.handshaking >= state.config.max_connections:
                state.refused += 1
                CONNECTIONS_REFUSED.labels(protocol=name, reason="max_connections").inc()
                limit_hit(
                    "max_connections",
                    name,
                    log,
                    max_connections=state.config.max_connections,
                    handshaking=state.handshaking,
                )
                await stream.aclose()
                continue
            state.handshaking += 1
            CONNECTIONS_HANDSHAKING.labels(protocol=name).inc()
            connections.start_soon(self._handle, name, stream)

    async def _read_proxy_header(
        self, stream: trio.abc.Stream, mode: str
    ) -> tuple[bytes, tuple[str, int] | None]:
        """(bytes read past the header, client address from the header or None)."""
        buf = b""
        while True:
            data = await stream.receive_some(4096)
            if not data:
                raise RefusedConnection("proxy_header", "closed before a PROXY header")
            buf += data
            if mode == "optional" and not proxy_protocol.could_be_header(buf):
                return buf, None
            try:
                header, used = proxy_protocol.parse(buf)
            except proxy_protocol.ProxyProtocolError as exc:
                raise RefusedConnection("proxy_header", str(exc)) from None
            if header is not None:
                return buf[used:], header.source

    async def _prepare(
        self,
        name: str,
        stream: trio.SocketStream,
        cfg: ListenerConfig,
        ssl_ctx: ssl.SSLContext | None,
    ) -> tuple[trio.abc.Stream, tuple[str, int] | None]:
        """PROXY header, then TLS handshake, within the listener's read timeout."""
        inner: trio.abc.Stream = stream
        source = None
        try:
            with trio.fail_after(cfg.read_timeout_s):
                if cfg.proxy_protocol != "off":
                    prefix, source = await self._read_proxy_header(stream, cfg.proxy_protocol)
                    if prefix:
                        inner = PrefixedStream(stream, prefix)
                if ssl_ctx is not None:
                    tls = trio.SSLStream(inner, ssl_ctx, server_side=True)
                    try:
                        await tls.do_handshake()
                    except trio.BrokenResourceError as exc:
                        cause = exc.__cause__ or exc
                        raise RefusedConnection("tls", f"TLS handshake failed: {cause}") from None
                    inner = tls
        except trio.TooSlowError:
            raise RefusedConnection(
                "handshake_timeout", "no PROXY header/TLS handshake in time"
            ) from None
        return inner, source

    async def _handle(self, name: str, stream: trio.SocketStream) -> None:
        state = self.listeners[name]
        cfg, ssl_ctx = state.config, state.ssl_context
        try:
            peer_addr = stream.socket.getpeername()
            peer = format_address(peer_addr[0], peer_addr[1])
        except OSError:
            peer = "?"
        try:
            try:
                inner, source = await self._prepare(name, stream, cfg, ssl_ctx)
            finally:  # counted since the accept loop took it (see _accept_loop)
                state.handshaking -= 1
                CONNECTIONS_HANDSHAKING.labels(protocol=name).dec()
        except (RefusedConnection, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            reason = exc.reason if isinstance(exc, RefusedConnection) else "reset"
            if reason == "handshake_timeout":
                limit_hit("read_timeout_s", name, log, phase="handshake", peer=peer)
            state.refused += 1
            CONNECTIONS_REFUSED.labels(protocol=name, reason=reason).inc()
            log.warning(
                "connection_refused", protocol=name, peer=peer, reason=reason, detail=str(exc)
            )
            with trio.CancelScope(shield=True):
                await stream.aclose()
            return
        via = None
        if source is not None:
            via, peer = peer, format_address(*source)
        guarded = GuardedStream(
            inner,
            idle_timeout_s=cfg.idle_timeout_s,
            read_timeout_s=cfg.read_timeout_s,
            send_timeout_s=cfg.send_timeout_s,
            swept=True,
        )
        conn_log = log.bind(protocol=name, peer=peer)
        if via is not None:
            conn_log = conn_log.bind(via=via)
        ctx = ConnectionContext(
            protocol=name,
            core=state.core,
            listener=cfg,
            config=self.config,
            peer=peer,
            advertised_host=state.advertised_host,
            advertised_port=state.advertised_port,
            log=conn_log,
        )
        if self.draining:
            ctx.shutdown.set()
            guarded.drain()
        state.connections.add(ctx)
        state.streams.add(guarded)
        state.accepted += 1
        CONNECTIONS_TOTAL.labels(protocol=name).inc()
        CONNECTIONS_OPEN.labels(protocol=name).inc()
        conn_log.info("connection_open", tls=ssl_ctx is not None)
        reason = "closed"
        try:
            await get_protocol(name).handle_connection(guarded, ctx)
        except Exception as raised:  # a bug in one connection never takes the process down
            failure = sole_exception(raised)
            if guarded.send_timed_out:
                pass  # counted below, whatever a session made of the failed send
            elif isinstance(failure, (trio.BrokenResourceError, trio.ClosedResourceError)):
                reason = "peer_reset"
            elif isinstance(failure, ConnectionTimeout):
                reason = f"{failure.kind}_timeout"
                PROTOCOL_ERRORS.labels(protocol=name, kind=reason).inc()
                if failure.kind == "read":  # a request not whole in time: slow or hostile
                    limit_hit("read_timeout_s", name, conn_log, read_timeout_s=failure.seconds)
            else:
                reason = "error"
                conn_log.exception("connection_failed", error=repr(failure))
        finally:
            if guarded.send_timed_out:  # the client took no byte of an answer in time
                reason = "send_timeout"
                limit_hit("send_timeout_s", name, conn_log, send_timeout_s=cfg.send_timeout_s)
            state.connections.discard(ctx)
            state.streams.discard(guarded)
            CONNECTIONS_OPEN.labels(protocol=name).dec()
            with trio.CancelScope(shield=True):
                try:
                    await guarded.aclose()
                except Exception:
                    pass
            conn_log.info(
                "connection_close",
                reason=reason,
                bytes_in=guarded.bytes_in,
                bytes_out=guarded.bytes_out,
            )

    # ------------------------------------------------------------------ status
    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        if self.draining:
            return False, {"ready": False, "reason": "draining"}
        if not self.ready:
            return False, {"ready": False, "reason": "starting"}
        problems = {}
        for name, backend in self.backends.items():
            try:
                ok, why = await backend.health()
            except Exception as exc:
                ok, why = False, str(exc)
            if not ok:
                problems[name] = why
        if problems:
            return False, {"ready": False, "reason": "backend unavailable", "backends": problems}
        return True, {"ready": True}


def freeze_startup_heap() -> None:
    """Move every object alive once the server listens (modules, config, codec tables: tens of
    thousands) out of the garbage collector's reach: its collections then scan only what
    requests allocate, so a full collection no longer stalls the event loop for 10-30 ms.
    Called by the process that serves (``gateway serve``, each ``--workers`` process), never by
    tests that embed a server."""
    gc.collect()
    gc.freeze()


async def serve(config: GatewayConfig, reuse_port: bool = False) -> int:
    from gateway.fdlimit import raise_file_limit

    raise_file_limit(log)  # before the backends open their files
    server = Server(config, reuse_port=reuse_port)
    await server.run(freeze_heap=True)
    return 0


def run_forever(config: GatewayConfig, reuse_port: bool = False) -> int:
    """Serve until stopped. A refusal to start (``SystemExit`` with a message: a port in use, a
    backend that will not open) propagates, inside trio's exception group, to the command line,
    which prints it as one line (``gateway.cli_errors``)."""
    try:
        return trio.run(serve, config, reuse_port)
    except KeyboardInterrupt:
        return 0
