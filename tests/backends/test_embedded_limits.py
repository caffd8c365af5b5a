"""The embedded log under resource pressure: topic creation and key-value compaction keep the
event loop free, a create that runs out of descriptors closes what it opened, running out of
descriptors or space is not an fsync failure (only an I/O error of fsync stops the log), and
sealed segments hold at most ``max_open_segments`` descriptors."""

from __future__ import annotations

import errno
import os
import resource
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.backends.embedded.files import OPEN_SEGMENTS
from gateway.model import ErrorCode, GatewayError
from tests.backends.test_conformance import T0, encoded, make_records, read_all, strip
from tests.backends.test_embedded import crash, embedded, fill, plog


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class GatedFsync:
    """os.fsync that, once armed, blocks (in its worker thread) until released."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        if self.armed:
            self.entered.set()
            assert self.release.wait(10), "never released"
        os.fsync(fd)


async def test_topic_creation_waits_for_the_disk_off_the_event_loop(tmp_path: Path) -> None:
    gate = GatedFsync()
    async with embedded(tmp_path, gate, fsync="never") as backend:
        await backend.create_topic("other", 1)
        gate.armed = True
        created = trio.Event()

        async def create() -> None:
            await backend.create_topic("slow", 3)
            created.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            # the create is now inside an fsync that does not return; the loop still serves
            await trio.to_thread.run_sync(gate.entered.wait, 10)
            ticks = 0
            with trio.move_on_after(0.2):
                while True:
                    await trio.sleep(0.01)
                    ticks += 1
            assert ticks >= 5 and not created.is_set()
            await backend.append("other", 0, encoded(make_records(2)))
            assert [t.name for t in await backend.list_topics()] == ["other"]
            # a second create of the same name waits its turn, then finds it exists
            with pytest.raises(GatewayError) as exc:
                gate.release.set()
                await backend.create_topic("slow", 1)
            assert exc.value.code is ErrorCode.TOPIC_EXISTS
        assert (await backend.topic("slow")).partitions == 3


async def test_a_create_that_runs_out_of_descriptors_closes_what_it_opened(
    tmp_path: Path,
) -> None:
    # fsync "always": no background sync round holds duplicated descriptors while we count
    async with embedded(tmp_path, fsync="always") as backend:
        await backend.create_topic("keep", 1)
        await fill(backend, "keep", 2)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        before = open_fds()
        resource.setrlimit(resource.RLIMIT_NOFILE, (before + 40, hard))
        try:
            with pytest.raises(GatewayError) as exc:
                await backend.create_topic("huge", 2000)
            assert exc.value.code is ErrorCode.BACKEND_UNAVAILABLE
            assert "open-file limit" in exc.value.message
            assert open_fds() == before  # nothing leaked
            assert not (tmp_path / "topics" / "huge").exists()
            with pytest.raises(GatewayError) as exc:
                await backend.create_partitions("keep", 2000)
            assert "open-file limit" in exc.value.message
            assert open_fds() == before
            assert sorted(p.name for p in (tmp_path / "topics" / "keep").iterdir()) == ["0"]
            # still writing and syncing: the exhaustion was not an fsync failure
            await backend.append("keep", 0, encoded(make_records(5, start=20)))
            await backend.flush()
            assert backend.syncer.failure == ""
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert (await backend.topic("keep")).partitions == 1
    async with embedded(tmp_path) as backend:  # and the table on disk agrees
        assert [t.name for t in await backend.list_topics()] == ["keep"]
        assert len(await read_all(backend, "keep", 0, 0)) == 25


class FailingFsync:
    def __init__(self, code: int) -> None:
        self.code = code
        self.fail = False

    def __call__(self, fd: int) -> None:
        if self.fail:
            self.fail = False
            raise OSError(self.code, os.strerror(self.code))
        os.fsync(fd)


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENOSPC])
async def test_running_out_of_descriptors_or_space_is_not_an_fsync_failure(
    tmp_path: Path, code: int
) -> None:
    fsync = FailingFsync(code)
    async with embedded(tmp_path, fsync, fsync="always") as backend:
        await backend.create_topic("t", 1)
        fsync.fail = True
        with pytest.raises(GatewayError) as exc:
            await backend.append("t", 0, encoded(make_records(3)))
        assert exc.value.code is ErrorCode.BACKEND_UNAVAILABLE
        assert backend.syncer.failure == ""
        assert (await backend.health())[0]
        result = await backend.append("t", 0, encoded(make_records(2, start=3)))
        assert result.base_offset == 3  # the refused write is covered by this round's fsync
        assert len(await read_all(backend, "t", 0, 0)) == 5


async def test_an_io_error_on_fsync_stops_the_log(tmp_path: Path) -> None:
    fsync = FailingFsync(errno.EIO)
    async with embedded(tmp_path, fsync, fsync="always") as backend:
        await backend.create_topic("t", 1)
        fsync.fail = True
        with pytest.raises(GatewayError):
            await backend.append("t", 0, encoded(make_records(3)))
        assert "fsync failed" in backend.syncer.failure
        with pytest.raises(GatewayError) as exc:
            await backend.append("t", 0, encoded(make_records(3)))
        assert "stops accepting writes" in exc.value.message
        assert not (await backend.health())[0]
        crash(backend)  # a clean close would need the fsync that failed


async def test_a_write_that_runs_out_of_space_leaves_no_torn_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with embedded(tmp_path, fsync="never") as backend:
        await backend.create_topic("t", 1)
        await fill(backend, "t", 3)
        real_writev = os.writev

        def short_then_full(fd: int, buffers: Any) -> int:
            data = b"".join(bytes(b) for b in buffers)
            os.write(fd, data[:11])  # part of the frame reaches the file, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, "writev", short_then_full)
        with pytest.raises(GatewayError) as exc:
            await backend.append("t", 0, encoded(make_records(4, start=30)))
        assert exc.value.code is ErrorCode.BACKEND_UNAVAILABLE
        monkeypatch.setattr(os, "writev", real_writev)
        result = await backend.append("t", 0, encoded(make_records(4, start=30)))
        assert result.base_offset == 30
        assert [r.offset for r in await read_all(backend, "t", 0, 0)] == list(range(34))
    async with embedded(tmp_path) as backend:
        assert [r.offset for r in await read_all(backend, "t", 0, 0)] == list(range(34))


async def test_kv_compaction_waits_for_the_disk_off_the_event_loop(tmp_path: Path) -> None:
    gate = GatedFsync()
    async with embedded(tmp_path, gate, fsync="never") as backend:
        gate.armed = True
        value = b"x" * (64 << 10)
        async with trio.open_nursery() as nursery:

            async def overwrite() -> None:
                for i in range(40):  # 2.5 MiB of overwrites of one key: compaction falls due
                    await backend.kv_put("state", "big", value + str(i).encode())

            nursery.start_soon(overwrite)
            await trio.to_thread.run_sync(gate.entered.wait, 10)
            ticks = 0
            with trio.move_on_after(0.2):
                while True:
                    await trio.sleep(0.01)
                    ticks += 1
            assert ticks >= 5  # the loop runs while the compaction's fsync does not return
            nursery.start_soon(backend.kv_put, "state", "during", b"compaction")
            await trio.sleep(0.05)
            gate.release.set()
        assert await backend.kv_get("state", "during") == b"compaction"
        assert backend.kv.path.stat().st_size < 1 << 20  # compacted
    async with embedded(tmp_path) as backend:
        assert await backend.kv_get("state", "big") == value + b"39"
        assert await backend.kv_get("state", "during") == b"compaction"


def segment_fds(directory: Path) -> int:
    """Descriptors of this process open on ``*.log`` segment files under ``directory``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory)) and target.endswith(".log")
    return count


async def test_sealed_segments_hold_at_most_max_open_segments_descriptors(tmp_path: Path) -> None:
    options = {"max_open_segments": 2, "segment_bytes": 2048}
    async with embedded(tmp_path, fsync="always", **options) as backend:
        await backend.create_topic("many", 1)
        expected = await fill(backend, "many", 100)  # one batch per segment: 100 segments
        assert len(plog(backend, "many").segments) >= 50
        assert segment_fds(tmp_path / "topics") <= 1 + 2  # the active one and two sealed ones
        assert strip(await read_all(backend, "many", 0, 0)) == strip(expected)
        assert await backend.offset_for_timestamp("many", 0, T0 + 555) == 555
        assert segment_fds(tmp_path / "topics") <= 1 + 2
        assert OPEN_SEGMENTS.labels("embedded")._value.get() == 2
        # a closed sealed segment is still covered by fsync (the round opens it by path)
        assert backend.syncer.failure == ""
    # the directory opens again under a file limit far below its segment count
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 20, hard))
    try:
        async with embedded(tmp_path, **options) as backend:
            assert strip(await read_all(backend, "many", 0, 0)) == strip(expected)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
