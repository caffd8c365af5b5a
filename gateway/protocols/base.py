"""What a protocol gives the server: its listener config and a per-connection handler.

Importing this module (and so a protocol package's ``__init__`` and its codec) imports neither
trio nor prometheus_client: a protocol names its session's module with :func:`lazy`, imported
when the first connection (or listener task) needs it.
"""

from __future__ import annotations

import importlib
import os
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import structlog

if TYPE_CHECKING:
    import trio

    from gateway.config import GatewayConfig
    from gateway.core.view import CoreView

MiB = 1 << 20
PROXY_MODES = ("off", "optional", "required")

T = TypeVar("T")


class PerCore(Generic[T]):
    """A protocol's state shared by all its connections on one Core (registries, flags, group
    bookkeeping): made on first use, dropped with the core (tests run many cores in one
    process)."""

    def __init__(self) -> None:
        self._states: weakref.WeakKeyDictionary[CoreView, T] = weakref.WeakKeyDictionary()

    def get(self, core: CoreView, make: Callable[[], T]) -> T:
        state = self._states.get(core)
        if state is None:
            state = self._states[core] = make()
        return state


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """Keys every listener has. A protocol subclasses this (keeping defaults for every field) to
    add its own keys and to set its default port and frame limit."""

    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 0
    advertised_host: str = ""  # "" = the bound host
    advertised_port: int = 0  # 0 = the bound port
    max_connections: int = 1024
    max_frame_bytes: int = 100 * MiB
    idle_timeout_s: float = 600.0
    read_timeout_s: float = 60.0  # a request begun must be complete within this (slowloris)
    send_timeout_s: float = 60.0  # an answer's write may wait this long for the client to read
    max_in_flight: int = 64
    max_answer_bytes: int = 64 * MiB  # a fetch/consume answer never exceeds this, whatever asked
    proxy_protocol: str = "off"  # "off" | "optional" | "required"
    tls_cert: str = ""  # PEM certificate chain; with tls_key, the listener speaks TLS only
    tls_key: str = ""
    tls_client_ca: str = ""  # PEM CA bundle: clients must present a certificate it signed
    read_allow: tuple[str, ...] = ("*",)  # topic globs this listener may read (deny wins)
    read_deny: tuple[str, ...] = ()
    write_allow: tuple[str, ...] = ("*",)  # topic globs this listener may write or create
    write_deny: tuple[str, ...] = ()
    alpn_protocols: ClassVar[tuple[str, ...]] = ()
    """ALPN ids a TLS listener offers (a protocol class sets it: ("h2",) for gRPC)."""

    def validate(self) -> list[str]:
        """Problems as ``key: got ..., expected ...`` (config.py prefixes the section)."""
        problems = []
        if self.proxy_protocol not in PROXY_MODES:
            problems.append(
                f"proxy_protocol: got {self.proxy_protocol!r}, expected one of {PROXY_MODES}"
            )
        if bool(self.tls_cert) != bool(self.tls_key):
            problems.append(
                f"tls_cert/tls_key: got cert={self.tls_cert!r} key={self.tls_key!r}, "
                "expected both or neither"
            )
        if self.tls_client_ca and not self.tls_cert:
            problems.append(
                f"tls_client_ca: got {self.tls_client_ca!r} without tls_cert, expected TLS on"
            )
        for key in ("tls_cert", "tls_key", "tls_client_ca"):
            path = getattr(self, key)
            if path and not os.path.isfile(path):
                problems.append(f"{key}: got {path!r}, expected a readable file")
        for key in ("max_connections", "max_frame_bytes", "max_in_flight", "max_answer_bytes"):
            if getattr(self, key) < 1:
                problems.append(f"{key}: got {getattr(self, key)}, expected >= 1")
        for key in ("idle_timeout_s", "read_timeout_s", "send_timeout_s"):
            if getattr(self, key) <= 0:
                problems.append(f"{key}: got {getattr(self, key)}, expected > 0 seconds")
        return problems


@dataclass(slots=True, eq=False)  # hashed by identity: the server keeps a set of them
class ConnectionContext:
    """Everything a connection handler may use. One per connection."""

    protocol: str
    core: CoreView  # the engine's Core, or an AclCore in front of it
    listener: ListenerConfig
    config: GatewayConfig
    peer: str
    advertised_host: str
    advertised_port: int
    shutdown: trio.Event = field(default_factory=lambda: _trio().Event())
    """Set when the gateway drains: finish the request in hand, read no new one, return."""
    log: Any = field(default_factory=lambda: structlog.get_logger())


def _trio() -> Any:
    import trio

    return trio


ConnectionHandler = Callable[["trio.abc.Stream", ConnectionContext], Awaitable[None]]


class Lazy:
    """An async function that calls ``module.name``, importing the module on first use (a
    protocol's session, which needs trio, is not imported with its package or codec). The
    server calls :meth:`load` when it starts a listener, so no connection waits for an import."""

    __slots__ = ("_target", "module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name
        self._target: Callable[..., Awaitable[Any]] | None = None

    def load(self) -> Callable[..., Awaitable[Any]]:
        if self._target is None:
            self._target = getattr(importlib.import_module(self.module), self.name)
        return self._target

    async def __call__(self, *args: Any) -> Any:
        return await self.load()(*args)

    def __repr__(self) -> str:
        return f"lazy({self.module}.{self.name})"


def lazy(module: str, name: str) -> Lazy:
    return Lazy(module, name)


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    name: str
    config_class: type[ListenerConfig]
    handle_connection: ConnectionHandler
    description: str = ""
    authorization_error: bool = True
    """False for protocols without an authorization error (Kafka 0.8, TANK): a topic an ACL
    denies is answered as if it did not exist."""
    background: Callable[[CoreView, ListenerConfig], Awaitable[None]] | None = None
    """An optional listener-wide task the server runs beside the listener, with the core and
    the listener's config (Liftbridge: NATS ingestion)."""

    def load_session(self) -> None:
        """Import the session now (the server does before it listens) if it is imported lazily."""
        if isinstance(self.handle_connection, Lazy):
            self.handle_connection.load()
