"""State the Liftbridge listener keeps beside the core, shared by all its connections.

Paused and readonly flags per partition, and the subscriptions to end when a partition is paused
or its stream deleted. It lives in the process (one gateway is one broker); a second gateway
instance does not see another's pause/readonly flags (documented in docs/protocols/liftbridge.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.protocols.base import PerCore

EndCallback = Callable[[int, str], None]
"""Ends a subscription with (grpc status, message)."""


@dataclass
class PartitionFlags:
    paused: bool = False
    was_paused: bool = False  # what metadata reports as paused (see pause)
    resume_all: bool = False
    readonly: bool = False
    paused_ns: tuple[int, int] = (0, 0)
    readonly_ns: tuple[int, int] = (0, 0)


@dataclass
class LiftbridgeState:
    flags: dict[tuple[str, int], PartitionFlags] = field(default_factory=dict)
    subscribers: dict[tuple[str, int], set[Any]] = field(default_factory=dict)

    def get(self, stream: str, partition: int) -> PartitionFlags | None:
        return self.flags.get((stream, partition))

    def flags_for(self, stream: str, partition: int) -> PartitionFlags:
        f = self.flags.get((stream, partition))
        if f is None:
            f = self.flags[(stream, partition)] = PartitionFlags()
        return f

    def pause(self, stream: str, partitions: list[int], resume_all: bool) -> None:
        """Pause partitions. Metadata reports a partition paused from then on, also once a
        publish or subscribe resumed it, as the reference server does (its partition keeps
        the flag); the pause timestamps record pausing and resuming."""
        now = time.time_ns()
        for p in partitions:
            f = self.flags_for(stream, p)
            f.was_paused = True
            if not f.paused:
                f.paused = True
                f.paused_ns = (f.paused_ns[0] or now, now)
            f.resume_all = resume_all

    def resume(self, stream: str, partition: int, partitions: int) -> None:
        """A publish to ``partition`` resumes it (and every partition with resumeAll)."""
        f = self.flags.get((stream, partition))
        if f is None or not f.paused:
            return
        targets = range(partitions) if f.resume_all else (partition,)
        now = time.time_ns()
        for p in targets:
            g = self.flags.get((stream, p))
            if g is not None and g.paused:
                g.paused = False
                g.resume_all = False
                g.paused_ns = (g.paused_ns[0] or now, now)

    def set_readonly(self, stream: str, partitions: list[int], readonly: bool) -> None:
        now = time.time_ns()
        for p in partitions:
            f = self.flags_for(stream, p)
            if f.readonly != readonly:
                f.readonly = readonly
                f.readonly_ns = (f.readonly_ns[0] or now, now)

    def forget(self, stream: str) -> None:
        for key in [k for k in self.flags if k[0] == stream]:
            del self.flags[key]

    # ------------------------------------------------------------------ subscriptions
    def add_subscriber(self, stream: str, partition: int, sub: Any) -> None:
        self.subscribers.setdefault((stream, partition), set()).add(sub)

    def remove_subscriber(self, stream: str, partition: int, sub: Any) -> None:
        subs = self.subscribers.get((stream, partition))
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self.subscribers[(stream, partition)]

    def end_subscribers(
        self, stream: str, partitions: list[int] | None, status: int, message: str
    ) -> None:
        for (s, p), subs in list(self.subscribers.items()):
            if s == stream and (partitions is None or p in partitions):
                for sub in list(subs):
                    sub.end(status, message)


_STATES: PerCore[LiftbridgeState] = PerCore()


def state_for(core: Any) -> LiftbridgeState:
    """The one LiftbridgeState of a core (created on first use)."""
    return _STATES.get(core, LiftbridgeState)
