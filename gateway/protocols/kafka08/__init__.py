"""Kafka 0.8 listener: legacy 0.8.x clients produce, consume and commit through the gateway.

``codec`` (framing, declared layouts, both roles), ``messageset`` (the hand-tuned message-set path),
``compression`` (gzip, snappy, lz4) and ``session`` (requests -> commands of the model).
Reference: ``docs/protocols/kafka08.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocols.base import ListenerConfig, MiB, ProtocolSpec, lazy
from gateway.protocols.kafka08.compression import CODECS

API_VERSIONS_MODES = ("full", "0.8", "off")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


STEP_LIMIT = "max_records_per_step"
"""The key (and limit label) of the record count a produced batch is checked in per step."""


@dataclass(frozen=True, slots=True)
class Kafka08ListenerConfig(ListenerConfig):
    port: int = 9092
    max_frame_bytes: int = 100 * MiB  # socket.request.max.bytes of the 0.8 broker
    fetch_compression: str = "none"
    """How Fetch answers carry records: "none", or one wrapper per partition in "gzip",
    "snappy" (xerial framing) or "lz4" (the 0.8.2 framing)."""
    api_versions: str | bool = "full"
    """Which Kafka this listener is: "full" answers ApiVersions with today's table and serves
    today's APIs (``gateway.protocols.kafka``, docs/protocols/kafka.md); "0.8" answers with the
    0.8.2 table, so modern clients fall back to the v0 APIs (docs/protocols/kafka08.md); "off"
    closes on ApiVersions like a real 0.8.2 broker. The older spelling true means "0.8", false
    "off"."""
    message_max_bytes: int = 1_000_012
    """Largest produced message (MessageSizeTooLarge, error 10, above it)."""
    max_records_per_step: int = 10_000
    """Records (messages) of one produced batch or message set checked in one go: a larger one
    (a megabyte of zstd can hold a million records, half a second of checking) is checked in
    steps of this many, the connection letting every other one run between two steps."""
    node_id: int = 0
    """The broker id the gateway advertises in Metadata and ConsumerMetadata."""

    sasl_mechanisms: tuple[str, ...] = ()
    """SASL on this listener: any of "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512" (today's clients
    only: SaslHandshake v1). Empty: no authentication."""
    sasl_users: tuple[dict[str, str], ...] = ()
    """``{ username, password }`` tables SASL checks against."""

    def __post_init__(self) -> None:
        if isinstance(self.api_versions, bool):  # the older spelling of this key
            object.__setattr__(self, "api_versions", "0.8" if self.api_versions else "off")

    def validate(self) -> list[str]:
        problems = []
        if self.api_versions not in API_VERSIONS_MODES:
            problems.append(
                f"api_versions: got {self.api_versions!r}, expected one of "
                f"{', '.join(repr(m) for m in API_VERSIONS_MODES)}"
            )
        for mechanism in self.sasl_mechanisms:
            if mechanism not in SASL_MECHANISMS:
                problems.append(
                    f"sasl_mechanisms: got {mechanism!r}, expected any of "
                    f"{', '.join(SASL_MECHANISMS)}"
                )
        for i, user in enumerate(self.sasl_users):
            if set(user) != {"username", "password"} or not all(
                isinstance(v, str) and v for v in user.values()
            ):
                problems.append(
                    f"sasl_users[{i}]: got keys {sorted(user)}, expected "
                    "{ username, password } with non-empty strings"
                )
        if self.sasl_mechanisms and not self.sasl_users:
            problems.append(
                "sasl_users: got none with sasl_mechanisms set, expected at least one user"
            )
        if self.sasl_mechanisms and self.api_versions != "full":
            problems.append(
                f"sasl_mechanisms: set with api_versions {self.api_versions!r}, expected "
                'api_versions "full" (SASL is one of today\'s APIs)'
            )
        if self.fetch_compression not in CODECS:
            problems.append(
                f"fetch_compression: got {self.fetch_compression!r}, expected one of "
                f"{', '.join(CODECS)}"
            )
        if self.message_max_bytes < 14:
            problems.append(f"message_max_bytes: got {self.message_max_bytes}, expected >= 14")
        if self.max_records_per_step < 1:
            problems.append(f"{STEP_LIMIT}: got {self.max_records_per_step}, expected >= 1")
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
    "Kafka 0.8 to today's clients (Produce v0/v3-9, Fetch v0/v4-13, Metadata v0-12, "
    "ListOffsets, InitProducerId, SASL; OffsetCommit/Fetch v0-1, ConsumerMetadata)",
    authorization_error=False,
)
