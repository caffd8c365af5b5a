"""TANK listener (phaistos-networks/TANK 4.0 binary protocol): produce, consume, discovery,
topic creation. Reference: ``docs/protocols/tank.md``."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocols.base import ListenerConfig, ProtocolSpec, lazy


@dataclass(frozen=True, slots=True)
class TankListenerConfig(ListenerConfig):
    port: int = 11011
    max_frame_bytes: int = 64 << 20  # the real broker caps a partition's fetch at 64 MiB too


PROTOCOL = ProtocolSpec(
    name="tank",
    config_class=TankListenerConfig,
    handle_connection=lazy("gateway.protocols.tank.session", "handle_connection"),
    description="TANK 4.0 binary protocol (tank-cli, TANK client library)",
    authorization_error=False,
)
