"""The durable key-value store: an append-only file of CRC-checked entries, loaded into a dict.

Entry::

    crc32c u32 | op u8 (1 put, 2 delete) | namespace_len u16 | key_len u32 | value_len u32
    | namespace utf-8 | key utf-8 | value

The CRC covers everything after itself. Opening replays the file; a torn or corrupt tail (a crash
during a write) is cut off and logged. When the file holds mostly overwritten entries it is
compacted: the live entries are written to a new file, fsynced, and renamed over the old one.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import structlog
from crc32c import crc32c

log = structlog.get_logger("gateway.backends.embedded")

ENTRY = struct.Struct("<IBHII")
PUT, DELETE = 1, 2
COMPACT_MIN_BYTES = 1 << 20


def _entry(op: int, namespace: str, key: str, value: bytes) -> bytes:
    ns, k = namespace.encode(), key.encode()
    body = ENTRY.pack(0, op, len(ns), len(k), len(value))[4:] + ns + k + value
    return struct.pack("<I", crc32c(body)) + body


class KvStore:
    def __init__(self, path: Path, fsync: Callable[[int], None]) -> None:
        self.path = path
        self._fsync = fsync
        self.fd = -1
        self._data: dict[str, dict[str, bytes]] = {}
        self._file_bytes = 0
        self._live_bytes = 0

    def open(self) -> None:
        raw = self.path.read_bytes() if self.path.exists() else b""
        pos = 0
        problem = ""
        while pos < len(raw):
            if pos + ENTRY.size > len(raw):
                problem = "torn entry header"
                break
            crc, op, nlen, klen, vlen = ENTRY.unpack_from(raw, pos)
            end = pos + ENTRY.size + nlen + klen + vlen
            if end > len(raw):
                problem = "torn entry"
                break
            if crc32c(raw[pos + 4 : end]) != crc or op not in (PUT, DELETE):
                problem = "CRC-32C mismatch"
                break
            p = pos + ENTRY.size
            ns = raw[p : p + nlen].decode()
            key = raw[p + nlen : p + nlen + klen].decode()
            if op == PUT:
                self._data.setdefault(ns, {})[key] = raw[p + nlen + klen : end]
            else:
                self._data.get(ns, {}).pop(key, None)
            pos = end
        self.fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        if pos < len(raw):
            log.warning(
                "embedded.recovery.truncated",
                file=str(self.path),
                reason=problem,
                valid_bytes=pos,
                dropped_bytes=len(raw) - pos,
            )
            os.ftruncate(self.fd, pos)
        self._file_bytes = pos
        self._live_bytes = self._compute_live()

    def _compute_live(self) -> int:
        return sum(
            ENTRY.size + len(ns.encode()) + len(k.encode()) + len(v)
            for ns, d in self._data.items()
            for k, v in d.items()
        )

    # ------------------------------------------------------------------ operations
    def get(self, namespace: str, key: str) -> bytes | None:
        return self._data.get(namespace, {}).get(key)

    def scan(self, namespace: str, prefix: str) -> list[tuple[str, bytes]]:
        items = self._data.get(namespace, {}).items()
        return sorted((k, v) for k, v in items if k.startswith(prefix))

    def put(self, namespace: str, key: str, value: bytes) -> None:
        entry = _entry(PUT, namespace, key, bytes(value))
        self._write(entry)
        old = self._data.setdefault(namespace, {}).get(key)
        if old is not None:
            self._live_bytes -= len(entry) - len(value) + len(old)
        self._live_bytes += len(entry)
        self._data[namespace][key] = bytes(value)

    def delete(self, namespace: str, key: str) -> bool:
        """True when something was deleted (and written)."""
        old = self._data.get(namespace, {}).get(key)
        if old is None:
            return False
        entry = _entry(DELETE, namespace, key, b"")
        self._write(entry)
        del self._data[namespace][key]
        self._live_bytes -= len(entry) + len(old)
        return True

    def _write(self, entry: bytes) -> None:
        written = os.write(self.fd, entry)
        while written < len(entry):
            written += os.write(self.fd, entry[written:])
        self._file_bytes += len(entry)

    def compaction_due(self) -> bool:
        """The file holds mostly overwritten entries: time for :meth:`compact` (which blocks on
        the disk: callers run it in a worker thread, with no put or delete meanwhile)."""
        return self._file_bytes >= COMPACT_MIN_BYTES and self._file_bytes >= 4 * self._live_bytes

    def compact(self) -> None:
        os.close(self.compact_keeping_old())

    def compact_keeping_old(self) -> int:
        """Compact; returns the old file's descriptor, still open, for the caller to close: a
        sync round on the event loop may be duplicating ``fd`` while this runs in a thread."""
        tmp = self.path.with_suffix(".compact")
        parts = [_entry(PUT, ns, k, v) for ns, d in self._data.items() for k, v in d.items()]
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            data = b"".join(parts)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            self._fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            self._fsync(dir_fd)
        finally:
            os.close(dir_fd)
        old, self.fd = self.fd, os.open(self.path, os.O_RDWR | os.O_APPEND, 0o644)
        self._file_bytes = self._live_bytes = len(data)
        return old

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
