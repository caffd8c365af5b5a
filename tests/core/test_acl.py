"""Topic ACLs on the command path and the topic/partition count limits."""

from __future__ import annotations

import pytest
import structlog

from gateway.backends.memory import MemoryBackend
from gateway.core.acl import AclCore, TopicAcl
from gateway.core.engine import Core
from gateway.model import (
    CreatePartitions,
    CreateTopic,
    ErrorCode,
    Fetch,
    GatewayError,
    JoinGroup,
    ListTopics,
    Produce,
    Record,
    RecordBatch,
)

ACL = TopicAcl(
    read_allow=("public.*", "shared"),
    read_deny=("public.secret",),
    write_allow=("shared",),
)


async def make() -> tuple[Core, AclCore, AclCore]:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    for name in ("public.a", "public.secret", "shared", "private"):
        await core.execute(CreateTopic(name, 1))
    log = structlog.get_logger()
    return core, AclCore(core, ACL, "iggy", False, log), AclCore(core, ACL, "kafka08", True, log)


async def expect(view: AclCore, command, code: ErrorCode) -> None:
    with pytest.raises(GatewayError) as info:
        await view.execute(command)
    assert info.value.code is code


def batch() -> RecordBatch:
    return RecordBatch([Record(None, b"v", (), 1)])


async def test_reads_and_writes_follow_allow_and_deny_globs() -> None:
    core, view, _ = await make()
    await view.execute(Fetch("public.a", 0, 0))
    await view.execute(Produce("shared", batch(), partition=0))
    await view.execute(Fetch("shared", 0, 0))
    await expect(view, Fetch("public.secret", 0, 0), ErrorCode.UNAUTHORIZED)  # deny wins
    await expect(view, Fetch("private", 0, 0), ErrorCode.UNAUTHORIZED)
    await expect(view, Produce("public.a", batch(), partition=0), ErrorCode.UNAUTHORIZED)
    await expect(view, CreateTopic("public.new", 1), ErrorCode.UNAUTHORIZED)
    await expect(view, JoinGroup("g", ("shared", "private")), ErrorCode.UNAUTHORIZED)
    names = [t.name for t in await view.execute(ListTopics())]
    assert names == ["public.a", "shared"]
    assert len(await core.execute(ListTopics())) == 4  # the core itself is unrestricted


async def test_protocols_without_an_authorization_error_see_unknown_topic() -> None:
    _, _, hidden = await make()
    await expect(hidden, Fetch("private", 0, 0), ErrorCode.UNKNOWN_TOPIC)
    await expect(hidden, Produce("public.a", batch(), partition=0), ErrorCode.UNKNOWN_TOPIC)
    with pytest.raises(GatewayError) as info:
        await hidden.topic("private")
    assert info.value.code is ErrorCode.UNKNOWN_TOPIC


async def test_topic_and_partition_limits() -> None:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")], max_topics=2, max_partitions_per_topic=4)
    await core.execute(CreateTopic("a", 4))
    await expect(core, CreateTopic("b", 5), ErrorCode.INVALID_PARTITIONS)
    await expect(core, CreatePartitions("a", 1), ErrorCode.INVALID_PARTITIONS)
    await core.execute(CreateTopic("b", 1))
    await expect(core, CreateTopic("c", 1), ErrorCode.INVALID_REQUEST)
    with pytest.raises(GatewayError, match="max_topics"):
        await core.topic("auto", create=True)
