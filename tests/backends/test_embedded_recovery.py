"""Damage the embedded log never turns into lost intact data: a flipped byte in an old segment
fails only the reads that reach it, a missing or damaged older segment stops the start (nothing
deleted) until ``gateway repair`` cuts the partition on purpose, and the topic table is a
snapshot plus an appended journal that survives a torn last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
import trio

from gateway.backends.embedded import EmbeddedBackend, EmbeddedConfig
from gateway.backends.embedded.log import RecoveryError
from gateway.backends.embedded.segment import FRAME
from gateway.core.engine import Core
from gateway.model import ErrorCode, Fetch, GatewayError
from tests.backends.conftest import opened
from tests.backends.test_conformance import read_all, strip
from tests.backends.test_embedded import REPO, crash, embedded, fill, plog, segment_files
from tests.support import make_config, write_toml


def frame_positions(path: Path) -> list[tuple[int, int]]:
    """(position, base offset) of each frame of a segment file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        length, _, base, _, _ = FRAME.unpack_from(data, pos)
        out.append((pos, base))
        pos += FRAME.size + length
    return out


def flip(path: Path, position: int) -> None:
    with open(path, "r+b") as fh:
        fh.seek(position)
        byte = fh.read(1)
        fh.seek(position)
        fh.write(bytes([byte[0] ^ 0xFF]))


async def make_old_segments(path: Path, topic: str = "old") -> list:
    async with embedded(path) as backend:
        await backend.create_topic(topic, 1)
        expected = await fill(backend, topic, 60)  # 600 records, about 5 segments of 16 KiB
        assert len(plog(backend, topic).segments) >= 4
    return expected


# ----------------------------------------------------------------------------- reads


@pytest.mark.parametrize("where", ["payload", "length"])
async def test_a_flipped_byte_in_an_old_segment_fails_only_the_reads_that_reach_it(
    tmp_path: Path, where: str
) -> None:
    expected = await make_old_segments(tmp_path)
    first = segment_files(tmp_path, "old")[0]
    frames = frame_positions(first)
    damaged_pos, damaged_base = frames[len(frames) // 2]
    flip(first, damaged_pos + (FRAME.size + 30 if where == "payload" else 2))
    async with embedded(tmp_path) as backend:
        # a normal-sized read from the start serves every record before the damage
        got = await backend.read("old", 0, 0, 1_000_000, 1 << 20)
        records = [r for b in got for r in b.records]
        assert strip(records) == strip(expected[:damaged_base])
        # the read that reaches the damage gets the corrupt-message error, naming the file
        with pytest.raises(GatewayError) as exc:
            await backend.read("old", 0, damaged_base, 1_000_000, 1 << 20)
        assert exc.value.code is ErrorCode.CORRUPT_MESSAGE
        assert first.name in exc.value.message
        # later segments stay readable
        second_base = plog(backend, "old").segments[1].base
        assert strip(await read_all(backend, "old", 0, second_base)) == strip(
            expected[second_base:]
        )
        # through the core: a fetch from 0 that wants more than lies before the damage (it
        # reads again, reaching the damage) answers with the records before it
        core = Core({"embedded": backend}, [("*", "embedded")])
        fetch = Fetch("old", 0, 0, max_bytes=1 << 20, max_wait_ms=1000, min_bytes=1 << 20)
        result = await core.execute(fetch)
        fetched = [r for b in result.batches for r in b.records]
        assert strip(fetched) == strip(expected[:damaged_base])


# ----------------------------------------------------------------------------- start-up


def write_repair_config(tmp_path: Path, data: Path) -> Path:
    config = make_config(
        tmp_path,
        backends={"main": {"type": "embedded", "data_dir": str(data), "segment_bytes": 16 * 1024}},
    )
    config["backends"]["main"]["index_interval_bytes"] = 1024
    path = tmp_path / "repair.toml"
    path.write_text(write_toml(config))
    return path


def run_repair(config: Path) -> subprocess.CompletedProcess[str]:
    """``gateway repair`` as the operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", "repair", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def repair_cli(config: Path) -> str:
    done = run_repair(config)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_a_missing_middle_segment_stops_the_start_and_repair_cuts_there(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    expected = await make_old_segments(data)
    files = segment_files(data, "old")
    missing = files[2]
    missing.unlink()
    before = {p.name: p.stat().st_size for p in files[3:]}
    with pytest.raises(RecoveryError) as exc:
        async with embedded(data):
            pass
    message = exc.value.message
    assert files[3].name in message and "missing" in message and "gateway repair" in message
    # nothing was deleted or cut
    assert {p.name: p.stat().st_size for p in segment_files(data, "old")[2:]} == before

    config = write_repair_config(tmp_path, data)
    holder = EmbeddedBackend("main", data_dir=data)
    holder._acquire_lock()
    try:
        refused = await trio.to_thread.run_sync(run_repair, config)
    finally:
        holder._close_files()
    assert refused.returncode == 1
    assert "locked by another process" in refused.stderr and "Traceback" not in refused.stderr
    out = repair_cli(config)
    for name in before:
        assert f"{name}: dropped" in out
    async with embedded(data) as backend:
        keep = int(missing.stem)
        assert (await backend.partition_info("old", 0)).high_watermark == keep
        assert strip(await read_all(backend, "old", 0, 0)) == strip(expected[:keep])
    assert "main: nothing to repair" in repair_cli(config)


async def test_a_damaged_older_segment_stops_an_unclean_start(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("old", 1)
        expected = await fill(backend, "old", 60)
        crash(backend)
    files = segment_files(tmp_path, "old")
    second = files[1]
    second.with_suffix(".index").unlink()  # its index is gone: the start must scan it
    pos, base = frame_positions(second)[3]
    flip(second, pos + FRAME.size + 30)
    sizes = {p.name: p.stat().st_size for p in files}
    with pytest.raises(RecoveryError) as exc:
        async with embedded(tmp_path):
            pass
    assert second.name in exc.value.message and "CRC-32C" in exc.value.message
    assert {p.name: p.stat().st_size for p in segment_files(tmp_path, "old")} == sizes

    repaired = EmbeddedBackend(
        "embedded",
        EmbeddedConfig(segment_bytes=16 * 1024, index_interval_bytes=1024),
        tmp_path,
        repair=True,
    )
    with structlog.testing.capture_logs() as logs:
        async with opened(repaired) as backend:
            assert strip(await read_all(backend, "old", 0, 0)) == strip(expected[:base])
    assert any(second.name in line and "cut at byte" in line for line in repaired.repairs)
    assert sum(e["event"] == "embedded.recovery.segment_dropped" for e in logs) == len(files) - 2


async def test_a_torn_tail_of_the_last_segment_is_still_cut_without_asking(
    tmp_path: Path,
) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("t", 1)
        await fill(backend, "t", 60)
        crash(backend)
    last = segment_files(tmp_path, "t")[-1]
    os.truncate(last, last.stat().st_size - 5)
    async with embedded(tmp_path) as backend:
        assert (await backend.partition_info("t", 0)).high_watermark == 590


# ----------------------------------------------------------------------------- topic table


async def test_topic_changes_are_appended_not_rewritten(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("a", 2)
        snapshot = (tmp_path / "topics.json").read_bytes()
        for i in range(50):
            await backend.create_topic(f"t{i}", 1)
        await backend.delete_topic("t7")
        await backend.create_partitions("a", 3)
        await backend.delete_partitions("a", 1)
        # the snapshot was not touched; the journal holds one line per change
        assert (tmp_path / "topics.json").read_bytes() == snapshot
        lines = (tmp_path / "topics.journal").read_bytes().splitlines()
        assert len(lines) == 1 + 50 + 3
        crash(backend)
    with open(tmp_path / "topics.journal", "ab") as fh:
        fh.write(b'0badc0de {"op":"delete","topic":"t1"')  # a torn last line
    with structlog.testing.capture_logs() as logs:
        async with embedded(tmp_path) as backend:
            topics = {t.name: t.partitions for t in await backend.list_topics()}
    assert topics == {"a": 4, **{f"t{i}": 1 for i in range(50) if i != 7}}
    assert any(e["event"] == "embedded.recovery.truncated" for e in logs)
    # the start folded the journal into the snapshot
    doc = json.loads((tmp_path / "topics.json").read_bytes())
    assert doc["topics"]["a"]["partitions"] == 4 and "t7" not in doc["topics"]
    assert (tmp_path / "topics.journal").read_bytes() == b""


async def test_a_corrupt_journal_line_before_intact_ones_stops_the_start(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        for name in ("a", "b", "c"):
            await backend.create_topic(name, 1)
        crash(backend)
    journal = tmp_path / "topics.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(lines[0] + lines[1].replace(b'"b"', b'"x"') + lines[2])
    with pytest.raises(GatewayError) as exc:
        async with embedded(tmp_path):
            pass
    assert "topics.journal: line 2 is corrupt" in exc.value.message
    assert (tmp_path / "topics" / "b").is_dir()  # nothing removed


async def test_a_data_directory_written_with_only_topics_json_still_opens(tmp_path: Path) -> None:
    async with embedded(tmp_path) as backend:
        await backend.create_topic("legacy", 2)
        await fill(backend, "legacy", 3)
    # what earlier versions left: the whole table in topics.json, no journal
    legacy = {"version": 1, "topics": {"legacy": {"partitions": 2, "config": []}}}
    (tmp_path / "topics.json").write_text(json.dumps(legacy, indent=1))
    (tmp_path / "topics.journal").unlink()
    async with embedded(tmp_path) as backend:
        assert (await backend.topic("legacy")).partitions == 2
        assert (await backend.partition_info("legacy", 0)).high_watermark == 30


def test_journal_lines_of_the_wrong_shape_are_damage() -> None:
    from gateway.backends.embedded.topictable import TopicTable, _line

    good = {"op": "set", "topic": "a", "partitions": 2, "config": [["k", "v"]]}
    assert TopicTable._parse(_line(good)[:-1]) == good
    for bad in (
        {"op": "set", "topic": "a"},
        {"op": "set", "topic": "a", "partitions": "x", "config": []},
        {"op": "set", "topic": "a", "partitions": 1, "config": [["k"]]},
        {"op": "delete", "topic": 5},
        {"op": "rename", "topic": "a"},
    ):
        assert TopicTable._parse(_line(bad)[:-1]) is None, bad
    assert TopicTable._parse(b"00000000 {}") is None
