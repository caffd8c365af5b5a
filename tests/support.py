"""Test support: run a real gateway (subprocess or in-process) on free loopback ports.

with GatewayProcess(tmp_path, listeners={"kafka08": {}}, backend="memory") as gw:
    host, port = gw.address("kafka08")

async with serving(config) as server:      # in-process, inside a trio test
    host, port = server.addresses()["kafka08"]
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
# first on a gateway subprocess's path: no test-only packages (tests/without_test_deps/hypothesis)
WITHOUT_TEST_DEPS = Path(__file__).resolve().parent / "without_test_deps"


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def write_toml(data: Mapping[str, Any]) -> str:
    """A small TOML writer for test configs: tables, nested tables, arrays of tables."""
    lines: list[str] = []

    def table(prefix: str, body: Mapping[str, Any]) -> None:
        scalars = {
            k: v for k, v in body.items() if not isinstance(v, Mapping) and not _is_table_array(v)
        }
        subtables = {k: v for k, v in body.items() if isinstance(v, Mapping)}
        arrays = {k: v for k, v in body.items() if _is_table_array(v)}
        if prefix and (scalars or not subtables):
            lines.append(f"[{prefix}]")
        for k, v in scalars.items():
            lines.append(f"{k} = {toml_value(v)}")
        for k, v in subtables.items():
            table(f"{prefix}.{k}" if prefix else k, v)
        for k, items in arrays.items():
            for item in items:
                lines.append(f"[[{prefix + '.' if prefix else ''}{k}]]")
                for ik, iv in item.items():
                    lines.append(f"{ik} = {toml_value(iv)}")

    table("", data)
    return "\n".join(lines) + "\n"


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(i, Mapping) for i in v)


def make_config(
    tmp_path: Path,
    listeners: Mapping[str, Mapping[str, Any]] | None = None,
    backend: str = "memory",
    server: Mapping[str, Any] | None = None,
    backends: Mapping[str, Mapping[str, Any]] | None = None,
    routes: list[Mapping[str, Any]] | None = None,
    admin: bool = True,
) -> dict[str, Any]:
    """A config dict: every listener and the admin endpoint on 127.0.0.1 port 0."""
    data: dict[str, Any] = {
        "server": {"data_dir": str(tmp_path / "data"), "log_format": "json", **(server or {})},
        "admin": {"enabled": admin, "host": "127.0.0.1", "port": 0},
        "listeners": {
            name: {"host": "127.0.0.1", "port": 0, **extra}
            for name, extra in (listeners or {}).items()
        },
        "backends": dict(backends) if backends else {"default": {"type": backend}},
    }
    if routes:
        data["routes"] = routes
    return data


class GatewayProcess:
    """``python -m gateway serve`` as a subprocess with a generated config."""

    def __init__(
        self,
        tmp_path: Path,
        listeners: Mapping[str, Mapping[str, Any]] | None = None,
        backend: str = "memory",
        server: Mapping[str, Any] | None = None,
        backends: Mapping[str, Mapping[str, Any]] | None = None,
        routes: list[Mapping[str, Any]] | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "gateway",
        start_timeout: float = 30.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.extra_args = tuple(extra_args)  # more `gateway serve` options, e.g. --workers 2
        self.tmp_path = Path(tmp_path)
        self.tmp_path.mkdir(parents=True, exist_ok=True)
        self.config = make_config(self.tmp_path, listeners, backend, server, backends, routes)
        self.config_path = self.tmp_path / f"{name}.toml"
        self.log_path = self.tmp_path / f"{name}.log"
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.addresses: dict[str, tuple[str, int]] = {}

    def write_config(self) -> None:
        self.config_path.write_text(write_toml(self.config))

    def start(self) -> GatewayProcess:
        self.write_config()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        path = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(WITHOUT_TEST_DEPS), path) if p)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "gateway", "serve", "--config", str(self.config_path)),
                *self.extra_args,
            ],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=self.tmp_path,
        )
        line = self._read_listening_line()
        for part in line.split()[1:]:
            name, addr = part.split("=", 1)
            host, port = addr.rsplit(":", 1)
            self.addresses[name] = (host.strip("[]"), int(port))
        return self

    def _read_listening_line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + self.start_timeout
        buf = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
                for line in buf.decode(errors="replace").splitlines():
                    if line.startswith("listening "):
                        return line
            elif self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError(
            f"gateway did not start (exit {self.proc.returncode}); stdout={buf!r}\n"
            f"log:\n{self.log_text()[-4000:]}"
        )

    def address(self, name: str) -> tuple[str, int]:
        return self.addresses[name]

    @property
    def admin_url(self) -> str:
        host, port = self.addresses["admin"]
        return f"http://{host}:{port}"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if getattr(self, "_log", None) is not None:
            self._log.close()

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()


@asynccontextmanager
async def serving(config: Any) -> AsyncIterator[Any]:
    """Run a :class:`gateway.server.Server` in this trio run; yields it once it listens."""
    from gateway.server import Server

    server = Server(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: server.run(
                handle_signals=False, announce=False, task_status=task_status
            )
        )
        try:
            yield server
        finally:
            server.request_stop()
