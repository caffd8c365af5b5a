"""What several bench drivers share: process CPU time, the gateway config they write, and
starting a gateway subprocess on free loopback ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc; 0.0 once it is gone). CPU per
    record does not depend on how busy the machine is the way wall-clock rates do."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_jiffies() -> tuple[int, int, int]:
    """(busy, steal, total) jiffies of all CPUs since boot, from /proc/stat. Steal is time a
    virtual CPU was ready to run but the host ran something else: a stall neither the gateway
    nor the generator can see coming."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], fields[7], sum(fields)


def toml(data: dict) -> str:
    """A gateway config as TOML: top-level tables, and named tables under listeners/backends."""
    lines = []
    for section, body in data.items():
        items = body.items() if section in ("listeners", "backends") else [(None, body)]
        for name, table in items:
            lines.append(f"[{section}.{name}]" if name else f"[{section}]")
            for k, v in table.items():
                lines.append(f"{k} = {json.dumps(v)}")
    return "\n".join(lines) + "\n"


def gateway_config(listener: str, backend: dict, tmp: Path) -> dict:
    """One listener on a free loopback port, one backend, no admin endpoint, quiet JSON logs."""
    return {
        "server": {"data_dir": str(tmp / "data"), "log_format": "json", "log_level": "warning"},
        "admin": {"enabled": False},
        "listeners": {listener: {"host": "127.0.0.1", "port": 0}},
        "backends": {"default": backend},
    }


@contextmanager
def gateway_process(config: dict, tmp: Path) -> Iterator[tuple[subprocess.Popen, dict[str, int]]]:
    """``gateway serve`` with ``config`` (written to ``tmp/gw.toml``, its log to ``tmp/gw.log``):
    (the process, port per listener) once it listens; terminated on exit."""
    (tmp / "gw.toml").write_text(toml(config))
    with open(tmp / "gw.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(tmp / "gw.toml")],
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=ROOT,
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("listening"):
            sys.exit(f"gateway did not start: {line!r}\n{(tmp / 'gw.log').read_text()[-3000:]}")
        ports = {
            name: int(address.rsplit(":", 1)[1])
            for name, address in (item.split("=", 1) for item in line.split()[1:] if "=" in item)
        }
        yield proc, ports
    finally:
        proc.terminate()
        proc.wait(30)


KCAT_08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]


def kcat_08_commands(kcat: str, bootstrap: str, topic: str, records: Path, n: int) -> dict:
    """kcat in Kafka 0.8.2 mode: produce every line of ``records`` to partition 0 of ``topic``
    (acks 1, batches of up to 10,000), and fetch ``n`` records back printing their offsets."""
    return {
        "produce": [kcat, "-b", bootstrap, "-P", "-t", topic, "-p", "0", *KCAT_08,
                    "-X", "request.required.acks=1", "-X", "linger.ms=5",
                    "-X", "batch.num.messages=10000",
                    "-X", "queue.buffering.max.messages=2000000", "-l", str(records)],
        "fetch": [kcat, "-b", bootstrap, "-C", "-t", topic, "-p", "0", *KCAT_08,
                  "-o", "beginning", "-c", str(n), "-e", "-q", "-f", "%o\n",
                  "-X", "fetch.message.max.bytes=1048576"],
    }  # fmt: skip


def check_fetched(stdout: bytes, n: int) -> None:
    """Exit unless a kcat fetch printed the offsets 0..n-1."""
    offsets = stdout.split()
    if len(offsets) != n or int(offsets[-1]) != n - 1:
        sys.exit(f"fetch: got {len(offsets)} of {n} records")
