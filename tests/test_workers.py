"""``gateway serve --workers N``: worker processes share each port with SO_REUSEPORT."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import trio
from prometheus_client.parser import text_string_to_metric_families

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
    # on a NATS default backend groups and Liftbridge's flags live in the backend: shared
    nats = {"js": {"type": "nats", "url": "nats://127.0.0.1:4222"}}
    cfg = make_config(tmp_path, {"cursus": {}, "iggy": {}, "liftbridge": {}}, backends=nats)
    path.write_text(write_toml(cfg))
    assert per_process_state(load_config(path)) == []


# ---------------------------------------------------------------------------- one view of N workers
def scrape_samples(gw: GatewayProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One fresh connection (the kernel may hand it to either worker): every sample."""
    with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def fetch_status(gw: GatewayProcess) -> dict:
    with urllib.request.urlopen(gw.admin_url + "/v1/status", timeout=30) as resp:
        return json.loads(resp.read())


async def test_one_scrape_counts_every_workers_connections(tmp_path: Path) -> None:
    with GatewayProcess(
        tmp_path, listeners={"tank": {}}, backend="memory", extra_args=("--workers", "2")
    ) as gw:
        assert gw.proc is not None
        workers = children(gw.proc.pid)
        host, port = gw.address("tank")
        socks = [socket.create_connection((host, port)) for _ in range(CONNECTIONS)]
        try:
            counts = [0, 0]
            with trio.fail_after(30):
                while sum(counts) < CONNECTIONS:
                    await trio.sleep(0.05)
                    counts = [accepted_by(w, port) for w in workers]
            assert all(c > 0 for c in counts), counts  # both workers hold some
            previous = 0.0
            for _ in range(6):  # fresh admin connections: both workers answer some of them
                samples = scrape_samples(gw)
                total = value(samples, "gateway_connections_total", protocol="tank")
                assert total >= CONNECTIONS and total >= previous
                previous = total
                assert value(samples, "gateway_connections_open", protocol="tank") == CONNECTIONS
                assert value(samples, "gateway_workers") == 2
                assert value(samples, "process_cpu_seconds_total") > 0
                assert value(samples, "gateway_ready") == 1
                status = fetch_status(gw)
                tank = [x for x in status["listeners"] if x["protocol"] == "tank"][0]
                assert tank["connections"] == CONNECTIONS
                assert status["ready"] is True
                assert sorted(w["pid"] for w in status["workers"]) == sorted(workers)
        finally:
            for s in socks:
                s.close()
        # a worker that dies keeps its counted connections in the sum, not its open ones
        os.kill(workers[1], signal.SIGKILL)
        with trio.fail_after(30):
            while (
                Path(f"/proc/{workers[1]}/stat").exists()
                and "Z" not in Path(f"/proc/{workers[1]}/stat").read_text().split()[2]
            ):
                await trio.sleep(0.05)
        # a connection the kernel queued on the dead worker's listening socket as it closed is
        # reset: a client would retry, and so does this scrape
        for attempt in range(5):
            try:
                after = scrape_samples(gw)
                break
            except (ConnectionResetError, http.client.RemoteDisconnected):
                if attempt == 4:
                    raise
                await trio.sleep(0.2)
        assert value(after, "gateway_connections_total", protocol="tank") >= previous
        assert value(after, "gateway_workers") == 1
        assert value(after, "gateway_connections_open", protocol="tank") < CONNECTIONS
        assert fetch_status(gw)["ready"] is False  # one of two workers answers
        gw.stop()


def test_per_process_state_on_upstream_backends(tmp_path: Path) -> None:
    """Group memberships are per worker only where the gateway keeps them: not on an upstream
    Cursus, Iggy or Liftbridge broker (its own groups) nor on TANK (joins refused), but on TANK
    with local_groups; Liftbridge's flags are per worker on every upstream."""
    from gateway.config import load_config
    from gateway.workers import per_process_state

    path = tmp_path / "gw.toml"
    listeners = {"cursus": {}, "iggy": {}, "liftbridge": {}}

    def unshared(**upstream: object) -> list[str]:
        backend = {"type": "upstream", "address": "127.0.0.1:9", **upstream}
        cfg = make_config(tmp_path, listeners, backends={"up": backend})
        path.write_text(write_toml(cfg))
        return [line.split(":")[0] for line in per_process_state(load_config(path))]

    assert unshared(protocol="cursus") == ["liftbridge"]
    assert unshared(protocol="tank") == ["liftbridge"]
    assert unshared(protocol="tank", local_groups=True) == ["cursus", "iggy", "liftbridge"]
    assert unshared(protocol="iggy") == ["liftbridge"]
    assert unshared(protocol="liftbridge") == ["liftbridge"]
    assert unshared(protocol="kafka08", local_groups=True) == ["cursus", "iggy", "liftbridge"]


def test_per_process_state_on_a_kafka_backend(tmp_path: Path) -> None:
    """On a Kafka backend the cluster's group coordinator runs the groups: memberships are not
    per worker; Liftbridge's flags still are."""
    from gateway.config import load_config
    from gateway.workers import per_process_state

    path = tmp_path / "gw.toml"
    backend = {"type": "kafka", "bootstrap": "127.0.0.1:9"}
    cfg = make_config(
        tmp_path, {"cursus": {}, "iggy": {}, "liftbridge": {}}, backends={"k": backend}
    )
    path.write_text(write_toml(cfg))
    assert [line.split(":")[0] for line in per_process_state(load_config(path))] == ["liftbridge"]
