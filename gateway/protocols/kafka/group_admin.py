"""DescribeGroups v0-v5, ListGroups v0-v5, DeleteGroups v0-v2: every group the gateway knows,
whichever protocol formed it. Kafka groups (client-side assignment) are described with their
members' metadata and assignments; the groups of Cursus, Iggy or Liftbridge members have no
protocol type and show members without metadata; a group that only has committed offsets
(or a snapshot) is ``Empty``; a name the gateway never saw is ``Dead``, as Kafka answers."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode as K

from gateway.core.classic import STATE_NAMES
from gateway.core.groups import delete_group
from gateway.model import DescribeGroup, ErrorCode, GatewayError
from gateway.protocols.kafka.codec import NO_THROTTLE, build, nested, response_class
from gateway.protocols.kafka.context import KafkaContext, RequestHeader
from gateway.protocols.kafka.groups import group_error

NO_OPERATIONS = -2147483648  # authorized operations not computed


async def _describe(ctx: KafkaContext, name: str, group_cls: Any, member_cls: Any) -> Any:
    classic = ctx.core.classic.get(name)
    if classic is not None:
        members = tuple(
            build(
                member_cls,
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata(classic.protocol_name),
                member_assignment=classic.data.get(m.member_id, b""),
            )
            for m in classic.classic_members()
        )
        return build(
            group_cls,
            error_code=K.none,
            group_id=name,
            group_state=STATE_NAMES[classic.state],
            protocol_type=classic.protocol_type,
            protocol_data=classic.protocol_name,
            members=members,
            authorized_operations=NO_OPERATIONS,
        )
    desc = await ctx.core.execute(DescribeGroup(name))
    if desc.members:
        state = "Stable"
    elif name in await ctx.core.groups.known_groups():
        state = "Empty"
    else:
        state = "Dead"
    members = tuple(
        build(
            member_cls,
            member_id=m.member_id,
            group_instance_id=None,
            client_id="",
            client_host="",
            member_metadata=b"",
            member_assignment=b"",
        )
        for m in desc.members
    )
    return build(
        group_cls,
        error_code=K.none,
        group_id=name,
        group_state=state,
        protocol_type="",
        protocol_data="",
        members=members,
        authorized_operations=NO_OPERATIONS,
    )


async def describe_groups(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(15, header.api_version)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    groups = []
    for name in request.groups:
        try:
            groups.append(await _describe(ctx, name, group_cls, member_cls))
            ctx.count("describe_groups", "ok")
        except GatewayError as exc:
            code = group_error(ctx, "describe_groups", exc, group=name)
            groups.append(
                build(
                    group_cls,
                    error_code=code,
                    group_id=name,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=NO_OPERATIONS,
                )
            )
    return build(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def list_groups(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(16, header.api_version)
    listed_cls = nested(cls, "ListedGroup")
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    names = set(await ctx.core.groups.known_groups()) | set(ctx.core.classic.names())
    listed = []
    for name in sorted(names):
        classic = ctx.core.classic.get(name)
        if classic is not None:
            protocol_type, state = classic.protocol_type, STATE_NAMES[classic.state]
        else:
            protocol_type = ""
            state = "Stable" if ctx.core.groups.has_members(name) else "Empty"
        if states and state.lower() not in states or types and "classic" not in types:
            continue
        listed.append(
            build(
                listed_cls,
                group_id=name,
                protocol_type=protocol_type,
                group_state=state,
                group_type="classic",
            )
        )
    ctx.count("list_groups", "ok")
    return build(cls, throttle_time=NO_THROTTLE, error_code=K.none, groups=tuple(listed))


async def delete_groups(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(42, header.api_version)
    result_cls = nested(cls, "DeletableGroupResult")
    results = []
    for name in request.groups_names:
        try:
            if ctx.core.classic.get(name) is not None or ctx.core.groups.has_members(name):
                raise GatewayError(ErrorCode.GROUP_NOT_EMPTY, f"group {name!r} has members")
            await delete_group(ctx.core, name)
            code = K.none
            ctx.count("delete_groups", "ok")
        except GatewayError as exc:
            code = group_error(ctx, "delete_groups", exc, group=name)
        results.append(build(result_cls, group_id=name, error_code=code))
    return build(cls, throttle_time=NO_THROTTLE, results=tuple(results))
