"""The classic consumer-group APIs: FindCoordinator v1-v5, JoinGroup v0-v9, SyncGroup v0-v5,
Heartbeat v0-v4, LeaveGroup v0-v5.

The gateway is its own coordinator (FindCoordinator names this listener, for every group of a
batched v4+ request; a transaction key gets INVALID_REQUEST: there are no transactions here).
Membership is the core's client-assigned group model (:mod:`gateway.core.classic`): the leader
gets the members' metadata and sends the assignment, which the gateway keeps opaque, reading
consumer-protocol subscriptions and assignments only to know the topics (ACLs) and to show the
assignment in ``gateway groups``.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

import trio
from kio.schema.errors import ErrorCode as K
from kio.serial import entity_reader

from gateway.model import (
    ErrorCode,
    GatewayError,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    MemberIdRequired,
    SyncGroup,
)
from gateway.observability import protocol_error
from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import PROTOCOL, KafkaContext, RequestHeader

CONSUMER = "consumer"
GROUP_KEY = 0  # FindCoordinator key type of a group (1: a transaction)
MIN_SESSION_TIMEOUT_MS = 6_000
MAX_SESSION_TIMEOUT_MS = 1_800_000
"""Kafka's ``group.min.session.timeout.ms`` and ``group.max.session.timeout.ms`` defaults."""

GROUP_ERRORS: dict[ErrorCode, K] = {
    ErrorCode.GROUP_NOT_EMPTY: K.non_empty_group,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: K.inconsistent_group_protocol,
    ErrorCode.MEMBER_ID_REQUIRED: K.member_id_required,
    ErrorCode.FENCED_INSTANCE_ID: K.fenced_instance_id,
    ErrorCode.UNKNOWN_GROUP: K.group_id_not_found,
}


def group_error(ctx: KafkaContext, api: str, exc: GatewayError, **fields: Any) -> K:
    """The Kafka error of a failed group operation, counted (and logged when the client is
    at fault)."""
    if exc.code is ErrorCode.INVALID_REQUEST and "max_group_members" in exc.message:
        code = K.group_max_size_reached  # the budget's hit is counted (and logged) already
    elif exc.code is ErrorCode.INVALID_REQUEST and "max_kafka_groups" in exc.message:
        code = K.invalid_request  # likewise; Kafka has no code for it
    else:
        code = GROUP_ERRORS.get(exc.code)  # type: ignore[assignment]
    if code is None:
        return K(ctx.error(api, exc, **fields))
    if exc.code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL:
        protocol_error(ctx.log, PROTOCOL, exc.code.value, error=exc.message, **fields)
    ctx.count(api, str(int(code)))
    return code


async def unless_draining(ctx: KafkaContext, command: Any) -> Any:
    """``ctx.core.execute(command)`` for a call that may wait (a JoinGroup for the round, a
    follower's SyncGroup for the leader): when the gateway drains meanwhile, NOT_COORDINATOR,
    so the member looks for its coordinator again instead of holding the drain up."""
    shutdown = ctx.conn.shutdown
    if shutdown.is_set():
        raise GatewayError(ErrorCode.NOT_COORDINATOR, "the gateway is shutting down")
    result: list[Any] = []
    failed: list[GatewayError] = []
    async with trio.open_nursery() as nursery:

        async def call() -> None:
            try:
                result.append(await ctx.core.execute(command))
            except GatewayError as exc:  # the answer, not a crash of the nursery
                failed.append(exc)
            nursery.cancel_scope.cancel()

        async def drain() -> None:
            await shutdown.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(call)
        nursery.start_soon(drain)
    if failed:
        raise failed[0]
    if not result:
        raise GatewayError(ErrorCode.NOT_COORDINATOR, "the gateway is shutting down")
    return result[0]


def ms(value: Any) -> int:
    """Milliseconds of a kio duration field (a timedelta) or a plain number."""
    if hasattr(value, "total_seconds"):
        return int(value.total_seconds() * 1000)
    return int(value)


# ---------------------------------------------------------------------------- consumer protocol


@cache
def _data_reader(kind: str, version: int) -> Any:
    module = __import__(f"kio.schema.consumer_protocol_{kind}.v{version}", fromlist=["x"])
    cls = getattr(module, f"ConsumerProtocol{kind.title()}")
    return entity_reader(cls)


def _read_data(kind: str, data: bytes) -> Any:
    """A consumer-protocol subscription or assignment: a version (int16) and its fields; a
    newer version than kio knows is read as v3 (later versions only append fields)."""
    (version,) = struct.unpack_from(">h", data, 0)
    entity, _ = _data_reader(kind, min(max(version, 0), 3))(data, 2)
    return entity


def subscribed_topics(
    protocol_type: str, protocols: tuple[tuple[str, bytes], ...]
) -> tuple[str, ...]:
    """The topics a consumer's subscription names (empty for other protocol types or what
    does not parse: the metadata stays opaque to the coordinator)."""
    if protocol_type != CONSUMER or not protocols:
        return ()
    try:
        return tuple(sorted(set(_read_data("subscription", protocols[0][1]).topics)))
    except Exception:
        return ()


def assigned_partitions(protocol_type: str, data: bytes) -> tuple[tuple[str, int], ...]:
    if protocol_type != CONSUMER or not data:
        return ()
    try:
        entity = _read_data("assignment", data)
    except Exception:
        return ()
    return tuple(
        sorted((t.topic, int(p)) for t in entity.assigned_partitions for p in t.partitions)
    )


# ---------------------------------------------------------------------------- FindCoordinator


async def find_coordinator(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(10, header.api_version)
    key_type = request.key_type if header.api_version >= 1 else 0
    # groups only: the listener serves no transactions (nor share groups) to coordinate
    served = key_type == GROUP_KEY
    code = K.none if served else K.invalid_request
    message = None if served else f"key type {key_type}: no such coordinator here"
    ctx.count("find_coordinator", "ok" if served else str(int(code)))
    if header.api_version >= 4:
        coord_cls = nested(cls, "Coordinator")
        coordinators = tuple(
            build(
                coord_cls,
                key=key,
                node_id=ctx.node_id if served else -1,
                host=ctx.host if served else "",
                port=ctx.port if served else -1,
                error_code=code,
                error_message=message,
            )
            for key in request.coordinator_keys
        )
        return build(cls, throttle_time=NO_THROTTLE, coordinators=coordinators)
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=code,
        error_message=message,
        node_id=ctx.node_id if served else -1,
        host=ctx.host if served else "",
        port=ctx.port if served else -1,
    )


# ---------------------------------------------------------------------------- JoinGroup


async def join_group(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    version = header.api_version
    cls = response_class(11, version)
    member_cls = nested(cls, "JoinGroupResponseMember")
    session_ms = ms(request.session_timeout)
    rebalance_ms = ms(getattr(request, "rebalance_timeout", session_ms)) if version >= 1 else 0
    protocols = tuple((p.name, bytes(p.metadata)) for p in request.protocols)
    instance_id = getattr(request, "group_instance_id", None)

    def answer(code: K, member_id: str = "", **fields: Any) -> Any:
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            generation_id=fields.get("generation", -1),
            protocol_type=request.protocol_type if code is K.none else None,
            protocol_name=fields.get("protocol", "" if version < 7 else None),
            leader=fields.get("leader", ""),
            skip_assignment=False,
            member_id=member_id,
            members=fields.get("members", ()),
        )

    if not request.group_id:
        ctx.count("join_group", str(int(K.invalid_group_id)))
        return answer(K.invalid_group_id, request.member_id)
    if not MIN_SESSION_TIMEOUT_MS <= session_ms <= MAX_SESSION_TIMEOUT_MS:
        protocol_error(
            ctx.log, PROTOCOL, "invalid_session_timeout", group=request.group_id, ms=session_ms
        )
        ctx.count("join_group", str(int(K.invalid_session_timeout)))
        return answer(K.invalid_session_timeout, request.member_id)
    cmd = JoinGroup(
        request.group_id,
        subscribed_topics(request.protocol_type, protocols),
        request.member_id,
        session_ms,
        protocols=protocols,
        protocol_type=request.protocol_type,
        instance_id=instance_id,
        rebalance_timeout_ms=rebalance_ms,
        require_member_id=version >= 4,
        client_id=header.client_id or "",
        client_host=ctx.peer.rsplit(":", 1)[0],
    )
    try:
        joined = await unless_draining(ctx, cmd)
    except MemberIdRequired as exc:
        ctx.count("join_group", str(int(K.member_id_required)))
        return answer(K.member_id_required, exc.member_id)
    except GatewayError as exc:
        code = group_error(ctx, "join_group", exc, group=request.group_id)
        return answer(code, request.member_id)
    ctx.count("join_group", "ok")
    members = tuple(
        build(member_cls, member_id=mid, group_instance_id=iid, metadata=data)
        for mid, iid, data in joined.member_metadata
    )
    return answer(
        K.none,
        joined.member_id,
        generation=joined.generation,
        protocol=joined.protocol,
        leader=joined.leader_id,
        members=members,
    )


# ---------------------------------------------------------------------------- SyncGroup


async def sync_group(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(14, header.api_version)
    protocol_type = getattr(request, "protocol_type", None)
    group = ctx.core.classic.groups.get(request.group_id)
    kind = protocol_type or (group.protocol_type if group is not None else CONSUMER)
    assignments = tuple(
        (a.member_id, bytes(a.assignment), assigned_partitions(kind, bytes(a.assignment)))
        for a in request.assignments
    )
    cmd = SyncGroup(
        request.group_id,
        request.member_id,
        request.generation_id,
        assignments,
        getattr(request, "group_instance_id", None),
    )
    try:
        synced = await unless_draining(ctx, cmd)
    except GatewayError as exc:
        code = group_error(ctx, "sync_group", exc, group=request.group_id)
        return build(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            protocol_type=None,
            protocol_name=None,
            assignment=b"",
        )
    ctx.count("sync_group", "ok")
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=K.none,
        protocol_type=kind,
        protocol_name=synced.protocol,
        assignment=synced.data,
    )


# ---------------------------------------------------------------------------- Heartbeat


async def heartbeat(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(12, header.api_version)
    cmd = Heartbeat(
        request.group_id,
        request.member_id,
        request.generation_id,
        getattr(request, "group_instance_id", None),
    )
    try:
        await ctx.core.execute(cmd)
    except GatewayError as exc:
        code = group_error(ctx, "heartbeat", exc, group=request.group_id)
        return build(cls, throttle_time=NO_THROTTLE, error_code=code)
    ctx.count("heartbeat", "ok")
    return build(cls, throttle_time=NO_THROTTLE, error_code=K.none)


# ---------------------------------------------------------------------------- LeaveGroup


async def leave_group(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(13, header.api_version)
    if header.api_version < 3:
        try:
            await ctx.core.execute(LeaveGroup(request.group_id, request.member_id))
        except GatewayError as exc:
            code = group_error(ctx, "leave_group", exc, group=request.group_id)
            return build(cls, throttle_time=NO_THROTTLE, error_code=code)
        ctx.count("leave_group", "ok")
        return build(cls, throttle_time=NO_THROTTLE, error_code=K.none)
    member_cls = nested(cls, "MemberResponse")
    members = []
    for m in request.members:
        try:
            await ctx.core.execute(LeaveGroup(request.group_id, m.member_id, m.group_instance_id))
            code = K.none
            ctx.count("leave_group", "ok")
        except GatewayError as exc:
            code = group_error(ctx, "leave_group", exc, group=request.group_id)
        members.append(
            build(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=code,
            )
        )
    return build(cls, throttle_time=NO_THROTTLE, error_code=K.none, members=tuple(members))
