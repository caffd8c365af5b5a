"""Liftbridge: its gRPC API (package ``proto``, service ``API``) over HTTP/2 on our own trio
listener (``h2`` sans-IO; see docs/protocols/liftbridge.md), protobuf messages from our own
``liftbridge_api.proto``.

Parts: ``codec.py`` (sans-IO gRPC framing over h2, both roles), ``envelope.py`` (the NATS
envelope), ``service.py`` (the RPCs on the command model), ``session.py`` (the connection),
``state.py`` (pause/readonly flags shared by connections).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gateway.protocols.base import ListenerConfig, MiB, ProtocolSpec, lazy


@dataclass(frozen=True, slots=True)
class LiftbridgeListenerConfig(ListenerConfig):
    port: int = 9292
    alpn_protocols: ClassVar[tuple[str, ...]] = ("h2",)  # gRPC over TLS negotiates h2
    max_frame_bytes: int = 16 * MiB
    """The largest gRPC message accepted (grpc's max_receive_message_length)."""
    broker_id: str = ""
    """The broker id in FetchMetadata ("" = advertised host:port)."""
    nats: str = ""
    """A NATS server (nats://host:port) whose stream subjects are ingested ("" = off)."""
    max_buffered_request_bytes: int = 64 * MiB
    """Unfinished request messages one connection may have us hold (past it: GOAWAY
    ENHANCE_YOUR_CALM). At least one largest message (max_frame_bytes + 5)."""
    max_resets_per_s: int = 100
    """RST_STREAM frames one connection may send per second (past it: GOAWAY
    ENHANCE_YOUR_CALM; HTTP/2 rapid reset)."""

    def validate(self) -> list[str]:
        problems = []
        if self.max_buffered_request_bytes < self.max_frame_bytes + 5:
            problems.append(
                f"max_buffered_request_bytes: got {self.max_buffered_request_bytes}, expected "
                f">= max_frame_bytes + 5 ({self.max_frame_bytes + 5}): one whole message must fit"
            )
        if self.max_resets_per_s < 1:
            problems.append(f"max_resets_per_s: got {self.max_resets_per_s}, expected >= 1")
        return problems


PROTOCOL = ProtocolSpec(
    name="liftbridge",
    config_class=LiftbridgeListenerConfig,
    handle_connection=lazy("gateway.protocols.liftbridge.session", "handle_connection"),
    description="Liftbridge gRPC API (HTTP/2, protobuf)",
    background=lazy("gateway.protocols.liftbridge.nats", "run_ingest"),
)
