"""The Cursus listener: text commands, binary batches, consumer groups, STREAM
(docs/protocols/cursus.md).

It answers in two dialects (``dialect.py``): the older broker's, with what the PyPI client
cursus-client 0.1.1 needs, and the current broker's (``dialect_2026_08.py``).

Parts: ``codec.py`` (sans-IO framing, text commands, batches, acks; both roles), ``client.py``
(the in-repo client), ``session.py`` (the connection: dispatch, produce, CONSUME, STREAM),
``topics.py`` and ``groups.py`` (the topic and consumer-group commands, mixed into the session),
``dialect.py`` and ``dialect_2026_08.py`` (the reply dialects), ``state.py`` (group facts shared by
connections), ``gotext.py`` (command words read and written as Go does), ``replies.py`` (the
CONSUME/STREAM reply frame), ``producers.py`` (durable idempotent-producer state).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.protocols.base import ListenerConfig, MiB, ProtocolSpec, lazy
from gateway.protocols.cursus.codec import COMPRESSIONS
from gateway.protocols.cursus.dialect import DIALECTS

FETCH_OFFSET_REPLIES = ("ok", "integer")


@dataclass(frozen=True, slots=True)
class CursusListenerConfig(ListenerConfig):
    port: int = 9000
    max_frame_bytes: int = 64 * MiB
    compression: str = "none"
    """Broker-wide compression of every incoming frame body: ``none``, ``gzip``, ``snappy``
    (go-xerial-snappy: xerial framing or a raw block) or ``lz4`` (LZ4 frame). Replies are never
    compressed. Clients must use the same setting (there is no per-frame flag)."""
    fetch_offset_reply: str = "ok"
    """FETCH_OFFSET reply format: ``ok`` = ``OK offset=N`` (cursus-client 0.1.1, the newer broker);
    ``integer`` = a plain ``N`` (the April 2026 broker, Java SDK, April Python SDK)."""
    dialect: str = "auto"
    """Reply dialect (docs/protocols/cursus.md): ``2026-04`` = the broker the older Go SDK and
    cursus-client 0.1.1 were written against; ``2026-08`` = the current broker (``OK key=value`` /
    ``ERROR: token key=value``, generation-fenced group commands); ``auto`` = ``2026-04`` until a
    connection sends a command only the current SDK sends, then ``2026-08`` on that connection."""
    default_partitions: int = 4
    """Partitions of ``CREATE topic=T`` without ``partitions=`` (the broker's default is 4)."""
    session_timeout_ms: int = 10_000
    """A group member without a heartbeat (HEARTBEAT, CONSUME) for this long is removed and the
    group rebalances (the broker's ``consumer-session-timeout`` default)."""
    max_idempotent_producers: int = 100_000
    """Idempotent-producer states kept (per topic, partition and producer id, in the backend's
    key-value store); past it the state written longest ago is dropped."""
    stream_keepalive_ms: int = 5_000
    """STREAM sends an empty frame after this much silence."""
    stream_commit_interval_ms: int = 5_000
    """STREAM commits its position to the group this often, and when it ends."""

    def validate(self) -> list[str]:
        problems = []
        if self.compression not in COMPRESSIONS:
            problems.append(
                f"compression: got {self.compression!r}, expected one of {COMPRESSIONS}"
            )
        if self.fetch_offset_reply not in FETCH_OFFSET_REPLIES:
            problems.append(
                f"fetch_offset_reply: got {self.fetch_offset_reply!r}, expected one of "
                f"{FETCH_OFFSET_REPLIES}"
            )
        if self.dialect not in DIALECTS:
            problems.append(f"dialect: got {self.dialect!r}, expected one of {DIALECTS}")
        if not 1 <= self.default_partitions <= 100_000:
            problems.append(
                f"default_partitions: got {self.default_partitions}, expected 1..100000"
            )
        for name in ("session_timeout_ms", "stream_keepalive_ms", "stream_commit_interval_ms",
                     "max_idempotent_producers"):  # fmt: skip
            if getattr(self, name) <= 0:
                problems.append(f"{name}: got {getattr(self, name)}, expected a positive integer")
        if not 1 <= self.max_frame_bytes <= 0xFFFFFFFF:
            problems.append(f"max_frame_bytes: got {self.max_frame_bytes}, expected 1..4294967295")
        return problems


PROTOCOL = ProtocolSpec(
    "cursus",
    CursusListenerConfig,
    lazy("gateway.protocols.cursus.session", "handle_connection"),
    "Cursus broker protocol (text commands + 0xBA7C binary batches), both broker dialects",
)
