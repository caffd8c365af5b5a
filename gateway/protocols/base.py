"""What a protocol gives the server: its listener config and a per-connection handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
import trio

if TYPE_CHECKING:
    from gateway.config import GatewayConfig
    from gateway.core.engine import Core

MiB = 1 << 20


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
    max_in_flight: int = 64


@dataclass(slots=True, eq=False)  # hashed by identity: the server keeps a set of them
class ConnectionContext:
    """Everything a connection handler may use. One per connection."""

    protocol: str
    core: Core
    listener: ListenerConfig
    config: GatewayConfig
    peer: str
    advertised_host: str
    advertised_port: int
    shutdown: trio.Event = field(default_factory=trio.Event)
    """Set when the gateway drains: finish the request in hand, read no new one, return."""
    log: Any = field(default_factory=lambda: structlog.get_logger())


ConnectionHandler = Callable[[trio.abc.Stream, ConnectionContext], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    name: str
    config_class: type[ListenerConfig]
    handle_connection: ConnectionHandler
    description: str = ""
