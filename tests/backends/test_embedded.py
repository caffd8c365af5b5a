"""Tests of the embedded log beyond the conformance suite: file formats, recovery, fsync ordering,
the data-directory lock, bounded index scans, segment roll and retention."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import crcmod.predefined
import pytest
import structlog
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.backends.embedded import BACKEND, EmbeddedBackend, EmbeddedConfig
from gateway.backends.embedded.log import PartitionLog
from gateway.backends.embedded.payload import NATIVE_FORMATS, codec_named
from gateway.backends.embedded.segment import FRAME, OFFSET_ENTRY, TIME_ENTRY
from gateway.canonical import CANONICAL
from gateway.canonical import HEADER as CANONICAL_HEADER
from gateway.config import ConfigError, parse_config
from gateway.core.groups import GroupCoordinator
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from tests.backends.conftest import opened
from tests.backends.test_conformance import T0, encoded, make_records, read_all, strip

REPO = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def embedded(path: Path, fsync_fn: Any = os.fsync, **options: Any) -> AsyncIterator[Any]:
    settings: dict[str, Any] = {"segment_bytes": 16 * 1024, "index_interval_bytes": 1024}
    settings.update(options)
    backend = EmbeddedBackend("embedded", EmbeddedConfig(**settings), path, fsync=fsync_fn)
    async with opened(backend) as b:
        yield b


def crash(backend: EmbeddedBackend) -> None:
    """What kill -9 leaves behind (in-process): files as written, no seal, no CLEAN marker."""
    if backend._background is not None:
        backend._background.cancel()
    backend._close_files()
    backend._is_open = False


def plog(backend: EmbeddedBackend, topic: str, partition: int = 0) -> PartitionLog:
    return backend._partition(topic, partition)


def segment_files(path: Path, topic: str, partition: int = 0) -> list[Path]:
    return sorted((path / "topics" / topic / str(partition)).glob("*.log"))


async def fill(backend: Any, topic: str, batches: int, per_batch: int = 10) -> list[Record]:
    out: list[Record] = []
    for _ in range(batches):
        recs = make_records(per_batch, start=len(out))
        await backend.append(topic, 0, encoded(recs))
        out.extend(recs)
    return out


# ----------------------------------------------------------------------------- formats


async def test_frames_carry_crc32c_that_crcmod_agrees_with(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("crc", 1)
        recs = make_records(5)
        await backend.append("crc", 0, encoded(recs))
    raw = segment_files(tmp_path, "crc")[0].read_bytes()
    length, crc, base, count, max_ts = FRAME.unpack_from(raw, 0)
    reference = crcmod.predefined.mkCrcFun("crc-32c")
    assert crc == reference(raw[8 : FRAME.size + length])
    assert (base, count, max_ts) == (0, 5, recs[-1].timestamp_us)
    assert raw[FRAME.size : FRAME.size + length] == CANONICAL.encode(recs)


async def test_reads_hand_out_the_stored_canonical_block(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("pass", 1)
        batch = encoded(make_records(20))
        await backend.append("pass", 0, batch)
        [got] = await backend.read("pass", 0, 0, 100, 1 << 20)
        assert got.codec is CANONICAL and got.is_whole
        assert bytes(got.encoded_as(CANONICAL)) == bytes(batch.encoded_as(CANONICAL))
        [window] = await backend.read("pass", 0, 5, 3, 1 << 20)
        assert (window.first_offset, window.count) == (5, 3)
        assert window.encoded_as(CANONICAL) is None  # a window is not the whole block


def native(codec_name: str, records: list[Record]) -> RecordBatch:
    """A whole batch in a protocol's own format, as its session hands it over."""
    codec = codec_named(codec_name)
    return RecordBatch(
        encoded=codec.encode(records),
        codec=codec,
        count=len(records),
        max_timestamp_us=max(r.timestamp_us for r in records),
    )


@pytest.mark.parametrize("codec_name", sorted(NATIVE_FORMATS))
async def test_native_blocks_are_stored_as_received_beside_canonical_ones(
    tmp_path: Path, codec_name: str
) -> None:
    first, second = native(codec_name, make_records(10)), native(codec_name, make_records(5))
    expected = [
        *first.records,
        *make_records(3, start=10),
        *second.records,
    ]
    async with embedded(tmp_path) as backend:
        await backend.create_topic("n", 1)
        await backend.append("n", 0, first)
        await backend.append("n", 0, encoded(make_records(3, start=10)))
        await backend.append("n", 0, second)
        got = await backend.read("n", 0, 0, 100, 1 << 20)
        assert [(b.codec.name, b.first_offset, b.count) for b in got] == [
            (codec_name, 0, 10),
            ("canonical", 10, 3),
            (codec_name, 13, 5),
        ]
        assert bytes(got[0].encoded_as(first.codec)) == bytes(first.encoded_as(first.codec))
        assert strip(await read_all(backend, "n", 0, 0)) == strip(expected)
        [window] = await backend.read("n", 0, 2, 3, 1 << 20)  # a window inside a native block
        assert strip(window.records) == strip(expected[2:5]) and window.first_offset == 2
        crash(backend)
    raw = segment_files(tmp_path, "n")[0].read_bytes()
    assert raw[FRAME.size] == 2 and codec_name.encode() in raw[: FRAME.size + 40]
    async with embedded(tmp_path) as backend:  # recovery scans and accepts both kinds of frame
        assert plog(backend, "n").high_watermark == 18
        assert [r.offset for r in await read_all(backend, "n", 0, 0)] == list(range(18))
        assert strip(await read_all(backend, "n", 0, 13)) == strip(expected[13:])
        target = expected[14].timestamp_us
        assert await backend.offset_for_timestamp("n", 0, target) == min(
            i for i, r in enumerate(expected) if r.timestamp_us >= target
        )


async def test_a_stored_block_of_an_unknown_format_is_reported_corrupt(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("u", 1)
        payload = CANONICAL_HEADER.pack(2, 1, -1, T0) + b"\x04nope" + b"data"
        plog(backend, "u").append(payload, 1, T0)
        plog(backend, "u").high_watermark = 1
        with pytest.raises(GatewayError) as info:
            await backend.read("u", 0, 0, 10, 1 << 20)
        assert info.value.code is ErrorCode.CORRUPT_MESSAGE and "nope" in info.value.message


async def test_segment_roll_names_and_oversized_batches(tmp_path: Path) -> None:
    async with embedded(tmp_path, segment_bytes=4096) as backend:
        await backend.create_topic("roll", 1)
        expected = await fill(backend, "roll", 30, per_batch=5)  # ~800 bytes per batch
        big = make_records(100, start=len(expected))  # ~14 KB: bigger than a segment
        await backend.append("roll", 0, encoded(big))
        expected += big
        await backend.append("roll", 0, encoded(make_records(1, start=len(expected))))
        log = plog(backend, "roll")
        files = segment_files(tmp_path, "roll")
        assert [f.stem for f in files] == [f"{s.base:020d}" for s in log.segments]
        assert len(files) >= 7
        for seg in log.segments[:-1]:
            assert seg.size <= 4096 or seg.records == 100  # the big batch sits alone
        bases = [s.base for s in log.segments]
        assert len(expected) - 100 in bases and len(expected) in bases
        got = await read_all(backend, "roll", 0, 0)
        assert strip(got) == strip(expected + make_records(1, start=len(expected)))


async def test_a_read_scans_at_most_one_index_interval(tmp_path: Path) -> None:
    interval = 1024
    async with embedded(tmp_path, segment_bytes=64 * 1024, index_interval_bytes=interval) as b:
        await b.create_topic("idx", 1)
        for i in range(600):  # single-record batches of ~150 bytes: many per interval
            await b.append("idx", 0, RecordBatch(make_records(1, start=i)))
        log = plog(b, "idx")
        assert len(log.segments) > 1
        worst = 0
        for offset in range(600):
            [batch] = await b.read("idx", 0, offset, 1, 1 << 20)
            assert batch.first_offset == offset
            assert log.last_scan_bytes < interval
            worst = max(worst, log.last_scan_bytes)
        assert worst > 0  # the index is sparse: some reads do scan
        # the index files on disk hold those sparse entries
        seg = log.segments[0]
        entries = seg.index_path.stat().st_size // OFFSET_ENTRY.size
        assert entries == seg.time_index_path.stat().st_size // TIME_ENTRY.size
        assert seg.size // (interval + 200) <= entries <= seg.size // interval + 1


# ----------------------------------------------------------------------------- recovery


async def test_torn_tail_is_truncated_logged_and_appends_continue(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("torn", 1)
        expected = await fill(backend, "torn", 40)
        crash(backend)
    last = segment_files(tmp_path, "torn")[-1]
    size = last.stat().st_size
    os.truncate(last, size - 7)  # the last batch is torn
    with structlog.testing.capture_logs() as logs:
        async with embedded(tmp_path) as backend:
            info = await backend.partition_info("torn", 0)
            assert info.high_watermark == 390  # the torn batch of 10 is gone
            got = await read_all(backend, "torn", 0, 0)
            assert strip(got) == strip(expected[:390])
            result = await backend.append("torn", 0, encoded(make_records(3, start=390)))
            assert result.base_offset == 390
            got = await read_all(backend, "torn", 0, 380)
            assert [r.offset for r in got] == list(range(380, 393))
    [event] = [e for e in logs if e["event"] == "embedded.recovery.truncated"]
    assert event["topic"] == "torn" and event["segment"] == last.name
    assert event["kept_through_offset"] == 389
    assert event["dropped_bytes"] == size - 7 - event["valid_bytes"]
    assert "torn" in event["reason"]


@pytest.mark.parametrize("clean_close", [False, True])
async def test_corrupt_tail_is_cut_at_the_damage(tmp_path: Path, clean_close: bool) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("bad", 1)
        expected = await fill(backend, "bad", 40)
        frames = []
        seg = plog(backend, "bad").segments[-1]
        pos = 0
        while pos < seg.size:  # frame positions of the last segment
            length, _, base, count, _ = FRAME.unpack_from(os.pread(seg.fd, FRAME.size, pos))
            frames.append((pos, base))
            pos += FRAME.size + length
        if clean_close:
            await backend.close()
        else:
            crash(backend)
    damaged_pos, damaged_base = frames[-3]  # three batches from the end
    last = segment_files(tmp_path, "bad")[-1]
    with open(last, "r+b") as fh:
        fh.seek(damaged_pos + FRAME.size + 40)
        byte = fh.read(1)
        fh.seek(damaged_pos + FRAME.size + 40)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with structlog.testing.capture_logs() as logs:
        async with embedded(tmp_path) as backend:
            info = await backend.partition_info("bad", 0)
            if not clean_close:
                # every batch before the damage is readable, nothing after it is served
                assert info.high_watermark == damaged_base
                got = await read_all(backend, "bad", 0, 0)
                assert strip(got) == strip(expected[:damaged_base])
                result = await backend.append("bad", 0, encoded(make_records(2)))
                assert result.base_offset == damaged_base
            else:
                # a clean close trusts the indexes: the damage is found by the read's CRC check
                assert info.high_watermark == 400
                with pytest.raises(GatewayError) as exc:
                    await read_all(backend, "bad", 0, damaged_base)
                assert exc.value.code is ErrorCode.CORRUPT_MESSAGE
                got = await backend.read("bad", 0, 0, damaged_base, 1 << 30)
                assert strip(r for b in got for r in b.records) == strip(expected[:damaged_base])
    truncated = [e for e in logs if e["event"] == "embedded.recovery.truncated"]
    if not clean_close:
        assert len(truncated) == 1 and truncated[0]["reason"] == "CRC-32C mismatch"
        assert truncated[0]["kept_through_offset"] == damaged_base - 1


async def test_missing_indexes_are_rebuilt(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("reidx", 1)
        expected = await fill(backend, "reidx", 60)
        nsegs = len(plog(backend, "reidx").segments)
    assert nsegs >= 3
    first = segment_files(tmp_path, "reidx")[0]
    first.with_suffix(".index").unlink()
    before = first.with_suffix(".timeindex").read_bytes()
    first.with_suffix(".timeindex").write_bytes(before[: len(before) // 2])  # behind
    with structlog.testing.capture_logs() as logs:
        async with embedded(tmp_path) as backend:
            got = await read_all(backend, "reidx", 0, 0)
            assert strip(got) == strip(expected)
            for offset in (0, 55, 123, 299):
                await backend.read("reidx", 0, offset, 1, 1 << 20)
                assert plog(backend, "reidx").last_scan_bytes < 1024
            assert await backend.offset_for_timestamp("reidx", 0, T0 + 77) == 77
    assert first.with_suffix(".timeindex").read_bytes() == before
    assert any(e["event"] == "embedded.recovery.index_rebuilt" for e in logs)


async def test_acknowledged_data_survives_kill_9(tmp_path: Path) -> None:
    """A real process killed with SIGKILL after acknowledging appends and a commit."""
    script = textwrap.dedent(
        f"""
        import sys, trio
        sys.path.insert(0, {str(REPO)!r})
        from gateway.backends.embedded import EmbeddedBackend, EmbeddedConfig
        from gateway.core.groups import GroupCoordinator
        from tests.backends.test_conformance import encoded, make_records

        async def main():
            b = EmbeddedBackend("e", EmbeddedConfig(fsync=50, segment_bytes=8192), sys.argv[1])
            async with trio.open_nursery() as n:
                await b.open(n)
                await b.create_topic("k9", 1)
                for i in range(30):
                    await b.append("k9", 0, encoded(make_records(10, start=10 * i)))
                await GroupCoordinator(lambda t: b, b).commit("g", "k9", 0, 123)
                print("acked", flush=True)
                await trio.sleep_forever()

        trio.run(main)
        """
    )
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(data)], stdout=subprocess.PIPE, cwd=REPO
    )
    try:
        assert proc.stdout is not None
        lines = iter(proc.stdout.readline, b"")  # structlog's default output goes there too
        assert any(line.strip() == b"acked" for line in lines)
        # the lock names the live process
        with pytest.raises(GatewayError) as exc:
            async with embedded(data):
                pass
        assert str(data) in exc.value.message and f"pid {proc.pid}" in exc.value.message
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    async with embedded(data) as backend:
        got = await read_all(backend, "k9", 0, 0)
        assert strip(got) == strip(make_records(300))
        committed = await GroupCoordinator(lambda t: backend, backend).fetch("g", "k9", 0)
        assert committed.offset == 123


# ----------------------------------------------------------------------------- fsync


class BlockingFsync:
    """An fsync that records calls and, when armed, blocks until released (it runs in a worker
    thread, so the test can look at the event loop meanwhile)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.calls = 0
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.armed:
            self.entered.set()
            self.release.wait(10)
        os.fsync(fd)
        self.events.append("fsync returned")


async def test_fsync_always_acknowledges_only_after_fsync_returned(tmp_path: Path) -> None:
    fsync = BlockingFsync()
    async with _always(tmp_path, fsync) as backend:
        await backend.create_topic("dur", 1)
        fsync.events.clear()
        fsync.armed = True
        done = trio.Event()

        async def produce() -> None:
            result = await backend.append("dur", 0, RecordBatch(make_records(3)))
            fsync.events.append(f"acknowledged {result.last_offset}")
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            assert await trio.to_thread.run_sync(fsync.entered.wait, 5)
            await trio.testing.wait_all_tasks_blocked()
            assert not done.is_set()  # the fsync has not returned: no acknowledgement yet
            assert fsync.events == []
            # not visible to readers either
            assert (await backend.partition_info("dur", 0)).high_watermark == 0
            assert await backend.read("dur", 0, 0, 10, 1000) == []
            fsync.release.set()
        assert fsync.events[-1] == "acknowledged 2"
        assert "fsync returned" in fsync.events[:-1]
        assert (await backend.partition_info("dur", 0)).high_watermark == 3


def _always(path: Path, fsync: Any) -> Any:
    return embedded(path, fsync, **{"fsync": "always"})


async def test_fsync_always_groups_concurrent_appends(tmp_path: Path) -> None:
    fsync = BlockingFsync()
    async with _always(tmp_path, fsync) as backend:
        await backend.create_topic("group", 4)
        rounds_before = backend.syncer.rounds
        fsync.armed = True
        results: list[int] = []

        async def produce(i: int) -> None:
            r = await backend.append("group", i % 4, RecordBatch(make_records(1)))
            results.append(r.base_offset)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce, 0)
            assert await trio.to_thread.run_sync(fsync.entered.wait, 5)
            for i in range(1, 12):  # written while the first round is in its fsync
                nursery.start_soon(produce, i)
            await trio.testing.wait_all_tasks_blocked()
            assert results == []
            fsync.release.set()
        assert len(results) == 12
        assert backend.syncer.rounds - rounds_before == 2  # one round for the first, one for 11
        # kv writes are durable before they return, too
        fsync.events.clear()
        await backend.kv_put("ns", "k", b"v")
        assert fsync.events == ["fsync returned"]


async def test_fsync_interval_runs_in_the_background(tmp_path: Path) -> None:
    fsync = BlockingFsync()
    async with embedded(tmp_path, fsync, fsync=20) as backend:
        await backend.create_topic("timer", 1)
        calls = fsync.calls
        result = await backend.append("timer", 0, RecordBatch(make_records(1)))
        assert result.base_offset == 0 and fsync.calls == calls  # acknowledged without fsync
        with trio.fail_after(10):
            while fsync.calls == calls:
                await trio.sleep(0.005)
        assert not backend.syncer.pending


async def test_fsync_never_does_not_fsync_appends(tmp_path: Path) -> None:
    fsync = BlockingFsync()
    async with embedded(tmp_path, fsync, fsync="never") as backend:
        await backend.create_topic("lazy", 1)
        calls = fsync.calls
        for i in range(20):
            await backend.append("lazy", 0, RecordBatch(make_records(1, start=i)))
        await backend.kv_put("ns", "k", b"v")
        await backend.flush()
        assert fsync.calls == calls


# ----------------------------------------------------------------------------- lock, config


async def test_the_data_directory_is_locked(tmp_path: Path) -> None:
    async with embedded(tmp_path):
        with pytest.raises(GatewayError) as exc:
            async with embedded(tmp_path):
                pass
        assert exc.value.code is ErrorCode.BACKEND_UNAVAILABLE
        assert str(tmp_path) in exc.value.message and f"pid {os.getpid()}" in exc.value.message
    async with embedded(tmp_path):  # released on close
        pass


def test_config_keys_and_validation(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"backends": {"log": {"type": "embedded", "fsync": "sometimes"}}})
    assert exc.value.problems == [
        'backends.log.fsync: got \'sometimes\', expected "always", "never" or milliseconds >= 1'
    ]
    with pytest.raises(ConfigError) as exc:
        parse_config({"backends": {"log": {"type": "embedded", "fsync": 0, "segment_bytes": 1}}})
    assert len(exc.value.problems) == 2
    for value in ("always", "never", 5):
        cfg = parse_config({"backends": {"log": {"type": "embedded", "fsync": value}}})
        assert cfg.backends["log"].options.fsync == value
    cfg = parse_config(
        {"server": {"data_dir": str(tmp_path / "d")}, "backends": {"log": {"type": "embedded"}}}
    )
    backend = BACKEND.factory("log", cfg.backends["log"].options, cfg)
    assert backend.data_dir == tmp_path / "d" / "log"
    explicit = EmbeddedConfig(data_dir=str(tmp_path / "elsewhere"))
    assert BACKEND.factory("log", explicit, cfg).data_dir == tmp_path / "elsewhere"


# ----------------------------------------------------------------------------- retention


async def test_retention_deletes_whole_old_segments_never_the_active_one(tmp_path: Path) -> None:
    now = [T0]
    backend = EmbeddedBackend(
        "embedded",
        EmbeddedConfig(segment_bytes=4096, index_interval_bytes=1024),
        tmp_path,
        clock=lambda: now[0],
    )
    async with opened(backend):
        await backend.create_topic("r", 1, (("retention_bytes", "0"),))
        await fill(backend, "r", 30)
        log = plog(backend, "r")
        active = log.segments[-1]
        assert len(log.segments) > 3
        await backend.enforce_retention()
        assert log.segments == [active]
        assert segment_files(tmp_path, "r") == [active.path]
        info = await backend.partition_info("r", 0)
        assert (info.log_start_offset, info.high_watermark) == (active.base, 300)

        await backend.create_topic("age", 1, (("retention_ms", "1000"),))
        await fill(backend, "age", 30)  # timestamps T0 .. T0 + 299 us
        now[0] = T0 + 1_000_000  # nothing older than 1 s yet
        await backend.enforce_retention()
        assert (await backend.partition_info("age", 0)).log_start_offset == 0
        now[0] = T0 + 2_000_000
        await backend.enforce_retention()
        age_log = plog(backend, "age")
        assert len(age_log.segments) == 1
        assert (await backend.partition_info("age", 0)).log_start_offset == age_log.segments[0].base
    # the moved log start survives a restart
    async with embedded(tmp_path) as backend:
        assert (await backend.partition_info("r", 0)).log_start_offset == active.base
        with pytest.raises(GatewayError) as exc:
            await backend.read("r", 0, 0, 10, 1000)
        assert exc.value.code is ErrorCode.OFFSET_OUT_OF_RANGE


async def test_retention_runs_periodically(tmp_path: Path) -> None:
    async with embedded(tmp_path, segment_bytes=4096, retention_check_ms=10) as backend:
        await backend.create_topic("periodic", 1, (("retention_bytes", "0"),))
        await fill(backend, "periodic", 30)
        with trio.fail_after(10):
            while (await backend.partition_info("periodic", 0)).log_start_offset == 0:
                await trio.sleep(0.005)


# ----------------------------------------------------------------------------- metadata, kv


async def test_metadata_and_kv_survive_restart_and_crash(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("m1", 3, (("subject", "x.y"), ("retention_ms", "5000")))
        await backend.create_topic("m2", 1)
        await backend.delete_partitions("m1", 1)
        await GroupCoordinator(lambda t: backend, backend).commit("g", "m1", 0, 7)
        for i in range(100):
            await backend.kv_put("state", f"k{i % 10}", str(i).encode())
        await backend.kv_delete("state", "k3")
        crash(backend)
    (tmp_path / "topics" / "ghost" / "0").mkdir(parents=True)  # a topic deleted mid-crash
    async with embedded(tmp_path) as backend:
        topics = {t.name: t for t in await backend.list_topics()}
        assert sorted(topics) == ["m1", "m2"]
        assert topics["m1"].partitions == 2 and topics["m1"].get("subject") == "x.y"
        assert not (tmp_path / "topics" / "ghost").exists()
        assert not (tmp_path / "topics" / "m1" / "2").exists()
        assert (await GroupCoordinator(lambda t: backend, backend).fetch("g", "m1", 0)).offset == 7
        assert await backend.kv_get("state", "k9") == b"99"
        assert await backend.kv_get("state", "k3") is None
        backend.kv.compact()
        assert await backend.kv_get("state", "k9") == b"99"
        await backend.kv_put("state", "after", b"compaction")
    kv = tmp_path / "kv.log"
    with open(kv, "ab") as fh:
        fh.write(b"\x01\x02\x03")  # a torn entry
    with structlog.testing.capture_logs() as logs:
        async with embedded(tmp_path) as backend:
            assert await backend.kv_get("state", "after") == b"compaction"
            assert [k for k, _ in await backend.kv_scan("state")] == sorted(
                [f"k{i}" for i in range(10) if i != 3] + ["after"]
            )
    assert any(e["event"] == "embedded.recovery.truncated" and "kv" in e["file"] for e in logs)


# ----------------------------------------------------------------------------- property


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=25),
    reads=st.lists(
        st.tuples(st.floats(0, 1), st.integers(1, 200), st.integers(1, 20_000)), max_size=15
    ),
    interval=st.sampled_from([1, 300, 4096]),
)
def test_reads_match_what_was_appended(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    reads: list[tuple[float, int, int]],
    interval: int,
) -> None:
    """Any batch sizes, any read windows, with or without a restart: exactly the records
    appended come back, windows start at the offset asked for, limits are honoured."""
    path = tmp_path_factory.mktemp("prop")

    def no_fsync(fd: int) -> None:  # durability is not what this test is about
        pass

    async def run() -> None:
        expected: list[Record] = []
        async with embedded(path, no_fsync, segment_bytes=2048, index_interval_bytes=interval) as b:
            await b.create_topic("p", 1)
            for i, n in enumerate(sizes):
                recs = make_records(n, start=len(expected), size=1 + (i * 37) % 150)
                await b.append("p", 0, encoded(recs) if i % 2 else RecordBatch(recs))
                expected.extend(recs)
        async with embedded(path, no_fsync, segment_bytes=2048, index_interval_bytes=interval) as b:
            for where, max_records, max_bytes in reads:
                offset = int(where * len(expected))
                batches = await b.read("p", 0, offset, max_records, max_bytes)
                got = [r for batch in batches for r in batch.records]
                if offset < len(expected):
                    assert batches[0].first_offset == offset
                    assert 1 <= len(got) <= max_records
                assert [r.offset for r in got] == list(range(offset, offset + len(got)))
                assert strip(got) == strip(expected[offset : offset + len(got)])
            assert strip(await read_all(b, "p", 0, 0)) == strip(expected)

    trio.run(run)


# ----------------------------------------------------------------------- canonical versions


def v1_block(records: list[Record]) -> bytes:
    """A canonical version-1 block packed by hand, as logs written before 2026-11-25 hold."""
    parts = [b""]
    for r in records:
        key, value = r.key, r.value
        parts.append(
            struct.pack(
                "<qiiH",
                r.timestamp_us,
                -1 if key is None else len(key),
                -1 if value is None else len(value),
                len(r.headers),
            )
        )
        parts += [key or b"", value or b""]
        for name, hval in r.headers:
            parts += [struct.pack("<HI", len(name.encode()), len(hval)), name.encode(), hval]
    stamps = [r.timestamp_us for r in records]
    parts[0] = CANONICAL_HEADER.pack(1, len(records), min(stamps), max(stamps))
    return b"".join(parts)


async def test_a_log_written_before_start_tables_is_still_read(tmp_path: Path) -> None:
    """Frames of version-1 blocks (as the old code wrote them) and version-3 ones in one log:
    recovery accepts both, reads hand both out, whole and as windows."""
    expected = make_records(60)
    async with embedded(tmp_path) as backend:
        await backend.create_topic("old", 1)
        log = plog(backend, "old")
        for i in range(0, 30, 10):  # the old format, written as the old code did
            log.append(v1_block(expected[i : i + 10]), 10, expected[i + 9].timestamp_us)
        log.high_watermark = log.next_offset
        for i in range(30, 60, 10):  # then the new code appends
            await backend.append("old", 0, encoded(expected[i : i + 10]))
        crash(backend)
    raw = segment_files(tmp_path, "old")[0].read_bytes()
    versions, pos = [], 0
    while pos < len(raw):
        versions.append(raw[pos + FRAME.size])
        pos += FRAME.size + FRAME.unpack_from(raw, pos)[0]
    assert versions == [1, 1, 1, 3, 3, 3]
    async with embedded(tmp_path) as backend:  # recovery scans every frame
        assert plog(backend, "old").high_watermark == 60
        got = await backend.read("old", 0, 0, 100, 1 << 20)
        assert [bytes(b.encoded_as(CANONICAL))[0] for b in got] == versions
        assert strip(await read_all(backend, "old", 0, 0)) == strip(expected)
        for start in (3, 25, 33, 57):
            [window, *_] = await backend.read("old", 0, start, 4, 1 << 20)
            assert strip(window.records) == strip(expected[start : start + window.count])


async def test_a_frame_whose_start_table_does_not_fit_is_cut_at_recovery(tmp_path: Path) -> None:
    """The CRC covers the table, so a torn or damaged one is found as before; a frame written
    with a table that cannot belong to its block (CRC and all) is found by the frame check."""
    expected = make_records(25)
    async with embedded(tmp_path) as backend:
        await backend.create_topic("tbl", 1)
        await backend.append("tbl", 0, encoded(expected[:10]))
        await backend.append("tbl", 0, encoded(expected[10:20]))
        bad = bytearray(CANONICAL.encode(expected[20:]))
        struct.pack_into("<I", bad, CANONICAL_HEADER.size, 5)  # record 0 must start at 0
        plog(backend, "tbl").append(bytes(bad), 5, expected[-1].timestamp_us)
        crash(backend)
    with structlog.testing.capture_logs() as logs:
        async with embedded(tmp_path) as backend:
            assert plog(backend, "tbl").high_watermark == 20
            assert strip(await read_all(backend, "tbl", 0, 0)) == strip(expected[:20])
    [event] = [e for e in logs if e["event"] == "embedded.recovery.truncated"]
    assert "start table" in event["reason"] and event["kept_through_offset"] == 19
