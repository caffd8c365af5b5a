"""One partition's log: an ordered list of segments, the last one active.

Appends go to the active segment, which rolls when the next frame would take it past
``segment_bytes``. Reads find the segment by base offset, the position by the sparse index, and
hand out the stored blocks (canonical, or a protocol's own: ``payload.py``) as
:class:`RecordBatch` windows without decoding records.
Retention deletes whole old segments (never the active one) and moves the log start offset.
"""

from __future__ import annotations

import os
import shutil
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from crc32c import crc32c

from gateway.backends.embedded.payload import decode_payload
from gateway.backends.embedded.segment import (
    FRAME,
    MAX_FRAME,
    Segment,
    frame_header,
    iter_frames,
    scan_segment,
    segment_name,
)
from gateway.model import ErrorCode, GatewayError, RecordBatch

log = structlog.get_logger("gateway.backends.embedded")

READ_CHUNK_MIN = 64 << 10
READ_CHUNK_MAX = 16 << 20


@dataclass(frozen=True, slots=True)
class LogSettings:
    segment_bytes: int
    index_interval_bytes: int
    retention_bytes: int
    retention_ms: int


class PartitionLog:
    """``next_offset`` is the end of what is written; ``high_watermark`` the end of what readers
    may see (with fsync "always" it trails until the fsync returned)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        directory: Path,
        settings: LogSettings,
        mark_dirty: Callable[[Any], None],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.settings = settings
        self._mark_dirty = mark_dirty
        self.segments: list[Segment] = []
        self.bases: list[int] = []
        self.next_offset = 0
        self.high_watermark = 0
        self.last_scan_bytes = 0  # bytes of frames skipped by the last read's index lookup

    # ------------------------------------------------------------------ open / recovery
    @classmethod
    def open(
        cls,
        topic: str,
        partition: int,
        directory: Path,
        settings: LogSettings,
        mark_dirty: Callable[[Any], None],
        clean: bool,
    ) -> PartitionLog:
        self = cls(topic, partition, directory, settings, mark_dirty)
        directory.mkdir(parents=True, exist_ok=True)
        bases = sorted(
            int(p.stem) for p in directory.glob("*.log") if len(p.stem) == 20 and p.stem.isdigit()
        )
        if not bases:
            seg = Segment(directory, 0)
            seg.open_file(create=True)
            self.segments.append(seg)
        expected: int | None = None
        for i, base in enumerate(bases):
            seg = Segment(directory, base)
            if expected is not None and base != expected:
                self._drop_from(bases[i:], f"segment starts at {base}, expected {expected}")
                break
            size = seg.open_file()
            last = i == len(bases) - 1
            if not ((clean or not last) and seg.load_index(size)):
                scan = scan_segment(seg.fd, base, size, settings.index_interval_bytes)
                if scan.valid_bytes != size:
                    log.warning(
                        "embedded.recovery.truncated",
                        topic=topic,
                        partition=partition,
                        segment=seg.path.name,
                        reason=scan.problem,
                        valid_bytes=scan.valid_bytes,
                        dropped_bytes=size - scan.valid_bytes,
                        kept_through_offset=scan.end_offset - 1,
                    )
                    seg.truncate(scan.valid_bytes)
                elif size:
                    log.info(
                        "embedded.recovery.index_rebuilt",
                        topic=topic,
                        partition=partition,
                        segment=seg.path.name,
                    )
                seg.adopt_scan(scan)
                self.segments.append(seg)
                if scan.valid_bytes != size and not last:
                    self._drop_from(bases[i + 1 :], "an earlier segment was truncated")
                    break
            else:
                self.segments.append(seg)
            expected = seg.end
        for seg in self.segments[:-1]:
            if seg.idx_pos[-1] != seg.size:  # sealed segments end their index with the end entry
                seg.open_index_for_append()
                seg.finish()
        active = self.segments[-1]
        active.open_index_for_append()
        self.bases = [s.base for s in self.segments]
        self.next_offset = self.high_watermark = active.end
        return self

    def _drop_from(self, bases: list[int], reason: str) -> None:
        for base in bases:
            seg = Segment(self.directory, base)
            log.error(
                "embedded.recovery.segment_dropped",
                topic=self.topic,
                partition=self.partition,
                segment=seg.path.name,
                reason=reason,
                bytes=seg.path.stat().st_size,
            )
            seg.delete()

    # ------------------------------------------------------------------ facts
    @property
    def log_start(self) -> int:
        return self.segments[0].base

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def fds(self) -> list[int]:
        return [s.fd for s in self.segments]

    # ------------------------------------------------------------------ append
    def append(self, payload: bytes | memoryview, count: int, max_ts: int) -> int:
        """Write one batch; returns its base offset. Visibility is the caller's business."""
        if len(payload) + FRAME.size > MAX_FRAME:
            raise GatewayError(ErrorCode.RECORD_TOO_LARGE, f"batch of {len(payload)} bytes")
        seg = self.segments[-1]
        if seg.size and seg.size + FRAME.size + len(payload) > self.settings.segment_bytes:
            seg = self.roll()
        base = self.next_offset
        header = frame_header(len(payload), base, count, max_ts, payload)
        seg.write(header, payload, base, count, max_ts, self.settings.index_interval_bytes)
        self.next_offset = base + count
        self._mark_dirty(seg)
        return base

    def roll(self) -> Segment:
        old = self.segments[-1]
        old.finish()
        seg = Segment(self.directory, self.next_offset)
        seg.open_file(create=True)
        seg.open_index_for_append()
        self.segments.append(seg)
        self.bases.append(seg.base)
        self._mark_dirty(self.directory)  # the new file's directory entry
        return seg

    # ------------------------------------------------------------------ read
    def read(self, offset: int, max_records: int, max_bytes: int) -> list[RecordBatch]:
        hwm = self.high_watermark
        if offset < self.log_start or offset > hwm:
            raise GatewayError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{self.log_start}, {hwm}] "
                f"of {self.topic}/{self.partition}",
            )
        out: list[RecordBatch] = []
        self.last_scan_bytes = 0
        if offset >= hwm or max_records <= 0:
            return out
        segments = self.segments
        si = bisect_right(self.bases, offset) - 1
        seg = segments[si]
        pos = seg.position_for(offset)
        # read ahead what the request can use: max_bytes, or fewer bytes when max_records of
        # this segment's average size are less (a 1,000-record read must not pread 16 MiB)
        per_record = seg.size // max(1, seg.records) + 1
        chunk = min(max(min(max_bytes, max_records * per_record), READ_CHUNK_MIN), READ_CHUNK_MAX)
        chunk += self.settings.index_interval_bytes + FRAME.size
        unpack = FRAME.unpack_from
        fsize = FRAME.size
        buf = b""
        mv = memoryview(buf)
        buf_pos = 0
        got_records = got_bytes = scanned = 0
        while True:
            if pos >= seg.size:
                si += 1
                if si >= len(segments):
                    break
                seg = segments[si]
                pos, buf, buf_pos = 0, b"", 0
                continue
            rel = pos - buf_pos
            if rel + fsize > len(buf):
                buf = os.pread(seg.fd, chunk, pos)
                mv = memoryview(buf)
                buf_pos, rel = pos, 0
            length, crc, base, count, max_ts = unpack(buf, rel)
            if base >= hwm:
                break
            flen = fsize + length
            if base + count <= offset:  # before the wanted offset: skip (within one interval)
                pos += flen
                scanned += flen
                continue
            if rel + flen > len(buf):
                buf = os.pread(seg.fd, max(chunk, flen), pos)
                mv = memoryview(buf)
                buf_pos, rel = pos, 0
            if crc32c(mv[rel + 8 : rel + flen]) != crc:
                raise GatewayError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"CRC-32C mismatch in {seg.path} at position {pos} (offset {base})",
                )
            codec, block = decode_payload(mv[rel + fsize : rel + flen])
            batch = RecordBatch(
                encoded=block,
                codec=codec,
                count=count,
                base_offset=base,
                max_timestamp_us=max_ts,
            )
            if offset != base or count > max_records - got_records:
                batch = batch.slice(offset, max_records - got_records)
            size = batch.size_bytes
            if out and got_bytes + size > max_bytes:
                break
            out.append(batch)
            got_records += batch.count
            got_bytes += size
            offset = base + count if batch.is_whole else batch.last_offset + 1
            pos += flen
            if got_records >= max_records or got_bytes >= max_bytes or offset >= hwm:
                break
        self.last_scan_bytes = scanned
        return out

    def offset_for_timestamp(self, timestamp_us: int) -> int:
        hwm = self.high_watermark
        for seg in self.segments:
            if seg.max_ts < timestamp_us:
                continue
            pos = seg.position_for_time(timestamp_us)
            chunk = max(READ_CHUNK_MIN, 2 * self.settings.index_interval_bytes)
            for _, frame, _ in iter_frames(seg.fd, pos, seg.size, chunk):
                if frame is None:
                    break
                _, _, base, _, max_ts = FRAME.unpack_from(frame, 0)
                if base >= hwm:
                    return hwm
                if max_ts < timestamp_us:
                    continue
                codec, block = decode_payload(frame[FRAME.size :])
                for record in codec.decode(block, base):
                    if record.timestamp_us >= timestamp_us:
                        return record.offset
        return hwm

    # ------------------------------------------------------------------ retention
    def enforce_retention(self, now_us: int) -> int:
        """Delete old whole segments beyond the size or age limit; returns how many."""
        retention_bytes = self.settings.retention_bytes
        retention_ms = self.settings.retention_ms
        if retention_bytes < 0 and retention_ms < 0:
            return 0
        total = self.size_bytes
        deleted = 0
        while len(self.segments) > 1:
            first = self.segments[0]
            if first.end > self.high_watermark:
                break
            too_big = retention_bytes >= 0 and total - first.size >= retention_bytes
            too_old = retention_ms >= 0 and first.max_ts < now_us - retention_ms * 1000
            if not (too_big or too_old):
                break
            log.info(
                "embedded.retention.segment_deleted",
                topic=self.topic,
                partition=self.partition,
                segment=first.path.name,
                reason="size" if too_big else "age",
                bytes=first.size,
                new_log_start=self.segments[1].base,
            )
            first.delete()
            del self.segments[0]
            del self.bases[0]
            total -= first.size
            deleted += 1
        return deleted

    # ------------------------------------------------------------------ lifecycle
    def seal(self) -> None:
        """Clean shutdown: end the active segment's indexes so the next open trusts them."""
        self.segments[-1].finish()

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


__all__ = ["LogSettings", "PartitionLog", "segment_name"]
