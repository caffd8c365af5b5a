"""Idempotent producers: (producer id, epoch, sequence) de-duplication per partition.

A retry of the last acknowledged batch (same producer, epoch and first sequence) is answered with
the offsets it got the first time, without appending again; a gap in the sequence is refused.
State is in memory: it protects against client retries within one gateway's lifetime. It holds
at most ``max_entries`` (producer, partition) entries (``[server] max_producer_states``): a new
one beyond that forgets the least recently used one, as a broker expires idle producers, and is
counted as a hit of that budget. A forgotten producer's next batch is taken as a new one.

One producer's appends to one partition go one at a time (a lock per producer and partition,
held across the check, the append and the state update): a retry sent on a second connection
while the first send is still being appended must wait for it and be answered as a duplicate,
not append the batch again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import trio

from gateway.backends.base import Backend
from gateway.model import AppendResult, ErrorCode, GatewayError, RecordBatch
from gateway.observability import limit_hit

DEFAULT_MAX_ENTRIES = 100_000


@dataclass
class _ProducerState:
    epoch: int
    first_seq: int
    last_seq: int
    result: AppendResult


class LastBatch(Protocol):
    """What is kept of a producer's last batch on a partition."""

    epoch: int
    first_seq: int
    last_seq: int


def is_retry(producer_id: int | str, epoch: int, first_seq: int, last: LastBatch) -> bool:
    """Whether a batch starting at ``first_seq`` is a retry of the producer's ``last`` batch
    (same epoch and first sequence); False for the next batch or a new epoch. A sequence
    already written, a gap and an older (fenced) epoch raise the error the client gets."""
    if epoch == last.epoch:
        if first_seq == last.first_seq:
            return True
        if first_seq <= last.last_seq:
            raise GatewayError(
                ErrorCode.DUPLICATE_SEQUENCE,
                f"sequence {first_seq} of producer {producer_id} was already written",
            )
        if first_seq != last.last_seq + 1:
            raise GatewayError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE,
                f"producer {producer_id} sent sequence {first_seq}, expected {last.last_seq + 1}",
            )
    elif epoch < last.epoch:
        raise GatewayError(
            ErrorCode.INVALID_REQUEST, f"producer {producer_id} epoch {epoch} is fenced"
        )
    return False


class ProducerRegistry:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max(1, max_entries)
        # insertion order is use order: an entry is moved to the end when its producer writes
        self._state: dict[tuple[str, int, int | str], _ProducerState] = {}
        self._locks: dict[tuple[str, int, int | str], trio.Lock] = {}

    async def append(
        self,
        backend: Backend,
        topic: str,
        partition: int,
        batch: RecordBatch,
        producer_id: int | str,
        epoch: int,
        sequence: int,
        expected_offset: int | None = None,
    ) -> AppendResult:
        """A retry of the last batch is answered from memory before ``expected_offset`` is
        looked at (its records are where they were); a new batch is appended conditionally."""
        key = (topic, partition, producer_id)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = trio.Lock()
        try:
            lock.acquire_nowait()  # no schedule point when uncontended (the usual)
        except trio.WouldBlock:
            await lock.acquire()
        try:
            return await self._append_locked(
                key, backend, batch, producer_id, epoch, sequence, expected_offset
            )
        finally:
            lock.release()
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._locks.pop(key, None)

    async def _append_locked(
        self,
        key: tuple[str, int, int | str],
        backend: Backend,
        batch: RecordBatch,
        producer_id: int | str,
        epoch: int,
        sequence: int,
        expected_offset: int | None,
    ) -> AppendResult:
        topic, partition, _ = key
        state = self._state.get(key)
        if state is not None and is_retry(producer_id, epoch, sequence, state):
            r = state.result
            return AppendResult(r.partition, r.base_offset, r.last_offset, r.timestamp_us, True)
        result = await backend.append(topic, partition, batch, expected_offset)
        states = self._state
        if states.pop(key, None) is None and len(states) >= self.max_entries:
            oldest = next(iter(states))
            del states[oldest]
            limit_hit(
                "max_producer_states",
                "server",
                producer_id=str(oldest[2]),
                topic=oldest[0],
                partition=oldest[1],
            )
        states[key] = _ProducerState(epoch, sequence, sequence + batch.count - 1, result)
        return result
