"""The topic table on disk: a snapshot (``topics.json``) plus an append-only journal
(``topics.journal``) of the changes since.

Creating or deleting a topic appends one line to the journal and fsyncs it: the cost of a change
does not grow with the number of topics (rewriting the whole table on each create made creating
N topics cost O(N^2) bytes written). The journal is folded into a fresh snapshot when the
backend opens and when it grows past a few times the table's size.

Journal line: ``<crc32c of the JSON, 8 hex digits> <JSON object>\\n`` where the object is one of
``{"op": "set", "topic": T, "partitions": N, "config": [[k, v], ...]}`` or
``{"op": "delete", "topic": T}``. Replaying is idempotent, so a crash between writing a snapshot
and emptying the journal is harmless. A torn or corrupt last line (a crash during an append) is
cut off and logged; a corrupt line followed by good ones stops the start instead (that is damage,
not a crash).

Blocking: every method does file I/O; callers run them in a worker thread.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from crc32c import crc32c

from gateway.model import ErrorCode, GatewayError

log = structlog.get_logger("gateway.backends.embedded")

METADATA_VERSION = 1
COMPACT_MIN_LINES = 1024

Entry = tuple[int, tuple[tuple[str, str], ...]]  # partitions, config


def _line(doc: dict[str, object]) -> bytes:
    body = json.dumps(doc, separators=(",", ":")).encode()
    return b"%08x " % crc32c(body) + body + b"\n"


class TopicTable:
    def __init__(self, data_dir: Path, fsync: Callable[[int], None]) -> None:
        self.snapshot_path = data_dir / "topics.json"
        self.journal_path = data_dir / "topics.journal"
        self._fsync = fsync
        self._fd = -1
        self.journal_lines = 0

    def exists(self) -> bool:
        return self.snapshot_path.exists() or self.journal_path.exists()

    # ------------------------------------------------------------------ load
    def load(self) -> dict[str, Entry]:
        """The table as of the last change; then folds the journal into a new snapshot."""
        entries: dict[str, Entry] = {}
        if self.snapshot_path.exists():
            try:
                doc = json.loads(self.snapshot_path.read_bytes())
                for name, t in doc["topics"].items():
                    entries[name] = (
                        int(t["partitions"]),
                        tuple((str(k), str(v)) for k, v in t["config"]),
                    )
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise GatewayError(
                    ErrorCode.BACKEND_UNAVAILABLE, f"{self.snapshot_path} is unreadable: {exc}"
                ) from None
        replayed = self._replay(entries)
        if replayed or not self.snapshot_path.exists():
            self.compact(entries)
        else:
            self._open_journal()
        return entries

    def _replay(self, entries: dict[str, Entry]) -> int:
        if not self.journal_path.exists():
            return 0
        raw = self.journal_path.read_bytes()
        lines = raw.split(b"\n")
        pos = count = 0
        for i, line in enumerate(lines):
            if i == len(lines) - 1 and not line:
                break  # the end of the file after the last newline
            doc = self._parse(line) if i < len(lines) - 1 else None
            if doc is None:
                later = any(self._parse(rest) is not None for rest in lines[i + 1 :])
                if later:
                    raise GatewayError(
                        ErrorCode.BACKEND_UNAVAILABLE,
                        f"{self.journal_path}: line {i + 1} is corrupt and later lines are "
                        f"intact: refusing to guess the topic table; restore the file",
                    )
                log.warning(
                    "embedded.recovery.truncated",
                    file=str(self.journal_path),
                    reason="torn or corrupt last line",
                    valid_bytes=pos,
                    dropped_bytes=len(raw) - pos,
                )
                break
            self._apply(entries, doc)
            pos += len(line) + 1
            count += 1
        return count or int(pos < len(raw))

    @staticmethod
    def _parse(line: bytes) -> dict[str, object] | None:
        if len(line) < 10 or line[8:9] != b" ":
            return None
        body = line[9:]
        try:
            if int(line[:8], 16) != crc32c(body):
                return None
            doc = json.loads(body)
        except ValueError:
            return None
        if not isinstance(doc, dict) or doc.get("op") not in ("set", "delete"):
            return None
        try:  # a line with a good CRC but the wrong shape is damage too
            TopicTable._apply({}, doc)
        except (KeyError, TypeError, ValueError):
            return None
        return doc

    @staticmethod
    def _apply(entries: dict[str, Entry], doc: dict[str, Any]) -> None:
        """Apply one parsed line; a wrong shape raises KeyError, TypeError or ValueError."""
        name = doc["topic"]
        if not isinstance(name, str):
            raise TypeError("topic")
        if doc["op"] == "delete":
            entries.pop(name, None)
        else:
            config = doc.get("config") or []
            entries[name] = (
                int(doc["partitions"]),
                tuple((str(k), str(v)) for k, v in config),
            )

    # ------------------------------------------------------------------ changes
    def set(self, name: str, partitions: int, config: tuple[tuple[str, str], ...]) -> None:
        """Record that ``name`` exists with ``partitions`` partitions (durable on return)."""
        self._append(
            {"op": "set", "topic": name, "partitions": partitions, "config": [*map(list, config)]}
        )

    def delete(self, name: str) -> None:
        self._append({"op": "delete", "topic": name})

    def _append(self, doc: dict[str, object]) -> None:
        data = memoryview(_line(doc))
        while data:
            data = data[os.write(self._fd, data) :]
        self._fsync(self._fd)
        self.journal_lines += 1

    def wants_compaction(self, topics: int) -> bool:
        return self.journal_lines > max(COMPACT_MIN_LINES, 4 * topics)

    def compact(self, entries: dict[str, Entry]) -> None:
        """Write ``entries`` as the new snapshot and empty the journal."""
        doc = {
            "version": METADATA_VERSION,
            "topics": {
                name: {"partitions": n, "config": [list(c) for c in config]}
                for name, (n, config) in sorted(entries.items())
            },
        }
        tmp = self.snapshot_path.with_name(self.snapshot_path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = memoryview(json.dumps(doc, indent=1).encode())
            while data:
                data = data[os.write(fd, data) :]
            self._fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.snapshot_path)
        self._fsync_dir()
        self.close()
        self._open_journal(truncate=True)

    def _open_journal(self, truncate: bool = False) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | (os.O_TRUNC if truncate else 0)
        self._fd = os.open(self.journal_path, flags, 0o644)
        if truncate:
            self._fsync(self._fd)
            self._fsync_dir()
            self.journal_lines = 0

    def _fsync_dir(self) -> None:
        fd = os.open(self.snapshot_path.parent, os.O_RDONLY)
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
