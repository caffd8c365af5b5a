"""One Kafka 0.8 connection: requests in order -> commands of the model -> responses in order.

Like the 0.8.2 broker, a connection answers in request order and executes one request at a time;
a Produce with acks 0 gets no answer (and a failed one closes the connection, its only error
signal); an unparseable frame, a bad size or an unknown api key closes the connection.

Produce requests with acks 1/-1 are pipelined (at most ``PRODUCE_PIPELINE``, and the listener's
``max_in_flight``, at once): the message sets of the next request are read and parsed while the
previous one is stored, then it is stored, strictly after it. Each answers itself, in order; any
other request waits until every earlier produce has answered. A produce with nothing in flight
before it and no bytes of a next request behind it is handled in line (a lone request, e.g. one
record at a time: a task of its own would only add scheduling). With a backend across the network
(Kafka, NATS) this overlaps the gateway's parsing with the backend's round trip; over the Kafka
backend a one-partition produce is even sent to the broker as soon as the previous one's request
is written there (``APPEND_SENT``: one connection, answered in order), so the round trips overlap
too.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from gateway.model import (
    APPEND_SENT,
    Acks,
    CommitOffset,
    DescribeTopic,
    ErrorCode,
    Fetch,
    FetchOffset,
    GatewayError,
    ListOffsets,
    ListTopics,
    OffsetSpec,
    Produce,
    TopicDescription,
    now_us,
)
from gateway.observability import (
    PROTOCOL_ERRORS,
    RECORDS_IN,
    RECORDS_OUT,
    REQUEST_LATENCY,
    REQUESTS,
    labelled,
    limit_hit,
    protocol_error,
)
from gateway.protocols.answers import (
    COALESCE_BYTES,
    AnswerBudget,
    holding,
    read_then_wait,
)
from gateway.protocols.driver import Connection, drive, run_steps
from gateway.protocols.kafka import context as modern_context
from gateway.protocols.kafka import dispatch as modern
from gateway.protocols.kafka.frames import Frames, ModernRequest
from gateway.protocols.kafka08 import STEP_LIMIT, Kafka08ListenerConfig
from gateway.protocols.kafka08 import codec as c
from gateway.protocols.kafka08.codec import ApiKey, Request
from gateway.protocols.kafka08.compression import CODECS
from gateway.protocols.kafka08.messageset import InvalidMessageSet, encode_fetch, produce_steps

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gateway.protocols.base import ConnectionContext

PROTOCOL = "kafka08"
RECEIVE_BYTES = 256 * 1024
PRODUCE_PIPELINE = 4
OFFSET_METADATA_MAX = 4096

UNKNOWN = -1
ERROR_CODES: dict[ErrorCode, int] = {
    ErrorCode.OFFSET_OUT_OF_RANGE: 1,
    ErrorCode.CORRUPT_MESSAGE: 2,
    ErrorCode.UNKNOWN_TOPIC: 3,
    ErrorCode.UNKNOWN_PARTITION: 3,
    ErrorCode.BACKEND_UNAVAILABLE: 5,  # LeaderNotAvailable: retriable for every 0.8 client
    ErrorCode.TIMEOUT: 7,
    ErrorCode.RECORD_TOO_LARGE: 10,
    ErrorCode.NOT_COORDINATOR: 16,
    ErrorCode.INVALID_TOPIC: 17,
}
"""The one table from canonical errors to Kafka 0.8 codes (docs/protocols/kafka08.md); everything
else is -1 Unknown (codes above 20 do not exist for 0.8 clients)."""

CLIENT_ERRORS = frozenset(
    {
        ErrorCode.OFFSET_OUT_OF_RANGE,
        ErrorCode.UNKNOWN_TOPIC,
        ErrorCode.UNKNOWN_PARTITION,
        ErrorCode.INVALID_TOPIC,
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.RECORD_TOO_LARGE,
    }
)
"""Errors caused by what the client asked for: counted in gateway_protocol_errors_total."""

API_NAMES: dict[int, str] = {  # keyed by ApiKey, looked up by a request's int api_key
    ApiKey.PRODUCE: "produce",
    ApiKey.FETCH: "fetch",
    ApiKey.OFFSETS: "offsets",
    ApiKey.METADATA: "metadata",
    ApiKey.OFFSET_COMMIT: "offset_commit",
    ApiKey.OFFSET_FETCH: "offset_fetch",
    ApiKey.CONSUMER_METADATA: "consumer_metadata",
    ApiKey.API_VERSIONS: "api_versions",
}


def error_code(code: ErrorCode) -> int:
    return ERROR_CODES.get(code, UNKNOWN)


_WAITING_APIS = frozenset({ApiKey.FETCH, 11, 14})
"""Today's APIs whose answer may wait (a Fetch's max wait, a JoinGroup or SyncGroup until its
group's round ends)."""


class CloseConnection(Exception):
    """End the connection without an answer (acks-0 failure, refused request)."""


class _Pipelined:
    """A pipelined produce: ``released`` when the next one may store (its own append is on its
    way to the backend, or it is done), ``done`` when it has answered (or failed)."""

    __slots__ = ("released", "done")

    def __init__(self) -> None:
        self.released = trio.Event()
        self.done = trio.Event()


class Session:
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        cfg = ctx.listener
        assert isinstance(cfg, Kafka08ListenerConfig)
        self.cfg = cfg
        self.log = ctx.log.bind(protocol=PROTOCOL, peer=ctx.peer)
        self.kctx = modern_context.KafkaContext.for_connection(ctx, self.log)
        self.conn = self.framing = Frames(cfg.max_frame_bytes, modern.router(self.kctx))
        self.receive_bytes = RECEIVE_BYTES
        self.codec = CODECS.get(cfg.fetch_compression, 0)
        self.node_id = cfg.node_id
        self.message_max_bytes = cfg.message_max_bytes
        self.api_versions = cfg.api_versions != "off"
        self.max_answer_bytes = cfg.max_answer_bytes
        self._duplicates_logged = False
        self._records_in = labelled(RECORDS_IN, PROTOCOL)
        self._records_out = labelled(RECORDS_OUT, PROTOCOL)
        self._handlers: dict[int, Callable[[Request], Awaitable[Any]]] = {
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.OFFSETS: self.offsets,
            ApiKey.METADATA: self.metadata,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.CONSUMER_METADATA: self.consumer_metadata,
            ApiKey.API_VERSIONS: self.api_versions_request,
        }
        self._metrics: dict[tuple[int, str], Any] = {}
        self._latency: dict[int, Any] = {}
        self._pipeline_depth = max(1, min(PRODUCE_PIPELINE, cfg.max_in_flight))
        self._produces: list[_Pipelined] = []  # pipelined produces not yet answered, oldest first

    # ------------------------------------------------------------------ the driver's calls
    async def handle(self, request: Request, io: Connection) -> bool:
        """Answer one request in order: a pipelined produce answers itself from its task; any
        other request waits until every earlier produce has answered. Answers to pipelined
        requests go out together, but never wait behind a long-polling Fetch."""
        if isinstance(request, ModernRequest):
            return await self._modern(request, io)
        if (
            request.api_key == ApiKey.PRODUCE
            and request.body.acks != 0
            and self._pipeline_depth > 1
            and (self._produces or self.conn.buffered)
        ):
            await io.flush()  # earlier answers go first
            await self._pipeline_produce(io, request)
            return True
        await self._wait_produces(0)  # earlier produces answer first
        if request.api_key == ApiKey.FETCH:
            await io.flush()
            with holding():  # the answer's share of the pool, given back once it is sent
                return await self._answer(request, io)
        return await self._answer(request, io)

    async def _answer(self, request: Request, io: Connection) -> bool:
        try:
            response = await self.handle_request(request)
        except CloseConnection:
            return False
        if isinstance(response, list):
            await io.send_pieces(response)
        elif response is not None:
            io.answer(response)
        return True

    async def _modern(self, request: ModernRequest, io: Connection) -> bool:
        """Today's APIs (``gateway.protocols.kafka``), in order after every earlier produce."""
        await self._wait_produces(0)
        if request.api_key in _WAITING_APIS:
            await io.flush()  # the answers before it go now, not after its wait
        if request.api_key == ApiKey.FETCH:
            with holding():  # the answer's share of the pool, given back once it is sent
                if not await self._serve_modern(request, io):
                    return False
                await io.flush()
                return not self.kctx.closing
        if not await self._serve_modern(request, io):
            return False
        return not self.kctx.closing  # e.g. a failed SASL exchange: answer, then close

    async def _serve_modern(self, request: ModernRequest, io: Connection) -> bool:
        try:
            answer = await modern.serve(self.kctx, request.payload)
        except modern_context.CloseConnection:
            return False
        if answer is not None:
            io.answer(answer)
        return True

    async def settle(self, io: Connection) -> None:
        """Before the last flush: every pipelined produce answers first."""
        await self._wait_produces(0)

    async def _wait_produces(self, at_most: int) -> None:
        """Until at most ``at_most`` pipelined produces are unanswered."""
        while len(self._produces) > at_most:
            await self._produces[0].done.wait()

    async def _pipeline_produce(self, io: Connection, request: Request) -> None:
        await self._wait_produces(self._pipeline_depth - 1)
        previous = self._produces[-1] if self._produces else None
        this = _Pipelined()
        self._produces.append(this)
        io.start_soon(self._produce_in_pipeline, io, request, previous, this)

    async def _produce_in_pipeline(
        self,
        io: Connection,
        request: Request,
        previous: _Pipelined | None,
        this: _Pipelined,
    ) -> None:
        """Parse now; store once the previous produce's append is on its way to the backend
        (``APPEND_SENT``: a one-partition request over the Kafka backend) or answered; answer
        right after the previous one answered."""
        try:
            start = time.perf_counter()
            parsed = await self._parse_produce(request)
            if previous is not None:
                await previous.released.wait()
            if io.failure is not None:
                return
            one_partition = len(parsed) == 1 and len(parsed[0][1]) == 1
            token = APPEND_SENT.set(this.released.set) if one_partition else None
            try:
                body = await self._store_produce(request, parsed)
            finally:
                if token is not None:
                    APPEND_SENT.reset(token)
            if previous is not None:
                await previous.done.wait()
            if io.failure is not None:
                return
            self._observe(request.api_key, start)
            await io.send(c.ServerConnection.send_response(request, body))
        except Exception as exc:
            io.fail(exc)
        finally:
            self._produces.remove(this)
            this.released.set()
            this.done.set()

    async def handle_request(self, request: Request) -> bytes | list[Any] | None:
        handler = self._handlers.get(request.api_key)
        if handler is None or (request.api_key == ApiKey.API_VERSIONS and not self.api_versions):
            protocol_error(
                self.log,
                PROTOCOL,
                "unknown_api",
                api_key=request.api_key,
                api_version=request.api_version,
            )
            raise CloseConnection
        start = time.perf_counter()
        body = await handler(request)
        self._observe(request.api_key, start)
        if body is None:
            return None
        if request.api_key == ApiKey.FETCH:
            pieces = c.ServerConnection.response_pieces(request, body)
            if sum(len(p) for p in pieces) >= COALESCE_BYTES:
                return pieces  # a large answer goes out as built, not copied into one frame
            return b"".join(pieces)
        return c.ServerConnection.send_response(request, body)

    def _observe(self, api: int, start: float) -> None:
        latency = self._latency.get(api)
        if latency is None:
            latency = self._latency[api] = labelled(REQUEST_LATENCY, PROTOCOL, API_NAMES[api])
        latency.observe(time.perf_counter() - start)

    def _count(self, api: int, outcome: str) -> None:
        key = (api, outcome)
        counter = self._metrics.get(key)
        if counter is None:
            counter = self._metrics[key] = labelled(REQUESTS, PROTOCOL, API_NAMES[api], outcome)
        counter.inc()

    def _error(self, api: int, exc: GatewayError, **fields: Any) -> int:
        code = error_code(exc.code)
        if exc.code in CLIENT_ERRORS:
            protocol_error(self.log, PROTOCOL, exc.code.value, error=exc.message, **fields)
        elif code == UNKNOWN:
            self.log.warning("request_failed", api=API_NAMES[api], error=str(exc), **fields)
        self._count(api, str(code))
        return code

    # ------------------------------------------------------------------ produce
    async def produce(self, request: Request) -> Any:
        return await self._store_produce(request, await self._parse_produce(request))

    async def _parse_produce(self, request: Request) -> list[tuple[Any, list[tuple[Any, Any]]]]:
        """Each topic with its partitions' parsed batches (or the InvalidMessageSet they raised):
        the CPU part of a produce, done before it is this request's turn to store; a set of
        more than ``max_records_per_step`` messages in steps, other connections served
        between two."""
        stamp = now_us()
        parsed = []
        step = self.cfg.max_records_per_step
        limit = {STEP_LIMIT: step}
        for t in request.body.topics:
            partitions = []
            for p in t.partitions:
                try:
                    batch: Any = await run_steps(
                        produce_steps(p.message_set, stamp, self.message_max_bytes, step),
                        partial(limit_hit, STEP_LIMIT, PROTOCOL, self.log, topic=t.topic, **limit),
                    )
                except InvalidMessageSet as exc:
                    batch = exc
                partitions.append((p, batch))
            parsed.append((t, partitions))
        return parsed

    async def _store_produce(
        self, request: Request, parsed: list[tuple[Any, list[tuple[Any, Any]]]]
    ) -> Any:
        body = request.body
        acks = body.acks
        acks_model = Acks.NONE if acks == 0 else Acks.LEADER if acks == 1 else Acks.ALL
        topics = []
        failed = False
        execute = self.core.execute
        for t, partitions in parsed:
            results = []
            for p, batch in partitions:
                if isinstance(batch, InvalidMessageSet):
                    protocol_error(
                        self.log, PROTOCOL, "invalid_message", error=str(batch), topic=t.topic
                    )
                    self._count(ApiKey.PRODUCE, str(batch.code))
                    results.append(c.PRODUCE_RESULT(p.partition, batch.code, -1))
                    failed = True
                    continue
                try:
                    result = await execute(
                        Produce(
                            t.topic if t.topic is not None else "",
                            batch,
                            p.partition,
                            acks=acks_model,
                            timeout_ms=max(0, body.timeout_ms),
                        )
                    )
                except GatewayError as exc:
                    code = self._error(ApiKey.PRODUCE, exc, topic=t.topic, partition=p.partition)
                    results.append(c.PRODUCE_RESULT(p.partition, code, -1))
                    failed = True
                    continue
                self._records_in.inc(batch.count)
                self._count(ApiKey.PRODUCE, "ok")
                results.append(c.PRODUCE_RESULT(p.partition, 0, result.base_offset))
            topics.append(c.PRODUCE_TOPIC_RESULT(t.topic, results))
        if acks == 0:
            if failed:
                raise CloseConnection  # the only error signal an acks-0 producer gets
            return None
        if request.api_version >= 1:
            return c.PRODUCE_RESPONSE_V1(topics, 0)
        return c.PRODUCE_RESPONSE(topics)

    # ------------------------------------------------------------------ fetch
    async def _fetch_partition(
        self, topic: str, p: Any, max_wait_ms: int, min_bytes: int, budget: AnswerBudget
    ) -> tuple[Any, int]:
        """(FetchPartitionResult, bytes of data) for one partition, within what is left of the
        answer's budget."""
        share, bounded = budget.share(p.max_bytes)
        try:
            result = await self.core.execute(
                Fetch(
                    topic,
                    p.partition,
                    p.offset,
                    max_bytes=max(1, share),
                    max_wait_ms=max(0, max_wait_ms),
                    min_bytes=max(1, min(min_bytes, share)),
                )
            )
        except GatewayError as exc:
            code = self._error(ApiKey.FETCH, exc, topic=topic, partition=p.partition)
            return c.FETCH_RESULT(p.partition, code, -1, b""), -1
        data, count = encode_fetch(result.batches, share, self.codec)
        if bounded:
            if not count:
                # only the start of a message fits what is left: send none of it, or a 0.8
                # client would take the partition for one holding a message too large to fetch
                data = b""
            if p.offset + count < result.high_watermark:
                budget.hit = True  # the budget, not MaxBytes, left records of it out
        budget.spend(len(data))
        if count:
            self._records_out.inc(count)
        self._count(ApiKey.FETCH, "ok")
        return c.FETCH_RESULT(p.partition, 0, result.high_watermark, data), len(data)

    def _wanted(self, body: Any) -> list[tuple[str, Any]]:
        """The partitions a Fetch asks for, each once: like the 0.8 broker (which reads them
        into a map), a partition listed again takes the place of its earlier entry, answered
        where it was first listed."""
        wanted: dict[tuple[str, int], tuple[str, Any]] = {}
        listed = 0
        for t in body.topics:
            topic = t.topic if t.topic is not None else ""
            for p in t.partitions:
                wanted[(topic, p.partition)] = (topic, p)
                listed += 1
        if listed != len(wanted):
            PROTOCOL_ERRORS.labels(protocol=PROTOCOL, kind="duplicate_partition").inc()
            if not self._duplicates_logged:  # once per connection: a client may repeat it
                self._duplicates_logged = True
                self.log.warning(
                    "protocol_error",
                    kind="duplicate_partition",
                    error="a Fetch lists a partition more than once: answered once",
                    listed=listed,
                    distinct=len(wanted),
                )
        return list(wanted.values())

    async def fetch(self, request: Request) -> Any:
        body = request.body
        wanted = self._wanted(body)
        if len(wanted) == 1:  # the common case: the core's long poll does all the waiting
            topic, p = wanted[0]
            results = [(topic, await self._fetch_one(topic, p, body.max_wait_ms, body.min_bytes))]
        else:
            results = await self._fetch_many(wanted, body.max_wait_ms, body.min_bytes)
        topics: dict[str, list[Any]] = {}
        for topic, result in results:
            topics.setdefault(topic, []).append(result)
        answer = [c.FETCH_TOPIC_RESULT(name, parts) for name, parts in topics.items()]
        if request.api_version >= 1:
            return c.FETCH_RESPONSE_V1(0, answer)
        return c.FETCH_RESPONSE(answer)

    async def _fetch_one(self, topic: str, p: Any, max_wait_ms: int, min_bytes: int) -> Any:
        """One partition, a long poll within the answer pool (:func:`read_then_wait`)."""

        def read(wait: int, budget: AnswerBudget) -> Awaitable[tuple[Any, int]]:
            return self._fetch_partition(
                topic, p, wait, min_bytes if wait == max_wait_ms else 1, budget
            )

        (result, _), budget = await read_then_wait(
            p.max_bytes,
            self.max_answer_bytes,
            max_wait_ms,
            read,
            lambda got: got[1] >= max(1, min_bytes) or got[1] < 0,
        )
        budget.trim()
        budget.report(PROTOCOL, self.log, peer=self.ctx.peer)
        return result

    async def _fetch_many(
        self, wanted: list[tuple[str, Any]], max_wait_ms: int, min_bytes: int
    ) -> list[tuple[str, Any]]:
        """MinBytes over all partitions, MaxWaitTime for the whole request."""

        async def one_pass() -> tuple[list[tuple[str, Any]], int, bool, AnswerBudget]:
            out = []
            total = 0
            error = False
            budget = await AnswerBudget.take(
                sum(max(0, p.max_bytes) for _, p in wanted), self.max_answer_bytes
            )
            for topic, p in wanted:
                result, size = await self._fetch_partition(topic, p, 0, 1, budget)
                out.append((topic, result))
                if size < 0:
                    error = True
                else:
                    total += size
            budget.trim()
            return out, total, error, budget

        results, total, error, budget = await one_pass()
        if error or max_wait_ms <= 0 or total >= max(1, min_bytes) or not wanted:
            budget.report(PROTOCOL, self.log, peer=self.ctx.peer)
            return results
        budget.release()
        del results, budget  # nothing worth keeping while waiting
        with trio.move_on_after(max_wait_ms / 1000):
            async with trio.open_nursery() as nursery:

                async def wait_one(topic: str, p: Any) -> None:
                    try:
                        result = await self.core.execute(
                            Fetch(topic, p.partition, p.offset, 1, 1, max_wait_ms, 1)
                        )
                    except GatewayError:
                        result = None
                    if result is None or result.count:
                        nursery.cancel_scope.cancel()

                for topic, p in wanted:
                    nursery.start_soon(wait_one, topic, p)
        results, _, _, budget = await one_pass()
        budget.report(PROTOCOL, self.log, peer=self.ctx.peer)
        return results

    # ------------------------------------------------------------------ offsets
    async def offsets(self, request: Request) -> Any:
        topics = []
        for t in request.body.topics:
            results = []
            for p in t.partitions:
                try:
                    offsets = await self._offsets_for(
                        t.topic or "", p.partition, p.time, p.max_offsets
                    )
                    self._count(ApiKey.OFFSETS, "ok")
                    results.append(c.OFFSETS_RESULT(p.partition, 0, offsets))
                except GatewayError as exc:
                    code = self._error(ApiKey.OFFSETS, exc, topic=t.topic, partition=p.partition)
                    results.append(c.OFFSETS_RESULT(p.partition, code, []))
            topics.append(c.OFFSETS_TOPIC_RESULT(t.topic, results))
        return c.OFFSETS_RESPONSE(topics)

    async def _offsets_for(
        self, topic: str, partition: int, when: int, max_offsets: int
    ) -> list[int]:
        """Kafka 0.8 semantics over one segment: -1 -> [HW, log start], -2 -> [log start],
        a time -> [the first offset at or after it]; descending, at most ``max_offsets``."""
        if when == -1:
            r = await self.core.execute(ListOffsets(topic, partition, OffsetSpec.LATEST))
            found = [r.high_watermark]
            if r.log_start_offset < r.high_watermark:
                found.append(r.log_start_offset)
        elif when == -2:
            r = await self.core.execute(ListOffsets(topic, partition, OffsetSpec.EARLIEST))
            found = [r.log_start_offset]
        else:
            try:
                r = await self.core.execute(ListOffsets(topic, partition, max(0, when) * 1000))
            except GatewayError as exc:
                if exc.code is not ErrorCode.UNSUPPORTED:
                    raise
                return []
            found = [r.offset]
        return found[: max(0, max_offsets)]

    # ------------------------------------------------------------------ metadata
    async def metadata(self, request: Request) -> Any:
        requested = request.body.topics
        if requested:
            names = [t if t is not None else "" for t in requested]
        else:
            names = [info.name for info in await self.core.execute(ListTopics())]
        node = self.node_id
        topics = []
        creations = self.ctx.config.server.max_topics_created_per_request
        for name in names:
            try:
                desc, created = await self._describe(name, bool(requested), creations > 0)
                if desc is None:  # this request's creations are used up: the client retries
                    limit_hit("max_topics_created_per_request", PROTOCOL, self.log, topic=name)
                    self._count(ApiKey.METADATA, "5")
                    topics.append(c.TOPIC_METADATA(5, name, []))  # LeaderNotAvailable
                    continue
                creations -= created
            except GatewayError as exc:
                code = error_code(exc.code)
                self._count(ApiKey.METADATA, str(code))
                topics.append(c.TOPIC_METADATA(code, name, []))
                continue
            parts = [
                c.PARTITION_METADATA(0, p.partition, node, [node], [node]) for p in desc.partitions
            ]
            topics.append(c.TOPIC_METADATA(0, name, parts))
        self._count(ApiKey.METADATA, "ok")
        brokers = [c.BROKER(node, self.ctx.advertised_host, self.ctx.advertised_port)]
        return c.METADATA_RESPONSE(brokers, topics)

    async def _describe(
        self, name: str, create: bool, may_create: bool
    ) -> tuple[TopicDescription | None, bool]:
        """(the topic, whether this call created it); (None, False) when it would have to be
        created but the request's ``max_topics_created_per_request`` are used up."""
        try:
            return await self.core.execute(DescribeTopic(name)), False
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNKNOWN_TOPIC or not create:
                raise
            if not self.ctx.config.server.auto_create_topics:
                raise
            if not may_create:
                return None, False
        return await self.core.execute(DescribeTopic(name, create=True)), True

    # ------------------------------------------------------------------ group offsets
    async def offset_commit(self, request: Request) -> Any:
        body = request.body
        v1 = request.api_version >= 1
        group = body.group or ""
        topics = []
        for t in body.topics:
            results = []
            for p in t.partitions:
                metadata = p.metadata or ""
                if len(metadata) > OFFSET_METADATA_MAX:
                    results.append(c.COMMIT_RESULT(p.partition, 12))
                    self._count(ApiKey.OFFSET_COMMIT, "12")
                    continue
                try:
                    await self.core.execute(
                        CommitOffset(
                            group,
                            t.topic or "",
                            p.partition,
                            p.offset,
                            metadata,
                            body.generation if v1 else -1,
                            (body.member_id or "") if v1 else "",
                        )
                    )
                    results.append(c.COMMIT_RESULT(p.partition, 0))
                    self._count(ApiKey.OFFSET_COMMIT, "ok")
                except GatewayError as exc:
                    code = self._error(ApiKey.OFFSET_COMMIT, exc, group=group, topic=t.topic)
                    results.append(c.COMMIT_RESULT(p.partition, code))
            topics.append(c.COMMIT_TOPIC_RESULT(t.topic, results))
        return c.COMMIT_RESPONSE(topics)

    async def offset_fetch(self, request: Request) -> Any:
        body = request.body
        v0 = request.api_version == 0
        group = body.group or ""
        topics = []
        for t in body.topics:
            results = []
            for partition in t.partitions:
                try:
                    got = await self.core.execute(FetchOffset(group, t.topic or "", partition))
                except GatewayError as exc:
                    code = self._error(ApiKey.OFFSET_FETCH, exc, group=group, topic=t.topic)
                    results.append(c.OFFSET_FETCH_RESULT(partition, -1, "", code))
                    continue
                self._count(ApiKey.OFFSET_FETCH, "ok")
                if got.offset < 0:
                    # nothing committed: v1 (Kafka store) answers 0, v0 (ZooKeeper) answers 3
                    results.append(c.OFFSET_FETCH_RESULT(partition, -1, "", 3 if v0 else 0))
                else:
                    results.append(
                        c.OFFSET_FETCH_RESULT(partition, got.offset, got.metadata or "", 0)
                    )
            topics.append(c.OFFSET_FETCH_TOPIC_RESULT(t.topic, results))
        return c.OFFSET_FETCH_RESPONSE(topics)

    async def consumer_metadata(self, request: Request) -> Any:
        self._count(ApiKey.CONSUMER_METADATA, "ok")
        return c.CONSUMER_METADATA_RESPONSE(
            0, self.node_id, self.ctx.advertised_host, self.ctx.advertised_port
        )

    async def api_versions_request(self, request: Request) -> Any:
        self._count(ApiKey.API_VERSIONS, "ok")
        return c.api_versions_response(request.api_version)


async def handle_connection(stream: trio.abc.Stream, ctx: ConnectionContext) -> None:
    """Serve one Kafka 0.8 connection until the peer closes, it idles out or the gateway drains."""
    await drive(stream, ctx, Session(ctx))
