"""Progress lines of long commands: records done (of the total when known), rate and the time
left. ``progress_text`` is pure; ``ProgressLine`` writes it to a stream at most every
``every`` seconds (rewriting one line on a terminal, a new line otherwise)."""

from __future__ import annotations

import time
from typing import TextIO


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {s:02d} s"
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m:02d} min"


def progress_text(
    label: str,
    done: int,
    total: int | None,
    elapsed: float,
    extra: str = "",
    working: float | None = None,
) -> str:
    """``label: 1,200 of 5,000 records (24%), 600 records/s, about 6 s left, 2 s so far``.
    ``working``: the seconds the records took (the rate's base) when not all of ``elapsed``
    (a Spark job's records start after Spark did)."""
    base = elapsed if working is None else working
    rate = done / base if base > 0 else 0.0
    parts = [f"{done:,} of {total:,} records" if total else f"{done:,} records"]
    if total:
        parts[0] += f" ({min(100, 100 * done // total)}%)"
    parts.append(f"{rate:,.0f} records/s")
    if total and rate > 0 and done < total:
        parts.append(f"about {duration((total - done) / rate)} left")
    parts.append(f"{duration(elapsed)} so far")
    if extra:
        parts.append(extra)
    return f"{label}: {', '.join(parts)}"


class ProgressLine:
    def __init__(self, stream: TextIO, every: float = 0.5, terminal: bool | None = None) -> None:
        self.stream = stream
        self.every = every
        self.terminal = stream.isatty() if terminal is None else terminal
        self.started = time.monotonic()
        self._last = 0.0
        self._shown = False

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.every

    def show(self, text: str, force: bool = False) -> None:
        if not force and not self.due():
            return
        self._last = time.monotonic()
        if self.terminal:
            self.stream.write("\r\x1b[K" + text)
            self._shown = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def end(self) -> None:
        """Leave the terminal line (the final message goes on a line of its own)."""
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False
