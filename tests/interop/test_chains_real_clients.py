"""Real clients through upstream chains: a client of one protocol writes through gateway A into
a server of another protocol (gateway B's listener, reached by A's upstream backend), and a
client of that protocol reads it there.

- kcat (librdkafka in Kafka 0.8 mode) -> A (upstream TANK) -> B: read with the TANK client at B,
  and back through A with kcat;
- iggy-py 0.4.0 -> A (upstream Liftbridge) -> B: read with gufo-liftbridge 0.2.0 at B.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from gateway.protocols.tank.client import TankClient
from tests.protocols.kafka08.conftest import KCAT_08, kcat
from tests.support import REPO_ROOT, GatewayProcess

IGGY_PY = REPO_ROOT / ".test-venvs" / "iggy-py" / "bin" / "python"
HERE = Path(__file__).parent


def addr(gw: GatewayProcess, protocol: str) -> str:
    host, port = gw.address(protocol)
    return f"{host}:{port}"


def upstream(gw: GatewayProcess, protocol: str) -> dict:
    return {"default": {"type": "upstream", "protocol": protocol, "address": addr(gw, protocol)}}


def test_kcat_writes_into_a_tank_server(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path / "b", listeners={"tank": {}}) as b:

        async def create() -> None:
            async with await TankClient.connect(*b.address("tank")) as client:
                assert await client.create_topic("k2t", 1) == 0

        trio.run(create)
        with GatewayProcess(
            tmp_path / "a", listeners={"kafka08": {}}, backends=upstream(b, "tank")
        ) as a:
            bootstrap = addr(a, "kafka08")
            lines = "".join(f"key-{i % 3}:value-{i}\n" for i in range(30))
            kcat("-b", bootstrap, "-P", "-t", "k2t", "-p", "0", "-K:", *KCAT_08, stdin=lines)

            async def read_at_b() -> list:
                async with await TankClient.connect(*b.address("tank")) as client:
                    messages, _ = await client.consume("k2t", 0, 1)
                    return messages

            messages = trio.run(read_at_b)
            assert [(m.seq, m.key, m.content) for m in messages] == [
                (i + 1, f"key-{i % 3}".encode(), f"value-{i}".encode()) for i in range(30)
            ]
            out = kcat(
                "-b", bootstrap, "-C", "-t", "k2t", "-p", "0", "-o", "beginning", "-e",
                "-f", "%k=%s@%o\n", *KCAT_08,
            )  # fmt: skip
            assert out.split() == [f"key-{i % 3}=value-{i}@{i}" for i in range(30)]


def test_iggy_py_writes_into_a_liftbridge_server(tmp_path: Path) -> None:
    assert IGGY_PY.exists(), f"{IGGY_PY} missing: run .ci/deps/iggy.sh"
    users = [{"username": "iggy", "password": "iggy"}]
    with GatewayProcess(tmp_path / "b", listeners={"liftbridge": {}}) as b:
        with GatewayProcess(
            tmp_path / "a", listeners={"iggy": {"users": users}}, backends=upstream(b, "liftbridge")
        ) as a:
            proc = subprocess.run(
                [str(IGGY_PY), str(HERE / "iggy_py_chain_driver.py"), addr(a, "iggy"),
                 "20"],
                capture_output=True, text=True, timeout=90,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr[-3000:]
            polled = json.loads(proc.stdout.strip().splitlines()[-1])["polled"]
            assert [(o, p) for o, p, _ in polled] == [(i, f"m{i}") for i in range(20)]
        # the Liftbridge server has the stream chain.i2l; a Liftbridge client reads it there
        proc = subprocess.run(
            [sys.executable, str(HERE / "gufo_iggy_driver.py"), str(b.address("liftbridge")[1]),
             "consume", "chain.i2l", "20"],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])["messages"]
        assert [(m["offset"], bytes.fromhex(m["value"])) for m in got] == [
            (i, f"m{i}".encode()) for i in range(20)
        ]
        # the time the Liftbridge server stamped comes back through A as Iggy's (µs vs ns)
        assert all(m["ts"] // 1000 == t for m, (_, _, t) in zip(got, polled, strict=True))
