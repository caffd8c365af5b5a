"""The ``[backends.NAME]`` keys of an ``type = "embedded"`` backend."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
MAX_SEGMENT_BYTES = 1 << 31  # index positions are u32; a frame is < 2 GiB

# per-topic overrides (CreateTopic config, as strings)
TOPIC_KEYS = ("retention_bytes", "retention_ms", "segment_bytes")


@dataclass(frozen=True, slots=True)
class EmbeddedConfig:
    data_dir: str = ""
    """Where the log lives; "" means ``<server.data_dir>/<backend name>``."""
    fsync: int | str = 50
    """"always" (no append is acknowledged before its fsync returned), "never", or every N ms."""
    segment_bytes: int = 64 * MIB
    index_interval_bytes: int = 4096
    retention_bytes: int = -1
    """Per partition; -1 keeps everything. Topics override it with the ``retention_bytes`` key."""
    retention_ms: int = -1
    """Age of a segment's newest record; -1 keeps everything. Topic key ``retention_ms``."""
    retention_check_ms: int = 60_000
    max_open_segments: int = 0
    """Descriptors of sealed (read-only) segments kept open, least recently read closed first;
    0 derives it from the open-file limit (as many as partitions the limit allows)."""

    def validate(self) -> list[str]:
        problems = []
        f = self.fsync
        if isinstance(f, str) and f not in ("always", "never") or isinstance(f, int) and f < 1:
            problems.append(f'fsync: got {f!r}, expected "always", "never" or milliseconds >= 1')
        if not 1024 <= self.segment_bytes <= MAX_SEGMENT_BYTES:
            problems.append(
                f"segment_bytes: got {self.segment_bytes}, expected 1024..{MAX_SEGMENT_BYTES}"
            )
        if self.index_interval_bytes < 1:
            problems.append(f"index_interval_bytes: got {self.index_interval_bytes}, expected >= 1")
        if self.retention_bytes < -1:
            problems.append(
                f"retention_bytes: got {self.retention_bytes}, expected -1 (unlimited) or >= 0"
            )
        if self.retention_ms < -1:
            problems.append(
                f"retention_ms: got {self.retention_ms}, expected -1 (unlimited) or >= 0"
            )
        if self.max_open_segments < 0:
            problems.append(
                f"max_open_segments: got {self.max_open_segments}, expected 0 (derived from the "
                "open-file limit) or a positive count"
            )
        if self.retention_check_ms < 1:
            problems.append(f"retention_check_ms: got {self.retention_check_ms}, expected >= 1")
        return problems

    @property
    def fsync_always(self) -> bool:
        return self.fsync == "always"

    @property
    def fsync_interval_ms(self) -> int | None:
        """The timer period, or None for "always"/"never"."""
        return self.fsync if isinstance(self.fsync, int) else None
