"""Kafka 0.8 listener: legacy 0.8.x clients produce, consume and commit through the gateway.

``codec`` (framing, declared layouts, both roles), ``messageset`` (the hand-tuned message-set path),
``compression`` (gzip, snappy, lz4) and ``session`` (requests -> commands of the model).
Reference: ``docs/protocols/kafka08.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocols.base import ListenerConfig, MiB, ProtocolSpec, lazy
from gateway.protocols.kafka08.compression import CODECS


@dataclass(frozen=True, slots=True)
class Kafka08ListenerConfig(ListenerConfig):
    port: int = 9092
    max_frame_bytes: int = 100 * MiB  # socket.request.max.bytes of the 0.8 broker
    fetch_compression: str = "none"
    """How Fetch answers carry records: "none", or one wrapper per partition in "gzip",
    "snappy" (xerial framing) or "lz4" (the 0.8.2 framing)."""
    api_versions: bool = True
    """Answer ApiVersions (key 18) with the 0.8.2 table, so unmodified modern clients fall back
    to the v0 APIs (docs/protocols/kafka08.md). False: close on it like a real 0.8.2 broker."""
    message_max_bytes: int = 1_000_012
    """Largest produced message (MessageSizeTooLarge, error 10, above it)."""
    node_id: int = 0
    """The broker id the gateway advertises in Metadata and ConsumerMetadata."""

    def validate(self) -> list[str]:
        problems = []
        if self.fetch_compression not in CODECS:
            problems.append(
                f"fetch_compression: got {self.fetch_compression!r}, expected one of "
                f"{', '.join(CODECS)}"
            )
        if self.message_max_bytes < 14:
            problems.append(f"message_max_bytes: got {self.message_max_bytes}, expected >= 14")
        if self.max_answer_bytes < self.message_max_bytes + 12:
            # a stored message must fit one Fetch answer, or no client could ever read past it
            problems.append(
                f"max_answer_bytes: got {self.max_answer_bytes}, expected >= message_max_bytes "
                f"+ 12 ({self.message_max_bytes + 12}): a message must fit one Fetch answer"
            )
        return problems


PROTOCOL = ProtocolSpec(
    "kafka08",
    Kafka08ListenerConfig,
    lazy("gateway.protocols.kafka08.session", "handle_connection"),
    "Kafka 0.8 (Produce/Fetch/Offsets/Metadata v0, OffsetCommit/Fetch v0-1, ConsumerMetadata)",
    authorization_error=False,
)
