"""Long polls: a read at the log end waits until an append or its deadline.

Local backends call :meth:`Waiters.notify` on every append (through ``Backend.append_listener``);
for backends that cannot tell (``capabilities.notifies_appends`` false) the waiter polls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from gateway.observability import LONG_POLL_WAITS

POLL_INTERVAL_S = 0.05


class Waiters:
    def __init__(self) -> None:
        self._events: dict[tuple[str, int], trio.Event] = {}
        self.waits_total = 0

    def notify(self, topic: str, partition: int, high_watermark: int = -1) -> None:
        event = self._events.pop((topic, partition), None)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        """Wake everyone (shutdown, topic deletion)."""
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    async def wait(self, topic: str, partition: int, deadline: float) -> bool:
        """Wait for the next append to (topic, partition) until ``deadline`` (trio clock).
        Returns True when woken by an append, False on the deadline."""
        self.waits_total += 1
        LONG_POLL_WAITS.inc()
        key = (topic, partition)
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = trio.Event()
        with trio.move_on_at(deadline):
            await event.wait()
            return True
        return False

    async def poll(self, has_data: Callable[[], Awaitable[bool]], deadline: float) -> bool:
        """For backends that do not notify: check ``has_data`` every POLL_INTERVAL_S."""
        self.waits_total += 1
        LONG_POLL_WAITS.inc()
        while True:
            if await has_data():
                return True
            now = trio.current_time()
            if now >= deadline:
                return False
            await trio.sleep(min(POLL_INTERVAL_S, deadline - now))
