"""Consumer groups on the Kafka cluster's own group coordinator.

Every gateway on one cluster must see one group ``g``, so the cluster runs it: each gateway
process that has local members of ``g`` (Cursus, Iggy, Liftbridge connections) is *one* Kafka
member of the cluster's group ``g`` (protocol type ``consumer``, assignor ``gateway``; the bytes
are in ``group_codec.py``). Its JoinGroup metadata lists its local members and their topics;
the Kafka leader (one of the gateways) assigns the partitions over every gateway's local members
(range) and sends each gateway an assignment carrying the whole group, so the members, the
assignment and the generation (Kafka's) are the same on every gateway.

Kafka's JoinGroup blocks until every member of the group has joined again, so a local join or
leave is not answered at once: it marks the membership for a new round, the group's task (one per
group, in the backend's nursery) runs JoinGroup + SyncGroup on a connection of its own (a blocking
JoinGroup must not hold up produces and fetches to that broker), and the local join is answered
when the round ends. Between rounds the task heartbeats every ``group_heartbeat_ms``; a
heartbeat answered REBALANCE_IN_PROGRESS (another gateway's member joined or left) starts a round
here too, and the local members' heartbeats answer REBALANCE_IN_PROGRESS meanwhile, so they join
again and get the new generation. The task also expires local members whose session timed out,
and leaves the cluster's group (LeaveGroup) when the last local member has gone.

Committed offsets of a group this gateway is a member of carry its Kafka member id and
generation (``membership``): Kafka refuses a plain commit to a group with members.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import structlog
import trio
from kio.schema.describe_groups.v2 import request as dg_req
from kio.schema.errors import ErrorCode as KErr
from kio.schema.heartbeat.v2 import request as hb_req
from kio.schema.join_group.v3 import request as jg_req
from kio.schema.leave_group.v2 import request as lg_req
from kio.schema.sync_group.v2 import request as sg_req
from kio.schema.types import GroupId
from kio.static.primitive import i32
from prometheus_client import Gauge

from gateway.backends.kafka.cluster import KafkaCluster, kafka_error, ms
from gateway.backends.kafka.connection import BrokerConnection
from gateway.backends.kafka.group_codec import (
    ASSIGNOR,
    PROTOCOL_TYPE,
    GroupCodecError,
    GroupView,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from gateway.model import (
    ErrorCode,
    GatewayError,
    GroupDescription,
    JoinGroupResult,
    MemberAssignment,
    SyncGroupResult,
)
from gateway.observability import REBALANCES, REGISTRY, limit_hit

log = structlog.get_logger("gateway.backends.kafka.groups")

CLUSTER_GROUPS = Gauge(
    "gateway_kafka_cluster_groups",
    "Consumer groups of a Kafka backend's cluster this gateway is a member of",
    ["backend"],
    registry=REGISTRY,
)

_COORDINATOR_MOVED = {KErr.not_coordinator, KErr.coordinator_not_available}


@dataclass
class _Local:
    topics: tuple[str, ...]
    session_timeout_ms: int
    last_seen: float = field(default_factory=trio.current_time)


@dataclass
class _Membership:
    """This gateway's membership in one cluster group."""

    name: str
    local: dict[str, _Local] = field(default_factory=dict)
    member_id: str = ""  # Kafka's id of this gateway in the group
    generation: int = -1
    view: GroupView | None = None
    dirty: bool = True  # the local members changed (or Kafka rebalances): a round is due
    joining: bool = False
    waiting: dict[str, int] = field(default_factory=dict)  # local members inside a call
    error: str = ""
    rounds: int = 0  # rounds started
    failure: tuple[int, GatewayError] | None = None  # a round Kafka refused, and why
    wake: trio.Event = field(default_factory=trio.Event)
    settled: trio.Event = field(default_factory=trio.Event)
    conn: BrokerConnection | None = None
    stale_conn: bool = False  # the coordinator moved: open a new connection
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    finished: trio.Event = field(default_factory=trio.Event)

    def notify(self) -> None:
        self.settled.set()
        self.settled = trio.Event()

    def poke(self) -> None:
        self.dirty = True
        self.wake.set()

    def stable(self) -> bool:
        return not (self.dirty or self.joining) and self.view is not None


class KafkaGroups:
    """The gateway's memberships in the cluster's groups (see the module docstring)."""

    def __init__(self, backend: str, cluster: KafkaCluster) -> None:
        self._backend = backend
        self._cluster = cluster
        self._config = cluster.config
        self._states: dict[str, _Membership] = {}
        self._coordinators: dict[str, int] = {}

    # ------------------------------------------------------------------ for kv.py
    def membership(self, group: str) -> tuple[str, int] | None:
        """(Kafka member id, generation) of this gateway in ``group``, if it is a member."""
        state = self._states.get(group)
        if state is None or not state.member_id or state.generation < 0:
            return None
        return state.member_id, state.generation

    # ------------------------------------------------------------------ the Backend's group_*
    async def join(
        self, group: str, topics: tuple[str, ...], member_id: str, session_timeout_ms: int
    ) -> JoinGroupResult:
        state = self._states.get(group)
        if state is None:
            state = self._start(group)
        member_id = member_id or f"{group}-{uuid.uuid4().hex[:12]}"
        existing = state.local.get(member_id)
        if existing is None or existing.topics != tuple(topics):
            state.local[member_id] = _Local(tuple(topics), session_timeout_ms)
            state.poke()
        else:
            existing.last_seen = trio.current_time()
        try:
            view = await self._settle(state, member_id, present=True)
        except GatewayError:
            if existing is None and state.local.pop(member_id, None) is not None:
                state.poke()  # refused: not a member (the last one leaves the cluster's group)
            raise
        return JoinGroupResult(
            group, member_id, view.generation, min(view.topics), tuple(sorted(view.topics))
        )

    async def sync(self, group: str, member_id: str, generation: int) -> SyncGroupResult:
        state, local = self._local(group, member_id)
        local.last_seen = trio.current_time()
        view = state.view
        if view is None or not state.stable() or view.generation != generation:
            raise GatewayError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {group!r} is rebalancing: join again"
            )
        return SyncGroupResult(MemberAssignment(member_id, view.partitions.get(member_id, ())))

    async def heartbeat(self, group: str, member_id: str, generation: int) -> None:
        state, local = self._local(group, member_id)
        local.last_seen = trio.current_time()
        if not state.stable() or state.view is None or state.view.generation != generation:
            raise GatewayError(
                ErrorCode.REBALANCE_IN_PROGRESS, f"group {group!r} rebalanced: join again"
            )

    async def leave(self, group: str, member_id: str) -> None:
        state, _ = self._local(group, member_id)
        del state.local[member_id]
        state.poke()
        if state.local:
            try:
                await self._settle(state, member_id, present=False)
            except GatewayError:
                pass  # it left here; the cluster's group catches up on the next round
        else:
            with trio.move_on_after(self._config.request_timeout_ms / 1000):
                while self._states.get(group) is state:
                    await state.settled.wait()

    async def describe(self, group: str) -> GroupDescription:
        state = self._states.get(group)
        if state is not None and state.view is not None:
            return self._description(
                group, state.view, "stable" if state.stable() else "rebalancing"
            )
        return await self._describe_cluster(group)

    async def close(self) -> None:
        """Leave every cluster group (so the others rebalance at once) and end the tasks."""
        states = list(self._states.values())
        for state in states:
            state.scope.cancel()
        with trio.move_on_after(2.0):
            for state in states:
                await state.finished.wait()
        self._states.clear()
        CLUSTER_GROUPS.labels(backend=self._backend).set(0)

    # ------------------------------------------------------------------ helpers
    def _local(self, group: str, member_id: str) -> tuple[_Membership, _Local]:
        state = self._states.get(group)
        local = state.local.get(member_id) if state is not None else None
        if state is None or local is None:
            raise GatewayError(ErrorCode.UNKNOWN_MEMBER, f"unknown member {member_id!r}")
        return state, local

    @staticmethod
    def _description(group: str, view: GroupView, state: str) -> GroupDescription:
        members = tuple(
            MemberAssignment(m, view.partitions.get(m, ())) for m in sorted(view.topics)
        )
        topics = tuple(sorted({t for ts in view.topics.values() for t in ts}))
        return GroupDescription(
            group, state if members else "empty", view.generation, members, topics
        )

    def _start(self, group: str) -> _Membership:
        if len(self._states) >= self._config.max_cluster_groups:
            limit_hit("max_cluster_groups", "kafka", log, backend=self._backend, group=group)
            raise GatewayError(
                ErrorCode.INVALID_REQUEST,
                f"group {group!r}: this gateway is a member of {len(self._states)} groups of the "
                f"Kafka cluster, the most allowed (backends.{self._backend}.max_cluster_groups)",
            )
        nursery = self._cluster.nursery
        if nursery is None:
            raise GatewayError(ErrorCode.BACKEND_UNAVAILABLE, "the Kafka backend is not open")
        state = self._states[group] = _Membership(group)
        CLUSTER_GROUPS.labels(backend=self._backend).set(len(self._states))
        nursery.start_soon(self._run, state)
        return state

    async def _settle(self, state: _Membership, member_id: str, present: bool) -> GroupView:
        """Wait for the round that takes ``member_id`` in (or out) of the cluster's group."""
        limit = (self._config.group_session_timeout_ms + self._config.request_timeout_ms) / 1000
        since = state.rounds
        state.waiting[member_id] = state.waiting.get(member_id, 0) + 1
        try:
            with trio.move_on_after(limit):
                while True:
                    view = state.view
                    if (
                        state.stable()
                        and view is not None
                        and (member_id in view.topics) == present
                    ):
                        return view
                    if state.failure is not None and state.failure[0] > since:
                        raise state.failure[1]  # Kafka refused a round this call waited for
                    if self._states.get(state.name) is not state:
                        break  # the membership ended (the backend closes)
                    await state.settled.wait()
        finally:
            state.waiting[member_id] -= 1
            if not state.waiting[member_id]:
                del state.waiting[member_id]
            local = state.local.get(member_id)
            if local is not None:
                local.last_seen = trio.current_time()
        raise GatewayError(
            ErrorCode.BACKEND_UNAVAILABLE,
            f"group {state.name!r}: the Kafka cluster's group did not settle within {limit:g}s"
            + (f" ({state.error})" if state.error else " (other gateways still joining)"),
        )

    def _expire(self, state: _Membership) -> None:
        now = trio.current_time()
        for mid, local in list(state.local.items()):
            if mid not in state.waiting and now - local.last_seen > local.session_timeout_ms / 1000:
                del state.local[mid]
                state.dirty = True
                log.info("group_member_expired", group=state.name, member=mid)

    async def _run(self, state: _Membership) -> None:
        interval = self._config.group_heartbeat_ms / 1000
        try:
            with state.scope:
                while True:
                    self._expire(state)
                    if not state.local:
                        await self._leave_cluster(
                            state, timeout=self._config.request_timeout_ms / 1000
                        )
                        if not state.local:
                            return
                        state.dirty = True
                    if state.dirty:
                        await self._round(state)
                        continue
                    with trio.move_on_after(interval):
                        await state.wake.wait()
                    state.wake = trio.Event()
                    if not state.dirty and state.local:
                        await self._heartbeat(state)
        finally:
            if self._states.get(state.name) is state:
                del self._states[state.name]
            CLUSTER_GROUPS.labels(backend=self._backend).set(len(self._states))
            with trio.CancelScope(shield=True):
                await self._leave_cluster(state, timeout=1.0)  # the others rebalance at once
                await self._drop_connection(state)
            state.notify()
            state.finished.set()

    async def _drop_connection(self, state: _Membership) -> None:
        conn, state.conn, state.stale_conn = state.conn, None, False
        if conn is not None:
            await conn.aclose()

    async def _connection(self, state: _Membership) -> BrokerConnection:
        if state.conn is not None and not state.conn.closed and not state.stale_conn:
            return state.conn
        await self._drop_connection(state)
        node = await self._coordinator(state.name)
        host, port = self._cluster.brokers[node]
        # the cluster's TLS context and SASL login, on a connection of the group's own
        conn = BrokerConnection(
            host,
            port,
            self._config.client_id,
            self._config.max_response_bytes,
            ssl_context=self._cluster._ssl,
            server_name=self._config.tls_server_name,
            authenticate=self._cluster._sasl,
        )
        assert self._cluster.nursery is not None
        await conn.connect(self._cluster.nursery, self._config.connect_timeout_ms / 1000)
        state.conn = conn
        return conn

    async def _coordinator(self, group: str) -> int:
        node = self._coordinators.get(group)
        if node is not None and node in self._cluster.brokers:
            return node
        from kio.schema.find_coordinator.v2 import request as fc_req
        from kio.static.primitive import i8

        response = await self._cluster.call(
            fc_req.FindCoordinatorRequest(key=group, key_type=i8(0))
        )
        if int(response.error_code):
            raise kafka_error(response.error_code, f"find coordinator of {group}")
        node = int(response.node_id)
        self._cluster.brokers[node] = (response.host, int(response.port))
        self._coordinators[group] = node
        return node

    def _lost(self, state: _Membership, err: KErr) -> None:
        """React to a group error of Kafka's: a new round, under a new id if it forgot ours."""
        state.dirty = True
        if err is KErr.unknown_member_id:
            state.member_id, state.generation = "", -1
        if err in _COORDINATOR_MOVED:
            self._coordinators.pop(state.name, None)
            state.stale_conn = True  # reopened to the new coordinator

    async def _round(self, state: _Membership) -> None:
        state.dirty, state.joining = False, True
        state.rounds += 1
        try:
            await self._join_and_sync(state)
            state.error, state.failure = "", None
        except GatewayError as exc:
            state.dirty = True
            if exc.code not in (ErrorCode.BACKEND_UNAVAILABLE, ErrorCode.TIMEOUT):
                state.failure = (state.rounds, exc)  # not retriable: the waiting joins get it
            if exc.message != state.error:
                log.warning("kafka_group_round_failed", group=state.name, error=exc.message)
            state.error = exc.message
            await self._drop_connection(state)
            state.joining = False
            state.notify()
            await trio.sleep(self._config.group_heartbeat_ms / 1000)
        finally:
            state.joining = False
            state.notify()

    async def _join_and_sync(self, state: _Membership) -> None:
        timeout = (self._config.group_rebalance_timeout_ms + self._config.request_timeout_ms) / 1000
        conn = await self._connection(state)
        joined = await conn.call(
            jg_req.JoinGroupRequest(
                group_id=GroupId(state.name),
                session_timeout=ms(self._config.group_session_timeout_ms),
                rebalance_timeout=ms(self._config.group_rebalance_timeout_ms),
                member_id=state.member_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=(
                    jg_req.JoinGroupRequestProtocol(
                        name=ASSIGNOR,
                        metadata=encode_subscription({m: v.topics for m, v in state.local.items()}),
                    ),
                ),
            ),
            timeout,
        )
        err = KErr(int(joined.error_code))
        if err is KErr.inconsistent_group_protocol:
            raise GatewayError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"group {state.name!r} of the Kafka cluster has members that are not gateways "
                "(Kafka consumers): use another group name",
            )
        if err is KErr.member_id_required:  # Kafka asks it from v4 on, Tansu from v3 too
            state.member_id, state.dirty = joined.member_id, True
            return
        if err in (KErr.unknown_member_id, KErr.illegal_generation, *_COORDINATOR_MOVED):
            self._lost(state, err)
            return
        if err is KErr.invalid_session_timeout:  # the operator's setting, not the client's
            raise GatewayError(
                ErrorCode.INTERNAL,
                f"the Kafka cluster refused group_session_timeout_ms = "
                f"{self._config.group_session_timeout_ms} (INVALID_SESSION_TIMEOUT): set it "
                "within the cluster's group.min.session.timeout.ms and "
                "group.max.session.timeout.ms (6000 and 1800000 on a default Kafka)",
            )
        if err is not KErr.none:
            raise kafka_error(err, f"join group {state.name}")
        state.member_id = joined.member_id
        generation = int(joined.generation_id)
        assignments: tuple[sg_req.SyncGroupRequestAssignment, ...] = ()
        if joined.leader == joined.member_id:
            assignments = await self._assign(generation, joined.members)
        synced = await conn.call(
            sg_req.SyncGroupRequest(
                group_id=GroupId(state.name),
                generation_id=i32(generation),
                member_id=state.member_id,
                assignments=assignments,
            ),
            timeout,
        )
        err = KErr(int(synced.error_code))
        if err in (
            KErr.rebalance_in_progress,
            KErr.unknown_member_id,
            KErr.illegal_generation,
            *_COORDINATOR_MOVED,
        ):
            self._lost(state, err)
            return
        if err is not KErr.none:
            raise kafka_error(err, f"sync group {state.name}")
        try:
            view = decode_assignment(synced.assignment)
        except GroupCodecError as exc:
            raise GatewayError(ErrorCode.INTERNAL, f"group {state.name!r}: {exc}") from None
        if generation != state.generation:
            REBALANCES.labels(group=state.name).inc()
        state.generation = generation
        state.view = GroupView(generation, view.topics, view.partitions)

    async def _assign(
        self, generation: int, members: tuple[Any, ...]
    ) -> tuple[sg_req.SyncGroupRequestAssignment, ...]:
        """The leader's work: every gateway's local members, range-assigned together."""
        topics_of: dict[str, tuple[str, ...]] = {}
        locals_of: dict[str, list[str]] = {}
        for m in members:
            try:
                subscribed = decode_subscription(m.metadata)
            except GroupCodecError as exc:
                log.warning("kafka_group_member_unreadable", member=m.member_id, error=str(exc))
                subscribed = {}
            locals_of[m.member_id] = sorted(subscribed)
            topics_of.update(subscribed)
        counts: dict[str, int] = {}
        for topic in sorted({t for ts in topics_of.values() for t in ts}):
            try:
                counts[topic] = (await self._cluster.topic_meta(topic)).info.partitions
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNKNOWN_TOPIC:
                    raise
        view = GroupView(generation, topics_of, range_assign(topics_of, counts))
        return tuple(
            sg_req.SyncGroupRequestAssignment(
                member_id=gw, assignment=encode_assignment(mine, view)
            )
            for gw, mine in sorted(locals_of.items())
        )

    async def _heartbeat(self, state: _Membership) -> None:
        try:
            conn = await self._connection(state)
            response = await conn.call(
                hb_req.HeartbeatRequest(
                    group_id=GroupId(state.name),
                    generation_id=i32(state.generation),
                    member_id=state.member_id,
                ),
                self._config.request_timeout_ms / 1000,
            )
        except GatewayError as exc:
            log.warning("kafka_group_heartbeat_failed", group=state.name, error=exc.message)
            await self._drop_connection(state)
            state.dirty = True
            return
        err = KErr(int(response.error_code))
        if err is not KErr.none:
            self._lost(state, err)

    async def _leave_cluster(self, state: _Membership, timeout: float) -> None:
        """LeaveGroup (best effort: the session timeout removes this gateway otherwise)."""
        member_id, state.member_id, state.generation, state.view = state.member_id, "", -1, None
        if not member_id or state.conn is None or state.conn.closed:
            return
        with trio.move_on_after(timeout):
            try:
                await state.conn.call(
                    lg_req.LeaveGroupRequest(group_id=GroupId(state.name), member_id=member_id),
                    timeout,
                )
            except GatewayError as exc:
                log.info("kafka_group_leave_failed", group=state.name, error=exc.message)

    async def _describe_cluster(self, group: str) -> GroupDescription:
        """The group as the cluster holds it (this gateway has no member in it)."""
        empty = GroupDescription(group, "empty", 0, ())
        try:
            node = await self._coordinator(group)
            response = await self._cluster.call(
                dg_req.DescribeGroupsRequest(groups=(GroupId(group),)), node
            )
        except GatewayError as exc:
            if exc.code is ErrorCode.UNSUPPORTED:
                return empty
            raise
        for g in response.groups:
            err = KErr(int(g.error_code))
            if err in _COORDINATOR_MOVED:
                self._coordinators.pop(group, None)
            if err is not KErr.none:
                raise kafka_error(err, f"describe group {group}")
            if g.protocol_type != PROTOCOL_TYPE or g.protocol_data != ASSIGNOR:
                return empty  # not a gateways' group (or no members)
            for m in g.members:
                if not m.member_assignment:
                    continue
                try:
                    view = decode_assignment(m.member_assignment)
                except GroupCodecError:
                    continue
                stable = g.group_state == "Stable"
                return self._description(group, view, "stable" if stable else "rebalancing")
        return empty
