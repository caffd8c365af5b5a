"""Idempotent Cursus producers whose de-duplication state survives a gateway restart or crash.

For each (topic, partition, producer id) the gateway keeps the producer's epoch and the first and
last sequence of its last batch. The state lives in the topic's backend key-value store
(namespace ``cursus.producers``, one small JSON value per key) with an in-memory copy, so a retry
sent after a restart is still answered as a duplicate instead of being stored twice.

Order of a produce: check the state, write the new state to the store *with the partition's high
watermark before the append* (the ``floor``: the batch can only land at or after it), append, and
only then acknowledge. A crash can therefore leave a state whose batch never landed, never a
landed batch without its state. After a restart, a retry of exactly the last batch settles which
it is by reading the log from the floor for that producer's message with that epoch and first
sequence (at most ``SCAN_RECORDS`` records): found, it is answered as a duplicate with the offsets
it got; not found, it is appended. Within one run the offsets are known from memory.

One producer's appends to one partition go one at a time (a lock per key), so a retry racing the
original on a second connection waits for it and is answered as a duplicate. Backends without a
key-value store keep the state in memory only.

Every client can invent producer ids, so their number is bounded (``max_idempotent_producers``):
past it the state written longest ago is dropped (from the store too), as Kafka expires producer
ids; a retry of a dropped producer's last batch would then be stored again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

import structlog
import trio

from gateway.core.idempotence import is_retry
from gateway.core.view import CoreView
from gateway.model import AppendResult, ErrorCode, GatewayError, Produce, ProduceResult
from gateway.observability import limit_hit
from gateway.protocols.cursus import codec

NS = "cursus.producers"
SCAN_RECORDS = 100_000
"""How far past its floor a batch of unknown fate is looked for (the records appended by others
while it was in flight come first; this many never are)."""

log = structlog.get_logger("gateway.protocols.cursus")


@dataclass
class ProducerState:
    epoch: int
    first_seq: int
    last_seq: int
    floor: int  # the partition's high watermark before the append: the batch is at or after it
    at: float = 0.0  # wall time of the write (the oldest are dropped first)


@dataclass
class Known:
    """A producer's state and, once known in this run, where its last batch landed."""

    state: ProducerState
    landed: AppendResult | None = None


def state_key(topic: str, partition: int, producer_id: str) -> str:
    """The store key: the producer id hashed, so every key has the same small size whatever
    the client sends (a Cursus producer id may be 64 KiB)."""
    digest = hashlib.blake2b(producer_id.encode(), digest_size=16).hexdigest()
    return f"{len(topic)}:{topic}/{partition}/{digest}"


class DurableProducers:
    """The producer states of one core (shared by its Cursus connections)."""

    def __init__(self) -> None:
        # the states in use: only keys of the index (so bounded with it), misses are not cached
        self._cache: dict[str, Known] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._memory_only: set[str] = set()  # backends without a key-value store
        self._index: OrderedDict[str, Any] | None = None  # every stored key -> its backend
        self._index_lock = trio.Lock()

    async def produce(
        self,
        core: CoreView,
        cmd: Produce,
        producer_id: str,
        epoch: int,
        first_seq: int,
        count: int,
        max_producers: int,
    ) -> ProduceResult:
        """Append ``cmd`` (an explicit partition, no producer fields) for an idempotent
        producer whose batch holds sequences ``first_seq .. first_seq + count - 1``."""
        assert cmd.partition is not None
        await self._load_index(core, max_producers)
        key = state_key(cmd.topic, cmd.partition, producer_id)
        lock = self._locks.setdefault(key, trio.Lock())
        try:
            async with lock:
                result = await self._locked(core, cmd, key, producer_id, epoch, first_seq, count)
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._locks.pop(key, None)
        await self._bound(max_producers)
        return ProduceResult(cmd.topic, (result,))

    async def _locked(
        self,
        core: CoreView,
        cmd: Produce,
        key: str,
        producer_id: str,
        epoch: int,
        first_seq: int,
        count: int,
    ) -> AppendResult:
        assert cmd.partition is not None
        backend = core.router.backend_for(cmd.topic)
        known = await self._load(backend, key)
        if known is not None and is_retry(producer_id, epoch, first_seq, known.state):
            landed = known.landed or await self._find(core, cmd, producer_id, known)
            if landed is not None:
                known.landed = landed
                return AppendResult(
                    landed.partition, landed.base_offset, landed.last_offset, duplicate=True
                )
            # written down before a crash or failure, never appended: append it now
        floor = (await backend.partition_info(cmd.topic, cmd.partition)).high_watermark
        new = Known(ProducerState(epoch, first_seq, first_seq + count - 1, floor, time.time()))
        await self._store(backend, key, new.state)  # before the append: see the module doc
        self._cache[key] = new
        assert self._index is not None
        self._index[key] = backend
        self._index.move_to_end(key)
        # a failure or cancellation leaves the state without ``landed``: the batch may or may not
        # be in the log, and a retry of it settles that from the log, as after a crash
        result = (await core.execute(cmd)).appends[0]
        new.landed = result
        return result

    async def _find(
        self, core: CoreView, cmd: Produce, producer_id: str, known: Known
    ) -> AppendResult | None:
        """Where the batch of a state written before a restart landed, from the log: the
        producer's message with the state's epoch and first sequence at or after its floor."""
        assert cmd.partition is not None
        state, pid = known.state, producer_id.encode()
        offset, scanned = state.floor, 0
        backend = core.router.backend_for(cmd.topic)  # the store's own check: no ACL, no metrics
        while scanned < SCAN_RECORDS:
            try:
                batches = await backend.read(
                    cmd.topic, cmd.partition, offset, SCAN_RECORDS - scanned, 8 << 20
                )
            except GatewayError as exc:
                if exc.code is ErrorCode.OFFSET_OUT_OF_RANGE:
                    return None  # the floor is gone (retention) or past the end
                raise
            if not batches:
                return None
            for batch in batches:
                for record in batch.records:
                    m = codec.record_to_message(record)
                    if m.producer_id == pid and m.seq == state.first_seq and m.epoch == state.epoch:
                        base = record.offset
                        last = base + state.last_seq - state.first_seq
                        return AppendResult(cmd.partition, base, last)
                scanned += batch.count
            offset = batches[-1].last_offset + 1
        return None

    # ------------------------------------------------------------------ the bound
    async def _load_index(self, core: CoreView, max_producers: int) -> None:
        """Once per core: the keys already in the stores, oldest write first."""
        if self._index is not None:
            return
        async with self._index_lock:
            if self._index is not None:
                return
            found: list[tuple[float, str, Any]] = []
            for backend in core.router.backends.values():
                try:
                    rows = await backend.kv_scan(NS, "")
                except GatewayError as exc:
                    if exc.code is not ErrorCode.UNSUPPORTED:
                        raise
                    self._no_store(backend)
                    continue
                for key, raw in rows:
                    found.append((json.loads(raw).get("at", 0.0), key, backend))
            found.sort(key=lambda row: row[0])
            self._index = OrderedDict((key, backend) for _, key, backend in found)
        await self._bound(max_producers)

    async def _bound(self, max_producers: int) -> None:
        assert self._index is not None
        while len(self._index) > max_producers:
            key, backend = self._index.popitem(last=False)
            if key in self._locks:  # in use right now: keep it, drop the next oldest
                self._index[key] = backend
                if len(self._locks) >= len(self._index):
                    return
                continue
            self._cache.pop(key, None)
            limit_hit("max_idempotent_producers", "cursus", log, max=max_producers)
            if backend.name not in self._memory_only:
                await backend.kv_delete(NS, key)

    # ------------------------------------------------------------------ store and cache
    async def _load(self, backend: Any, key: str) -> Known | None:
        known = self._cache.get(key)
        if known is not None:
            return known
        if backend.name in self._memory_only:
            return None
        try:
            raw = await backend.kv_get(NS, key)
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNSUPPORTED:
                raise
            self._no_store(backend)
            return None
        if raw is None:
            return None
        known = self._cache[key] = Known(ProducerState(**json.loads(raw)))
        return known

    async def _store(self, backend: Any, key: str, state: ProducerState) -> None:
        if backend.name in self._memory_only:
            return
        try:
            await backend.kv_put(NS, key, json.dumps(asdict(state)).encode())
        except GatewayError as exc:
            if exc.code is not ErrorCode.UNSUPPORTED:
                raise
            self._no_store(backend)

    def _no_store(self, backend: Any) -> None:
        if backend.name not in self._memory_only:
            self._memory_only.add(backend.name)
            log.warning("idempotent_state_in_memory", backend=backend.name,
                        reason="the backend has no key-value store")  # fmt: skip
