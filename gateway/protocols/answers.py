"""The byte budget of one fetch/consume/poll answer (the listener's ``max_answer_bytes``), the
process-wide pool all answers take it from (``[server] max_answer_memory``), and sending a large
answer as the pieces it was built from.

A client names how many bytes it wants per partition (Kafka 0.8 MaxBytes, TANK fetch_size, an
Iggy message count) and may list many partitions, or one partition many times, in a request of a
few dozen bytes. Whatever it asks, the partitions of one answer share one budget: each takes at
most what is left, in request order, so an answer never holds more than the budget of record
data. A hit is counted (``gateway_limit_hits_total{limit="max_answer_bytes"}``) when the budget,
not the client's own size, left data out of an answer.

The pool: an answer's budget is taken from :data:`MEMORY` before the answer reads anything, and
given back once the answer was written to the socket, or the answer failed, was cancelled or its
connection ended (:func:`holding` releases on every exit). So however many connections ask for
huge answers and never read them, the record bytes held by answers stay under
``max_answer_memory`` (``gateway_answer_memory_bytes``); with the server's ``send_timeout_s`` a
client that never reads gives its share back within that time.

When the pool is short an answer gets less: what is left. A smaller answer is valid in every
protocol (the client fetches again from where it stopped). Only when less than a small floor
(:data:`FLOOR_BYTES`, or what the answer asks if smaller) is left does the answer wait, at most
:data:`WAIT_S`, for answers being sent to give theirs back, then goes on with what is left, even
nothing (an answer without records). Why this and not a fixed floor taken beyond the pool: a
floor outside the pool would let a thousand connections hold a thousand floors, which is the
unbounded total this pool exists to prevent. Why not wait until the whole ask fits: a waiter
holds no share while it waits, so nothing can deadlock, but a client asking 64 MiB would then
starve behind smaller ones. A share is given back in one place per answer, so none can leak.

A long poll does not sit on a large share: a read that may wait at the log end first reads at
once with its whole share, and only when that found too little waits with
:data:`WAIT_BYTES` (:meth:`AnswerBudget.take_for_wait`), so idle consumers cannot take the pool
from answers that have data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

import trio

from gateway.observability import ANSWER_MEMORY, limit_hit

LIMIT = "max_answer_bytes"
MEMORY_LIMIT = "max_answer_memory"
COALESCE_BYTES = 256 * 1024  # small pieces are joined into writes of about this size
DEFAULT_MAX_ANSWER_MEMORY = 512 * 1024 * 1024
FLOOR_BYTES = 64 * 1024  # below this much left, an answer waits (WAIT_S at most) for more
WAIT_S = 1.0
WAIT_BYTES = 64 * 1024
"""What a fetch waiting at the log end (a long poll) holds of the pool at most: it reads at
once with its whole share, and only when that found too little waits with this much."""


class AnswerMemory:
    """The pool of record bytes every answer of the process takes its budget from."""

    __slots__ = ("limit", "held", "_freed")

    def __init__(self, limit: int = DEFAULT_MAX_ANSWER_MEMORY) -> None:
        self.limit = limit
        self.held = 0
        self._freed: trio.Event | None = None

    def configure(self, limit: int) -> None:
        """Set the pool's size (``[server] max_answer_memory``); shares taken stay taken."""
        self.limit = limit
        self._wake()

    @property
    def free(self) -> int:
        return max(0, self.limit - self.held)

    async def take(self, wanted: int) -> int:
        """Take up to ``wanted`` bytes: what is left when that is less; below the floor, wait
        (at most WAIT_S) for shares given back first. The bytes taken (maybe 0)."""
        wanted = max(0, wanted)
        floor = min(wanted, FLOOR_BYTES)
        if self.free < floor:
            with trio.move_on_after(WAIT_S):
                while self.free < floor:
                    if self._freed is None:
                        self._freed = trio.Event()
                    await self._freed.wait()
        got = min(wanted, self.free)
        if got:
            self.held += got
            ANSWER_MEMORY.set(self.held)
        return got

    def give_back(self, size: int) -> None:
        if size > 0:
            self.held = max(0, self.held - size)
            ANSWER_MEMORY.set(self.held)
            self._wake()

    def _wake(self) -> None:
        freed = self._freed
        if freed is not None:
            self._freed = None
            freed.set()


MEMORY = AnswerMemory()
"""The process's pool (the server sizes it from ``[server] max_answer_memory``)."""


class Held:
    """The bytes one answer holds from the pool, from before it reads until it was sent."""

    __slots__ = ("memory", "size", "closed")

    def __init__(self, memory: AnswerMemory) -> None:
        self.memory = memory
        self.size = 0
        self.closed = False

    async def take(self, wanted: int) -> int:
        got = await self.memory.take(wanted)
        if self.closed:  # the answer ended while this waited
            self.memory.give_back(got)
            return got
        self.size += got
        return got

    def give_back(self, size: int) -> None:
        size = min(max(0, size), self.size)
        if size:
            self.size -= size
            self.memory.give_back(size)

    def close(self) -> None:
        self.closed = True
        self.give_back(self.size)


_HELD: ContextVar[Held | None] = ContextVar("answer_held", default=None)


class holding:  # noqa: N801  (used as a context manager, like contextlib's)
    """``with holding():`` around reading, building and sending one answer: the budget the
    answer takes (:meth:`AnswerBudget.take`, anywhere below in the same task) is given back
    when the block ends, however it ends. A task started inside the block would see it: a
    task that answers opens its own (TANK's consume tasks do)."""

    __slots__ = ("held", "_token")

    def __init__(self, memory: AnswerMemory | None = None) -> None:
        self.held = Held(MEMORY if memory is None else memory)

    def __enter__(self) -> Held:
        self._token = _HELD.set(self.held)
        return self.held

    def __exit__(self, *exc: object) -> None:
        _HELD.reset(self._token)
        self.held.close()


class AnswerBudget:
    """What is left of one answer's budget of record bytes."""

    __slots__ = ("limit", "left", "hit", "key", "held", "_taken")

    def __init__(self, limit: int, key: str = LIMIT) -> None:
        self.limit = max(0, limit)
        self.left = self.limit
        self.hit = False
        self.key = key  # the config key named when the budget left data out ("": none)
        self.held: Held | None = None
        self._taken = 0  # bytes of the pool this budget still holds

    @classmethod
    async def take(cls, wanted: int, limit: int) -> AnswerBudget:
        """A budget for an answer whose partitions ask ``wanted`` bytes together, capped at
        ``limit`` (the listener's ``max_answer_bytes``), taken from the pool: less when the
        pool is short (then a hit names ``max_answer_memory``). Outside :class:`holding`
        (a session driven directly, as unit tests do) nothing is taken from the pool."""
        limit = max(1, limit)
        held = _HELD.get()
        if held is None or held.closed:
            return cls(limit)
        ask = min(max(0, wanted), limit)
        got = await held.take(ask)
        budget = cls(got, MEMORY_LIMIT) if got < ask else cls(limit)
        budget.held = held
        budget._taken = got
        return budget

    @classmethod
    async def take_for_wait(cls, wanted: int) -> AnswerBudget:
        """The budget of a read that waits at the log end: WAIT_BYTES at most. What that cap
        leaves out is no budget hit (the next read takes it), what the pool does is."""
        budget = await cls.take(min(max(0, wanted), WAIT_BYTES), WAIT_BYTES)
        if budget.key != MEMORY_LIMIT:
            budget.key = ""
        return budget

    @property
    def used(self) -> int:
        return self.limit - self.left

    def share(self, wanted: int) -> tuple[int, bool]:
        """(the bytes a partition asking for ``wanted`` may take, whether the budget rather
        than ``wanted`` set that number)."""
        wanted = max(0, wanted)
        if wanted <= self.left:
            return wanted, False
        return self.left, True

    def spend(self, size: int) -> None:
        self.left = max(0, self.left - size)

    def trim(self) -> None:
        """The answer is built: give back what it did not use (the rest is held until sent)."""
        self._give_back(self._taken - self.used)

    def release(self) -> None:
        """The answer is dropped before it was sent (read again later): give back all."""
        self._give_back(self._taken)

    def _give_back(self, size: int) -> None:
        size = min(max(0, size), self._taken)
        if size and self.held is not None:
            self._taken -= size
            self.held.give_back(size)

    def report(self, protocol: str, log: Any, **fields: Any) -> None:
        """Count (and, rate-limited, log) a hit once per answer."""
        if self.hit and self.key:
            limit_hit(self.key, protocol, log, limit_bytes=self.limit, **fields)


R = TypeVar("R")


async def read_then_wait(
    wanted: int,
    limit: int,
    wait_ms: int,
    read: Callable[[int, AnswerBudget], Awaitable[R]],
    enough: Callable[[R], bool],
) -> tuple[R, AnswerBudget]:
    """One answer's read that may wait at the log end (a long poll), within the pool. A share
    larger than WAIT_BYTES is not held while waiting (idle long polls would take the pool from
    answers with data): such a read first reads at once (``read(0, budget)``) and, when that is
    not ``enough``, gives its share back and waits (``read(wait_ms, budget)``) holding
    WAIT_BYTES at most. The result and the budget it was read with."""
    budget = await AnswerBudget.take(wanted, limit)
    if wait_ms > 0 and budget.limit > WAIT_BYTES:
        result = await read(0, budget)
        if enough(result):
            return result, budget
        budget.release()
        budget = await AnswerBudget.take_for_wait(wanted)
    return await read(wait_ms, budget), budget


def coalesce(pieces: Iterable[Any], size: int = COALESCE_BYTES) -> Iterator[Any]:
    """The pieces as writes: runs of small pieces joined up to about ``size`` bytes, large
    pieces (record data shared with the backend) passed through uncopied."""
    run: list[Any] = []
    held = 0
    for piece in pieces:
        n = len(piece)
        if not n:
            continue
        if n >= size:
            if run:
                yield b"".join(run)
                run, held = [], 0
            yield piece
            continue
        run.append(piece)
        held += n
        if held >= size:
            yield b"".join(run)
            run, held = [], 0
    if run:
        yield b"".join(run)


async def send_pieces(stream: trio.abc.SendStream, pieces: Iterable[Any]) -> int:
    """Write an answer built as pieces without joining it into one buffer; the bytes sent."""
    sent = 0
    for data in coalesce(pieces):
        await stream.send_all(data)
        sent += len(data)
    return sent
