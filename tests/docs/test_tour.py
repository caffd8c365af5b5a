"""The README's five-minute tour, run as written: the gateway started the way `make run` starts
it (every port moved by PORT_OFFSET so nothing clashes), then every command of the tour's
``console`` blocks, each output checked against the lines the README shows. When the tour and
the gateway drift apart, this fails."""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

README = REPO_ROOT / "README.md"
CONFIG = REPO_ROOT / "config" / "gateway.toml"
ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")


@dataclass
class Step:
    command: str
    expected: list[str]


def tour_steps(text: str) -> list[Step]:
    """The ``$ command`` lines of the tour's console blocks (with their ``\\`` continuations and
    ``<<'EOF'`` documents) and the output lines shown under each."""
    section = text.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    steps: list[Step] = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.startswith("$ "):
                assert steps, f"output before any command in the tour: {line!r}"
                steps[-1].expected.append(line)
                i += 1
                continue
            command = [line[2:]]
            if "<<'EOF'" in line:
                while lines[i] != "EOF":
                    i += 1
                    command.append(lines[i])
            else:
                while command[-1].endswith("\\"):
                    i += 1
                    command.append(lines[i])
            steps.append(Step("\n".join(command), []))
            i += 1
    return steps


def matches(expected: list[str], output: str) -> bool:
    """Every expected line (``...`` = any text; runs of blanks count as one) matches a whole
    output line, in order."""
    got = [" ".join(line.split()) for line in output.splitlines()]
    pos = 0
    for want in expected:
        if want.strip() == "...":
            continue
        pattern = ".*".join(re.escape(part) for part in " ".join(want.split()).split("..."))
        while pos < len(got) and not re.fullmatch(pattern, got[pos]):
            pos += 1
        if pos == len(got):
            return False
        pos += 1
    return True


def configured_ports() -> set[int]:
    data = tomllib.loads(CONFIG.read_text())
    ports = {data["admin"]["port"]}
    ports.update(section["port"] for section in data["listeners"].values())
    return ports


def free_offset(ports: set[int]) -> int:
    """An offset that puts every port on a free one below the ephemeral range."""
    for _ in range(200):
        offset = random.randrange(1000, 32_000 - max(ports), 7)
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + offset))
        except OSError:
            continue
        return offset
    raise AssertionError("no free set of ports found")


def test_the_tour_parser_reads_commands_and_outputs() -> None:
    steps = tour_steps(
        "## A five-minute tour\n```console\n$ a \\\n  b\nout\n$ c <<'EOF'\nx\nEOF\ny\n```\n"
    )
    assert [(s.command, s.expected) for s in steps] == [
        ("a \\\n  b", ["out"]),
        ("c <<'EOF'\nx\nEOF", ["y"]),
    ]
    assert matches(["k1 hello", "...", "done in ..."], "noise\nk1\thello\nmore\ndone in 2 s\n")
    assert not matches(["k2 world"], "k1 hello\n")


def start_like_make_run(
    tmp_path: Path, ports: set[int]
) -> tuple[subprocess.Popen, int, dict[str, str], str]:
    """The gateway started with the command `make run PORT_OFFSET=N` runs (found by a dry run,
    so nothing is installed into the shared venv); a new offset when a port was taken between
    the check and the bind. Returns the process, the offset, the environment and the
    ``listening`` line."""
    for _attempt in range(3):
        offset = free_offset(ports)
        dry = subprocess.run(
            ["make", "--no-print-directory", "-n", "run", f"PORT_OFFSET={offset}"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert dry.returncode == 0, dry.stderr
        serve = dry.stdout.strip().splitlines()[-1]
        assert serve == (
            f"GATEWAY_PORT_OFFSET={offset} .venv/bin/gateway serve --config config/gateway.toml"
        )
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO_ROOT),  # this checkout's code, whatever .venv came from
            "GATEWAY_PORT_OFFSET": str(offset),  # for the `gateway` commands of the tour
            "GATEWAY_SERVER__DATA_DIR": str(tmp_path / "data"),
        }
        log_path = tmp_path / f"gateway-{offset}.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                ["bash", "-c", f"exec env {serve}"], cwd=REPO_ROOT, env=env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 60
        while True:
            lines = log_path.read_text().splitlines()
            listening = next((line for line in lines if line.startswith("listening ")), "")
            if listening:
                return proc, offset, env, listening
            if proc.poll() is not None:
                if "cannot bind" in log_path.read_text():
                    break  # taken meanwhile by someone else: another offset
                raise AssertionError(log_path.read_text())
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("the gateway did not start in 60 s")
            time.sleep(0.2)
    raise AssertionError("no free set of ports in 3 attempts")


def test_the_readme_tour(tmp_path: Path) -> None:
    ports = configured_ports()
    proc, offset, env, listening = start_like_make_run(tmp_path, ports)
    try:
        readme = README.read_text()
        shown = next(line for line in readme.splitlines() if line.startswith("listening "))

        def moved(text: str) -> str:
            return ADDRESS.sub(
                lambda m: f"127.0.0.1:{int(m[1]) + offset if int(m[1]) in ports else m[1]}", text
            )

        assert listening == moved(shown)

        steps = tour_steps(readme)
        assert len(steps) >= 7, steps
        for step in steps:
            command = moved(step.command).replace("/tmp/", f"{tmp_path}/")
            slow = "pipeline" in command
            res = subprocess.run(
                ["bash", "-c", command],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=240 if slow else 60,
            )
            assert res.returncode == 0, f"{command}\nexit {res.returncode}:\n{res.stdout}"
            expected = [moved(line).replace("/tmp/", f"{tmp_path}/") for line in step.expected]
            assert matches(expected, res.stdout), (
                f"{command}\nexpected (in order):\n" + "\n".join(expected) + f"\ngot:\n{res.stdout}"
            )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (tmp_path / f"gateway-{offset}.log").read_text()


@pytest.mark.parametrize("name", ["kcat", "curl", "bash", "make"])
def test_the_tour_tools_are_installed(name: str) -> None:
    # the tour needs them; a machine without them fails here with the name, not mid-tour
    found = subprocess.run(["bash", "-c", f"command -v {name}"], capture_output=True, text=True)
    assert found.returncode == 0, f"{name} is not installed (.ci/deps installs it)"
