"""The type checker sees what ``Core.execute`` answers: mypy on a small client of the core infers
each command's result type, and refuses a handler row whose command or result does not match."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mypy import api

REPO = Path(__file__).resolve().parents[2]

CLIENT = """
from typing import assert_type

from gateway.core.engine import Core
from gateway.model import (
    DeleteTopic, Fetch, FetchResult, JoinGroup, JoinGroupResult, ListTopics, Ping, Produce,
    ProduceResult, RecordBatch, TopicInfo,
)


async def client(core: Core) -> None:
    assert_type(await core.execute(Produce("t", RecordBatch([]))), ProduceResult)
    assert_type(await core.execute(Fetch("t", 0, 0)), FetchResult)
    assert_type(await core.execute(ListTopics()), list[TopicInfo])
    assert_type(await core.execute(JoinGroup("g", ("t",))), JoinGroupResult)
    assert_type(await core.execute(DeleteTopic("t")), None)
    assert_type(await core.execute(Ping()), float)
"""

WRONG_ROWS = """
from gateway.core.engine import Core
from gateway.model import CreatePartitions, Fetch, Ping


def rows(core: Core) -> None:
    Fetch.handled_by(core.produce)  # wrong command type and result
    CreatePartitions.handled_by(core._create_topic)  # same result, wrong command type
    Ping.handled_by(core._stats)  # wrong result
"""


def mypy(tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, int]:
    path = tmp_path / "client.py"
    path.write_text(textwrap.dedent(source))
    monkeypatch.setenv("MYPYPATH", str(REPO))  # this checkout's gateway/, not an installed one
    out, err, status = api.run(
        [
            f"--config-file={REPO / 'pyproject.toml'}",
            "--python-version=3.11",
            "--follow-imports=silent",
            f"--cache-dir={tmp_path / 'cache'}",
            "--no-error-summary",
            str(path),
        ]
    )
    return out + err, status


def test_execute_is_typed_by_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, status = mypy(tmp_path, CLIENT, monkeypatch)
    assert status == 0, out


def test_a_mismatched_handler_row_is_a_type_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, status = mypy(tmp_path, WRONG_ROWS, monkeypatch)
    assert status == 1, out
    lines = [line for line in out.splitlines() if "error:" in line]
    assert [line.split(":")[1] for line in lines] == ["7", "8", "9"], out
    assert all('"handled_by"' in line for line in lines), out
