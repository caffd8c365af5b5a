"""The serving process's allocator thresholds (gateway/allocator.py): megabyte buffers freed and
allocated again per request stop costing page faults; an operator's own settings win."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gateway.allocator import tune_allocator
from tests.support import GatewayProcess

ROOT = Path(__file__).resolve().parent.parent

# one "fetch" after another: a 1.2 MB read, a 1 MB answer, both freed before the next
CHURN = """
import resource
from gateway.allocator import tune_allocator
tuned = tune_allocator()
def fetch(i):
    read = bytes([i % 251]) * 1_200_000
    answer = read[: 1 << 20] + b"x"
    return len(answer)
for i in range(5):
    fetch(i)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):
    fetch(i)
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults() -> tuple[str, int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUN"))}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", CHURN],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    ).stdout.split()
    return out[0], int(out[1])


def test_tuned_process_reuses_large_buffers_instead_of_faulting_them_in() -> None:
    tuned, faults = _faults()
    assert tuned == "True"
    # 200 x 2.2 MB of buffers: faulting them in would take ~540 faults each time (154,600 in
    # all with glibc 2.36's defaults); reused, next to none
    assert faults < 2_000, faults


def test_operator_settings_are_left_alone(monkeypatch) -> None:
    for knob in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"):
        monkeypatch.setenv(knob, "1048576")
        assert tune_allocator() is False
        monkeypatch.delenv(knob)


def test_gateway_serve_applies_it_once_at_start(tmp_path: Path) -> None:
    for name, env, applied in (("plain", {}, True), ("knob", {"GLIBC_TUNABLES": "x=1"}, False)):
        gw = GatewayProcess(tmp_path / name, server={"log_level": "info"}, env=env)
        with gw:
            assert gw.addresses  # it listens: the start is over
        lines = [line for line in gw.log_text().splitlines() if "allocator_tuned" in line]
        assert len(lines) == 1, lines
        assert (f'"set": {str(applied).lower()}' in lines[0]) or (f"set={applied}" in lines[0])
