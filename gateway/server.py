"""The server: backends, the core, one trio listener per enabled protocol and the admin endpoint,
all in one nursery tree.

Shutdown (SIGTERM/SIGINT or :meth:`Server.request_stop`): readiness turns false, listeners stop
accepting, every connection's ``shutdown`` event is set so it finishes the request in hand, the
connections get ``shutdown_grace_s`` to end before they are cancelled, then the backends are
flushed and closed.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio

from gateway.backends import get_backend_spec
from gateway.backends.base import Backend
from gateway.config import GatewayConfig
from gateway.core.engine import Core
from gateway.observability import CONNECTIONS_OPEN, CONNECTIONS_REFUSED, CONNECTIONS_TOTAL
from gateway.protocols import get_protocol
from gateway.protocols.base import ConnectionContext, ListenerConfig

log = structlog.get_logger("gateway.server")


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
    )


class Server:
    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.backends = build_backends(config)
        self.core = build_core(config, self.backends)
        self.listeners: dict[str, ListenerState] = {
            name: ListenerState(name, lc) for name, lc in config.listeners.items() if lc.enabled
        }
        self.admin_address: tuple[str, int] | None = None
        self.started_at = time.time()
        self.draining = False
        self.ready = False
        self._stop = trio.Event()

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
        task_status: trio.TaskStatus[Server] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with trio.open_nursery() as background:
            for backend in self.backends.values():
                await backend.open(background)
            try:
                await self._serve(background, handle_signals, announce, task_status)
            finally:
                with trio.CancelScope(shield=True):
                    await self._close_backends()
                background.cancel_scope.cancel()

    async def _close_backends(self) -> None:
        for backend in self.backends.values():
            try:
                await backend.flush()
                await backend.close()
            except Exception as exc:  # keep closing the others
                log.error("backend_close_failed", backend=backend.name, error=str(exc))

    async def _bind(self) -> dict[str, list[trio.SocketListener]]:
        bound: dict[str, list[trio.SocketListener]] = {}
        for name, state in self.listeners.items():
            cfg = state.config
            try:
                socks = await trio.open_tcp_listeners(cfg.port, host=cfg.host)
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
        task_status: trio.TaskStatus[Server],
    ) -> None:
        from gateway.admin import serve_admin

        bound = await self._bind()
        admin_socks: list[trio.SocketListener] = []
        if self.config.admin.enabled:
            try:
                admin_socks = await trio.open_tcp_listeners(
                    self.config.admin.port, host=self.config.admin.host
                )
            except OSError as exc:
                raise SystemExit(
                    f"admin: cannot bind "
                    f"{format_address(self.config.admin.host, self.config.admin.port)}: {exc}"
                ) from None
            self.admin_address = tuple(admin_socks[0].socket.getsockname()[:2])  # type: ignore[assignment]

        async with trio.open_nursery() as admin_nursery:
            if admin_socks:
                admin_nursery.start_soon(serve_admin, self, admin_socks)
            async with trio.open_nursery() as connections:
                async with trio.open_nursery() as acceptors:
                    for name, socks in bound.items():
                        for sock in socks:
                            acceptors.start_soon(self._accept_loop, name, sock, connections)
                    if handle_signals:
                        await acceptors.start(self._watch_signals)
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
                connections.cancel_scope.deadline = (
                    trio.current_time() + self.config.server.shutdown_grace_s
                )
            admin_nursery.cancel_scope.cancel()
        log.info("stopped")

    async def _watch_signals(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()  # handlers are in place before the listening line is printed
            async for signum in signals:
                log.info("signal", signal=signal.Signals(signum).name)
                self.request_stop()
                return

    async def _accept_loop(
        self, name: str, sock: trio.SocketListener, connections: trio.Nursery
    ) -> None:
        state = self.listeners[name]
        while True:
            try:
                stream = await sock.accept()
            except OSError as exc:  # EMFILE and friends: back off, keep serving
                log.error("accept_failed", protocol=name, error=str(exc))
                await trio.sleep(0.1)
                continue
            if len(state.connections) >= state.config.max_connections:
                state.refused += 1
                CONNECTIONS_REFUSED.labels(protocol=name, reason="max_connections").inc()
                log.warning(
                    "connection_refused",
                    protocol=name,
                    reason="max_connections",
                    limit=state.config.max_connections,
                )
                await stream.aclose()
                continue
            connections.start_soon(self._handle, name, stream)

    async def _handle(self, name: str, stream: trio.SocketStream) -> None:
        state = self.listeners[name]
        try:
            peer_addr = stream.socket.getpeername()
            peer = format_address(peer_addr[0], peer_addr[1])
        except OSError:
            peer = "?"
        conn_log = log.bind(protocol=name, peer=peer)
        ctx = ConnectionContext(
            protocol=name,
            core=self.core,
            listener=state.config,
            config=self.config,
            peer=peer,
            advertised_host=state.advertised_host,
            advertised_port=state.advertised_port,
            log=conn_log,
        )
        if self.draining:
            ctx.shutdown.set()
        state.connections.add(ctx)
        state.accepted += 1
        CONNECTIONS_TOTAL.labels(protocol=name).inc()
        CONNECTIONS_OPEN.labels(protocol=name).inc()
        conn_log.info("connection_open")
        reason = "closed"
        try:
            await get_protocol(name).handle_connection(stream, ctx)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            reason = "peer_reset"
        except Exception as exc:  # a bug in one connection never takes the process down
            reason = "error"
            conn_log.exception("connection_failed", error=repr(exc))
        finally:
            state.connections.discard(ctx)
            CONNECTIONS_OPEN.labels(protocol=name).dec()
            with trio.CancelScope(shield=True):
                try:
                    await stream.aclose()
                except Exception:
                    pass
            conn_log.info("connection_close", reason=reason)

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


async def serve(config: GatewayConfig) -> int:
    server = Server(config)
    await server.run()
    return 0


def run_forever(config: GatewayConfig) -> int:
    try:
        return trio.run(serve, config)
    except KeyboardInterrupt:
        return 0
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        raise
