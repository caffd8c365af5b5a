"""One Cursus connection: frames in, commands of the model to the core, replies out in order.

Replies follow the Go broker at ``c436b45`` (standalone) word for word, except where the issue
and docs/protocols/cursus.md ask for the newer dialect that cursus-client 0.1.1 needs: FETCH_OFFSET
``OK offset=N`` (a listener option), METADATA, FIND_COORDINATOR, rebalance tokens (GEN_MISMATCH,
member_not_found, NOT_OWNER) from HEARTBEAT and commits, an error reply for a batch to an unknown
topic, the batch header's partition honoured, ``last_offset`` = last assigned offset, a JSON ack
for acks 0 and ``STREAM_CONTROL`` before a stream closes. That is the ``2026-04`` dialect; a
connection in the current broker's ``2026-08`` dialect (dialect.py) has the topic and group commands
answered by dialect_2026_08.py instead. Idempotent produces go through producers.py (durable state).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import trio

from gateway.core.partitioner import partition_for_key
from gateway.model import (
    Acks,
    CommitOffset,
    ErrorCode,
    Fetch,
    FetchOffset,
    FetchResult,
    GatewayError,
    Heartbeat,
    ListOffsets,
    OffsetSpec,
    Partitioning,
    Produce,
    RecordBatch,
    TopicInfo,
    now_us,
)
from gateway.observability import (
    BYTES_OUT,
    RECORDS_IN,
    RECORDS_OUT,
    REQUEST_LATENCY,
    REQUESTS,
    labelled,
    limit_hit,
    protocol_error,
)
from gateway.protocols.answers import AnswerBudget, holding, read_then_wait
from gateway.protocols.base import ConnectionContext
from gateway.protocols.cursus import CursusListenerConfig, codec
from gateway.protocols.cursus.block import CURSUS_BLOCK
from gateway.protocols.cursus.codec import (
    Ack,
    BatchDecodeError,
    FrameBuffer,
    RemoteProtocolError,
)
from gateway.protocols.cursus.dialect import marks_2026_08
from gateway.protocols.cursus.dialect_2026_08 import CommandsAug2026
from gateway.protocols.cursus.gotext import go_atoi, go_quote, go_uint, positional
from gateway.protocols.cursus.groups import GroupCommands
from gateway.protocols.cursus.replies import ReplyFrame, build_reply_frame
from gateway.protocols.cursus.state import DEFAULT_GROUP, state_for
from gateway.protocols.cursus.topics import H_IDEMPOTENT, TopicCommands
from gateway.protocols.driver import Connection, drive
from gateway.streams import ConnectionTimeout

PROTOCOL = "cursus"
RECV_BYTES = 1 << 18
DEFAULT_MAX_POLL_RECORDS = 8192

MALFORMED = "ERROR: malformed input - missing topic or payload"

HELP = """Available commands:
CREATE topic=<name> [partitions=<N>] [idempotent=<true|false>] - create topic (default partitions=4, idempotent=false)
DELETE topic=<name> - delete topic
LIST - list all topics
PUBLISH topic=<name> acks=<0|1> message=<text> producerId=<id> [seqNum=<N> epoch=<N>] [isIdempotent=<true|false>] - publish message
CONSUME topic=<name> partition=<N> offset=<N> group=<name> [autoOffsetReset=<earliest|latest>] - consume messages
JOIN_GROUP topic=<name> group=<name> member=<id> - join consumer group
SYNC_GROUP topic=<name> group=<name> member=<id> generation=<N> - sync group assignments
LEAVE_GROUP group=<name> member=<id> - leave consumer group
HEARTBEAT topic=<name> group=<name> member=<id> - send heartbeat
COMMIT_OFFSET topic=<name> partition=<N> group=<name> offset=<N> - commit offset
FETCH_OFFSET topic=<name> partition=<N> group=<name> - fetch committed offset
REGISTER_GROUP topic=<name> group=<name> - register consumer group
GROUP_STATUS group=<name> - get group status
DESCRIBE topic=<name> - get topic/partition metadata (leader, ISR, offsets)
APPEND_STREAM topic=<name> key=<aggregate_key> version=<N> event_type=<type> message=<payload> - append event to stream
READ_STREAM topic=<name> key=<aggregate_key> [from_version=<N>] - read events from stream (binary response)
SAVE_SNAPSHOT topic=<name> key=<aggregate_key> version=<N> message=<json_payload> - save aggregate snapshot
READ_SNAPSHOT topic=<name> key=<aggregate_key> - read latest snapshot
STREAM_VERSION topic=<name> key=<aggregate_key> - get current stream version
HELP - show this help
EXIT - exit"""  # noqa: E501 - the broker's text, verbatim

# the broker's isCommand keywords (prefix match), plus the newer dialect's METADATA/FIND_COORDINATOR
KEYWORDS = (
    "CREATE", "DELETE", "LIST", "LIST_CLUSTER", "PUBLISH", "CONSUME", "STREAM", "HELP",
    "HEARTBEAT", "JOIN_GROUP", "LEAVE_GROUP", "COMMIT_OFFSET", "BATCH_COMMIT", "REGISTER_GROUP",
    "GROUP_STATUS", "FETCH_OFFSET", "LIST_GROUPS", "SYNC_GROUP", "DESCRIBE",
    "APPEND_STREAM", "READ_STREAM", "SAVE_SNAPSHOT", "READ_SNAPSHOT", "STREAM_VERSION",
    "METADATA", "FIND_COORDINATOR",
)  # fmt: skip
EVENT_SOURCING = ("APPEND_STREAM ", "READ_STREAM ", "SAVE_SNAPSHOT ", "READ_SNAPSHOT ",
                  "STREAM_VERSION ")  # fmt: skip
ACKS = {"0": Acks.NONE, "1": Acks.LEADER, "-1": Acks.ALL, "all": Acks.ALL}

# ---------------------------------------------------------------------------------- replies


@dataclass
class StreamSpec:
    topic: str
    partition: int
    group: str
    member: str
    generation: int
    offset: int
    batch: int
    committed: int = -1


@dataclass
class Reply:
    body: bytes | bytearray | None = None
    close: bool = False
    stream: StreamSpec | None = None
    framed: bool = False  # body already carries its length prefix


@dataclass
class CommonArgs:
    topic: str
    partition: int
    group: str
    member: str
    generation: int
    offset: int | None
    batch: int
    wait_ms: int
    reset: str


# ---------------------------------------------------------------------------------- session


class CursusSession(TopicCommands, GroupCommands, CommandsAug2026):
    def __init__(self, ctx: ConnectionContext) -> None:
        self.ctx = ctx
        self.core = ctx.core
        cfg = ctx.listener
        assert isinstance(cfg, CursusListenerConfig)
        self.cfg = cfg
        self.state = state_for(ctx.core)
        self.log = ctx.log.bind(protocol=PROTOCOL, peer=ctx.peer)
        self._interrupt: trio.CancelScope | None = None
        self._api = "unknown"
        self._handlers = {
            "CREATE ": self._create,
            "DELETE ": self._delete,
            "PUBLISH ": self._publish,
            "REGISTER_GROUP ": self._register_group,
            "JOIN_GROUP ": self._join_group,
            "SYNC_GROUP ": self._sync_group,
            "LEAVE_GROUP ": self._leave_group,
            "FETCH_OFFSET ": self._fetch_offset,
            "GROUP_STATUS ": self._group_status,
            "DESCRIBE ": self._describe,
            "HEARTBEAT ": self._heartbeat,
            "COMMIT_OFFSET ": self._commit_offset,
            "BATCH_COMMIT ": self._batch_commit,
            "METADATA ": self._metadata,
            "FIND_COORDINATOR ": self._find_coordinator,
        }
        # the commands whose replies differ in the current broker's dialect (dialect.py)
        self._handlers_2026_08 = {
            "CREATE ": self._create_2026_08,
            "DELETE ": self._delete_2026_08,
            "PUBLISH ": self._publish_2026_08,
            "REGISTER_GROUP ": self._register_group_2026_08,
            "JOIN_GROUP ": self._join_group_2026_08,
            "SYNC_GROUP ": self._sync_group_2026_08,
            "LEAVE_GROUP ": self._leave_group_2026_08,
            "HEARTBEAT ": self._heartbeat_2026_08,
            "COMMIT_OFFSET ": self._commit_offset_2026_08,
            "BATCH_COMMIT ": self._batch_commit_2026_08,
            "FETCH_OFFSET ": self._fetch_offset_2026_08,
            "DESCRIBE ": self._describe_2026_08,
            "GROUP_STATUS ": self._group_status_2026_08,
            "METADATA ": self._metadata_2026_08,
            "FIND_COORDINATOR ": self._find_coordinator_2026_08,
        }
        self.dialect = "2026-08" if self.cfg.dialect == "2026-08" else "2026-04"

    def interrupt(self) -> None:
        """The gateway drains: end a running stream (its position is committed, CLOSE sent)."""
        if self._interrupt is not None:
            self._interrupt.cancel()

    async def handle(self, body: bytes) -> Reply:
        """One request frame -> its reply (and whether to close or start streaming)."""
        started = time.perf_counter()
        self._api = "unknown"
        try:
            reply = await self._dispatch(body)
        except GatewayError as exc:  # a backend failure nobody mapped: say so, keep serving
            self.log.warning("request_failed", api=self._api, error=str(exc))
            reply = Reply(f"ERROR: {exc.code.value}: {exc.message}".encode())
        except Exception:
            self.log.exception("request_crashed", api=self._api)
            reply = Reply(b"ERROR: internal error")
        outcome = "ok"
        if reply.body is not None and (
            reply.body.startswith(b"ERROR") or reply.body.startswith(b'{"status":"ERROR"')
        ):
            outcome = "error"
        labelled(REQUESTS, PROTOCOL, self._api, outcome).inc()
        labelled(REQUEST_LATENCY, PROTOCOL, self._api).observe(time.perf_counter() - started)
        return reply

    async def _dispatch(self, body: bytes) -> Reply:
        try:
            body = codec.decompress(body, self.cfg.compression)
        except RemoteProtocolError as exc:  # the broker drops the connection without a reply
            protocol_error(self.log, PROTOCOL, exc.kind, error=str(exc))
            return Reply(close=True)
        if codec.is_batch(body):
            self._api = "batch"
            return await self._batch(body)
        cmd = codec.decode_text(body)
        text = positional(cmd.text) or cmd.text
        upper = text.upper()
        if not upper.startswith(KEYWORDS):
            if cmd.envelope is None:  # neither an envelope nor a command: closed, no reply
                protocol_error(self.log, PROTOCOL, "malformed_input", input=text[:80])
                return Reply(close=True)
            protocol_error(self.log, PROTOCOL, "malformed_input", input=text[:80])
            return Reply(MALFORMED.encode(), close=True)
        result = await self._command(text.strip(), upper.strip())
        return result if isinstance(result, Reply) else Reply(_bytes(result))

    async def _command(self, cmd: str, upper: str) -> str | bytes | Reply:
        if self.dialect == "2026-04" and self.cfg.dialect == "auto" and marks_2026_08(upper, cmd):
            self.dialect = "2026-08"  # this connection speaks the current SDK from now on
        if upper.startswith("STREAM "):
            self._api = "stream"
            return await self._stream(cmd)
        if upper.startswith("CONSUME "):
            self._api = "consume"
            return await self._consume(cmd)
        if upper in ("HELP", "LIST_CLUSTER", "LIST"):
            self._api = upper.lower()
            if upper == "HELP":
                return HELP
            if upper == "LIST_CLUSTER":
                return "ERROR: distribution not enabled"
            return await (self._list_2026_08() if self.dialect == "2026-08" else self._list())
        handlers = self._handlers_2026_08 if self.dialect == "2026-08" else self._handlers
        for prefix, handler in handlers.items():
            if upper.startswith(prefix):
                self._api = prefix.strip().lower()
                return await handler(cmd[len(prefix) :])
        for prefix, handler in self._handlers.items():
            if upper.startswith(prefix):
                self._api = prefix.strip().lower()
                return await handler(cmd[len(prefix) :])
        if upper.startswith(EVENT_SOURCING):
            self._api = "event_sourcing"
            return "ERROR: event sourcing commands are not supported by this gateway"
        protocol_error(self.log, PROTOCOL, "unknown_command", command=cmd[:80])
        return "ERROR: unknown command: " + cmd

    # ------------------------------------------------------------------ helpers
    async def _topic(self, name: str) -> TopicInfo | None:
        try:
            return await self.core.topic(name)
        except GatewayError as exc:
            if exc.code in (ErrorCode.UNKNOWN_TOPIC, ErrorCode.INVALID_TOPIC):
                return None
            raise

    # ------------------------------------------------------------------ produce
    async def _publish(self, args_text: str) -> str | bytes:
        args = codec.parse_params(args_text)
        topic = args.get("topic", "")
        if not topic:
            return "ERROR: missing topic parameter"
        message = args.get("message", "")
        if not message:
            return "ERROR: missing message parameter"
        producer_id = args.get("producerId", "")
        if not producer_id:
            return "ERROR: missing producerID parameter"
        acks = args.get("acks") or "1"
        idempotent = False
        if "isIdempotent" in args:
            value = args["isIdempotent"].lower()
            if value not in ("true", "false"):
                return (
                    f"ERROR: invalid isIdempotent value: {args['isIdempotent']}. "
                    "Expected 'true' or 'false'"
                )
            idempotent = value == "true"
        if acks.lower() not in ACKS:
            protocol_error(self.log, PROTOCOL, "bad_acks", acks=acks[:20])
            return f"ERROR: invalid acks value: {acks}. Expected -1 (all), 0, or 1"
        seq = 0
        if "seqNum" in args:
            parsed = go_uint(args["seqNum"])
            if parsed is None:
                return f'ERROR: invalid seqNum: strconv.ParseUint: parsing "{args["seqNum"]}": invalid syntax'  # noqa: E501
            seq = parsed
        epoch = 0
        if "epoch" in args:
            parsed = go_atoi(args["epoch"])
            if parsed is None:
                return f'ERROR: invalid epoch: strconv.ParseInt: parsing "{args["epoch"]}": invalid syntax'  # noqa: E501
            epoch = parsed
        info = await self._topic(topic)
        if info is None:
            return f"ERROR: topic '{topic}' does not exist"
        msg = codec.Message(
            seq=seq, producer_id=producer_id.encode(), epoch=epoch, payload=message.encode()
        )
        return await self._publish_record(topic, info, msg, acks, idempotent, None)

    async def _publish_record(
        self,
        topic: str,
        info: TopicInfo,
        msg: codec.Message,
        acks: str,
        idempotent: bool,
        partition: int | None,
    ) -> str | bytes:
        """Store one PUBLISH record and answer it (both dialects). Without ``partition``: the
        producer id's partition when idempotent (so a retry meets its state), else round robin."""
        record = codec.message_to_record(msg, now_us())
        producer_id = msg.producer_id.decode("utf-8", "replace")
        mode = ACKS[acks.lower()]
        try:
            if idempotent or info.get(H_IDEMPOTENT) == "true":
                if partition is None:
                    partition = partition_for_key(msg.producer_id, info.partitions)
                cmd = Produce(topic, RecordBatch([record]), partition=partition, acks=mode)
                result = await self.state.producers.produce(
                    self.core, cmd, producer_id, msg.epoch, msg.seq, 1,
                    self.cfg.max_idempotent_producers,
                )  # fmt: skip
            else:
                result = await self.core.execute(
                    Produce(topic, RecordBatch([record]), partition=partition,
                            partitioning=Partitioning.ROUND_ROBIN, acks=mode)
                )  # fmt: skip
        except GatewayError as exc:
            return codec.encode_ack(Ack("ERROR", error=_idempotence_error(exc)))
        labelled(RECORDS_IN, PROTOCOL).inc()
        if acks == "0":
            return "OK"
        seq = msg.seq
        return codec.encode_ack(Ack("OK", result.last_offset, msg.epoch, producer_id, seq, seq))

    async def _batch(self, body: bytes) -> Reply:
        try:
            batch = codec.decode_batch(body)
        except BatchDecodeError as exc:
            protocol_error(self.log, PROTOCOL, exc.kind, error=str(exc))
            if self.dialect == "2026-08":
                return Reply(f"ERROR: batch_decode_failed reason={go_quote(str(exc))}".encode())
            return Reply(f"ERROR: {exc}".encode())
        acks = batch.acks or "1"
        mode = ACKS.get(acks.lower())
        if mode is None:
            protocol_error(self.log, PROTOCOL, "bad_acks", acks=acks[:20])
            if self.dialect == "2026-08":
                return Reply(f"ERROR: invalid_acks value={acks}".encode())
            return Reply(
                f"ERROR: invalid acks value in batch: {acks}. Expected -1 (all), 0, or 1".encode()
            )
        info = await self._topic(batch.topic)
        if info is None:
            return Reply(f"ERROR: topic_not_found topic={batch.topic}".encode())
        if not 0 <= batch.partition < info.partitions:
            return Reply(f"ERROR: partition_not_found partition={batch.partition}".encode())
        # the 2026-08 broker answers acks 0 with a bare OK (2026-04 here: a JSON ack, which
        # cursus-client 0.1.1 needs, or it resends for ever)
        bare_ok = self.dialect == "2026-08" and acks == "0"
        if batch.count == 0:
            if bare_ok:
                return Reply(b"OK")
            if self.dialect == "2026-08":
                return Reply(b'ERROR: broker_error reason="empty batch messages"')
            return Reply(codec.encode_ack(Ack("ERROR", error="empty batch messages")))
        assert batch.starts is not None
        ts = now_us()
        records = RecordBatch(
            encoded=CURSUS_BLOCK.block(batch.body, batch.starts, ts),
            codec=CURSUS_BLOCK,
            count=batch.count,
            max_timestamp_us=ts,
        )
        seq_start = codec.message_ids(batch.body, 0)[0]
        seq_end, producer_id, epoch = codec.message_ids(batch.body, batch.starts[-1])
        pid = producer_id.decode("utf-8", "replace")
        idem = (batch.idempotent or info.get(H_IDEMPOTENT) == "true") and bool(pid)
        cmd = Produce(batch.topic, records, partition=batch.partition, acks=mode)
        try:
            if idem:
                result = await self.state.producers.produce(
                    self.core, cmd, pid, epoch, seq_start, batch.count,
                    self.cfg.max_idempotent_producers,
                )  # fmt: skip
            else:
                result = await self.core.execute(cmd)
            last_offset = result.last_offset
        except GatewayError as exc:
            if exc.code is not ErrorCode.DUPLICATE_SEQUENCE:
                ack = Ack("ERROR", 0, epoch, pid, seq_start, seq_end, error=_idempotence_error(exc))
                return Reply(codec.encode_ack(ack))
            last_offset = 0  # an older retry: stored before, acknowledge it again
        labelled(RECORDS_IN, PROTOCOL).inc(batch.count)
        if bare_ok:
            return Reply(b"OK")
        return Reply(codec.encode_ack(Ack("OK", last_offset, epoch, pid, seq_start, seq_end)))

    # ------------------------------------------------------------------ consume
    def _common(self, args: dict[str, str]) -> CommonArgs | str:
        """parseCommonArgs; a str is the error reply."""
        partition = 0
        if args.get("partition", ""):
            p = go_atoi(args["partition"])
            if p is None:
                return f"ERROR: invalid partition value: {args['partition']}"
            partition = p
        generation = -1
        if args.get("generation", ""):
            g = go_atoi(args["generation"])
            if g is None:
                return f"ERROR: invalid generation value: {args['generation']}"
            generation = g
        offset = None
        if args.get("offset", ""):
            offset = go_uint(args["offset"])
            if offset is None:
                return f"ERROR: invalid offset value: {args['offset']}"
        batch = go_atoi(args.get("batch"))
        wait = go_atoi(args.get("wait_ms"))
        group = args.get("group", "")
        return CommonArgs(
            args.get("topic", ""),
            partition,
            DEFAULT_GROUP if group in ("", "-") else group,
            args.get("member", ""),
            generation,
            offset,
            batch if batch and batch > 0 else DEFAULT_MAX_POLL_RECORDS,
            wait if wait and wait > 0 else 0,
            args.get("autoOffsetReset", "").lower(),
        )

    async def _partition_error(self, topic: str, partition: int) -> tuple[TopicInfo | None, str]:
        info = await self._topic(topic)
        if info is None:
            return None, f"ERROR: topic '{topic}' does not exist"
        if not 0 <= partition < info.partitions:
            return None, (
                f"ERROR: partition {partition} out of range for topic '{topic}' "
                f"(0-{info.partitions - 1})"
            )
        return info, ""

    async def _out_of_range(self, topic: str, partition: int, requested: int) -> str:
        r = await self.core.execute(ListOffsets(topic, partition, OffsetSpec.LATEST))
        return f"requested={requested} earliest={r.log_start_offset} latest={r.high_watermark}"

    async def _read_answer(
        self, a: CommonArgs, offset: int, wait_ms: int
    ) -> tuple[FetchResult | None, AnswerBudget]:
        """Read for one answer within its share of the answer pool (call inside ``holding``);
        no result when the pool had nothing left. A wait at the log end holds WAIT_BYTES at
        most (:func:`read_then_wait`)."""
        cap = self.cfg.max_answer_bytes

        async def read(wait: int, budget: AnswerBudget) -> FetchResult | None:
            return await self._read(a, offset, wait, budget) if budget.limit else None

        return await read_then_wait(
            cap, cap, wait_ms, read, lambda got: got is not None and got.count > 0
        )

    async def _read(
        self, a: CommonArgs, offset: int, wait_ms: int, budget: AnswerBudget
    ) -> FetchResult:
        return await self.core.execute(
            Fetch(
                a.topic,
                a.partition,
                offset,
                max_records=a.batch,
                max_bytes=max(1, budget.limit),
                max_wait_ms=wait_ms,
            )
        )

    async def _consume(self, cmd: str) -> str | bytes | Reply:
        args = codec.parse_params(cmd[8:])
        if not all(args.get(k) for k in ("topic", "partition", "offset", "member")):
            if self.dialect == "2026-08":
                return "ERROR: invalid_consume_syntax"
            return "ERROR: invalid CONSUME syntax"
        a = self._common(args)
        if isinstance(a, str):
            return a
        info, error = await self._partition_error(a.topic, a.partition)
        if info is None:
            return error
        if await self._group_binding(a.group) is None:
            return f"ERROR: heartbeat failed: group '{a.group}' not found"
        desc = await self._describe_group(a.group)
        assigned = self._assigned(desc, a.member)
        if assigned is None:
            return f"ERROR: heartbeat failed: consumer '{a.member}' not found"
        try:
            await self.core.execute(Heartbeat(a.group, a.member, desc.generation))
            self._touch(a.group, a.member)
        except GatewayError:
            pass  # expired or rebalanced meanwhile: the ownership check below decides
        generation = a.generation if a.generation != -1 else desc.generation
        empty = codec.batch_header(a.topic, a.partition, "1", False, 0, 0, 0)
        if generation != desc.generation or a.partition not in assigned:
            return empty
        assert a.offset is not None
        try:
            result, budget = await self._read_answer(a, a.offset, a.wait_ms)
        except GatewayError as exc:
            if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                rng = await self._out_of_range(a.topic, a.partition, a.offset)
                return f"ERROR: OFFSET_OUT_OF_RANGE {rng}"
            raise
        if result is None:  # the answer pool is empty: nothing now, the client asks again
            limit_hit(budget.key, PROTOCOL, self.log, topic=a.topic, partition=a.partition)
            return empty
        reply = self._reply_frame(a.topic, a.partition, result, budget)
        if reply.count:
            labelled(RECORDS_OUT, PROTOCOL).inc(reply.count)
        return Reply(reply.frame, framed=True)

    def _reply_frame(
        self, topic: str, partition: int, result: FetchResult, budget: AnswerBudget
    ) -> ReplyFrame:
        """The reply batch, cut at the budget (``max_answer_bytes``, or less when the answer
        pool is short; the rest is read by the next request)."""
        reply = build_reply_frame(topic, partition, result.batches, max(1, budget.limit))
        if reply.capped and budget.key:
            limit_hit(budget.key, PROTOCOL, self.log, topic=topic, partition=partition,
                      limit_bytes=budget.limit)  # fmt: skip
        budget.spend(len(reply.frame))
        budget.trim()
        return reply

    async def _stream(self, cmd: str) -> str | Reply:
        args = codec.parse_params(cmd[7:])
        if not (args.get("topic") and args.get("partition") and args.get("group")):
            if self.dialect == "2026-08":
                return "ERROR: invalid_stream_syntax"
            return "ERROR: invalid STREAM syntax"
        a = self._common(args)
        if isinstance(a, str):
            return a
        if not await self._owns(a.group, a.member, a.generation, a.partition):
            return "ERROR: not partition owner or generation mismatch"
        info, error = await self._partition_error(a.topic, a.partition)
        if info is None:
            return error
        committed = await self.core.execute(FetchOffset(a.group, a.topic, a.partition))
        if committed.offset >= 0:
            offset = committed.offset
        elif a.offset is not None:
            offset = a.offset
        else:
            spec = OffsetSpec.LATEST if a.reset == "latest" else OffsetSpec.EARLIEST
            offset = (await self.core.execute(ListOffsets(a.topic, a.partition, spec))).offset
        return Reply(
            stream=StreamSpec(
                a.topic, a.partition, a.group, a.member, a.generation, offset, a.batch,
                committed.offset,
            )
        )  # fmt: skip

    async def _run_stream(self, stream: trio.abc.Stream, spec: StreamSpec) -> None:
        """Push batches as records arrive until the client goes, the member loses the partition
        or the gateway drains; commit the position periodically and at the end."""
        self.log.info("stream_open", topic=spec.topic, partition=spec.partition, group=spec.group)
        reason = "stopped"
        try:
            async with trio.open_nursery() as nursery:
                self._interrupt = nursery.cancel_scope
                if self.ctx.shutdown.is_set():
                    nursery.cancel_scope.cancel()
                nursery.start_soon(_drain, stream, nursery.cancel_scope)
                try:
                    reason = await self._push(stream, spec)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    reason = "gone"
                nursery.cancel_scope.cancel()
        finally:
            self._interrupt = None
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + 2
                await self._stream_commit(spec)
                if self.ctx.shutdown.is_set():
                    reason = "stopped"
                    await _send_quietly(stream, _control("CLOSE", reason, spec.offset))
            self.log.info("stream_close", topic=spec.topic, partition=spec.partition, reason=reason)

    async def _stream_commit(self, spec: StreamSpec) -> None:
        if spec.offset == spec.committed:
            return
        if not await self._owns(spec.group, spec.member, spec.generation, spec.partition):
            return
        await self.core.execute(
            CommitOffset(
                spec.group,
                spec.topic,
                spec.partition,
                spec.offset,
                generation=spec.generation,
                member_id=spec.member,
            )
        )
        spec.committed = spec.offset

    async def _push(self, stream: trio.abc.Stream, spec: StreamSpec) -> str:
        keepalive = self.cfg.stream_keepalive_ms / 1000
        commit_every = self.cfg.stream_commit_interval_ms / 1000
        a = CommonArgs(spec.topic, spec.partition, spec.group, spec.member, spec.generation,
                       spec.offset, spec.batch, 0, "")  # fmt: skip
        now = trio.current_time()
        next_keepalive, next_commit = now + keepalive, now + commit_every
        records_out = labelled(RECORDS_OUT, PROTOCOL)
        bytes_out = labelled(BYTES_OUT, PROTOCOL)
        while True:
            wait_ms = int(max(0.0, min(next_keepalive, next_commit) - trio.current_time()) * 1000)
            with holding():  # each push's share of the answer pool, given back once sent
                try:
                    result, budget = await self._read_answer(a, spec.offset, wait_ms)
                except GatewayError as exc:
                    if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                        rng = await self._out_of_range(spec.topic, spec.partition, spec.offset)
                        await stream.send_all(
                            codec.frame(_control("CLOSE", "offset_out_of_range", spec.offset, rng))
                        )
                        return "offset_out_of_range"
                    await stream.send_all(codec.frame(_control("CLOSE", "error", spec.offset)))
                    return "error"
                reply = None
                if result is not None and result.count:
                    reply = self._reply_frame(spec.topic, spec.partition, result, budget)
                if reply is not None and reply.count:
                    await stream.send_all(reply.frame)
                    bytes_out.inc(len(reply.frame))
                    records_out.inc(reply.count)
                    spec.offset = reply.last_offset + 1
                    next_keepalive = trio.current_time() + keepalive
            now = trio.current_time()
            if now >= next_keepalive:
                await stream.send_all(codec.KEEPALIVE)
                next_keepalive = now + keepalive
            if now >= next_commit:
                next_commit = now + commit_every
                if not await self._owns(spec.group, spec.member, spec.generation, spec.partition):
                    await stream.send_all(codec.frame(_control("CLOSE", "removed", spec.offset)))
                    return "removed"
                await self._stream_commit(spec)


def _idempotence_error(exc: GatewayError) -> str:
    if exc.code is ErrorCode.OUT_OF_ORDER_SEQUENCE:
        return f"idempotency_gap: {exc.message}"
    if exc.code is ErrorCode.INVALID_REQUEST and "fenced" in exc.message:
        return f"stale_producer_epoch: {exc.message}"
    return exc.message


def _control(kind: str, reason: str, offset: int, extra: str = "") -> bytes:
    text = f"STREAM_CONTROL type={kind} reason={reason} offset={offset}"
    return (text + " " + extra if extra else text).encode()


async def _drain(stream: trio.abc.Stream, scope: trio.CancelScope) -> None:
    """In stream mode the client sends nothing more; its close ends the stream."""
    try:
        while await stream.receive_some(RECV_BYTES):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionTimeout):
        pass
    scope.cancel()


async def _send_quietly(stream: trio.abc.Stream, body: bytes) -> None:
    try:
        await stream.send_all(codec.frame(body))
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
        pass


def _bytes(reply: str | bytes) -> bytes:
    return reply.encode() if isinstance(reply, str) else reply


async def handle_connection(stream: trio.abc.Stream, ctx: ConnectionContext) -> None:
    """The ProtocolSpec entry point: serve one connection until the peer closes."""
    await drive(stream, ctx, CursusConnectionSession(ctx))


class CursusConnectionSession:
    """The driver's session for Cursus: length-prefixed frames in order; a STREAM command takes
    the connection over until it ends."""

    receive_bytes = RECV_BYTES

    def __init__(self, ctx: ConnectionContext) -> None:
        self.session = CursusSession(ctx)
        self._frames = FrameBuffer(ctx.listener.max_frame_bytes)
        self.framing = self
        self.receive_data = self._frames.feed
        self.next_request = self._frames.next_frame

    @property
    def buffered(self) -> int:
        return len(self._frames)

    def drain(self, io: Connection) -> None:
        self.session.interrupt()

    async def handle(self, body: bytes, io: Connection) -> bool:
        with holding():  # a CONSUME answer's share of the answer pool, given back once sent
            reply = await self.session.handle(body)
            if reply.body is not None:
                await io.send(reply.body if reply.framed else codec.frame(reply.body))
        if reply.stream is not None:
            await self.session._run_stream(io.stream, reply.stream)
            return False
        return not reply.close
