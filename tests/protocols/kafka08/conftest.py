"""Fixtures for the Kafka 0.8 listener tests: a running gateway, the real clients (installed by
.ci/deps/kafka08.sh), the admin metrics, and a raw-socket client built on our codec."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.protocols.kafka08 import codec as c
from tests.support import REPO_ROOT, GatewayProcess

VENVS = REPO_ROOT / ".test-venvs"
CLIENTS = Path(__file__).parent / "clients"
KCAT_08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]


def venv_python(name: str) -> str:
    python = VENVS / name / "bin" / "python"
    assert python.exists(), f"{python} missing: run .ci/deps/kafka08.sh"
    return str(python)


def run_client(venv: str, script: str, args: dict[str, Any], timeout: float = 120) -> dict:
    proc = subprocess.run(
        [venv_python(venv), str(CLIENTS / script), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def kcat(*args: str, stdin: str | None = None, timeout: float = 60) -> str:
    exe = shutil.which("kcat")
    assert exe, "kcat missing: run .ci/deps/kafka08.sh"
    proc = subprocess.run(
        [exe, *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"kcat {args} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout


def expected_records(count: int, first_offset: int = 0) -> list[list[Any]]:
    return [
        [first_offset + i, (b"key-%d" % i).hex(), (b"value-%d" % i).hex()] for i in range(count)
    ]


def metric(gw: GatewayProcess, name: str, **labels: str) -> float:
    """The value of one sample on the admin /metrics page (0 when absent)."""
    with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def protocol_errors(gw: GatewayProcess, kind: str) -> float:
    return metric(gw, "gateway_protocol_errors_total", protocol="kafka08", kind=kind)


class RawClient:
    """A blocking socket speaking Kafka 0.8 through our codec in its client role (for bad input,
    pipelining and byte-level checks; the real clients are the main tests)."""

    def __init__(self, address: tuple[str, int], timeout: float = 15) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.conn = c.ClientConnection("raw-test")

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, api_key: int, version: int, body: Any) -> None:
        self.sock.sendall(self.conn.send_request(api_key, version, body))

    def receive(self) -> Any:
        while True:
            got = self.conn.next_response()
            if got is not None:
                return got[1]
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed by the gateway")
            self.conn.receive_data(data)

    def call(self, api_key: int, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        return self.receive()

    def closed_by_peer(self) -> bool:
        """True when the gateway closes the connection (EOF or reset) without sending more."""
        try:
            data = self.sock.recv(1 << 16)
        except ConnectionResetError:
            return True
        return data == b""

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway (memory backend, kafka08 listener) shared by a test module."""
    with GatewayProcess(tmp_path_factory.mktemp("gw"), listeners={"kafka08": {}}) as gw:
        yield gw


@pytest.fixture
def raw(gateway: GatewayProcess) -> Iterator[RawClient]:
    client = RawClient(gateway.address("kafka08"))
    yield client
    client.close()
