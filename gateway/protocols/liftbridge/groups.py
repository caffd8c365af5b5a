"""The consumer-group RPCs of the Liftbridge API, on the core's group coordinator: the
epoch of a group is its generation - 1 (a new group's epoch is 0, as on the reference server;
every join or leave moves it on here). One broker, so this gateway is every group's
coordinator."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from gateway.model import Command, DescribeGroup, JoinGroup, LeaveGroup, SyncGroup, TopicInfo
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.codec import Status
from gateway.protocols.liftbridge.statuses import RpcError, text

R = TypeVar("R")

CONSUMER_TIMEOUT_NS = 15_000_000_000
COORDINATOR_TIMEOUT_NS = 15_000_000_000


class GroupRpcs:
    """The consumer-group methods of :class:`~gateway.protocols.liftbridge.service.Service`
    (a mixin: it uses the service's ``_execute``, ``_stream`` and ``broker_id``)."""

    broker_id: str
    _stream: Callable[..., Awaitable[TopicInfo]]

    if TYPE_CHECKING:  # the service's

        async def _execute(self, command: Command[R]) -> R: ...

    async def JoinConsumerGroup(
        self, req: pb.JoinConsumerGroupRequest
    ) -> pb.JoinConsumerGroupResponse:
        self._check_member(req)
        if not req.streams:
            raise RpcError(Status.INVALID_ARGUMENT, text("no_streams"))
        for name in req.streams:
            await self._stream(
                name, text("stream_does_not_exist"), status=Status.FAILED_PRECONDITION
            )
        result = await self._execute(
            JoinGroup(
                req.groupId,
                tuple(req.streams),
                req.consumerId,
                session_timeout_ms=CONSUMER_TIMEOUT_NS // 1_000_000,
                create_member=True,
            )
        )
        return pb.JoinConsumerGroupResponse(
            coordinator=self.broker_id,
            epoch=group_epoch(result.generation),
            consumerTimeout=CONSUMER_TIMEOUT_NS,
            coordinatorTimeout=COORDINATOR_TIMEOUT_NS,
        )

    @staticmethod
    def _check_member(req: Any) -> None:
        if not req.groupId:
            raise RpcError(Status.INVALID_ARGUMENT, text("no_group_id"))
        if not req.consumerId:
            raise RpcError(Status.INVALID_ARGUMENT, text("no_consumer"))

    async def _group_generation(self, group: str, consumer: str, epoch: int | None = None) -> int:
        """The group's generation (its epoch here), checked as the reference server does:
        unknown group, then (for ``epoch``) an epoch ahead of the group's, then membership."""
        desc = await self._execute(DescribeGroup(group))
        if not desc.members:
            raise RpcError(Status.NOT_FOUND, text("group_not_found"))
        if epoch is not None and epoch > group_epoch(desc.generation):
            raise RpcError(Status.FAILED_PRECONDITION, text("group_epoch"))
        if not any(m.member_id == consumer for m in desc.members):
            raise RpcError(Status.FAILED_PRECONDITION, text("not_member"))
        return desc.generation

    async def LeaveConsumerGroup(
        self, req: pb.LeaveConsumerGroupRequest
    ) -> pb.LeaveConsumerGroupResponse:
        self._check_member(req)
        await self._group_generation(req.groupId, req.consumerId)
        await self._execute(LeaveGroup(req.groupId, req.consumerId))
        return pb.LeaveConsumerGroupResponse()

    async def FetchConsumerGroupAssignments(
        self, req: pb.FetchConsumerGroupAssignmentsRequest
    ) -> pb.FetchConsumerGroupAssignmentsResponse:
        self._check_member(req)
        generation = await self._group_generation(req.groupId, req.consumerId, req.epoch)
        result = await self._execute(SyncGroup(req.groupId, req.consumerId, generation))
        by_stream: dict[str, list[int]] = {}
        for topic, partition in result.assignment.partitions:
            by_stream.setdefault(topic, []).append(partition)
        return pb.FetchConsumerGroupAssignmentsResponse(
            epoch=group_epoch(generation),
            assignments=[
                pb.PartitionAssignment(stream=s, partitions=sorted(ps))
                for s, ps in sorted(by_stream.items())
            ],
        )

    async def ReportConsumerGroupCoordinator(
        self, req: pb.ReportConsumerGroupCoordinatorRequest
    ) -> pb.ReportConsumerGroupCoordinatorResponse:
        self._check_member(req)
        if not req.coordinator:
            raise RpcError(Status.INVALID_ARGUMENT, text("no_coordinator"))
        # One broker: the coordinator cannot be replaced; acknowledging is all there is to do,
        # after the reference server's checks (all FAILED_PRECONDITION here)
        desc = await self._execute(DescribeGroup(req.groupId))
        if not desc.members:
            raise RpcError(Status.FAILED_PRECONDITION, text("report_no_group", group=req.groupId))
        if req.coordinator != self.broker_id or req.epoch != group_epoch(desc.generation):
            raise RpcError(
                Status.FAILED_PRECONDITION,
                text(
                    "report_coordinator",
                    coordinator=self.broker_id,
                    epoch=group_epoch(desc.generation),
                    got=req.coordinator,
                    got_epoch=req.epoch,
                ),
            )
        if not any(m.member_id == req.consumerId for m in desc.members):
            raise RpcError(
                Status.FAILED_PRECONDITION,
                text("report_not_member", consumer=req.consumerId, group=req.groupId),
            )
        return pb.ReportConsumerGroupCoordinatorResponse()


def group_epoch(generation: int) -> int:
    """A group's Liftbridge epoch from the core's generation (1 after the first join)."""
    return max(0, generation - 1)
