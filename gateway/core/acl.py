"""Per-listener topic ACLs: allow/deny globs for reading and writing.

A listener with ACLs hands its sessions an :class:`AclCore` instead of the core: the same
``execute`` interface, checking each command's topic first. A denied command is logged, counted
(``gateway_acl_denied_total``) and fails with UNAUTHORIZED, or, for protocols without an
authorization error (``ProtocolSpec.authorization_error`` false: Kafka 0.8, TANK), with
UNKNOWN_TOPIC, as if the topic did not exist. Topic listings only show readable or writable topics.

Deny wins over allow; the defaults allow everything.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from gateway.core.groups import GroupCoordinator
from gateway.core.router import Router
from gateway.core.view import CoreView
from gateway.model import (
    Command,
    CommitOffset,
    CreatePartitions,
    CreateTopic,
    DeletePartitions,
    DeleteTopic,
    DescribeTopic,
    ErrorCode,
    Fetch,
    FetchOffset,
    GatewayError,
    JoinGroup,
    ListOffsets,
    ListTopics,
    Produce,
    TopicInfo,
)
from gateway.observability import ACL_DENIED

if TYPE_CHECKING:
    from gateway.core.classic import ClassicGroups
    from gateway.core.waiters import Waiters

WRITE_COMMANDS = (Produce, CreateTopic, DeleteTopic, CreatePartitions, DeletePartitions)
READ_COMMANDS = (Fetch, ListOffsets, DescribeTopic, CommitOffset, FetchOffset)

R = TypeVar("R")


def _matches(topic: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(topic, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class TopicAcl:
    read_allow: tuple[str, ...] = ("*",)
    read_deny: tuple[str, ...] = ()
    write_allow: tuple[str, ...] = ("*",)
    write_deny: tuple[str, ...] = ()

    @property
    def is_open(self) -> bool:
        return self == TopicAcl()

    def can_read(self, topic: str) -> bool:
        return _matches(topic, self.read_allow) and not _matches(topic, self.read_deny)

    def can_write(self, topic: str) -> bool:
        return _matches(topic, self.write_allow) and not _matches(topic, self.write_deny)


class AclCore:
    """The core as one listener is allowed to see it."""

    def __init__(
        self, core: CoreView, acl: TopicAcl, protocol: str, hide_denied: bool, log: Any
    ) -> None:
        self._core = core
        self.acl = acl
        self.protocol = protocol
        self._denied_code = ErrorCode.UNKNOWN_TOPIC if hide_denied else ErrorCode.UNAUTHORIZED
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)

    @property
    def groups(self) -> GroupCoordinator:
        return self._core.groups

    @property
    def classic(self) -> ClassicGroups:
        return self._core.classic

    @property
    def router(self) -> Router:
        return self._core.router

    @property
    def waiters(self) -> Waiters:
        return self._core.waiters

    def _deny(self, operation: str, topic: str) -> GatewayError:
        ACL_DENIED.labels(protocol=self.protocol, operation=operation).inc()
        self._log.warning("acl_denied", protocol=self.protocol, operation=operation, topic=topic)
        if self._denied_code is ErrorCode.UNKNOWN_TOPIC:
            return GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {topic!r}")
        return GatewayError(ErrorCode.UNAUTHORIZED, f"{operation} of topic {topic!r} not allowed")

    def check(self, command: Command[Any]) -> None:
        if isinstance(command, WRITE_COMMANDS):
            if not self.acl.can_write(command.topic):
                raise self._deny("write", command.topic)
        elif isinstance(command, READ_COMMANDS):
            if not self.acl.can_read(command.topic):
                raise self._deny("read", command.topic)
        elif isinstance(command, JoinGroup):
            for topic in command.topics:
                if not self.acl.can_read(topic):
                    raise self._deny("read", topic)

    async def execute(self, command: Command[R]) -> R:
        self.check(command)
        result = await self._core.execute(command)
        if isinstance(command, ListTopics):
            # R is list[TopicInfo] here: the checker does not narrow R with the command
            return cast(R, [t for t in cast(list[TopicInfo], result) if self._visible(t)])
        return result

    def _visible(self, info: TopicInfo) -> bool:
        return self.acl.can_read(info.name) or self.acl.can_write(info.name)

    async def topic(self, name: str, create: bool = False) -> TopicInfo:
        if not (self.acl.can_write(name) if create else self._visible(TopicInfo(name, 0))):
            raise self._deny("write" if create else "read", name)
        return await self._core.topic(name, create)
