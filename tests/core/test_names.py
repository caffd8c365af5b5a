"""Topic and group names: no empty names, no control characters, on every command that names
one, before any backend or group table sees them; the admin API answers such a group 400."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import trio

from gateway.backends.memory import MemoryBackend
from gateway.config import parse_config
from gateway.core.engine import Core
from gateway.core.names import name_problem
from gateway.model import (
    CommitOffset,
    CreateTopic,
    DescribeGroup,
    DescribeTopic,
    ErrorCode,
    Fetch,
    FetchOffset,
    GatewayError,
    JoinGroup,
    Produce,
    Record,
    RecordBatch,
)
from tests.support import make_config, serving


@pytest.mark.parametrize(
    "name, problem",
    [
        ("orders", None),
        ("ördérs-ünïcode", None),
        ("with space", None),
        ("", "empty"),
        ("a\x01b", "control character '\\x01' at position 1"),
        ("tab\there", "control character '\\t' at position 3"),
        ("del\x7f", "control character '\\x7f' at position 3"),
        ("c1\x85", "control character '\\x85' at position 2"),
        (7, "expected a string, got int"),
    ],
)
def test_name_problem(name: object, problem: str | None) -> None:
    assert name_problem(name) == problem


def make_core() -> Core:
    return Core({"a": MemoryBackend("a")}, [("*", "a")])


BAD = "g\x01"


@pytest.mark.parametrize(
    "command, code",
    [
        (JoinGroup(BAD, ("t",), "m", 30_000), ErrorCode.INVALID_REQUEST),
        (JoinGroup("g", ("t", BAD), "m", 30_000), ErrorCode.INVALID_REQUEST),
        (DescribeGroup(BAD), ErrorCode.INVALID_REQUEST),
        (DescribeGroup(""), ErrorCode.INVALID_REQUEST),
        (CommitOffset(BAD, "t", 0, 1), ErrorCode.INVALID_REQUEST),
        (FetchOffset(BAD, "t", 0), ErrorCode.INVALID_REQUEST),
        (FetchOffset("g", BAD, 0), ErrorCode.UNKNOWN_TOPIC),
        (CommitOffset("g", BAD, 0, 1), ErrorCode.UNKNOWN_TOPIC),
        (Fetch(BAD, 0, 0), ErrorCode.UNKNOWN_TOPIC),
        (DescribeTopic(BAD), ErrorCode.UNKNOWN_TOPIC),
        (DescribeTopic(BAD, create=True), ErrorCode.INVALID_TOPIC),
        (CreateTopic("", 1), ErrorCode.INVALID_TOPIC),
        (Produce(BAD, RecordBatch([Record(b"k", b"v")])), ErrorCode.INVALID_TOPIC),
    ],
)
async def test_every_command_naming_a_bad_name_is_refused(command: object, code: ErrorCode) -> None:
    core = make_core()
    await core.execute(CreateTopic("t", 1))
    with pytest.raises(GatewayError) as err:
        await core.execute(command)
    assert err.value.code is code
    assert core.groups.group_names() == [] or BAD not in core.groups.group_names()
    with pytest.raises(GatewayError) as err:
        await core.topic(BAD, create=True)
    assert err.value.code is ErrorCode.INVALID_TOPIC
    with pytest.raises(GatewayError) as err:
        await core.topic(BAD)
    assert err.value.code is ErrorCode.UNKNOWN_TOPIC


async def test_admin_answers_a_group_with_a_control_character_400(tmp_path: Path) -> None:
    cfg = parse_config(make_config(tmp_path, backend="memory"))
    async with serving(cfg) as server:
        host, port = server.addresses()["admin"]

        def get(path: str) -> tuple[int, dict[str, object]]:
            try:
                with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        status, body = await trio.to_thread.run_sync(get, "/v1/groups/a%01b")
        assert status == 400, body
        assert "group name" in json.dumps(body) and "not valid" in json.dumps(body)
        assert (await trio.to_thread.run_sync(get, "/v1/groups/fine"))[0] == 200
