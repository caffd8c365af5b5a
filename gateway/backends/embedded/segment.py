"""One segment of a partition's log: ``<base offset, 20 digits>.log`` plus its two sparse indexes.

Log file: a sequence of frames, each one stored batch::

    length u32 | crc32c u32 | base_offset i64 | count u32 | max_timestamp_us i64 | payload

``length`` is the payload's size; the CRC-32C covers everything after the crc field (the rest of
the header and the payload); the payload is the batch in the canonical encoding
(``gateway.canonical``: version 3, with its record start table, or version 1 in logs written
before 2026-11-25), stored exactly as it arrived when it was canonical already, or a protocol's
own block behind a prefix (``payload.py``).

Indexes (entries every ``index_interval_bytes`` of log, at frame boundaries; the start of the
segment is an implicit entry)::

    .index      relative_offset u32 | position u32
    .timeindex  max_timestamp_before i64 | relative_offset u32 | position u32

``max_timestamp_before`` is the largest timestamp of every record before ``position`` in this
segment, so the first record with a timestamp >= T lies after the last entry below T and before the
next one: a lookup by offset or by time scans at most one index interval. A finished segment
(rolled, or closed cleanly) ends both indexes with an entry at its end position, which also tells
recovery that the index is complete.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from gateway.backends.embedded.payload import payload_problem
from gateway.canonical import HEADER as CANONICAL_HEADER

FRAME = struct.Struct("<IIqIq")  # length, crc, base_offset, count, max_timestamp_us
FRAME_TAIL = struct.Struct("<qIq")  # the CRC'd part of the header
LEN_CRC = struct.Struct("<II")
OFFSET_ENTRY = struct.Struct("<II")
TIME_ENTRY = struct.Struct("<qII")
NO_TIMESTAMP = -(1 << 63)
MAX_FRAME = 1 << 31
SCAN_CHUNK = 4 << 20


def segment_name(base: int) -> str:
    return f"{base:020d}"


def frame_header(payload_len: int, base: int, count: int, max_ts: int, payload: object) -> bytes:
    tail = FRAME_TAIL.pack(base, count, max_ts)
    crc = crc32c(payload, crc32c(tail))  # type: ignore[arg-type]
    return LEN_CRC.pack(payload_len, crc) + tail


@dataclass
class ScanResult:
    """What a scan of a segment's frames found: where the valid part ends and why it stopped."""

    valid_bytes: int
    end_offset: int
    max_ts: int
    entries: list[tuple[int, int, int]] = field(default_factory=list)  # (rel, pos, ts_before)
    problem: str = ""  # empty: the scan reached the end of the file


def iter_frames(
    fd: int, start: int, file_size: int, chunk: int = SCAN_CHUNK
) -> Iterator[tuple[int, memoryview | None, str]]:
    """(position, frame, problem) for each frame from ``start``; a frame whose bytes are not all
    there yields ``(pos, None, why)`` and ends the iteration."""
    pos = start
    buf = b""
    buf_pos = start
    while pos < file_size:
        rel = pos - buf_pos
        if rel + FRAME.size > len(buf):
            buf = os.pread(fd, max(chunk, FRAME.size), pos)
            buf_pos, rel = pos, 0
            if len(buf) < FRAME.size:
                yield pos, None, f"torn frame header ({file_size - pos} bytes at the end)"
                return
        length = LEN_CRC.unpack_from(buf, rel)[0]
        flen = FRAME.size + length
        if length < CANONICAL_HEADER.size or flen > MAX_FRAME:
            yield pos, None, f"impossible frame length {length}"
            return
        if pos + flen > file_size:
            yield pos, None, f"torn frame ({file_size - pos} of {flen} bytes present)"
            return
        if rel + flen > len(buf):
            buf = os.pread(fd, max(chunk, flen), pos)
            buf_pos, rel = pos, 0
        yield pos, memoryview(buf)[rel : rel + flen], ""
        pos += flen


def check_frame(frame: memoryview, expected_base: int) -> tuple[int, int, int, str]:
    """(base, count, max_ts, problem) of one complete frame; ``problem`` is empty when valid."""
    length, crc, base, count, max_ts = FRAME.unpack_from(frame, 0)
    if crc32c(frame[8:]) != crc:
        return base, count, max_ts, "CRC-32C mismatch"
    if base != expected_base:
        return base, count, max_ts, f"base offset {base}, expected {expected_base}"
    found = payload_problem(frame[FRAME.size :], count) if count >= 1 else f"count {count}"
    if found:
        return base, count, max_ts, f"bad batch header ({found})"
    return base, count, max_ts, ""


def scan_segment(fd: int, base: int, file_size: int, interval: int) -> ScanResult:
    """Validate every frame of a segment file and compute its index entries."""
    result = ScanResult(0, base, NO_TIMESTAMP)
    last_entry_pos = 0
    for pos, frame, problem in iter_frames(fd, 0, file_size):
        if frame is None:
            result.problem = problem
            return result
        fbase, count, max_ts, problem = check_frame(frame, result.end_offset)
        if problem:
            result.problem = problem
            return result
        if pos - last_entry_pos >= interval:
            result.entries.append((fbase - base, pos, result.max_ts))
            last_entry_pos = pos
        result.end_offset = fbase + count
        result.max_ts = max(result.max_ts, max_ts)
        result.valid_bytes = pos + len(frame)
    return result


class Segment:
    """A segment file and its in-memory sparse index. Only the active (last) segment of a
    partition is written; it keeps its index files open for appending."""

    __slots__ = (
        "base",
        "path",
        "fd",
        "size",
        "end",
        "max_ts",
        "idx_rel",
        "idx_pos",
        "idx_ts",
        "_idx_fd",
        "_tidx_fd",
    )

    def __init__(self, directory: Path, base: int) -> None:
        self.base = base
        self.path = directory / f"{segment_name(base)}.log"
        self.fd = -1
        self.size = 0
        self.end = base  # the next offset after this segment's last record
        self.max_ts = NO_TIMESTAMP
        # the sparse index, with the implicit entry for the segment's start
        self.idx_rel: list[int] = [0]
        self.idx_pos: list[int] = [0]
        self.idx_ts: list[int] = [NO_TIMESTAMP]
        self._idx_fd = -1
        self._tidx_fd = -1

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(".index")

    @property
    def time_index_path(self) -> Path:
        return self.path.with_suffix(".timeindex")

    @property
    def records(self) -> int:
        return self.end - self.base

    # ------------------------------------------------------------------ opening
    def open_file(self, create: bool = False) -> int:
        """Open the log file; returns its size on disk."""
        flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
        self.fd = os.open(self.path, flags, 0o644)
        return os.fstat(self.fd).st_size

    def load_index(self, file_size: int) -> bool:
        """Load both index files; True when they are consistent and complete (end with an
        entry at ``file_size``), which makes the segment trusted without a scan."""
        try:
            raw = self.index_path.read_bytes()
            traw = self.time_index_path.read_bytes()
        except FileNotFoundError:
            return False
        if len(raw) % OFFSET_ENTRY.size or len(traw) % TIME_ENTRY.size:
            return False
        offsets = list(OFFSET_ENTRY.iter_unpack(raw))
        times = list(TIME_ENTRY.iter_unpack(traw))
        if not offsets or len(offsets) != len(times):
            return False
        rel_prev = pos_prev = 0
        ts_prev = NO_TIMESTAMP
        for (rel, pos), (ts, trel, tpos) in zip(offsets, times, strict=True):
            if (rel, pos) != (trel, tpos) or rel < rel_prev or pos < pos_prev or ts < ts_prev:
                return False
            rel_prev, pos_prev, ts_prev = rel, pos, ts
        if pos_prev != file_size:
            return False
        self.idx_rel = [0] + [rel for rel, _ in offsets]
        self.idx_pos = [0] + [pos for _, pos in offsets]
        self.idx_ts = [NO_TIMESTAMP] + [ts for ts, _, _ in times]
        self.size = file_size
        self.end = self.base + rel_prev
        self.max_ts = ts_prev
        return True

    def adopt_scan(self, scan: ScanResult) -> None:
        """Take a scan's findings as the segment's state and rewrite its index files."""
        self.size = scan.valid_bytes
        self.end = scan.end_offset
        self.max_ts = scan.max_ts
        self.idx_rel = [0] + [e[0] for e in scan.entries]
        self.idx_pos = [0] + [e[1] for e in scan.entries]
        self.idx_ts = [NO_TIMESTAMP] + [e[2] for e in scan.entries]
        self.index_path.write_bytes(b"".join(OFFSET_ENTRY.pack(r, p) for r, p, _ in scan.entries))
        self.time_index_path.write_bytes(
            b"".join(TIME_ENTRY.pack(t, r, p) for r, p, t in scan.entries)
        )

    def open_index_for_append(self) -> None:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        self._idx_fd = os.open(self.index_path, flags, 0o644)
        self._tidx_fd = os.open(self.time_index_path, flags, 0o644)

    # ------------------------------------------------------------------ writing
    def _add_entry(self, rel: int, pos: int, ts_before: int) -> None:
        self.idx_rel.append(rel)
        self.idx_pos.append(pos)
        self.idx_ts.append(ts_before)
        if self._idx_fd >= 0:
            os.write(self._idx_fd, OFFSET_ENTRY.pack(rel, pos))
            os.write(self._tidx_fd, TIME_ENTRY.pack(ts_before, rel, pos))

    def write(
        self,
        header: bytes,
        payload: bytes | memoryview,
        base: int,
        count: int,
        max_ts: int,
        interval: int,
    ) -> None:
        pos = self.size
        if pos - self.idx_pos[-1] >= interval:
            self._add_entry(base - self.base, pos, self.max_ts)
        total = len(header) + len(payload)
        written = os.writev(self.fd, (header, payload))
        while written < total:  # short write (rare on files): finish it
            data = (header + bytes(payload))[written:]
            written += os.write(self.fd, data)
        self.size = pos + total
        self.end = base + count
        if max_ts > self.max_ts:
            self.max_ts = max_ts

    def finish(self) -> None:
        """Seal the indexes with the end entry and stop writing them."""
        if self._idx_fd >= 0 and self.idx_pos[-1] != self.size:
            self._add_entry(self.end - self.base, self.size, self.max_ts)
        self.close_index()

    def close_index(self) -> None:
        for fd in (self._idx_fd, self._tidx_fd):
            if fd >= 0:
                os.close(fd)
        self._idx_fd = self._tidx_fd = -1

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.size = size

    def close(self) -> None:
        self.close_index()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close()
        for path in (self.path, self.index_path, self.time_index_path):
            path.unlink(missing_ok=True)

    # ------------------------------------------------------------------ lookups
    def position_for(self, offset: int) -> int:
        """The file position of the last index entry at or before ``offset``."""
        return self.idx_pos[bisect_right(self.idx_rel, offset - self.base) - 1]

    def position_for_time(self, timestamp_us: int) -> int:
        """The file position of the last index entry before which every timestamp is below
        ``timestamp_us``: the first record at or after it lies within one interval from there."""
        return self.idx_pos[bisect_left(self.idx_ts, timestamp_us) - 1]
