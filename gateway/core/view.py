"""The core as its callers see it: :class:`gateway.core.engine.Core` itself, or a listener's
:class:`gateway.core.acl.AclCore` in front of it. Sessions, the admin API and the group tools
take a :class:`CoreView`, so they type-check against either."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

from gateway.model import Command, TopicInfo

if TYPE_CHECKING:  # the engine imports the group coordinator, which takes a CoreView
    from gateway.core.classic import ClassicGroups
    from gateway.core.groups import GroupCoordinator
    from gateway.core.router import Router
    from gateway.core.waiters import Waiters

R = TypeVar("R")


class CoreView(Protocol):
    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def classic(self) -> ClassicGroups:
        """Kafka's classic groups (client-side assignment), beside the gateway's groups."""
        ...

    @property
    def router(self) -> Router: ...

    @property
    def waiters(self) -> Waiters:
        """The long-poll waits on new records (a protocol wakes them when a partition's
        state changes without a record, e.g. made read-only)."""
        ...

    async def execute(self, command: Command[R]) -> R:
        """The command's result, or a GatewayError."""
        ...

    async def topic(self, name: str, create: bool = False) -> TopicInfo:
        """The topic, created first when ``create`` and the server auto-creates topics."""
        ...
