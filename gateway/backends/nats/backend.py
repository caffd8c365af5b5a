"""The NATS JetStream backend; the mapping is documented in ``gateway.backends.nats``."""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Sequence
from typing import Any

import trio

from gateway.backends import BackendSpec
from gateway.backends.base import (
    Backend,
    Capabilities,
    check_partitions,
    check_topic_name,
    offset_mismatch,
)
from gateway.backends.nats.auth import Credentials, NatsAuthError
from gateway.backends.nats.client import STATUS_NO_RESPONDERS, NatsClient, unavailable
from gateway.backends.nats.config import NatsConfig, ssl_context
from gateway.backends.nats.messages import (
    JS_NOT_ENABLED,
    JS_STREAM_NAME_IN_USE,
    JS_STREAM_NOT_FOUND,
    JS_SUBJECT_OVERLAP,
    JS_WRONG_LAST_MSG_ID,
    JS_WRONG_LAST_SEQUENCE,
    MAX_SEQUENCE,
    enc,
    js_error,
    msg_record,
    msg_seq,
    record_headers,
    wrong_last_sequence,
)
from gateway.backends.nats.protocol import Msg, encode_headers
from gateway.config import ConfigError
from gateway.model import (
    AppendResult,
    ErrorCode,
    GatewayError,
    PartitionInfo,
    Record,
    RecordBatch,
    TopicInfo,
    now_us,
)

TOPICS_NS = "_gw.topics"
READ_BATCH_LIMIT = 2000


class NatsBackend(Backend):
    capabilities = Capabilities(
        durable=True,
        notifies_appends=False,
        shared_groups=True,
    )
    type_name = "nats"

    def __init__(self, name: str, config: NatsConfig) -> None:
        super().__init__(name)
        self.config = config
        try:
            credentials = Credentials.load(
                user=config.user,
                password=config.password,
                token=config.token,
                nkey_seed_file=config.nkey_seed_file,
                creds_file=config.creds_file,
            )
            context = ssl_context(config)
        except (NatsAuthError, OSError, ssl.SSLError) as exc:
            raise ConfigError([f"backends.{name}: {exc}"]) from None
        self.client = NatsClient(
            list(config.urls) or config.url,
            credentials=credentials,
            ssl_context=context,
            tls_server_name=config.tls_server_name,
            name=f"gateway-{name}",
            connect_timeout=config.connect_timeout_ms / 1000,
            request_timeout=config.request_timeout_ms / 1000,
        )
        self._topics: dict[str, tuple[TopicInfo, tuple[str, ...], float]] = {}
        self._last_seq: dict[tuple[str, int], int] = {}  # last stream sequence we know of
        self._kv_ready = False
        self._kv_lock = trio.Lock()
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------------ lifecycle
    async def open(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        await nursery.start(self.client.run)
        await self.client.wait_connected(self.config.connect_timeout_ms / 1000)

    async def close(self) -> None:
        await self.client.aclose()

    async def health(self) -> tuple[bool, str]:
        if not self.client.connected:
            return False, self.client.last_error or "not connected"
        try:
            reply = await self.client.request("$JS.API.INFO", b"", timeout=2.0)
        except GatewayError as exc:
            return False, exc.message
        err = js_error(reply)
        if err is not None:
            return False, f"JetStream: {err.get('description')}"
        return True, "ok"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type_name,
            "url": self.client.url,
            "connected": self.client.connected,
            "server_version": self.client.server_info.get("version"),
        }

    # ------------------------------------------------------------------ names
    def stream_name(self, topic: str, partition: int, incarnation: str | None = None) -> str:
        """``GW_<enc(topic)>_<partition>_<incarnation>``: the incarnation (random, kept in the
        topic registry) makes a re-created topic or partition a new stream, never the old one."""
        if incarnation is None:
            cached = self._topics.get(topic)
            ids = cached[1] if cached is not None else ()
            incarnation = ids[partition] if 0 <= partition < len(ids) else ""
        suffix = f"_{incarnation}" if incarnation else ""
        return f"{self.config.stream_prefix}_{enc(topic)}_{partition}{suffix}"

    def subject(self, topic: str, partition: int) -> str:
        return f"{self.config.subject_prefix}.{enc(topic)}.{partition}"

    def _kv_subject(self, namespace: str, key: str) -> str:
        return (
            f"$KV.{self.config.kv_bucket}.{namespace.encode().hex() or '_'}.k{key.encode().hex()}"
        )

    # ------------------------------------------------------------------ JetStream API
    async def _api(self, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(body, separators=(",", ":")).encode() if body is not None else b""
        reply = await self.client.request(subject, payload)
        if reply.status == STATUS_NO_RESPONDERS:
            raise unavailable("JetStream is not available (no responders)")
        data = json.loads(reply.payload) if reply.payload else {}
        return data

    @staticmethod
    def _raise_js(err: dict[str, Any], what: str) -> None:
        code = err.get("err_code")
        if code in JS_NOT_ENABLED or err.get("code") == 503:
            raise unavailable(f"{what}: JetStream unavailable: {err.get('description')}")
        raise GatewayError(ErrorCode.INTERNAL, f"{what}: JetStream error {err}")

    def _stream_config(
        self, topic: str, partition: int, incarnation: str, config: dict[str, str]
    ) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "name": self.stream_name(topic, partition, incarnation),
            "subjects": [self.subject(topic, partition)],
            "retention": "limits",
            "discard": "old",
            "storage": self.config.storage,
            "num_replicas": self.config.replicas,
            "allow_direct": True,
            "allow_atomic": True,
            "duplicate_window": 5_000_000_000,  # 5 s: only the append chains use message ids
            "metadata": {"gw.topic": topic, "gw.partition": str(partition)},
        }
        # Kafka's -1 (keep everything) is JetStream's 0 for max_age and -1 for max_bytes
        if int(config.get("retention_ms", 0)) > 0:
            cfg["max_age"] = int(config["retention_ms"]) * 1_000_000
        if "retention_bytes" in config:
            cfg["max_bytes"] = max(-1, int(config["retention_bytes"]))
        return cfg

    async def _create_stream(
        self, topic: str, partition: int, incarnation: str, config: dict[str, str]
    ) -> None:
        """Create the partition's stream. Its subject may still belong to a stream nobody
        registered: one being created by another gateway right now (then wait for its
        registration: TOPIC_EXISTS), or one left by an interrupted create or delete (removed)."""
        cfg = self._stream_config(topic, partition, incarnation, config)
        for attempt in range(2):
            data = await self._api(f"$JS.API.STREAM.CREATE.{cfg['name']}", cfg)
            err = data.get("error")
            if err is None:
                return
            if err.get("err_code") != JS_SUBJECT_OVERLAP or attempt:
                self._raise_js(err, f"creating stream {cfg['name']}")
            with trio.move_on_after(2.0):
                while True:
                    info, ids, _ = await self._load_topic(topic)
                    if info is not None and partition < info.partitions:
                        raise GatewayError(
                            ErrorCode.TOPIC_EXISTS, f"topic {topic!r} already exists"
                        )
                    await trio.sleep(0.05)
            names = await self._api("$JS.API.STREAM.NAMES", {"subject": cfg["subjects"][0]})
            for orphan in names.get("streams") or ():
                await self._api(f"$JS.API.STREAM.DELETE.{orphan}")

    async def _delete_stream(self, topic: str, partition: int, incarnation: str) -> None:
        self._last_seq.pop((topic, partition), None)
        name = self.stream_name(topic, partition, incarnation)
        data = await self._api(f"$JS.API.STREAM.DELETE.{name}")
        err = data.get("error")
        if err is not None and err.get("err_code") != JS_STREAM_NOT_FOUND:
            self._raise_js(err, f"deleting stream {name}")

    # ------------------------------------------------------------------ key-value bucket
    async def _ensure_kv(self) -> None:
        if self._kv_ready:
            return
        async with self._kv_lock:
            if self._kv_ready:
                return
            bucket = self.config.kv_bucket
            cfg = {
                "name": f"KV_{bucket}",
                "subjects": [f"$KV.{bucket}.>"],
                "retention": "limits",
                "max_msgs_per_subject": 1,
                "discard": "new",
                "storage": self.config.storage,
                "num_replicas": self.config.replicas,
                "allow_rollup_hdrs": True,
                "deny_delete": True,
                "allow_direct": True,
            }
            data = await self._api(f"$JS.API.STREAM.CREATE.KV_{bucket}", cfg)
            err = data.get("error")
            if err is not None and err.get("err_code") != JS_STREAM_NAME_IN_USE:
                self._raise_js(err, f"creating key-value bucket {bucket}")
            self._kv_ready = True

    async def _kv_get_rev(self, namespace: str, key: str) -> tuple[bytes | None, int]:
        """(value, revision); revision 0 when the key never existed or was purged."""
        await self._ensure_kv()
        body = json.dumps({"last_by_subj": self._kv_subject(namespace, key)}).encode()
        reply = await self.client.request(f"$JS.API.DIRECT.GET.KV_{self.config.kv_bucket}", body)
        if reply.status == 404:
            return None, 0
        if reply.status == STATUS_NO_RESPONDERS:
            raise unavailable("JetStream key-value bucket is not available")
        if reply.status:
            raise GatewayError(
                ErrorCode.INTERNAL, f"key-value get: {reply.status} {reply.description}"
            )
        rev = int(reply.header("Nats-Sequence", "0") or 0)
        if reply.header("KV-Operation") in ("DEL", "PURGE"):
            return None, rev
        return reply.payload, rev

    async def _kv_publish(
        self, namespace: str, key: str, value: bytes, headers: dict[str, str] | None = None
    ) -> int:
        await self._ensure_kv()
        block = encode_headers(headers) if headers else b""
        reply = await self.client.request(self._kv_subject(namespace, key), value, block)
        if reply.status == STATUS_NO_RESPONDERS:
            raise unavailable("JetStream key-value bucket is not available")
        data = json.loads(reply.payload)
        err = data.get("error")
        if err is not None:
            if err.get("err_code") == JS_WRONG_LAST_SEQUENCE:
                raise _Conflict(err.get("description", ""))
            self._raise_js(err, "key-value put")
        return int(data["seq"])

    async def kv_get(self, namespace: str, key: str) -> bytes | None:
        return (await self._kv_get_rev(namespace, key))[0]

    async def kv_put(self, namespace: str, key: str, value: bytes) -> None:
        await self._kv_publish(namespace, key, bytes(value))

    async def kv_delete(self, namespace: str, key: str) -> None:
        await self._kv_publish(namespace, key, b"", {"KV-Operation": "PURGE", "Nats-Rollup": "sub"})

    async def kv_get_revision(self, namespace: str, key: str) -> tuple[bytes | None, int]:
        return await self._kv_get_rev(namespace, key)

    async def kv_put_if(self, namespace: str, key: str, value: bytes, revision: int) -> int | None:
        # JetStream checks the subject's last sequence atomically with the write
        headers = {"Nats-Expected-Last-Subject-Sequence": str(revision)}
        try:
            return await self._kv_publish(namespace, key, bytes(value), headers)
        except _Conflict:
            return None

    async def kv_scan(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        await self._ensure_kv()
        bucket = self.config.kv_bucket
        ns = namespace.encode().hex() or "_"
        out: list[tuple[str, bytes]] = []
        msgs = await self.client.request_stream(
            f"$JS.API.DIRECT.GET.KV_{bucket}",
            json.dumps({"multi_last": [f"$KV.{bucket}.{ns}.*"], "batch": 100_000}).encode(),
        )
        start = len(f"$KV.{bucket}.{ns}.k")
        hex_prefix = prefix.encode().hex()
        for m in msgs:
            if m.status == STATUS_NO_RESPONDERS:
                raise unavailable("JetStream key-value bucket is not available")
            if m.status:
                continue
            if m.header("KV-Operation") in ("DEL", "PURGE"):
                continue
            subject = m.header("Nats-Subject", "") or ""
            hexkey = subject[start:]
            if not hexkey.startswith(hex_prefix):
                continue
            out.append((bytes.fromhex(hexkey).decode(), m.payload))
        out.sort()
        return out

    # ------------------------------------------------------------------ topics
    async def _load_topic(self, name: str) -> tuple[TopicInfo | None, tuple[str, ...], int]:
        """(info, stream incarnations, registry revision) from the key-value bucket."""
        raw, rev = await self._kv_get_rev(TOPICS_NS, name)
        if raw is None:
            self._topics.pop(name, None)
            return None, (), rev
        info, ids = _registry_entry(name, raw)
        self._topics[name] = (info, ids, trio.current_time())
        return info, ids, rev

    async def _info(self, name: str, partition: int | None = None) -> TopicInfo:
        """The topic (cached for ``topic_cache_ms``; reloaded when ``partition`` is beyond the
        cached count). Raises UNKNOWN_TOPIC / UNKNOWN_PARTITION."""
        cached = self._topics.get(name)
        if cached is not None:
            info, _, at = cached
            fresh = trio.current_time() - at < self.config.topic_cache_ms / 1000
            if fresh and (partition is None or 0 <= partition < info.partitions):
                return info
        loaded, _, _ = await self._load_topic(name)
        if loaded is None:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        if partition is not None and not 0 <= partition < loaded.partitions:
            raise GatewayError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {name!r} has no partition {partition} (it has {loaded.partitions})",
            )
        return loaded

    async def _stream_missing(self, topic: str, partition: int) -> GatewayError:
        """The error for a partition whose stream did not answer: gone or NATS trouble."""
        self._topics.pop(topic, None)
        try:
            await self._info(topic, partition)
        except GatewayError as exc:
            return exc
        return unavailable(f"stream {self.stream_name(topic, partition)} is not available")

    async def _register(
        self, name: str, info: TopicInfo, ids: tuple[str, ...], expected_rev: int, conflict: str
    ) -> None:
        value = json.dumps(
            {
                "partitions": info.partitions,
                "config": [list(kv) for kv in info.config],
                "ids": list(ids),
            }
        )
        try:
            await self._kv_publish(
                TOPICS_NS,
                name,
                value.encode(),
                {"Nats-Expected-Last-Subject-Sequence": str(expected_rev)},
            )
        except _Conflict:
            code = ErrorCode.TOPIC_EXISTS if conflict == "exists" else ErrorCode.INVALID_PARTITIONS
            message = (
                f"topic {name!r} already exists"
                if conflict == "exists"
                else f"topic {name!r} changed concurrently; try again"
            )
            raise GatewayError(code, message) from None
        self._topics[name] = (info, ids, trio.current_time())

    async def create_topic(
        self, name: str, partitions: int, config: tuple[tuple[str, str], ...] = ()
    ) -> TopicInfo:
        check_topic_name(name)
        check_partitions(partitions)
        existing, _, rev = await self._load_topic(name)
        if existing is not None:
            raise GatewayError(ErrorCode.TOPIC_EXISTS, f"topic {name!r} already exists")
        cfg = dict(config)
        ids = tuple(os.urandom(4).hex() for _ in range(partitions))
        info = TopicInfo(name, partitions, tuple(config))
        try:
            for p in range(partitions):
                await self._create_stream(name, p, ids[p], cfg)
            # rev is 0, or the revision of the purge marker a deleted topic left behind
            await self._register(name, info, ids, rev, "exists")
        except GatewayError as exc:
            if exc.code is ErrorCode.TOPIC_EXISTS:  # another gateway won: drop our streams
                for p in range(partitions):
                    await self._delete_stream(name, p, ids[p])
            raise
        return info

    async def delete_topic(self, name: str) -> None:
        info, ids, _ = await self._load_topic(name)
        if info is None:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        await self.kv_delete(TOPICS_NS, name)
        self._topics.pop(name, None)
        for p in range(info.partitions):
            await self._delete_stream(name, p, ids[p] if p < len(ids) else "")

    async def list_topics(self) -> list[TopicInfo]:
        return [_registry_entry(name, raw)[0] for name, raw in await self.kv_scan(TOPICS_NS)]

    async def topic(self, name: str) -> TopicInfo:
        return await self._info(name)

    async def create_partitions(self, name: str, count: int) -> TopicInfo:
        info, ids, rev = await self._load_topic(name)
        if info is None:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        check_partitions(info.partitions + count)
        new_ids = tuple(os.urandom(4).hex() for _ in range(count))
        for i, p in enumerate(range(info.partitions, info.partitions + count)):
            await self._create_stream(name, p, new_ids[i], dict(info.config))
        grown = TopicInfo(name, info.partitions + count, info.config)
        await self._register(name, grown, ids + new_ids, rev, "changed")
        return grown

    async def delete_partitions(self, name: str, count: int) -> TopicInfo:
        info, ids, rev = await self._load_topic(name)
        if info is None:
            raise GatewayError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {name!r}")
        check_partitions(info.partitions - count)
        keep = info.partitions - count
        shrunk = TopicInfo(name, keep, info.config)
        await self._register(name, shrunk, ids[:keep], rev, "changed")
        for p in range(keep, info.partitions):
            await self._delete_stream(name, p, ids[p] if p < len(ids) else "")
        return shrunk

    # ------------------------------------------------------------------ data
    async def append(
        self,
        topic: str,
        partition: int,
        batch: RecordBatch,
        expected_offset: int | None = None,
    ) -> AppendResult:
        await self._info(topic, partition)
        records = batch.records
        if not records:
            part = await self.partition_info(topic, partition)
            hw = part.high_watermark
            if expected_offset is not None and expected_offset != hw:
                raise offset_mismatch(topic, partition, expected_offset, hw)
            return AppendResult(partition, hw, hw - 1)
        now = now_us()
        if expected_offset is not None:
            if expected_offset > MAX_SEQUENCE:
                # JetStream parses the header modulo 2**64 (2**64 would expect an empty stream)
                _, hw = await self._stream_state(topic, partition)
                raise offset_mismatch(topic, partition, expected_offset, hw)
            # no chain: a chain broken half way leaves a stored prefix, and a conditional
            # append must store all or nothing (within one atomic batch of max_batch)
            return await self._append_atomic(topic, partition, records, now, expected_offset)
        if len(records) > 1:
            for _ in range(2):
                result = await self._append_chained(topic, partition, records, now)
                if result is not None:
                    return result
        return await self._append_atomic(topic, partition, records, now)

    async def _append_chained(
        self, topic: str, partition: int, records: Sequence[Record], now: int
    ) -> AppendResult | None:
        """The fast path: plain publishes forming a chain (each message expects the previous
        one's ``Nats-Msg-Id`` as the stream's last, the first expects the last sequence we saw),
        and a reply on the last only. A chain that breaks anywhere (another writer in between,
        a refusal) fails every later message, so an acknowledged last message proves the whole
        batch is stored contiguously. None: the chain broke (nothing acknowledged; a stored
        prefix is an unacknowledged duplicate, as after any retry); the caller falls back."""
        key = (topic, partition)
        last = self._last_seq.get(key)
        if last is None:
            _, last = await self._stream_state(topic, partition)
        subject = self.subject(topic, partition)
        chain = os.urandom(6).hex()
        frames: list[tuple[str, bytes, bytes]] = []
        for i, r in enumerate(records):
            ts = r.timestamp_us if r.timestamp_us >= 0 else now
            head = record_headers(r, ts)
            if i:
                extra = (
                    f"Nats-Msg-Id: {chain}.{i}\r\nNats-Expected-Last-Msg-Id: {chain}.{i - 1}\r\n"
                )
            else:
                extra = f"Nats-Msg-Id: {chain}.0\r\nNats-Expected-Last-Sequence: {last}\r\n"
            frames.append((subject, r.value or b"", head[:10] + extra.encode() + head[10:]))
        n = len(frames)
        need_reply = [False] * n
        need_reply[-1] = True
        (reply,) = await self.client.request_many(frames, need_reply=need_reply)
        if reply.status == STATUS_NO_RESPONDERS:
            raise await self._stream_missing(topic, partition)
        data = json.loads(reply.payload)
        err = data.get("error")
        if err is not None:
            self._last_seq.pop(key, None)
            if err.get("err_code") in (JS_WRONG_LAST_SEQUENCE, JS_WRONG_LAST_MSG_ID):
                return None
            self._raise_js(err, f"append to {topic}/{partition}")
        seq = int(data["seq"])
        if seq != last + n:  # cannot happen while the chain holds; do not trust it
            self._last_seq.pop(key, None)
            return None
        self._last_seq[key] = seq
        return AppendResult(partition, last, seq - 1, now)

    async def _append_atomic(
        self,
        topic: str,
        partition: int,
        records: Sequence[Record],
        now: int,
        expected_offset: int | None = None,
    ) -> AppendResult:
        """JetStream atomic batches of ``max_batch`` (single records: one publish).

        With ``expected_offset`` the first message of every atomic batch carries
        ``Nats-Expected-Last-Sequence`` (one stream per partition, offset = sequence - 1, so the
        stream's last sequence *is* the partition's next offset): JetStream stores the batch only
        if nothing else was appended since, and answers err_code 10071 otherwise. A batch of up
        to ``max_batch`` records is all or nothing; a longer one can have its first atomic
        batches stored when a writer slips in before a later one (reported as
        BACKEND_UNAVAILABLE with the stored offsets, as for any partly refused batch)."""
        subject = self.subject(topic, partition)
        frames: list[tuple[str, bytes, bytes]] = []
        need_reply: list[bool] = []
        size = self.config.max_batch
        for start in range(0, len(records), size):
            chunk = records[start : start + size]
            expect = (
                ""
                if expected_offset is None
                else f"Nats-Expected-Last-Sequence: {expected_offset + start}\r\n"
            )
            if len(chunk) == 1:
                r = chunk[0]
                ts = r.timestamp_us if r.timestamp_us >= 0 else now
                head = record_headers(r, ts)
                if expect:
                    head = head[:10] + expect.encode() + head[10:]
                frames.append((subject, r.value or b"", head))
                need_reply.append(True)
                continue
            batch_id = os.urandom(8).hex()
            last = len(chunk)
            for i, r in enumerate(chunk, 1):
                ts = r.timestamp_us if r.timestamp_us >= 0 else now
                head = record_headers(r, ts)
                extra = f"Nats-Batch-Id: {batch_id}\r\nNats-Batch-Sequence: {i}\r\n"
                if i == 1:
                    extra += expect
                if i == last:
                    extra += "Nats-Batch-Commit: 1\r\n"
                head = head[:10] + extra.encode() + head[10:]  # after "NATS/1.0\r\n"
                frames.append((subject, r.value or b"", head))
                need_reply.append(i == last)
        replies = await self.client.request_many(frames, need_reply=need_reply)
        base = last_offset = -1
        for reply in replies:
            if reply.status == STATUS_NO_RESPONDERS:
                raise await self._stream_missing(topic, partition)
            data = json.loads(reply.payload)
            err = data.get("error")
            if err is not None:
                self._last_seq.pop((topic, partition), None)
                if base < 0 and expected_offset is not None and wrong_last_sequence(err):
                    _, hw = await self._stream_state(topic, partition)
                    raise offset_mismatch(topic, partition, expected_offset, hw)
                if base >= 0:
                    raise GatewayError(
                        ErrorCode.BACKEND_UNAVAILABLE,
                        f"part of the batch was stored (offsets {base}..{last_offset}) before "
                        f"JetStream refused the rest: {err.get('description')}",
                    )
                self._raise_js(err, f"append to {topic}/{partition}")
            seq = int(data["seq"])
            count = int(data.get("count", 1))
            if base < 0:
                base = seq - count
            last_offset = seq - 1
        self._last_seq[(topic, partition)] = last_offset + 1
        return AppendResult(partition, base, last_offset, now)

    async def _stream_state(self, topic: str, partition: int) -> tuple[int, int]:
        data = await self._api(f"$JS.API.STREAM.INFO.{self.stream_name(topic, partition)}")
        err = data.get("error")
        if err is not None:
            if err.get("err_code") == JS_STREAM_NOT_FOUND:
                raise await self._stream_missing(topic, partition)
            self._raise_js(err, f"stream info of {topic}/{partition}")
        state = data["state"]
        first, last = int(state["first_seq"]), int(state["last_seq"])
        return max(first - 1, 0), last

    async def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        await self._info(topic, partition)
        start, hw = await self._stream_state(topic, partition)
        return PartitionInfo(topic, partition, start, hw)

    async def _direct_get(
        self, topic: str, partition: int, offset: int, count: int, max_bytes: int | None
    ) -> list[Msg]:
        body: dict[str, Any] = {"seq": offset + 1, "batch": count}
        if max_bytes is not None:
            body["max_bytes"] = max_bytes
        msgs = await self.client.request_stream(
            f"$JS.API.DIRECT.GET.{self.stream_name(topic, partition)}",
            json.dumps(body).encode(),
        )
        if msgs and msgs[-1].status == STATUS_NO_RESPONDERS:
            raise await self._stream_missing(topic, partition)
        return msgs

    async def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> list[RecordBatch]:
        await self._info(topic, partition)
        count = max(1, min(max_records, READ_BATCH_LIMIT))
        msgs = await self._direct_get(topic, partition, offset, count, max(1, max_bytes))
        data = [m for m in msgs if not m.status]
        if not data and msgs and msgs[-1].status == 204:
            # max_bytes smaller than the first message: return it anyway
            msgs = await self._direct_get(topic, partition, offset, 1, None)
            data = [m for m in msgs if not m.status]
        if not data:
            start, hw = await self._stream_state(topic, partition)
            if offset == hw and offset >= start:
                return []
            raise GatewayError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{start}, {hw}] of {topic}/{partition}",
            )
        first_seq = msg_seq(data[0])
        if first_seq != offset + 1:
            start, hw = await self._stream_state(topic, partition)
            raise GatewayError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{start}, {hw}] of {topic}/{partition}",
            )
        records = [msg_record(m, offset + i) for i, m in enumerate(data)]
        batch = RecordBatch(records, base_offset=offset)
        batch.max_timestamp_us = max(r.timestamp_us for r in records)
        return [batch]

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp_us: int) -> int:
        """A scan from the log start (JetStream indexes its own store time, not the record's)."""
        await self._info(topic, partition)
        start, hw = await self._stream_state(topic, partition)
        offset = start
        while offset < hw:
            msgs = await self._direct_get(topic, partition, offset, READ_BATCH_LIMIT, None)
            data = [m for m in msgs if not m.status]
            if not data:
                break
            for m in data:
                seq = msg_seq(m)
                if msg_record(m, seq - 1).timestamp_us >= timestamp_us:
                    return seq - 1
            offset = msg_seq(data[-1])
        return hw


def _registry_entry(name: str, raw: bytes) -> tuple[TopicInfo, tuple[str, ...]]:
    data = json.loads(raw)
    count = int(data["partitions"])
    ids = tuple(data.get("ids", ())) or ("",) * count
    return TopicInfo(name, count, tuple(tuple(kv) for kv in data["config"])), ids


class _Conflict(Exception):
    """A compare-and-set publish found another revision."""


def _factory(name: str, options: Any, config: Any) -> Backend:
    return NatsBackend(name, options)


BACKEND = BackendSpec("nats", NatsConfig, _factory)

__all__ = ["BACKEND", "NatsBackend", "NatsConfig"]
