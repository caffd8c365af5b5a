"""The byte budget of one fetch/consume/poll answer (the listener's ``max_answer_bytes``), and
sending a large answer as the pieces it was built from.

A client names how many bytes it wants per partition (Kafka 0.8 MaxBytes, TANK fetch_size, an
Iggy message count) and may list many partitions, or one partition many times, in a request of a
few dozen bytes. Whatever it asks, the partitions of one answer share one budget: each takes at
most what is left, in request order, so an answer never holds more than the budget of record
data. A hit is counted (``gateway_limit_hits_total{limit="max_answer_bytes"}``) when the budget,
not the client's own size, left data out of an answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import trio

from gateway.observability import limit_hit

LIMIT = "max_answer_bytes"
COALESCE_BYTES = 256 * 1024  # small pieces are joined into writes of about this size


class AnswerBudget:
    """What is left of one answer's budget of record bytes."""

    __slots__ = ("limit", "left", "hit")

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.left = self.limit
        self.hit = False

    def share(self, wanted: int) -> tuple[int, bool]:
        """(the bytes a partition asking for ``wanted`` may take, whether the budget rather
        than ``wanted`` set that number)."""
        wanted = max(0, wanted)
        if wanted <= self.left:
            return wanted, False
        return self.left, True

    def spend(self, size: int) -> None:
        self.left = max(0, self.left - size)

    def report(self, protocol: str, log: Any, **fields: Any) -> None:
        """Count (and, rate-limited, log) a hit once per answer."""
        if self.hit:
            limit_hit(LIMIT, protocol, log, limit_bytes=self.limit, **fields)


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
