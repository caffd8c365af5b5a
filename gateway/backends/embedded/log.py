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
from prometheus_client import Counter

from gateway.backends.embedded.files import SegmentFiles
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
from gateway.canonical import HEADER as CANONICAL_HEADER
from gateway.model import ErrorCode, GatewayError, RecordBatch
from gateway.observability import REGISTRY

log = structlog.get_logger("gateway.backends.embedded")

corrupt_reads = Counter(
    "gateway_embedded_corrupt_reads_total",
    "Reads of the embedded log that reached a damaged frame (answered: corrupt message)",
    registry=REGISTRY,
)

READ_CHUNK_MIN = 64 << 10
READ_CHUNK_MAX = 16 << 20


@dataclass(frozen=True, slots=True)
class LogSettings:
    segment_bytes: int
    index_interval_bytes: int
    retention_bytes: int
    retention_ms: int


class RecoveryError(GatewayError):
    """A partition is damaged in a way recovery will not fix by itself (it would lose intact
    data); the message names the file and the repair command."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.BACKEND_UNAVAILABLE, message)


class PartitionLog:
    """``next_offset`` is the end of what is written; ``high_watermark`` the end of what readers
    may see (with fsync "always" it trails until the fsync returned)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        directory: Path,
        settings: LogSettings,
        mark_dirty: Callable[[Any], object],
        files: SegmentFiles | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.settings = settings
        self._mark_dirty = mark_dirty
        self._files = files  # None: every segment keeps its descriptor
        self.segments: list[Segment] = []
        self.bases: list[int] = []
        self.next_offset = 0
        self.high_watermark = 0
        self.last_scan_bytes = 0  # bytes of frames skipped by the last read's index lookup
        self.repairs: list[str] = []  # what recovery cut or dropped, one line each
        self._reported: set[tuple[int, int]] = set()  # damaged frames already logged

    # ------------------------------------------------------------------ open / recovery
    @classmethod
    def open(
        cls,
        topic: str,
        partition: int,
        directory: Path,
        settings: LogSettings,
        mark_dirty: Callable[[Any], object],
        clean: bool,
        repair: bool = False,
        files: SegmentFiles | None = None,
    ) -> PartitionLog:
        """Open (creating it when new) and recover a partition's log. A torn or damaged tail of
        the last segment is cut off (what a crash leaves). Damage anywhere else (a missing
        segment, an unreadable older one) stops the open with :class:`RecoveryError`, deleting
        nothing, unless ``repair``: then the log is cut at the damage and later segments dropped,
        each drop logged and listed in ``repairs``."""
        self = cls(topic, partition, directory, settings, mark_dirty, files)
        try:
            self._open(clean, repair)
        except BaseException:
            self.close()
            raise
        return self

    def _refuse(self, problem: str) -> None:
        raise RecoveryError(
            f"topic {self.topic!r} partition {self.partition}: {problem}; nothing was changed. "
            f"Stop the gateway and run `gateway repair` (same --config) to cut the partition at "
            f"the damage, dropping the segments from there on"
        )

    def _open(self, clean: bool, repair: bool) -> None:
        directory = self.directory
        directory.mkdir(parents=True, exist_ok=True)
        bases = sorted(
            int(p.stem) for p in directory.glob("*.log") if len(p.stem) == 20 and p.stem.isdigit()
        )
        if not bases:
            seg = Segment(directory, 0)
            self.segments.append(seg)
            seg.open_file(create=True)
        expected: int | None = None
        for i, base in enumerate(bases):
            seg = Segment(directory, base)
            if expected is not None and base != expected:
                problem = (
                    f"{seg.path} starts at offset {base} but the segment before it ends at "
                    f"{expected} (a segment file is missing)"
                )
                if not repair:
                    self._refuse(problem)
                self._drop_from(bases[i:], problem)
                break
            if self.segments:
                self._sealed(self.segments[-1])  # a later one follows: it is only read now
            self.segments.append(seg)
            size = seg.open_file()
            last = i == len(bases) - 1
            if not ((clean or not last) and seg.load_index(size)):
                scan = scan_segment(seg.fd, base, size, self.settings.index_interval_bytes)
                if scan.valid_bytes != size and not last and not repair:
                    self._refuse(
                        f"{seg.path} is damaged at byte {scan.valid_bytes} ({scan.problem}) and "
                        f"{len(bases) - i - 1} later segment(s) follow it"
                    )
                if scan.valid_bytes != size:
                    log.warning(
                        "embedded.recovery.truncated",
                        topic=self.topic,
                        partition=self.partition,
                        segment=seg.path.name,
                        reason=scan.problem,
                        valid_bytes=scan.valid_bytes,
                        dropped_bytes=size - scan.valid_bytes,
                        kept_through_offset=scan.end_offset - 1,
                    )
                    self.repairs.append(
                        f"{seg.path}: cut at byte {scan.valid_bytes} ({scan.problem}), "
                        f"{size - scan.valid_bytes} bytes dropped, offsets from "
                        f"{scan.end_offset} on"
                    )
                    seg.truncate(scan.valid_bytes)
                elif size:
                    log.info(
                        "embedded.recovery.index_rebuilt",
                        topic=self.topic,
                        partition=self.partition,
                        segment=seg.path.name,
                    )
                seg.adopt_scan(scan)
                if scan.valid_bytes != size and not last:
                    self._drop_from(bases[i + 1 :], "an earlier segment was cut")
                    break
            expected = seg.end
        for seg in self.segments[:-1]:
            if seg.idx_pos[-1] != seg.size:  # sealed segments end their index with the end entry
                seg.open_index_for_append()
                seg.finish()
        active = self.segments[-1]
        active.open_index_for_append()
        self.bases = [s.base for s in self.segments]
        self.next_offset = self.high_watermark = active.end

    def _drop_from(self, bases: list[int], reason: str) -> None:
        for base in bases:
            seg = Segment(self.directory, base)
            size = seg.path.stat().st_size
            log.error(
                "embedded.recovery.segment_dropped",
                topic=self.topic,
                partition=self.partition,
                segment=seg.path.name,
                reason=reason,
                bytes=size,
            )
            self.repairs.append(f"{seg.path}: dropped ({size} bytes, offsets from {base} on)")
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
        size, end, entries = seg.size, seg.end, len(seg.idx_pos)
        try:
            seg.write(header, payload, base, count, max_ts, self.settings.index_interval_bytes)
        except OSError as exc:  # no space, or no descriptor: undo the partial frame, refuse
            seg.truncate(size)
            seg.end = end
            del seg.idx_rel[entries:], seg.idx_pos[entries:], seg.idx_ts[entries:]
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE,
                f"cannot append to {self.topic}/{self.partition}: {exc.strerror}",
            ) from None
        self.next_offset = base + count
        self._mark_dirty(seg)
        return base

    def roll(self) -> Segment:
        old = self.segments[-1]
        seg = Segment(self.directory, self.next_offset)
        try:
            seg.open_file(create=True)
            seg.open_index_for_append()
        except OSError as exc:
            seg.close()
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE,
                f"cannot start a new segment of {self.topic}/{self.partition}: {exc.strerror}",
            ) from None
        old.finish()
        self._sealed(old)
        self.segments.append(seg)
        self.bases.append(seg.base)
        self._mark_dirty(self.directory)  # the new file's directory entry
        return seg

    # ------------------------------------------------------------------ descriptors
    def _sealed(self, seg: Segment) -> None:
        if self._files is not None:
            self._files.release(seg)

    def _fd(self, seg: Segment) -> int:
        return seg.fd if self._files is None else self._files.fd(seg)

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
        fd = self._fd(seg)
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
        expect = -1  # the base offset the next frame must have; -1: not known (index position)
        while True:
            if pos >= seg.size:
                si += 1
                if si >= len(segments):
                    break
                seg = segments[si]
                fd = self._fd(seg)
                pos, buf, buf_pos, expect = 0, b"", 0, seg.base
                continue
            rel = pos - buf_pos
            if rel + fsize > len(buf):
                buf = os.pread(fd, chunk, pos)
                mv = memoryview(buf)
                buf_pos, rel = pos, 0
            problem = ""
            if len(buf) - rel < fsize:
                problem = "the file ends inside a frame header"
            else:
                length, crc, base, count, max_ts = unpack(buf, rel)
                flen = fsize + length
                if length < CANONICAL_HEADER.size or pos + flen > seg.size:
                    problem = f"impossible frame length {length}"
                elif expect >= 0 and base != expect:
                    problem = f"base offset {base}, expected {expect}"
            if not problem:
                if base >= hwm:
                    break
                if base + count <= offset:  # before the wanted offset: skip (within one interval)
                    pos += flen
                    scanned += flen
                    expect = base + count
                    continue
                if rel + flen > len(buf):
                    buf = os.pread(fd, max(chunk, flen), pos)
                    mv = memoryview(buf)
                    buf_pos, rel = pos, 0
                if crc32c(mv[rel + 8 : rel + flen]) != crc:
                    problem = "CRC-32C mismatch"
            if problem:
                if out:  # serve the records before the damage; the next read reaches it
                    break
                corrupt_reads.inc()
                if (seg.base, pos) not in self._reported:  # once per damaged frame
                    self._reported.add((seg.base, pos))
                    log.warning(
                        "embedded.corrupt_read",
                        topic=self.topic,
                        partition=self.partition,
                        segment=str(seg.path),
                        position=pos,
                        problem=problem,
                    )
                raise GatewayError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"{problem} in {seg.path} at position {pos} (reading offset {offset})",
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
            expect = base + count
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
            for _, frame, _ in iter_frames(self._fd(seg), pos, seg.size, chunk):
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
            if self._files is not None:
                self._files.forget(first)
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
            if self._files is not None:
                self._files.forget(seg)
            seg.close()

    def delete(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


__all__ = ["LogSettings", "PartitionLog", "RecoveryError", "segment_name"]
