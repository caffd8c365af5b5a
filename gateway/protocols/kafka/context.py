"""What a modern Kafka API handler gets: the connection's :class:`KafkaContext` and the request's
:class:`RequestHeader`. Sans-IO in the sense that matters here: no sockets; handlers call the
core (``await ctx.core.execute(command)``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.model import ErrorCode, GatewayError
from gateway.observability import REQUESTS, labelled, protocol_error
from gateway.protocols.kafka.errors import CLIENT_ERRORS, kafka_error
from gateway.protocols.kafka08 import Kafka08ListenerConfig

if TYPE_CHECKING:
    from gateway.config import GatewayConfig
    from gateway.core.view import CoreView
    from gateway.protocols.base import ConnectionContext

PROTOCOL = "kafka08"
"""The listener's name and the ``protocol`` label of its metrics (one listener, every version)."""


class CloseConnection(Exception):
    """End the connection without an answer (what a Kafka broker does on a request it refuses:
    a failed SASL authentication, an unsupported version of a request it cannot answer)."""


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """Request header v0-v2 (v2 = flexible: tagged fields, already read)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(slots=True, eq=False)
class KafkaContext:
    """One per connection. ``principal`` is the SASL user once authenticated ("" before, or
    when SASL is off); ``sasl`` holds the SASL exchange in progress (the sasl module's)."""

    conn: ConnectionContext
    node_id: int
    host: str
    """The advertised host of this listener (Metadata brokers, FindCoordinator)."""
    port: int
    log: Any
    principal: str = ""
    sasl: Any = None
    closing: bool = False
    """Set by a handler whose answer must be the connection's last (a failed SASL exchange)."""
    _counters: dict[tuple[str, str], Any] = field(default_factory=dict)

    @classmethod
    def for_connection(cls, conn: ConnectionContext, log: Any = None) -> KafkaContext:
        return cls(
            conn,
            _listener(conn).node_id,
            conn.advertised_host,
            conn.advertised_port,
            log if log is not None else conn.log.bind(protocol=PROTOCOL, peer=conn.peer),
        )

    @property
    def sasl_required(self) -> bool:
        """SASL is on for this listener: only ApiVersions and SASL before authentication."""
        return bool(self.listener.sasl_mechanisms)

    @property
    def core(self) -> CoreView:
        return self.conn.core

    @property
    def listener(self) -> Kafka08ListenerConfig:
        """The listener's config (the Kafka listener is ``[listeners.kafka08]``)."""
        return _listener(self.conn)

    @property
    def config(self) -> GatewayConfig:
        return self.conn.config

    @property
    def peer(self) -> str:
        return self.conn.peer

    def count(self, api: str, outcome: str) -> None:
        """``gateway_requests_total{protocol, api, outcome}``: "ok" or the Kafka error code."""
        key = (api, outcome)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = labelled(REQUESTS, PROTOCOL, api, outcome)
        counter.inc()

    def error(self, api: str, exc: GatewayError, **fields: Any) -> int:
        """The Kafka error code for ``exc``, counted; a client's mistake is a protocol error
        (logged, rate-limited), anything unexpected a warning."""
        code = kafka_error(exc.code)
        if exc.code in CLIENT_ERRORS:
            protocol_error(self.log, PROTOCOL, exc.code.value, error=exc.message, **fields)
        elif exc.code is ErrorCode.INTERNAL or code == -1:
            self.log.warning("request_failed", api=api, error=str(exc), **fields)
        self.count(api, str(code))
        return code


def _listener(conn: ConnectionContext) -> Kafka08ListenerConfig:
    cfg = conn.listener
    assert isinstance(cfg, Kafka08ListenerConfig)
    return cfg
