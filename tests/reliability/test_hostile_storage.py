"""Hostile and careless clients against the embedded log, each against a real gateway process
while a bystander keeps probing the admin port (tests/reliability/hostile.py):

- one Kafka 0.8 Metadata request naming 1,000 unknown topics (auto-create on);
- a Cursus ``CREATE partitions=2000`` under a low open-file limit, refused by the partition
  budget, and (with the budget lifted) failing on the descriptors without leaking any or
  stopping the log;
- a data directory missing a segment: the start is refused with one line, nothing is deleted;
- a flipped byte in an old segment: Kafka 0.8 fetches get every record before it, and
  CorruptMessage (2) only where they reach it.
"""

from __future__ import annotations

import functools
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.backends.embedded.segment import FRAME
from gateway.model import Record
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Ack, Message
from gateway.protocols.kafka08 import codec as k
from gateway.protocols.kafka08.messageset import decode_message_set, encode_message_set
from tests.protocols.kafka08.conftest import RawClient, metric
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess, make_config, write_toml

REPO = Path(__file__).resolve().parents[2]
EMBEDDED = {"default": {"type": "embedded", "fsync": 50}}
ATTACK_DEADLINE_S = 120.0  # generous bound on each attack's own duration


def metadata(address: tuple[str, int], names: list[str]) -> list[Any]:
    client = RawClient(address, timeout=ATTACK_DEADLINE_S)
    try:
        return client.call(k.ApiKey.METADATA, 0, k.METADATA_REQUEST(names)).topics
    finally:
        client.close()


def limit_hits(gw: GatewayProcess, limit: str) -> float:
    return metric(gw, "gateway_limit_hits_total", limit=limit)


def test_a_metadata_request_naming_1000_unknown_topics_freezes_nothing(tmp_path: Path) -> None:
    names = [f"probe-{i:04d}" for i in range(1000)]
    # creation unlimited: all 1,000 are created while the bystander keeps getting answers
    with GatewayProcess(
        tmp_path / "unlimited",
        listeners={"kafka08": {}},
        backends=EMBEDDED,
        server={"max_topics_created_per_s": 0, "max_topics_created_per_request": 1000},
    ) as gw:
        baseline = Footprint.of(gw)
        started = time.monotonic()
        with Bystander(gw) as bystander:
            topics = metadata(gw.address("kafka08"), names)
        assert time.monotonic() - started < ATTACK_DEADLINE_S
        bystander.check()
        Footprint.of(gw).check_within(baseline)
        assert [t.topic for t in topics] == names
        assert {t.error for t in topics} == {0}
        assert all(len(t.partitions) == 1 for t in topics)
        # asked again, they exist: nothing is created twice
        assert {t.error for t in metadata(gw.address("kafka08"), names[:10])} == {0}

    # with a creation budget (10 a second here, to stay far from the disk's own pace), the
    # topics beyond it are refused with LeaderNotAvailable (5), which every 0.8 client retries
    with GatewayProcess(
        tmp_path / "budget",
        listeners={"kafka08": {}},
        backends=EMBEDDED,
        server={"max_topics_created_per_s": 10},
    ) as gw:
        with Bystander(gw) as bystander:
            topics = metadata(gw.address("kafka08"), names)
        bystander.check()
        codes = [t.error for t in topics]
        assert set(codes) == {0, 5} and codes.count(0) >= 10 and codes.count(5) >= 500
        assert codes[:10] == [0] * 10  # the burst
        assert limit_hits(gw, "max_topics_created_per_s") == codes.count(5)
        assert gw.proc is not None and gw.proc.poll() is None

    # the default budget of one request: 100 topics created, the rest LeaderNotAvailable (5),
    # created when the client asks again
    with GatewayProcess(
        tmp_path / "per-request",
        listeners={"kafka08": {}},
        backends=EMBEDDED,
        server={"max_topics_created_per_s": 0},
    ) as gw:
        first = [t.error for t in metadata(gw.address("kafka08"), names[:150])]
        assert first == [0] * 100 + [5] * 50
        assert limit_hits(gw, "max_topics_created_per_request") == 50
        assert {t.error for t in metadata(gw.address("kafka08"), names[:150])} == {0}


def low_file_limit(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def start_limited(gw: GatewayProcess, limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Start the gateway process with soft and hard RLIMIT_NOFILE = ``limit``."""
    with monkeypatch.context() as m:
        m.setattr(
            subprocess,
            "Popen",
            functools.partial(
                subprocess.Popen, preexec_fn=functools.partial(low_file_limit, limit)
            ),
        )
        gw.start()


async def cursus(gw: GatewayProcess, *commands: str) -> list[str]:
    async with await CursusClient.connect(*gw.address("cursus")) as client:
        return [await client.text(cmd) for cmd in commands]


async def publish(gw: GatewayProcess, topic: str, n: int) -> Ack | str:
    async with await CursusClient.connect(*gw.address("cursus")) as client:
        messages = [Message(seq=i + 1, producer_id=b"p", payload=b"m%d" % i) for i in range(n)]
        return await client.produce(topic, 0, messages)


def test_create_2000_partitions_under_a_low_file_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 512
    cap = (limit - 128) // 4  # the derived max_partitions_total: 96
    gw = GatewayProcess(tmp_path, listeners={"cursus": {}}, backends=EMBEDDED)
    start_limited(gw, limit, monkeypatch)
    try:
        baseline = Footprint.of(gw)
        assert baseline.file_limit == limit
        with Bystander(gw) as bystander:
            [refused, small, over] = trio.run(
                cursus,
                gw,
                "CREATE topic=big partitions=2000",
                "CREATE topic=small partitions=90",
                "CREATE topic=more partitions=7",
            )
            ack = trio.run(publish, gw, "small", 5)
        bystander.check()
        assert refused.startswith("ERROR: failed to create topic 'big'")
        assert f"max_partitions_total ({cap})" in refused
        assert small == "Topic 'small' now has 90 partitions"
        assert over.startswith("ERROR: failed to create topic 'more'")
        assert isinstance(ack, Ack) and ack.status == "OK", ack
        after = Footprint.of(gw)
        after.check_within(baseline)
        assert after.open_files < limit
        assert limit_hits(gw, "max_partitions_total") == 2
        assert "file_limit" in gw.log_text()
    finally:
        gw.stop()
    # the same data directory starts again under the same limit
    start_limited(gw, limit, monkeypatch)
    try:
        assert trio.run(cursus, gw, "CREATE topic=small partitions=90") == [
            "Topic 'small' now has 90 partitions"
        ]
    finally:
        gw.stop()
    # under a limit too low for its 91 partitions, the start is refused with one clear line
    with pytest.raises(RuntimeError):
        start_limited(gw, 160, monkeypatch)
    log = gw.log_text()
    assert "holds more partitions than the open-file limit allows" in log
    assert "ulimit -n" in log and "Traceback" not in log


def test_running_out_of_descriptors_leaks_none_and_stops_no_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 512
    gw = GatewayProcess(
        tmp_path,
        listeners={"cursus": {}},
        backends=EMBEDDED,
        server={"max_partitions_total": 100_000},  # the budget lifted: the descriptors run out
    )
    start_limited(gw, limit, monkeypatch)
    try:
        [ok] = trio.run(cursus, gw, "CREATE topic=keep partitions=1")
        assert ok == "Topic 'keep' now has 1 partitions"
        baseline = Footprint.of(gw)
        with Bystander(gw) as bystander:
            [refused] = trio.run(cursus, gw, "CREATE topic=big partitions=2000")
            time.sleep(0.3)  # past a background fsync round (fsync = 50 ms)
            ack = trio.run(publish, gw, "keep", 3)
        bystander.check()
        assert refused.startswith("ERROR: failed to create topic 'big'"), refused
        assert "open-file limit" in refused
        assert isinstance(ack, Ack) and ack.status == "OK", ack
        after = Footprint.of(gw)
        after.check_within(baseline)
        # nothing leaked (a margin for descriptors a background fsync round holds meanwhile)
        assert after.open_files <= baseline.open_files + 4, (after, baseline)
        assert not (tmp_path / "data" / "default" / "topics" / "big").exists()
        assert "fsync failed" not in gw.log_text()
    finally:
        gw.stop()


def test_a_missing_segment_refuses_the_start_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data" / "default" / "topics" / "t" / "0"
    with GatewayProcess(
        tmp_path,
        listeners={"cursus": {}},
        backends={"default": {"type": "embedded", "segment_bytes": 4096}},
    ) as gw:
        trio.run(cursus, gw, "CREATE topic=t partitions=1")
        for _ in range(20):
            assert isinstance(trio.run(publish, gw, "t", 20), Ack)
    segments = sorted(data.glob("*.log"))
    assert len(segments) >= 4
    segments[1].unlink()
    sizes = {p.name: p.stat().st_size for p in data.iterdir()}
    config = tmp_path / "refused.toml"
    config.write_text(
        write_toml(
            make_config(
                tmp_path,
                {"cursus": {}},
                backends={"default": {"type": "embedded", "segment_bytes": 4096}},
            )
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1
    [line] = [x for x in done.stderr.splitlines() if not x.startswith("{")]
    assert segments[2].name in line and "gateway repair" in line
    assert "Traceback" not in done.stderr
    assert {p.name: p.stat().st_size for p in data.iterdir()} == sizes


def kafka_fetch(client: RawClient, topic: str, offset: int) -> Any:
    body = k.FETCH_REQUEST(
        -1, 0, 1, [k.FETCH_TOPIC(topic, [k.FETCH_PARTITION(0, offset, 1 << 20)])]
    )
    [t] = client.call(k.ApiKey.FETCH, 0, body).topics
    [p] = t.partitions
    return p


def test_a_flipped_byte_in_an_old_segment_costs_only_the_damaged_batch(tmp_path: Path) -> None:
    backends = {"default": {"type": "embedded", "segment_bytes": 4096}}
    gw = GatewayProcess(tmp_path, listeners={"kafka08": {}}, backends=backends)
    with gw:
        client = RawClient(gw.address("kafka08"))
        assert metadata(gw.address("kafka08"), ["t"])[0].error == 0  # auto-created
        for i in range(30):
            records = [Record(b"k", b"value-%03d-%02d" % (i, j) + b"." * 40) for j in range(10)]
            message_set = encode_message_set(records)
            body = k.PRODUCE_REQUEST(
                1, 1000, [k.PRODUCE_TOPIC("t", [k.PRODUCE_PARTITION(0, message_set)])]
            )
            [t] = client.call(k.ApiKey.PRODUCE, 0, body).topics
            assert t.partitions[0].error == 0
        client.close()
    directory = tmp_path / "data" / "default" / "topics" / "t" / "0"
    first = sorted(directory.glob("*.log"))[0]
    data = bytearray(first.read_bytes())
    frames, pos = [], 0
    while pos < len(data):
        length, _, base, _, _ = FRAME.unpack_from(data, pos)
        frames.append((pos, base))
        pos += FRAME.size + length
    assert len(frames) >= 3 and len(sorted(directory.glob("*.log"))) >= 3
    damaged_pos, damaged = frames[len(frames) // 2]
    data[damaged_pos + 60] ^= 0xFF
    first.write_bytes(bytes(data))
    with gw:
        client = RawClient(gw.address("kafka08"))
        p = kafka_fetch(client, "t", 0)
        assert p.error == 0
        got = decode_message_set(p.message_set)
        assert [r.offset for r in got] == list(range(damaged))  # everything before the damage
        p = kafka_fetch(client, "t", damaged)
        assert p.error == 2  # CorruptMessage
        later = int(sorted(directory.glob("*.log"))[1].stem)  # the next segment's first offset
        p = kafka_fetch(client, "t", later)
        assert p.error == 0 and decode_message_set(p.message_set)[0].offset == later
        client.close()
        assert metric(gw, "gateway_embedded_corrupt_reads_total") >= 1
