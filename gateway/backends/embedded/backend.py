"""The embedded durable log: the default backend, on local disk.

Data directory layout::

    LOCK                      flock'ed while open; holds the owner's pid
    CLEAN                     present only after a clean close (indexes trusted on the next open)
    topics.json, .journal     topic metadata (partitions, config): snapshot + appended changes
    kv.log                    the key-value store (committed offsets, group state)
    topics/<topic>/<partition>/<base offset>.log|.index|.timeindex

Durability (``fsync``): "always": an append (or kv write) returns only after an fsync that
started after its write returned (group commit: concurrent writers share a round); milliseconds:
a background task fsyncs what was written every N ms; "never": the OS decides. Records become
visible to readers when acknowledged (with "always": after the fsync). Metadata changes and the
clean-shutdown marker are always fsynced.

Topic and partition creation and deletion run their file work (mkdir, open, fsync, rmtree) in a
worker thread, one change at a time: the event loop keeps serving every other client meanwhile.
A create that fails half-way closes and removes what it made.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import trio

from gateway.backends.base import (
    Backend,
    Capabilities,
    check_partitions,
    check_topic_name,
    offset_mismatch,
)
from gateway.backends.embedded.config import TOPIC_KEYS, EmbeddedConfig
from gateway.backends.embedded.files import SegmentFiles
from gateway.backends.embedded.kv import KvStore
from gateway.backends.embedded.log import LogSettings, PartitionLog
from gateway.backends.embedded.payload import encode_payload
from gateway.backends.embedded.syncer import Syncer
from gateway.backends.embedded.topictable import TopicTable
from gateway.fdlimit import default_partition_cap
from gateway.model import (
    AppendResult,
    ErrorCode,
    GatewayError,
    PartitionInfo,
    RecordBatch,
    TopicInfo,
    now_us,
)

log = structlog.get_logger("gateway.backends.embedded")


@dataclass
class _Topic:
    info: TopicInfo
    settings: LogSettings
    logs: list[PartitionLog]


class EmbeddedBackend(Backend):
    capabilities = Capabilities(durable=True, retention=True)
    type_name = "embedded"

    def __init__(
        self,
        name: str = "embedded",
        config: EmbeddedConfig | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        fsync: Callable[[int], None] = os.fsync,
        clock: Callable[[], int] = now_us,
        repair: bool = False,
    ) -> None:
        super().__init__(name)
        self.repair = repair
        """Open damaged partitions by cutting them at the damage (``gateway repair``) instead of
        refusing to start."""
        self.repairs: list[str] = []  # what the last open cut or dropped, one line each
        self.config = config or EmbeddedConfig()
        self.data_dir = Path(data_dir or self.config.data_dir or f"data/{name}")
        self._fsync = fsync
        self._clock = clock
        self.syncer = Syncer(fsync)
        self.kv = KvStore(self.data_dir / "kv.log", fsync)
        self._topics: dict[str, _Topic] = {}
        self.table = TopicTable(self.data_dir, fsync)
        self._meta_lock = trio.Lock()  # one topic/partition change at a time
        self._meta_limiter = trio.CapacityLimiter(1)
        self._kv_lock = trio.Lock()
        self.files: SegmentFiles | None = None  # made at open (the file limit is known then)
        self._lock_fd = -1
        self._background: trio.CancelScope | None = None
        self._is_open = False

    @property
    def topics_dir(self) -> Path:
        return self.data_dir / "topics"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type_name,
            "data_dir": str(self.data_dir),
            "fsync": self.config.fsync,
            "segment_bytes": self.config.segment_bytes,
        }

    # ------------------------------------------------------------------ lifecycle
    async def open(self, nursery: trio.Nursery) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            marker = self.data_dir / "CLEAN"
            clean = marker.exists()
            if clean:
                marker.unlink()
                self._fsync_path(self.data_dir)
            self.topics_dir.mkdir(exist_ok=True)
            self.files = SegmentFiles(
                self.name,
                self.config.max_open_segments or default_partition_cap(),
            )
            self._load_topics(clean)
            self.kv.open()
        except OSError as exc:
            self._close_files()
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE,
                f"cannot open {exc.filename or self.data_dir}: {exc.strerror}: the data directory "
                f"holds more partitions than the open-file limit allows (each keeps about three "
                f"files open); raise the limit (ulimit -n) or remove topics",
            ) from None
        except BaseException:
            self._close_files()
            raise
        self._is_open = True
        await nursery.start(self._run_background)
        log.info(
            "embedded.opened",
            backend=self.name,
            data_dir=str(self.data_dir),
            topics=len(self._topics),
            clean=clean,
            fsync=self.config.fsync,
        )

    async def close(self) -> None:
        if self._background is not None:
            self._background.cancel()
            self._background = None
        if not self._is_open:
            return
        self._is_open = False
        try:
            for topic in self._topics.values():
                for plog in topic.logs:
                    plog.seal()
            await self.syncer.sync_all()
            self._write_durably(self.data_dir / "CLEAN", b"")
        finally:
            self._close_files()

    async def flush(self) -> None:
        self._check_open()
        if self.config.fsync != "never":
            await self.syncer.sync_all()

    async def health(self) -> tuple[bool, str]:
        if self.syncer.failure:
            return False, self.syncer.failure
        return (True, "ok") if self._is_open else (False, "not open")

    def _close_files(self) -> None:
        for topic in self._topics.values():
            for plog in topic.logs:
                plog.close()
        self._topics.clear()
        self.kv.close()
        self.table.close()
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _acquire_lock(self) -> None:
        path = self.data_dir / "LOCK"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE,
                f"data directory {self.data_dir} is locked by another process (pid {holder}): "
                f"another gateway or CLI command is using it",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    async def _run_background(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self._background = scope
            task_status.started()
            async with trio.open_nursery() as nursery:
                interval = self.config.fsync_interval_ms
                if interval is not None:
                    nursery.start_soon(self._sync_loop, interval)
                nursery.start_soon(self._retention_loop)

    async def _sync_loop(self, interval_ms: int) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            if self.syncer.pending:
                try:
                    await self.syncer.sync_all()
                except GatewayError as exc:
                    log.error("embedded.fsync_failed", backend=self.name, error=exc.message)
                    return

    async def _retention_loop(self) -> None:
        while True:
            await trio.sleep(self.config.retention_check_ms / 1000)
            try:
                await self.enforce_retention()
            except (GatewayError, OSError) as exc:
                log.error("embedded.retention_failed", backend=self.name, error=str(exc))

    def _check_open(self) -> None:
        if not self._is_open:
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE, f"embedded backend {self.name!r} is not open"
            )

    # ------------------------------------------------------------------ files
    def _fsync_path(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    def _write_durably(self, path: Path, data: bytes) -> None:
        """Replace ``path`` atomically and durably (write a temporary, fsync, rename, fsync dir)."""
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            self._fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self._fsync_path(path.parent)

    def _settings(self, config: tuple[tuple[str, str], ...]) -> LogSettings:
        values = {
            "retention_bytes": self.config.retention_bytes,
            "retention_ms": self.config.retention_ms,
            "segment_bytes": self.config.segment_bytes,
        }
        for key, raw in config:
            if key in TOPIC_KEYS:
                try:
                    values[key] = int(raw)
                except ValueError:
                    raise GatewayError(
                        ErrorCode.INVALID_REQUEST,
                        f"topic config {key}: got {raw!r}, expected an integer",
                    ) from None
        return LogSettings(
            segment_bytes=max(1024, values["segment_bytes"]),
            index_interval_bytes=self.config.index_interval_bytes,
            retention_bytes=values["retention_bytes"],
            retention_ms=values["retention_ms"],
        )

    def _open_log(
        self, topic: str, partition: int, settings: LogSettings, clean: bool
    ) -> PartitionLog:
        return PartitionLog.open(
            topic,
            partition,
            self.topics_dir / topic / str(partition),
            settings,
            self.syncer.mark,
            clean,
            repair=self.repair,
            files=self.files,
        )

    def _load_topics(self, clean: bool) -> None:
        on_disk = sorted(p.name for p in self.topics_dir.iterdir() if p.is_dir())
        if not self.table.exists():
            if on_disk:
                raise GatewayError(
                    ErrorCode.BACKEND_UNAVAILABLE,
                    f"{self.table.snapshot_path} is missing but {self.topics_dir} holds topics "
                    f"({', '.join(on_disk[:5])}): refusing to guess; restore the file",
                )
        entries = self.table.load()
        for name in on_disk:
            if name not in entries:  # deleted (or half created) before a crash
                log.warning("embedded.recovery.orphan_removed", topic=name)
                shutil.rmtree(self.topics_dir / name, ignore_errors=True)
        for name, (partitions, config) in entries.items():
            settings = self._settings(config)
            topic_dir = self.topics_dir / name
            topic_dir.mkdir(exist_ok=True)
            for path in topic_dir.iterdir():
                if not (path.name.isdigit() and int(path.name) < partitions):
                    log.warning("embedded.recovery.orphan_removed", topic=name, partition=path.name)
                    shutil.rmtree(path, ignore_errors=True)
            logs: list[PartitionLog] = []
            self._topics[name] = _Topic(TopicInfo(name, partitions, config), settings, logs)
            for p in range(partitions):  # appended one by one: _close_files sees each opened
                logs.append(self._open_log(name, p, settings, clean))
                self.repairs.extend(logs[-1].repairs)

    # ------------------------------------------------------------------ topics
    def _topic(self, name: str) -> _Topic:
        self._check_open()
        t = self._topics.get(name)
        if t is None:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        return t

    def _partition(self, topic: str, partition: int) -> PartitionLog:
        t = self._topic(topic)
        if not 0 <= partition < len(t.logs):
            raise GatewayError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {topic!r} has no partition {partition} (it has {len(t.logs)})",
            )
        return t.logs[partition]

    async def _off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking file work in a worker thread (never abandoned: the change completes or
        fails as a whole even when the requester goes away)."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self._meta_limiter)

    def _new_logs(
        self, name: str, settings: LogSettings, start: int, stop: int, config: Any
    ) -> list[PartitionLog]:
        """Create partitions ``start..stop-1`` of ``name`` and record the new count in the topic
        table, durably. Blocking (runs in a worker thread). On failure nothing stays open and
        nothing is left on disk, and the error says what ran out."""
        logs: list[PartitionLog] = []
        if start == 0:
            shutil.rmtree(self.topics_dir / name, ignore_errors=True)  # a crash's leftovers
        try:
            for p in range(start, stop):
                logs.append(self._open_log(name, p, settings, True))
            for plog in logs:
                self._fsync_path(plog.directory)
            self._fsync_path(self.topics_dir / name)
            if start == 0:
                self._fsync_path(self.topics_dir)
            self.table.set(name, stop, config)
        except BaseException as exc:
            for plog in logs:
                plog.close()
            if start == 0:
                shutil.rmtree(self.topics_dir / name, ignore_errors=True)
            else:
                for p in range(start, stop):
                    shutil.rmtree(self.topics_dir / name / str(p), ignore_errors=True)
            if isinstance(exc, OSError):
                what = "topic" if start == 0 else f"partitions {start}..{stop - 1} of topic"
                log.error("embedded.create_failed", backend=self.name, topic=name, error=str(exc))
                raise GatewayError(
                    ErrorCode.BACKEND_UNAVAILABLE,
                    f"cannot create {what} {name!r}: {exc.strerror}"
                    + (
                        " (the process's open-file limit is exhausted)"
                        if exc.errno in (errno.EMFILE, errno.ENFILE)
                        else ""
                    ),
                ) from None
            raise
        return logs

    def _compact_if_due(self) -> dict[str, Any] | None:
        if not self.table.wants_compaction(len(self._topics)):
            return None
        return {n: (len(t.logs), t.info.config) for n, t in self._topics.items()}

    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        self._check_open()
        check_topic_name(name)
        check_partitions(partitions)
        settings = self._settings(tuple(config))
        async with self._meta_lock:
            self._check_open()
            if name in self._topics:
                raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
            logs = await self._off_loop(
                self._new_logs, name, settings, 0, partitions, tuple(config)
            )
            info = TopicInfo(name, partitions, tuple(config))
            self._topics[name] = _Topic(info, settings, logs)
            await self._maybe_compact()
        return info

    async def _maybe_compact(self) -> None:
        entries = self._compact_if_due()
        if entries is not None:
            await self._off_loop(self.table.compact, entries)

    async def delete_topic(self, name: str) -> None:
        async with self._meta_lock:
            t = self._topic(name)
            await self._off_loop(self.table.delete, name)
            del self._topics[name]
            for plog in t.logs:
                plog.close()
            await self._off_loop(shutil.rmtree, self.topics_dir / name, True)
            await self._maybe_compact()

    async def list_topics(self) -> list[TopicInfo]:
        self._check_open()
        return [t.info for _, t in sorted(self._topics.items())]

    async def topic(self, name: str) -> TopicInfo:
        return self._topic(name).info

    def partition_count(self) -> int:
        """Partitions this backend holds open (each keeps about three files open)."""
        return sum(len(t.logs) for t in self._topics.values())

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        if count < 1:
            raise GatewayError(ErrorCode.INVALID_PARTITIONS, f"cannot add {count} partitions")
        async with self._meta_lock:
            t = self._topic(name)
            start = len(t.logs)
            check_partitions(start + count)
            new = await self._off_loop(
                self._new_logs, name, t.settings, start, start + count, t.info.config
            )
            t.logs.extend(new)
            t.info = TopicInfo(name, len(t.logs), t.info.config)
            await self._maybe_compact()
        return t.info

    async def delete_partitions(self, name: str, count: int) -> TopicInfo:
        if count < 1:
            raise GatewayError(ErrorCode.INVALID_PARTITIONS, f"cannot delete {count} partitions")
        async with self._meta_lock:
            t = self._topic(name)
            check_partitions(len(t.logs) - count)
            await self._off_loop(self.table.set, name, len(t.logs) - count, t.info.config)
            removed = t.logs[len(t.logs) - count :]
            del t.logs[len(t.logs) - count :]
            t.info = TopicInfo(name, len(t.logs), t.info.config)
            for plog in removed:
                plog.close()
            for plog in removed:
                await self._off_loop(shutil.rmtree, plog.directory, True)
            await self._maybe_compact()
        return t.info

    # ------------------------------------------------------------------ data
    async def append(
        self,
        topic: str,
        partition: int,
        batch: RecordBatch,
        expected_offset: int | None = None,
    ) -> AppendResult:
        plog = self._partition(topic, partition)
        # next_offset, not the high watermark: under fsync_always an append waiting for its
        # fsync already owns the offsets below next_offset. No await until plog.append: the
        # check and the append are one step.
        if expected_offset is not None and expected_offset != plog.next_offset:
            raise offset_mismatch(topic, partition, expected_offset, plog.next_offset)
        if batch.count == 0:
            return AppendResult(partition, plog.next_offset, plog.next_offset - 1)
        payload, count, max_ts = encode_payload(batch)
        if self.syncer.failure:
            raise GatewayError(ErrorCode.BACKEND_UNAVAILABLE, self.syncer.failure)
        base = plog.append(payload, count, max_ts)
        end = base + count
        if self.config.fsync_always:
            await self.syncer.sync_all()
            if plog.high_watermark < end:
                plog.high_watermark = end
        else:
            plog.high_watermark = end
        self._appended(topic, partition, plog.high_watermark)
        return AppendResult(partition, base, end - 1, self._clock())

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        return self._partition(topic, partition).read(offset, max_records, max_bytes)

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        plog = self._partition(topic, partition)
        return PartitionInfo(topic, partition, plog.log_start, plog.high_watermark)

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_us: int) -> int:
        return self._partition(topic, partition).offset_for_timestamp(timestamp_us)

    async def enforce_retention(self) -> None:
        self._check_open()
        now = self._clock()
        for t in list(self._topics.values()):
            for plog in t.logs:
                plog.enforce_retention(now)

    # ------------------------------------------------------------------ key-value store
    async def _kv_durable(self) -> None:
        if self.config.fsync_always:
            await self.syncer.sync_all()

    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        self._check_open()
        return self.kv.get(namespace, key)

    async def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        self._check_open()
        async with self._kv_lock:  # not while a compaction replaces the file
            self.kv.put(namespace, key, value)
            self.syncer.mark(self.kv)
            await self._kv_compact_if_due()
        await self._kv_durable()

    async def kv_delete(self, namespace: str, key: str) -> None:
        self._check_open()
        async with self._kv_lock:
            deleted = self.kv.delete(namespace, key)
            if deleted:
                self.syncer.mark(self.kv)
                await self._kv_compact_if_due()
        if deleted:
            await self._kv_durable()

    async def _kv_compact_if_due(self) -> None:
        if self.kv.compaction_due():  # its fsyncs run off the event loop
            os.close(await trio.to_thread.run_sync(self.kv.compact_keeping_old))

    async def kv_scan(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        self._check_open()
        return self.kv.scan(namespace, prefix)
