"""iggy-py 0.4.0 (the real SDK, Rust crate 0.6.202) against a running gateway."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support import REPO_ROOT, GatewayProcess

PYTHON = REPO_ROOT / ".test-venvs" / "iggy-py" / "bin" / "python"
DRIVER = Path(__file__).with_name("iggy_py_driver.py")
USERS = [{"username": "iggy", "password": "iggy"}]


def drive(addr: tuple[str, int], scenario: str) -> dict:
    proc = subprocess.run(
        [str(PYTHON), str(DRIVER), f"{addr[0]}:{addr[1]}", scenario],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_iggy_py_end_to_end(tmp_path: Path) -> None:
    with GatewayProcess(tmp_path, listeners={"iggy": {"users": USERS}}) as gw:
        addr = gw.address("iggy")
        out = drive(addr, "setup")
        assert out["stream"] == [1, "s1", 1, 0]
        assert out["topic"] == [1, "t1", 0]
        first = out["first"]
        assert [m["payload"] for m in first] == ["m0", "m1"]
        assert [m["offset"] for m in first] == [0, 1]
        for m in first:
            assert m["state"] == "MessageState.Available"
            assert m["id"] != 0  # id 0 is replaced by a server-assigned id
            assert m["timestamp"] > 1_600_000_000_000_000  # microseconds
            assert m["length"] == 2
        assert [m["payload"] for m in out["offset"]] == ["m3", "m4"]
        assert [m["offset"] for m in out["last"]] == [3, 4]
        assert [m["payload"] for m in out["timestamp"]] == ["other"]
        # ids and timestamps are stored, not invented per poll
        assert out["next"][:2] == first
        assert [m["payload"] for m in out["next"]] == ["m0", "m1", "m2"]
        assert "StreamIdNotFound" in out["missing_stream"]
        # Next with auto-commit resumes after the stored offset in a second and third run
        assert [m["payload"] for m in drive(addr, "next")["next"]] == ["m3", "m4"]
        assert drive(addr, "next")["next"] == []
        log = gw.log_text()
        assert '"event": "iggy_login"' in log
        assert "status_1009" in log


def test_iggy_py_wrong_password_is_refused(tmp_path: Path) -> None:
    users = [{"username": "iggy", "password": "other"}]
    with GatewayProcess(tmp_path, listeners={"iggy": {"users": users}}) as gw:
        proc = subprocess.run(
            [str(PYTHON), str(DRIVER), "{}:{}".format(*gw.address("iggy")), "next"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert proc.returncode != 0
        assert "status_42" in gw.log_text()
