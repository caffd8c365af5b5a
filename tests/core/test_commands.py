"""Commands are generic in their result (``Command[R]``): every command has a handler in the
core, and what ``Core.execute`` returns at run time is the ``R`` the command declares."""

from __future__ import annotations

import inspect
import typing
from dataclasses import FrozenInstanceError, is_dataclass

import pytest

from gateway import model
from gateway.backends.memory import MemoryBackend
from gateway.core.engine import Core
from gateway.model import (
    Command,
    CommitOffset,
    CreatePartitions,
    CreateTopic,
    DeletePartitions,
    DeleteTopic,
    DescribeGroup,
    DescribeTopic,
    ErrorCode,
    Fetch,
    FetchOffset,
    GatewayError,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    ListOffsets,
    ListTopics,
    Ping,
    Produce,
    Record,
    RecordBatch,
    Stats,
    SyncGroup,
)

COMMANDS = [
    c
    for c in vars(model).values()
    if inspect.isclass(c) and issubclass(c, Command) and c is not Command
]


def declared_result(kind: type) -> object:
    """The ``R`` of ``class Kind(Command[R])``, resolved in the model's namespace."""
    (base,) = kind.__orig_bases__  # type: ignore[attr-defined]
    (arg,) = typing.get_args(base)
    if isinstance(arg, typing.ForwardRef):
        return eval(arg.__forward_arg__, vars(model))
    return arg


def conforms(value: object, expected: object) -> bool:
    if expected is None or expected is type(None):
        return value is None
    origin = typing.get_origin(expected)
    if origin is list:
        (item,) = typing.get_args(expected)
        return isinstance(value, list) and all(conforms(v, item) for v in value)
    assert isinstance(expected, type), expected
    return isinstance(value, expected)


def test_every_command_is_a_frozen_slotted_dataclass_with_a_handler() -> None:
    assert Produce in COMMANDS and Ping in COMMANDS  # the scan of the model finds them
    core = Core({"a": MemoryBackend("a")}, [("*", "a")])
    for kind in COMMANDS:
        assert is_dataclass(kind) and "__slots__" in vars(kind), kind
        assert kind in core._handlers, f"{kind.__name__} has no handler in Core"
        assert declared_result(kind) is not typing.Any, kind


async def test_execute_returns_what_each_command_declares() -> None:
    core = Core({"a": MemoryBackend("a")}, [("*", "a")])
    batch = RecordBatch([Record(b"k", b"v", (), 1000)])
    join = JoinGroup("g", ("t",))
    script: list[Command[typing.Any]] = [
        CreateTopic("t", 1),
        CreateTopic("gone", 1),
        ListTopics(),
        DescribeTopic("t"),
        CreatePartitions("t", 2),
        DeletePartitions("t", 1),
        Produce("t", batch, partition=0),
        Fetch("t", 0, 0),
        ListOffsets("t", 0),
        CommitOffset("g", "t", 0, 1),
        FetchOffset("g", "t", 0),
        join,
        DescribeGroup("g"),
        Stats(),
        Ping(),
        DeleteTopic("gone"),
    ]
    seen: set[type] = set()
    member = ""
    for cmd in script:
        result = await core.execute(cmd)
        assert conforms(result, declared_result(type(cmd))), (cmd, result)
        seen.add(type(cmd))
        if cmd is join:
            member = result.member_id
            generation = result.generation
    for cmd in (
        SyncGroup("g", member, generation),
        Heartbeat("g", member, generation),
        LeaveGroup("g", member),
    ):
        result = await core.execute(cmd)
        assert conforms(result, declared_result(type(cmd))), (cmd, result)
        seen.add(type(cmd))
    assert seen == set(COMMANDS)


async def test_a_command_type_without_a_handler_is_an_invalid_request() -> None:
    core = Core({"a": MemoryBackend("a")}, [("*", "a")])

    class Unknown(Command[int]):
        __slots__ = ()

    with pytest.raises(GatewayError) as info:
        await core.execute(Unknown())
    assert info.value.code is ErrorCode.INVALID_REQUEST


def test_commands_stay_frozen_and_without_an_instance_dict() -> None:
    cmd = Produce("t", RecordBatch([]), partition=0)
    assert not hasattr(cmd, "__dict__")
    with pytest.raises(FrozenInstanceError):
        cmd.topic = "u"  # type: ignore[misc]
