"""Fixtures for the modern Kafka listener tests: the real clients (installed by
.ci/deps/kafka08.sh) as subprocesses against gateways started with tests.support."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.protocols.kafka08.conftest import kcat, metric, venv_python  # noqa: F401

CLIENTS = Path(__file__).parent / "clients"
BASE_TS = 1_700_000_000_000  # the confluent client script's first timestamp


def confluent(args: dict[str, Any], timeout: float = 120) -> dict[str, Any]:
    """Run clients/confluent_modern.py with ``args``; its JSON answer."""
    proc = subprocess.run(
        [venv_python("confluent-kafka"), str(CLIENTS / "confluent_modern.py"), json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"confluent_modern.py failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def expected(count: int, first_offset: int = 0) -> list[list[Any]]:
    """What confluent_modern.py reads back after producing ``count`` records."""
    return [
        [
            first_offset + i,
            f"key-{i}",
            f"value-{i} " + "x" * (i % 50),
            [["h1", f"one-{i}"], ["h2", ""]],
            BASE_TS + i,
        ]
        for i in range(count)
    ]
