"""Harness for the hostile-client tests: one attack against a real gateway process while a
well-behaved client on another listener keeps getting answers.

    with GatewayProcess(tmp_path, listeners={...}) as gw:
        baseline = Footprint.of(gw)
        with Bystander(gw) as bystander:          # GET /healthz on the admin port, in a thread
            run_attack(gw)
        bystander.check()                          # every probe answered within the deadline
        Footprint.of(gw).check_within(baseline)    # RSS and open files bounded, still running

The bystander probes the admin port's ``/healthz``, which shares the event loop with every
listener: a frozen loop fails it as surely as a frozen listener would.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
from dataclasses import dataclass, field

from tests.support import GatewayProcess

RSS_BOUND_BYTES = 300 * 1024 * 1024  # "300 MB above its idle size"
PROBE_DEADLINE_S = 5.0  # generous: a healthy gateway answers in milliseconds


def _status_field(pid: int, name: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    raise LookupError(name)


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _soft_nofile(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise LookupError("Max open files")


@dataclass(frozen=True)
class Footprint:
    """What the gateway process holds at one moment."""

    pid: int
    rss: int
    peak_rss: int
    open_files: int
    file_limit: int

    @classmethod
    def of(cls, gw: GatewayProcess) -> Footprint:
        assert gw.proc is not None and gw.proc.poll() is None, "the gateway is not running"
        pid = gw.proc.pid
        return cls(
            pid=pid,
            rss=_status_field(pid, "VmRSS"),
            peak_rss=_status_field(pid, "VmHWM"),
            open_files=_open_files(pid),
            file_limit=_soft_nofile(pid),
        )

    def check_within(self, baseline: Footprint, rss_bound: int = RSS_BOUND_BYTES) -> None:
        """The process still runs, its peak RSS stayed under baseline + bound, files under the limit."""
        assert self.pid == baseline.pid
        grown = self.peak_rss - baseline.rss
        assert grown < rss_bound, (
            f"peak RSS grew by {grown / 2**20:.0f} MiB (bound {rss_bound >> 20})"
        )
        assert self.open_files < self.file_limit, (self.open_files, self.file_limit)


@dataclass
class Bystander:
    """A well-behaved client: ``GET /healthz`` on the admin port every ``interval_s``."""

    gw: GatewayProcess
    interval_s: float = 0.1
    deadline_s: float = PROBE_DEADLINE_S
    path: str = "/healthz"
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _probe(self) -> None:
        host, port = self.gw.address("admin")
        started = time.monotonic()
        try:
            conn = http.client.HTTPConnection(host, port, timeout=self.deadline_s)
            conn.request("GET", self.path)
            status = conn.getresponse().status
            conn.close()
        except OSError as exc:
            self.failures.append(f"{type(exc).__name__}: {exc}")
            return
        took = time.monotonic() - started
        self.latencies.append(took)
        if status != 200:
            self.failures.append(f"status {status}")
        elif took > self.deadline_s:
            self.failures.append(f"answered after {took:.2f} s")

    def _run(self) -> None:
        while not self._stop.is_set():
            self._probe()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Bystander:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def check(self) -> None:
        assert self.latencies, "the bystander got no answer at all"
        assert not self.failures, self.failures[:5]
