"""The TANK session: one per connection; TANK requests -> commands of the model -> TANK responses.

Mapping (docs/protocols/tank.md): sequence number = offset + 1 (0 in a consume = earliest;
u64::MAX = the tail); ``hwmark`` = the high watermark (the sequence number of the last message); a
partition's first available sequence number is ``log_start + 1`` (0 while it is empty);
timestamps are milliseconds; TANK has no headers.

Ordering: requests are handled in the order they arrive, each finished before the next is read,
except Consume, which runs as its own task (bounded by ``max_in_flight``) so a parked long poll
does not hold up a produce on the same connection; TANK responses carry the request id and the
real broker answers parked consumes out of order too. A consume is started only after every
earlier request on the connection completed, so it sees their writes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from gateway.model import (
    CreateTopic,
    DescribeTopic,
    ErrorCode,
    Fetch,
    GatewayError,
    ListOffsets,
    ListTopics,
    OffsetSpec,
    Produce,
    Record,
    RecordBatch,
    Stats,
)
from gateway.observability import (
    RECORDS_IN,
    RECORDS_OUT,
    REQUEST_LATENCY,
    REQUESTS,
    labelled,
)
from gateway.protocols.answers import AnswerBudget, holding
from gateway.protocols.base import ConnectionContext
from gateway.protocols.driver import Connection, drive
from gateway.protocols.tank.bundle import TANK_BUNDLE, decode_bundle
from gateway.protocols.tank.chunk import fill_chunk, first_available
from gateway.protocols.tank.codec import (
    C_BOUNDARY,
    C_OK,
    C_SYSTEM_ERROR,
    C_UNKNOWN_PARTITION,
    CT_BAD_CONFIG,
    CT_EXISTS,
    CT_INVALID,
    CT_OK,
    CT_READ_ONLY,
    CT_SYSTEM_ERROR,
    CT_UNSUPPORTED,
    DP_SYSTEM_ERROR,
    GREETING,
    MAX_FETCH_SIZE,
    P_INVALID_SEQNUMS,
    P_IO_FAULT,
    P_OK,
    P_READ_ONLY,
    P_UNKNOWN_PARTITION,
    RC_BAD_PARTITION,
    RC_OK,
    RC_UNKNOWN_TOPIC,
    U64_MAX,
    ConsumePartitionRequest,
    ConsumePartitionResult,
    ConsumeRequest,
    ConsumeResponse,
    ConsumeTopicResult,
    CreateTopicRequest,
    CreateTopicResponse,
    DiscoverPartitionsRequest,
    DiscoverPartitionsResponse,
    DiscoverTopicsRequest,
    DiscoverTopicsResponse,
    DiscoverTopologyRequest,
    DiscoverTopologyResponse,
    PartitionWatermarks,
    Ping,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopicResult,
    ReloadConfRequest,
    ReloadConfResponse,
    Role,
    StatusRequest,
    StatusResponse,
    TankConnection,
    TopicEntry,
    consume_response_pieces,
    encode_consume_response,
    encode_response,
)

PROTOCOL = "tank"
STARTED_AT = int(time.time())
MAX_TOPIC_NAME = 64
MAX_PARTITIONS = 65530
RECEIVE_SIZE = 256 * 1024
PARK_PROBE_BYTES = 1 << 20
"""A parked consume waits for min(min_bytes, this) to arrive: what its wait may hold in memory
(up to ``max_in_flight`` parked consumes per connection)."""

_PRODUCE_STATUS = {
    ErrorCode.UNKNOWN_PARTITION: P_UNKNOWN_PARTITION,
    ErrorCode.READ_ONLY: P_READ_ONLY,
    ErrorCode.DUPLICATE_SEQUENCE: P_INVALID_SEQNUMS,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: P_INVALID_SEQNUMS,
    ErrorCode.OFFSET_MISMATCH: P_INVALID_SEQNUMS,
}
_CREATE_ERR = {
    ErrorCode.TOPIC_EXISTS: CT_EXISTS,
    ErrorCode.INVALID_TOPIC: CT_INVALID,
    ErrorCode.INVALID_PARTITIONS: CT_INVALID,
    ErrorCode.INVALID_REQUEST: CT_INVALID,
    ErrorCode.UNSUPPORTED: CT_UNSUPPORTED,
    ErrorCode.READ_ONLY: CT_READ_ONLY,
}

_API_NAMES = {
    ProduceRequest: "produce",
    ConsumeRequest: "consume",
    DiscoverPartitionsRequest: "discover_partitions",
    CreateTopicRequest: "create_topic",
    ReloadConfRequest: "reload_conf",
    StatusRequest: "status",
    DiscoverTopicsRequest: "discover_topics",
    DiscoverTopologyRequest: "discover_topology",
}
_records_in = labelled(RECORDS_IN, PROTOCOL)
_records_out = labelled(RECORDS_OUT, PROTOCOL)
_latency = {api: labelled(REQUEST_LATENCY, PROTOCOL, api) for api in _API_NAMES.values()}


_NAME_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_NAME_ALNUM = _NAME_BYTES - frozenset(b"-_")


def valid_topic_name(raw: bytes) -> bool:
    """TANK's rule for a topic it creates: 1 to 64 bytes of ``A-Z a-z 0-9 - _``, at least one
    letter or digit, neither starting nor ending with ``-`` or ``_`` (so ``a.b``, ``--`` and
    ``_`` are refused). Topics made through other protocols are not held to it."""
    return (
        0 < len(raw) <= MAX_TOPIC_NAME
        and all(b in _NAME_BYTES for b in raw)
        and any(b in _NAME_ALNUM for b in raw)
        and raw[0] in _NAME_ALNUM
        and raw[-1] in _NAME_ALNUM
    )


def parse_topic_config(text: bytes) -> tuple[tuple[str, str], ...] | None:
    """TANK topic configuration (``key = value`` lines, ``#`` comments); None when malformed."""
    try:
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None
    out = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            return None
        out.append((key.strip(), value.strip()))
    return tuple(out)


@dataclass(slots=True)
class ConsumePlan:
    request: ConsumeRequest
    response: ConsumeResponse
    pending: list[tuple[str, ConsumePartitionRequest, ConsumePartitionResult, int]]


class TankSession:
    """Answers TANK requests with the core. Protocol-agnostic of I/O: tests call ``handle``."""

    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        self.max_answer_bytes = ctx.listener.max_answer_bytes
        self.answer_lock = trio.Lock()  # one consume answer read, built and sent at a time

    async def handle(self, req: Any) -> Any:
        if isinstance(req, ProduceRequest):
            return await self.produce(req)
        if isinstance(req, ConsumeRequest):
            return await self.consume(req)
        if isinstance(req, DiscoverPartitionsRequest):
            return await self.discover_partitions(req)
        if isinstance(req, CreateTopicRequest):
            return await self.create_topic(req)
        if isinstance(req, ReloadConfRequest):
            return await self.reload_conf(req)
        if isinstance(req, StatusRequest):
            return await self.status(req)
        if isinstance(req, DiscoverTopicsRequest):
            return await self.discover_topics(req)
        if isinstance(req, DiscoverTopologyRequest):
            return DiscoverTopologyResponse(req.request_id)
        raise TypeError(f"not a TANK request: {req!r}")

    async def _partitions(self, topic: str) -> int | None:
        """The topic's partition count, None when it does not exist (TANK never auto-creates)."""
        try:
            return (await self.core.topic(topic, create=False)).partitions
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_TOPIC:
                return None
            raise

    # ------------------------------------------------------------------ produce
    async def produce(self, req: ProduceRequest) -> ProduceResponse:
        results = []
        for t in req.topics:
            try:
                count = await self._partitions(t.name)
            except GatewayError as exc:
                results.append(
                    ProduceTopicResult(
                        t.name, [_PRODUCE_STATUS.get(exc.code, P_IO_FAULT)] * len(t.partitions)
                    )
                )
                continue
            if count is None:
                results.append(ProduceTopicResult(t.name, None))
                continue
            statuses = []
            for p in t.partitions:
                if not 0 <= p.partition < count:
                    statuses.append(P_UNKNOWN_PARTITION)
                    continue
                try:
                    statuses.append(await self._produce_one(t.name, p, req.with_seqnum))
                except GatewayError as exc:
                    self.ctx.log.warning(
                        "tank_produce_failed",
                        topic=t.name,
                        partition=p.partition,
                        error=exc.code.value,
                        message=exc.message,
                    )
                    statuses.append(_PRODUCE_STATUS.get(exc.code, P_IO_FAULT))
            results.append(ProduceTopicResult(t.name, statuses))
        return ProduceResponse(req.request_id, results, req.with_seqnum)

    async def _produce_one(self, topic: str, p: ProducePartition, with_seqnum: bool) -> int:
        info = p.info
        assert info is not None  # the server-role decoder validated the bundle
        header = info.header
        explicit = header.first_seq if header.sparse else (p.base_seqnum if with_seqnum else 0)
        expected_offset: int | None = None
        if explicit:
            # Explicit sequence numbers (mirroring). Offsets are dense in the model, so they must
            # continue the partition exactly: hwmark + 1, consecutive (docs/protocols/tank.md). The
            # "continues exactly" part is the backend's conditional append (expected_offset),
            # not a watermark read here: another writer can append between a read and the
            # produce, and the records would land at other sequence numbers than named.
            if not info.contiguous:
                return P_INVALID_SEQNUMS
            expected_offset = explicit - 1
        if header.sparse:
            # sparse bundles carry their own sequence numbers; keep plain records instead
            _, msgs = decode_bundle(p.bundle)
            batch = RecordBatch(
                [Record(m.key, m.content, (), m.timestamp_ms * 1000) for m in msgs],
                max_timestamp_us=info.max_ts_ms * 1000,
            )
        else:
            batch = RecordBatch(
                encoded=p.bundle,
                codec=TANK_BUNDLE,
                count=header.message_count,
                max_timestamp_us=info.max_ts_ms * 1000,
            )
        try:
            await self.core.execute(
                Produce(topic, batch, partition=p.partition, expected_offset=expected_offset)
            )
        except GatewayError as exc:
            if exc.code is ErrorCode.OFFSET_MISMATCH:
                return P_INVALID_SEQNUMS  # the client's answer, not a failure to log
            raise
        _records_in.inc(header.message_count)
        return P_OK

    # ------------------------------------------------------------------ consume
    async def consume(self, req: ConsumeRequest) -> ConsumeResponse:
        return await self.finish_consume(await self.start_consume(req))

    async def start_consume(self, req: ConsumeRequest) -> ConsumePlan:
        """Resolve every partition's starting offset (the tail means the high watermark *now*,
        before any later request on the connection runs); faults are filled in already."""
        topics: list[ConsumeTopicResult] = []
        pending: list[tuple[str, ConsumePartitionRequest, ConsumePartitionResult, int]] = []
        for t in req.topics:
            try:
                count = await self._partitions(t.name)
            except GatewayError:
                count = -1
            if count is None:
                topics.append(ConsumeTopicResult(t.name, None, len(t.partitions)))
                continue
            parts = []
            for cp in t.partitions:
                res = ConsumePartitionResult(cp.partition)
                parts.append(res)
                if count < 0:
                    res.err = C_SYSTEM_ERROR
                elif not 0 <= cp.partition < count:
                    res.err = C_UNKNOWN_PARTITION
                else:
                    offset = await self._resolve(t.name, cp, res)
                    if offset is not None:
                        # a partition listed again is answered again, like the real broker
                        # does: the answer's budget is shared by every entry
                        pending.append((t.name, cp, res, offset))
            topics.append(ConsumeTopicResult(t.name, parts, len(parts)))
        return ConsumePlan(req, ConsumeResponse(req.request_id, topics), pending)

    async def finish_consume(
        self, plan: ConsumePlan, deliver: Callable[[ConsumeResponse], Awaitable[None]] | None = None
    ) -> ConsumeResponse:
        """Read (and, at the tail, wait) for the partitions that had no fault; ``deliver`` sends
        the answer. Reading, building and delivering hold the connection's answer lock, so
        however many consumes a client pipelines without reading, one answer's data at a time is
        held; a parked consume waits holding at most PARK_PROBE_BYTES (then reads again)."""
        req = plan.request
        min_bytes = max(1, req.min_bytes)
        waited = False
        while True:
            # the answer's share of the pool is held from the read until it was delivered
            async with self.answer_lock:
                with holding():
                    got = await self._read_all(plan.pending) if plan.pending else 0
                    if (
                        got >= min_bytes
                        or req.max_wait_ms <= 0
                        or waited
                        or self.ctx.shutdown.is_set()
                        or not plan.pending
                    ):
                        if deliver is not None:
                            await deliver(plan.response)
                        return plan.response
                # several partitions wait for the first of those that had nothing to get some
                waiting = plan.pending
                if len(waiting) > 1:
                    waiting = [w for w in waiting if w[2].err == C_OK and not _chunk_size(w[2])]
                for _, _, res, _ in plan.pending:
                    res.chunk = b""  # held by nobody while parked
            await self._park(waiting, req.max_wait_ms, min_bytes if len(plan.pending) == 1 else 1)
            waited = True

    async def _resolve(
        self, topic: str, cp: ConsumePartitionRequest, res: ConsumePartitionResult
    ) -> int | None:
        """The offset to read from, or None after filling ``res`` with a boundary fault."""
        try:
            lo = await self.core.execute(ListOffsets(topic, cp.partition, OffsetSpec.LATEST))
        except GatewayError as exc:
            res.err = (
                C_UNKNOWN_PARTITION if exc.code is ErrorCode.UNKNOWN_PARTITION else (C_SYSTEM_ERROR)
            )
            return None
        start, hw = lo.log_start_offset, lo.high_watermark
        if cp.seq == 0:
            offset = start
        elif cp.seq == U64_MAX:
            offset = hw
        else:
            offset = cp.seq - 1
        if offset > hw or offset < start:
            res.err = C_BOUNDARY
            res.hwmark = hw
            res.first_available = first_available(start, hw)
            return None
        res.hwmark = hw
        res.base_seq = first_available(start, hw)
        return offset

    async def _read_all(
        self, pending: list[tuple[str, ConsumePartitionRequest, ConsumePartitionResult, int]]
    ) -> int:
        """Read every pending partition now, in request order, within one answer budget; the
        chunk bytes read."""
        budget = await AnswerBudget.take(
            sum(min(cp.fetch_size, MAX_FETCH_SIZE) for _, cp, _, _ in pending),
            self.max_answer_bytes,
        )
        got = 0
        for topic, cp, res, offset in pending:
            got += await self._fetch_one(topic, cp, res, offset, budget)
        budget.trim()
        budget.report(PROTOCOL, self.ctx.log, peer=getattr(self.ctx, "peer", ""))
        return got

    async def _park(
        self,
        pending: list[tuple[str, ConsumePartitionRequest, ConsumePartitionResult, int]],
        max_wait_ms: int,
        min_bytes: int,
    ) -> None:
        """Until ``min_bytes`` arrived (one partition; 1: any data in any of them), the wait
        ran out or the gateway drains; what the waits read is dropped (the caller reads again)."""
        single = len(pending) == 1 and min_bytes > 1
        if not pending:
            return
        with trio.move_on_after(max_wait_ms / 1000):
            async with trio.open_nursery() as nursery:

                async def drain_watch() -> None:
                    await self.ctx.shutdown.wait()
                    nursery.cancel_scope.cancel()

                async def wait_one(topic: str, cp: ConsumePartitionRequest, offset: int) -> None:
                    if single:  # min_bytes, up to what a parked wait may hold
                        probe = min(min_bytes, PARK_PROBE_BYTES, self.max_answer_bytes)
                        fetch = Fetch(
                            topic, cp.partition, offset, 1 << 30, probe, max_wait_ms, probe
                        )
                    else:  # any data
                        fetch = Fetch(topic, cp.partition, offset, 1, 1, max_wait_ms, 1)
                    with contextlib.suppress(GatewayError):  # the read after says what failed
                        await self.core.execute(fetch)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(drain_watch)
                for topic, cp, res, offset in pending:
                    if res.err == C_OK:
                        nursery.start_soon(wait_one, topic, cp, offset)

    async def _fetch_one(
        self,
        topic: str,
        cp: ConsumePartitionRequest,
        res: ConsumePartitionResult,
        offset: int,
        budget: AnswerBudget,
    ) -> int:
        """Fill ``res`` from ``offset`` (no waiting) with what is left of the budget; the chunk
        bytes."""
        share, bounded = budget.share(min(cp.fetch_size, MAX_FETCH_SIZE))
        if share == 0 and bounded:
            # nothing left for this partition: an empty chunk (hwmark and first available
            # sequence number as resolved), as if the wait had run out
            res.err, res.chunk = C_OK, b""
            if res.hwmark > offset:
                budget.hit = True
            return 0
        fetch = Fetch(topic, cp.partition, offset, max_bytes=max(1, share))
        try:
            result = await self.core.execute(fetch)
        except GatewayError as exc:
            res.chunk = b""
            if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:  # retention moved meanwhile
                lo = await self.core.execute(ListOffsets(topic, cp.partition))
                res.err = C_BOUNDARY
                res.hwmark = lo.high_watermark
                res.first_available = first_available(lo.log_start_offset, lo.high_watermark)
            elif exc.code is ErrorCode.UNKNOWN_PARTITION:
                res.err = C_UNKNOWN_PARTITION
            else:
                res.err = C_SYSTEM_ERROR
            return 0
        records, end = fill_chunk(res, result, share, at_least_one=not bounded)
        _records_out.inc(records)
        size = _chunk_size(res)
        if bounded and max(end, offset) < result.high_watermark:
            budget.hit = True  # the budget, not the fetch size, left records out
        budget.spend(size)
        return size

    # ------------------------------------------------------------------ other requests

    async def discover_partitions(
        self, req: DiscoverPartitionsRequest
    ) -> DiscoverPartitionsResponse:
        try:
            desc = await self.core.execute(DescribeTopic(req.topic))
        except GatewayError as exc:
            if exc.code is ErrorCode.UNKNOWN_TOPIC:
                return DiscoverPartitionsResponse(req.request_id, req.topic, [])
            raise
        by_id = {p.partition: p for p in desc.partitions}
        ids = req.partitions if req.partitions is not None else sorted(by_id)
        out = []
        for pid in ids:
            part = by_id.get(pid)
            if part is None:
                out.append(PartitionWatermarks(U64_MAX, U64_MAX, DP_SYSTEM_ERROR))
            else:
                out.append(
                    PartitionWatermarks(
                        first_available(part.log_start_offset, part.high_watermark),
                        part.high_watermark,
                    )
                )
        return DiscoverPartitionsResponse(req.request_id, req.topic, out)

    async def create_topic(self, req: CreateTopicRequest) -> CreateTopicResponse:
        raw = req.topic.encode("utf-8", "surrogateescape")
        if not valid_topic_name(raw) or not 1 <= req.partitions <= MAX_PARTITIONS:
            return CreateTopicResponse(req.request_id, req.topic, CT_INVALID)
        config = parse_topic_config(req.config)
        if config is None:
            return CreateTopicResponse(req.request_id, req.topic, CT_BAD_CONFIG)
        try:
            await self.core.execute(CreateTopic(req.topic, req.partitions, config))
        except GatewayError as exc:
            return CreateTopicResponse(
                req.request_id, req.topic, _CREATE_ERR.get(exc.code, CT_SYSTEM_ERROR)
            )
        return CreateTopicResponse(req.request_id, req.topic, CT_OK)

    async def reload_conf(self, req: ReloadConfRequest) -> ReloadConfResponse:
        # The topic's configuration lives in the backend; "reloading" re-reads it from there.
        count = await self._partitions(req.topic)
        if count is None:
            err = RC_UNKNOWN_TOPIC
        elif not 0 <= req.partition < count:
            err = RC_BAD_PARTITION
        else:
            await self.core.execute(DescribeTopic(req.topic))
            err = RC_OK
        return ReloadConfResponse(req.request_id, req.topic, req.partition, err)

    async def status(self, req: StatusRequest) -> StatusResponse:
        stats = await self.core.execute(Stats())
        return StatusResponse(
            req.request_id,
            topics=stats.topics,
            partitions=stats.partitions,
            open_partitions=stats.partitions,
            open_time=0,
            startup_ts=STARTED_AT,
        )

    async def discover_topics(self, req: DiscoverTopicsRequest) -> DiscoverTopicsResponse:
        topics = await self.core.execute(ListTopics())
        return DiscoverTopicsResponse(
            req.request_id, [TopicEntry(t.name, True, t.partitions) for t in topics]
        )


def _chunk_size(res: ConsumePartitionResult) -> int:
    chunk = res.chunk
    if isinstance(chunk, list):
        return sum(len(c) for c in chunk)
    return len(chunk)


_PRODUCE_OUTCOME = {
    P_UNKNOWN_PARTITION: "unknown_partition",
    P_IO_FAULT: "io_fault",
    P_INVALID_SEQNUMS: "invalid_sequence_numbers",
    P_READ_ONLY: "read_only",
}
_CONSUME_OUTCOME = {
    C_BOUNDARY: "boundary_fault",
    C_UNKNOWN_PARTITION: "unknown_partition",
    C_SYSTEM_ERROR: "system_error",
}


def outcome(resp: Any) -> str:
    """The metrics outcome of a response: ``ok`` or its first error (unknown topics and
    partitions, boundary faults... are answered with an error byte and counted here)."""
    if isinstance(resp, ProduceResponse):
        for t in resp.topics:
            if t.statuses is None:
                return "unknown_topic"
            for status in t.statuses:
                if status:
                    return _PRODUCE_OUTCOME.get(status, f"status_{status:#04x}")
    elif isinstance(resp, ConsumeResponse):
        for ct in resp.topics:
            if ct.partitions is None:
                return "unknown_topic"
            for p in ct.partitions:
                if p.err:
                    return _CONSUME_OUTCOME.get(p.err, f"err_{p.err:#04x}")
    elif isinstance(resp, DiscoverPartitionsResponse):
        if not resp.partitions:
            return "unknown_topic"
    elif isinstance(resp, (CreateTopicResponse, ReloadConfResponse)):
        if resp.err:
            return f"err_{resp.err}"
    return "ok"


# ------------------------------------------------------------------ the connection


async def handle_connection(stream: trio.abc.Stream, ctx: ConnectionContext) -> None:
    """Serve one TANK connection until the peer closes, a malformed frame arrives (closed, as the
    real broker does: logged once and counted), or the gateway drains (the request in hand and
    parked consumes are answered first)."""
    await drive(stream, ctx, TankConnectionSession(ctx))


class TankConnectionSession:
    """The driver's session for TANK: the greeting, then requests in order; a consume that has
    to wait for data is parked as a task (at most ``max_in_flight``) and answers when it can."""

    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.session = TankSession(ctx)
        self.framing = TankConnection(Role.SERVER, max_frame_bytes=ctx.listener.max_frame_bytes)
        self.receive_bytes = RECEIVE_SIZE
        self.slots = trio.Semaphore(max(1, ctx.listener.max_in_flight))

    async def start(self, io: Connection) -> None:
        await io.send(GREETING)

    async def handle(self, event: Any, io: Connection) -> bool:
        if isinstance(event, ConsumeRequest):
            started = time.perf_counter()
            plan = await self._answer("consume", started, self.session.start_consume, event)
            if plan is None:
                return False
            await self.slots.acquire()
            io.start_soon(self.consume_task, io, plan, started)
        elif not isinstance(event, Ping):  # a client ping gets no reply
            api = _API_NAMES[type(event)]
            data = await self._answer(api, time.perf_counter(), self.session.handle, event)
            if data is None:
                return False
            await io.send(data)
        return True

    async def _answer(
        self, api: str, started: float, handler: Any, arg: Any
    ) -> Any:  # bytes, a ConsumePlan (start_consume), or None: close
        try:
            resp = await handler(arg)
        except GatewayError as exc:
            # a failure no TANK answer covers (the backend is down during a discovery, say):
            # the real broker would drop the connection, so do we
            REQUESTS.labels(protocol=PROTOCOL, api=api, outcome=exc.code.value).inc()
            self.ctx.log.warning(
                "tank_request_failed", api=api, error=exc.code.value, message=exc.message
            )
            return None
        if isinstance(resp, ConsumePlan):
            return resp
        data = (
            encode_consume_response(resp)
            if isinstance(resp, ConsumeResponse)
            else encode_response(resp)
        )
        labelled(REQUESTS, PROTOCOL, api, outcome(resp)).inc()
        _latency[api].observe(time.perf_counter() - started)
        return data

    async def consume_task(self, io: Connection, plan: ConsumePlan, started: float) -> None:
        async def deliver(resp: ConsumeResponse) -> None:
            labelled(REQUESTS, PROTOCOL, "consume", outcome(resp)).inc()
            _latency["consume"].observe(time.perf_counter() - started)
            await io.send_pieces(consume_response_pieces(resp))

        try:
            await self.session.finish_consume(plan, deliver)
            return
        except GatewayError as exc:  # as in _answer: no TANK answer covers it, so close
            REQUESTS.labels(protocol=PROTOCOL, api="consume", outcome=exc.code.value).inc()
            self.ctx.log.warning(
                "tank_request_failed", api="consume", error=exc.code.value, message=exc.message
            )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.slots.release()
        io.fail(trio.ClosedResourceError("the connection is closed"))
