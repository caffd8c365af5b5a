"""``gateway produce`` streams stdin in bounded batches (constant memory), ``consume --follow``
waits for new records, ``--format json`` round-trips every field, ``topics delete``."""

from __future__ import annotations

import base64
import json
import os
import pty
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.support import REPO_ROOT, GatewayProcess, write_toml

GATEWAY = [sys.executable, "-m", "gateway"]


def gateway(*args: str, stdin: str | bytes = b"") -> subprocess.CompletedProcess[bytes]:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run(
        [*GATEWAY, *args], input=data, capture_output=True, cwd=REPO_ROOT, timeout=120
    )


def running(tmp_path: Path, backend: str = "memory") -> GatewayProcess:
    gw = GatewayProcess(tmp_path, backend=backend).start()
    gw.config["admin"]["port"] = gw.address("admin")[1]  # the CLI finds it by the config
    gw.write_config()
    return gw


def admin_get(gw: GatewayProcess, path: str) -> Any:
    with urllib.request.urlopen(gw.admin_url + path, timeout=30) as resp:
        return json.loads(resp.read())


def vm_hwm_kib(pid: int) -> int:
    """The peak resident set of a running process, in KiB (0 once it has exited)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


RECORDS = 200_000
RECORD = b"x" * 1015  # with the 8-digit number and the newline: 1 KiB a line, 200 MiB in all


def test_produce_streams_200_mb_in_constant_memory(tmp_path: Path) -> None:
    gw = running(tmp_path, backend="embedded")
    try:
        proc = subprocess.Popen(
            [*GATEWAY, "produce", "big", "--config", str(gw.config_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        assert proc.stdin is not None
        # the CLI's own high-water mark (VmHWM of its address space after exec), sampled while
        # it runs: a child's ru_maxrss would count the pages of this (large) test process that
        # the child shared between fork and exec
        peak_kib = 0
        chunk = 1000
        for start in range(0, RECORDS, chunk):
            proc.stdin.write(
                b"".join(b"%08d%s\n" % (i, RECORD) for i in range(start, start + chunk))
            )
            peak_kib = max(peak_kib, vm_hwm_kib(proc.pid))
        proc.stdin.close()
        while proc.poll() is None:
            peak_kib = max(peak_kib, vm_hwm_kib(proc.pid))
            time.sleep(0.005)
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        assert proc.returncode == 0, stderr
        assert stderr == f"produced {RECORDS} record(s) to big\n"
        peak_mb = peak_kib / 1024
        assert 0 < peak_mb < 150, f"the CLI peaked at {peak_mb:.0f} MB"

        offsets = admin_get(gw, "/v1/topics/big/offsets")
        assert sum(p["high_watermark"] - p["log_start_offset"] for p in offsets) == RECORDS
        assert len(offsets) == 1  # one partition: stdin order is offset order
        for i in (0, 123_457, RECORDS - 1):
            got = admin_get(gw, f"/v1/topics/big/records?partition=0&offset={i}&max=1")
            value = base64.b64decode(got["records"][0]["value"])
            assert value == b"%08d%s" % (i, RECORD)
    finally:
        gw.stop()


def test_consume_follow_gets_records_produced_after_it_started(tmp_path: Path) -> None:
    gw = running(tmp_path)
    cfg = str(gw.config_path)
    try:
        assert gateway("produce", "live", "--config", cfg, stdin="before\n").returncode == 0
        follower = subprocess.Popen(
            [*GATEWAY, "consume", "live", "--from-beginning", "--follow", "--config", cfg],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        assert follower.stdout is not None and follower.stderr is not None
        try:
            assert follower.stdout.readline() == b"before\n"  # it is running and caught up
            assert gateway("produce", "live", "--config", cfg, stdin="after\n").returncode == 0
            assert follower.stdout.readline() == b"after\n"
            assert follower.poll() is None  # still waiting for more
            follower.send_signal(signal.SIGINT)  # the way to stop following
            assert follower.wait(timeout=30) == 0
            assert follower.stderr.read() == b""
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
            follower.stdout.close()
            follower.stderr.close()
    finally:
        gw.stop()


def test_json_format_round_trips_headers_and_binary_values(tmp_path: Path) -> None:
    gw = running(tmp_path)
    cfg = str(gw.config_path)
    records = [
        {
            "key": "k1",
            "value": "plain text é",
            "headers": [
                ["trace", "abc"],
                ["raw", {"base64": base64.b64encode(b"\xff\x00").decode()}],
            ],
            "timestamp_us": 1_700_000_000_000_001,
        },
        {
            "key": {"base64": base64.b64encode(b"\x80key").decode()},
            "value": {"base64": base64.b64encode(bytes(range(256))).decode()},
            "headers": [["trace", "abc"], ["trace", "twice"]],
            "timestamp_us": 1_700_000_000_000_002,
        },
        {"key": None, "value": "line\nbreak\ttab", "headers": [], "timestamp_us": 5},
    ]
    try:
        text = "".join(json.dumps(r) + "\n" for r in records)
        res = gateway("produce", "j", "--format", "json", "--config", cfg, stdin=text)
        assert res.returncode == 0, res.stderr
        res = gateway("consume", "j", "--from-beginning", "--format", "json", "--config", cfg)
        assert res.returncode == 0, res.stderr
        got = [json.loads(line) for line in res.stdout.decode().splitlines()]
        assert got == [
            {"topic": "j", "partition": 0, "offset": i, **r} for i, r in enumerate(records)
        ]
        # and back in: the consumed objects are produce input as they are
        res = gateway("produce", "j2", "--format", "json", "--config", cfg, stdin=res.stdout)
        assert res.returncode == 0, res.stderr
        res = gateway("consume", "j2", "--from-beginning", "--format", "json", "--config", cfg)
        again = [json.loads(line) for line in res.stdout.decode().splitlines()]
        assert [{**r, "topic": "j"} for r in again] == got
    finally:
        gw.stop()


def test_topics_delete_through_the_gateway_and_directly(tmp_path: Path) -> None:
    gw = running(tmp_path / "gw")
    cfg = str(gw.config_path)
    try:
        assert gateway("topics", "create", "gone", "--config", cfg).returncode == 0
        assert gateway("topics", "create", "kept", "--config", cfg).returncode == 0
        res = gateway("topics", "delete", "gone", "--config", cfg)
        assert res.returncode == 0 and res.stdout == b"deleted gone\n"
        assert gateway("topics", "list", "--config", cfg).stdout == b"kept\t1\n"
        res = gateway("topics", "delete", "gone", "--config", cfg)
        assert res.returncode == 1 and res.stderr.startswith(b"error: ") and b"gone" in res.stderr
    finally:
        gw.stop()
    direct = tmp_path / "direct.toml"
    direct.write_text(
        write_toml(
            {
                "server": {"data_dir": str(tmp_path / "data")},
                "admin": {"enabled": False},
                "backends": {"default": {"type": "embedded"}},
            }
        )
    )
    assert gateway("topics", "create", "d", "--config", str(direct)).returncode == 0
    assert gateway("topics", "delete", "d", "--config", str(direct)).returncode == 0
    assert gateway("topics", "list", "--config", str(direct)).stdout == b""


def test_produce_shows_progress_on_a_terminal(tmp_path: Path) -> None:
    gw = running(tmp_path)
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [*GATEWAY, "produce", "p", "--config", str(gw.config_path), "--batch-records", "10"],
            stdin=subprocess.PIPE,
            stderr=slave,
            cwd=REPO_ROOT,
        )
        os.close(slave)
        proc.communicate(b"".join(b"%d\n" % i for i in range(1000)), timeout=60)
        assert proc.returncode == 0
        seen = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            seen += chunk
        text = seen.decode(errors="replace")
        assert "produce p: " in text and "records/s" in text  # the live line
        assert text.rstrip().endswith("produced 1000 record(s) to p")
    finally:
        os.close(master)
        gw.stop()
