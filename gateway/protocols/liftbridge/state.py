"""State the Liftbridge listener keeps beside the core, shared by all its connections.

Paused and readonly flags per partition, and the subscriptions to end when a partition is paused
or its stream deleted. On a backend whose key-value store several gateways share (NATS, the
backends with ``shared_groups``) the flags of each stream are also kept there (namespace
``liftbridge``, one entry per stream): every change is written at once and each gateway re-reads
a stream's entry when it is older than ``REFRESH_S``, so a pause or readonly set through one
replica holds on every replica within that time. Elsewhere they live in the process. Ending the
subscriptions of a paused partition is done by the gateway that paused it (a subscription on
another replica ends at its next read of a paused or readonly partition's end).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from gateway.core.view import CoreView
from gateway.model import ErrorCode, GatewayError
from gateway.protocols.base import PerCore

FLAGS_NS = "liftbridge"
REFRESH_S = 1.0


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
    store: Any = None  # the shared backend keeping the flags, or None (in the process only)
    loaded: dict[str, float] = field(default_factory=dict)  # stream -> when read (monotonic)
    dirty: set[str] = field(default_factory=set)  # streams changed here, not yet written

    # ------------------------------------------------------------------ the shared store
    async def refresh(self, stream: str) -> None:
        """Write this gateway's pending changes, then re-read ``stream``'s flags if the copy
        here is older than ``REFRESH_S``."""
        if self.store is None:
            return
        await self.flush()
        now = time.monotonic()
        if now - self.loaded.get(stream, -REFRESH_S) < REFRESH_S:
            return
        try:
            raw = await self.store.kv_get(FLAGS_NS, stream)
        except GatewayError as exc:
            if exc.code is ErrorCode.UNSUPPORTED:
                self.store = None
                return
            raise
        self.loaded[stream] = now
        for key in [k for k in self.flags if k[0] == stream]:
            del self.flags[key]
        for p, data in (json.loads(raw) if raw else {}).items():
            data["paused_ns"] = tuple(data["paused_ns"])
            data["readonly_ns"] = tuple(data["readonly_ns"])
            self.flags[(stream, int(p))] = PartitionFlags(**data)

    async def flush(self) -> None:
        """Write the flags of every stream changed here since the last flush."""
        while self.store is not None and self.dirty:
            stream = self.dirty.pop()
            mine = {str(p): asdict(f) for (s, p), f in self.flags.items() if s == stream}
            if mine:
                await self.store.kv_put(FLAGS_NS, stream, json.dumps(mine).encode())
            else:
                await self.store.kv_delete(FLAGS_NS, stream)
            self.loaded[stream] = time.monotonic()

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
        self.dirty.add(stream)

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
        self.dirty.add(stream)

    def set_readonly(self, stream: str, partitions: list[int], readonly: bool) -> None:
        now = time.time_ns()
        for p in partitions:
            f = self.flags_for(stream, p)
            if f.readonly != readonly:
                f.readonly = readonly
                f.readonly_ns = (f.readonly_ns[0] or now, now)
        self.dirty.add(stream)

    def forget(self, stream: str) -> None:
        for key in [k for k in self.flags if k[0] == stream]:
            del self.flags[key]
        self.dirty.add(stream)

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


def state_for(core: CoreView) -> LiftbridgeState:
    """The one LiftbridgeState of a core (created on first use), keeping its flags in the
    default backend when that backend is shared by several gateways."""

    def make() -> LiftbridgeState:
        state = LiftbridgeState()
        router = getattr(core, "router", None)
        backend = getattr(router, "default_backend", None)
        if backend is not None and backend.capabilities.shared_groups:
            state.store = backend
        return state

    return _STATES.get(core, make)
