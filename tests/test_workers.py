"""``gateway serve --workers N``: worker processes share each port with SO_REUSEPORT."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import trio

from gateway.protocols.tank.client import TankClient
from tests.support import GatewayProcess, make_config, write_toml

CONNECTIONS = 40


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def established_on(port: int) -> dict[int, int]:
    """socket inode -> 1 for every established TCP socket whose local port is ``port``."""
    out = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "01":
                out[int(f[9])] = 1
    return out


def accepted_by(pid: int, port: int) -> int:
    inodes = established_on(port)
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:[") and int(target[8:-1]) in inodes:
            count += 1
    return count


async def test_two_workers_share_one_port(tmp_path: Path) -> None:
    with GatewayProcess(
        tmp_path, listeners={"tank": {}}, backend="memory", extra_args=("--workers", "2")
    ) as gw:
        assert gw.proc is not None
        workers = children(gw.proc.pid)
        assert len(workers) == 2
        host, port = gw.address("tank")
        socks = [socket.create_connection((host, port)) for _ in range(CONNECTIONS)]
        try:
            # wait until both workers together hold every connection, then count per worker
            counts = [0, 0]
            with trio.fail_after(30):
                while sum(counts) < CONNECTIONS:
                    await trio.sleep(0.05)
                    counts = [accepted_by(w, port) for w in workers]
            # the kernel hashes each connection to one worker: both get some of 40
            assert all(c > 0 for c in counts), counts
        finally:
            for s in socks:
                s.close()
        # and both serve the protocol: enough fresh clients reach each worker
        for i in range(8):
            client = await TankClient.connect(host, port)
            try:
                assert await client.create_topic(f"w{i}", 1) in (0, 1)
                assert await client.produce(f"w{i}", 0, [(None, b"hello", 1)]) == 0
            finally:
                await client.aclose()
        assert gw.stop() == 0
    assert not any(Path(f"/proc/{w}").exists() for w in workers)


def test_workers_refuse_the_embedded_log(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(write_toml(make_config(tmp_path, {"tank": {}}, backend="embedded")))
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "embedded" in proc.stderr and "--workers" in proc.stderr


def test_workers_warn_once_of_what_they_do_not_share(tmp_path: Path) -> None:
    """Group memberships (Cursus, Iggy) live in each worker: the parent says so once at start
    (members of one group on different workers would get overlapping assignments)."""
    with GatewayProcess(
        tmp_path,
        listeners={"cursus": {}, "tank": {}},
        backend="memory",
        extra_args=("--workers", "2"),
    ) as gw:
        assert gw.stop() == 0
    text = gw.log_text()
    assert text.count("workers_do_not_share") == 1
    assert (
        "consumer-group memberships" in text
        and "tank" not in text.split("workers_do_not_share")[1].split("\n")[0]
    )


def test_per_process_state_lists_only_enabled_listeners(tmp_path: Path) -> None:
    from gateway.config import load_config
    from gateway.workers import per_process_state

    path = tmp_path / "gw.toml"
    path.write_text(write_toml(make_config(tmp_path, {"tank": {}}, backend="memory")))
    assert per_process_state(load_config(path)) == []
    path.write_text(
        write_toml(make_config(tmp_path, {"iggy": {}, "liftbridge": {}}, backend="memory"))
    )
    assert [line.split(":")[0] for line in per_process_state(load_config(path))] == [
        "iggy",
        "liftbridge",
    ]
