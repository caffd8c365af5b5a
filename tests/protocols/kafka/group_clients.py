"""Helpers of the real-client group and admin tests: group members as subprocesses of their
own venvs (tests/protocols/kafka/clients/*_group.py) and confluent-kafka's AdminClient."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.protocols.kafka08.conftest import venv_python

CLIENTS = Path(__file__).parent / "clients"
SCRIPTS = {"confluent-kafka": "confluent_group.py", "kafka-python-3": "kafka_python_group.py"}


def admin(bootstrap: str, *ops: tuple[str, Any], timeout: float = 90) -> list[Any]:
    """Run AdminClient operations (clients/confluent_admin.py); their outcomes, in order."""
    proc = subprocess.run(
        [
            venv_python("confluent-kafka"),
            str(CLIENTS / "confluent_admin.py"),
            json.dumps({"bootstrap": bootstrap, "ops": [list(op) for op in ops]}),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"confluent_admin.py failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


class Member:
    """One group member process: its assignments and records as it reports them."""

    def __init__(self, venv: str, bootstrap: str, topic: str, group: str) -> None:
        args = {"bootstrap": bootstrap, "topic": topic, "group": group}
        self.proc = subprocess.Popen(
            [venv_python(venv), str(CLIENTS / SCRIPTS[venv]), json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict] = queue.Queue()
        self.owned: set[tuple[str, int]] | None = None
        self.got: dict[int, list[int]] = {}
        self.current: dict[int, list[int]] = {}  # got since the latest assignment
        self.done: dict | None = None
        self.committed: dict[int, int] | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def update(self, wait: float = 0.05) -> None:
        """Take in what the member reported since the last call."""
        try:
            while True:
                line = self.lines.get(timeout=wait)
                wait = 0
                if "assigned" in line:
                    self.owned = {(t, p) for t, p in line["assigned"]}
                    self.current = {}
                for p, offset in line.get("got", ()):
                    self.got.setdefault(p, []).append(offset)
                    self.current.setdefault(p, []).append(offset)
                if "commit_done" in line:
                    self.committed = {int(p): o for p, o in line["commit_done"].items()}
                if line.get("done"):
                    self.done = line
        except queue.Empty:
            pass

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def commit(self, timeout: float = 60) -> dict[int, int]:
        """Commit what the member consumed; its committed offsets (owned partitions)."""
        self.committed = None
        self.send("commit")
        wait_for([self], lambda: self.committed is not None, timeout, "a commit")
        assert self.committed is not None
        return self.committed

    def commit_until(self, offset: int, timeout: float = 60) -> None:
        """Commit again until every partition the member owns is committed at ``offset`` (it
        has read them up to there since it got them)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            owned = {p for _, p in self.owned or ()}
            if owned and self.commit() == dict.fromkeys(owned, offset):
                return
            time.sleep(0.2)
        raise AssertionError(f"not committed at {offset}: {self.committed}, {self.owned}")

    def stop(self, timeout: float = 60) -> dict:
        """Commit, leave the group and exit; the member's summary."""
        self.send("stop")
        deadline = time.monotonic() + timeout
        while self.done is None and time.monotonic() < deadline:
            self.update(0.2)
        self.proc.wait(timeout=max(1, deadline - time.monotonic()))
        assert self.done is not None, f"member did not finish: {self.stderr()}"
        return self.done

    def stderr(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read()[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def wait_for(members: list[Member], check: Any, timeout: float = 60, what: str = "") -> None:
    """Until ``check()`` holds (members' reports taken in meanwhile), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.update()
        if check():
            return
        for m in members:
            assert m.proc.poll() is None, f"a member exited: {m.stderr()}"
    states = [(m.owned, {p: len(v) for p, v in m.got.items()}) for m in members]
    logs = "\n".join(m.stderr() for m in members)
    raise AssertionError(f"timed out waiting for {what}: {states}\n{logs}")
