"""TANK messages are consumed through Kafka 0.8 (kcat) and Iggy (iggy-py), and messages produced
with those real clients are consumed through TANK.

No TANK client installs from PyPI or apt, so the TANK side is the in-repo
client on the codec's client role (tied to the real programs by the wire captures of
test_golden.py); the Kafka and Iggy sides are the real clients, installed by
.ci/deps/kafka08.sh and .ci/deps/iggy.sh.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import trio

from gateway.protocols.tank.client import TankClient
from tests.protocols.kafka08.conftest import KCAT_08, kcat
from tests.support import REPO_ROOT, GatewayProcess

IGGY_PY = REPO_ROOT / ".test-venvs" / "iggy-py" / "bin" / "python"
IGGY_DRIVER = Path(__file__).parent / "clients" / "iggy_driver.py"
TS = 1_700_000_000_123  # ms


def iggy(addr: tuple[str, int], **args: object) -> dict:
    assert IGGY_PY.exists(), f"{IGGY_PY} missing: run .ci/deps/iggy.sh"
    proc = subprocess.run(
        [str(IGGY_PY), str(IGGY_DRIVER), json.dumps({"addr": f"{addr[0]}:{addr[1]}", **args})],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"iggy driver failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tank(addr: tuple[str, int], fn) -> object:
    async def main() -> object:
        async with await TankClient.connect(*addr) as c:
            return await fn(c)

    return trio.run(main)


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    listeners = {
        "tank": {},
        "kafka08": {},
        "iggy": {"users": [{"username": "iggy", "password": "iggy"}]},
    }
    with GatewayProcess(tmp_path_factory.mktemp("tank-interop"), listeners=listeners) as proc:
        yield proc


def test_tank_to_kafka08_and_iggy(gw) -> None:
    msgs = [(b"k%d" % i, b"tank-%d" % i, TS + i) for i in range(3)] + [(None, b"nokey", TS + 9)]

    async def produce(c: TankClient) -> None:
        assert await c.create_topic("from-tank", 1) == 0
        assert await c.produce("from-tank", 0, msgs[:2]) == 0
        assert await c.produce("from-tank", 0, msgs[2:], compress=True) == 0

    tank(gw.address("tank"), produce)
    bootstrap = f"127.0.0.1:{gw.address('kafka08')[1]}"
    got = kcat("-b", bootstrap, "-C", "-t", "from-tank", "-p", "0", "-o", "beginning", "-e",
               "-f", "%o|%k|%s\n", *KCAT_08)  # fmt: skip
    assert got.splitlines() == ["0|k0|tank-0", "1|k1|tank-1", "2|k2|tank-2", "3||nokey"]
    out = iggy(gw.address("iggy"), op="poll", topic="from-tank", count=10)["messages"]
    assert [(m["offset"], bytes.fromhex(m["payload"]), m["timestamp"]) for m in out] == [
        (i, content, ts * 1000) for i, (_, content, ts) in enumerate(msgs)
    ]


def test_kafka08_and_iggy_to_tank(gw) -> None:
    bootstrap = f"127.0.0.1:{gw.address('kafka08')[1]}"

    async def create(c: TankClient) -> None:
        assert await c.create_topic("to-tank", 1) == 0

    tank(gw.address("tank"), create)
    kcat("-b", bootstrap, "-P", "-t", "to-tank", "-p", "0", "-K:", *KCAT_08,
         stdin="ka:kafka-a\nkb:kafka-b\n")  # fmt: skip
    iggy(gw.address("iggy"), op="send", topic="to-tank", payloads=["iggy-c", "iggy-d"])

    async def consume(c: TankClient) -> object:
        return await c.consume("to-tank", 0, 0)

    msgs, hwmark = tank(gw.address("tank"), consume)
    assert hwmark == 4
    assert [(m.seq, m.key, m.content) for m in msgs] == [
        (1, b"ka", b"kafka-a"),
        (2, b"kb", b"kafka-b"),
        (3, None, b"iggy-c"),
        (4, None, b"iggy-d"),
    ]
    assert all(m.timestamp_ms > TS for m in msgs)  # stamped at append (Kafka v0 has none)

    async def from_seq(c: TankClient) -> object:
        return await c.consume("to-tank", 0, 3)

    msgs, _ = tank(gw.address("tank"), from_seq)
    assert [m.content for m in msgs] == [b"iggy-c", b"iggy-d"]
