"""Group commit: makes written files durable with as few fsyncs as possible.

Writers ``mark`` what they wrote (an object with an ``fd`` and a ``path``, or a directory ``Path``
whose entries changed) and, under fsync "always", ``await sync_through(ticket)`` with the ticket
``mark`` returned. One task at a time runs a round: it takes every file marked so far and fsyncs
them in a worker thread (so the event loop keeps serving); writers that arrive meanwhile wait for
the next round, which then covers all of them with one fsync per file. A writer returns only
after a round that started after its write has finished.

Running out of descriptors or space fails the writers waiting on that round (retriable) and leaves
everything marked for the next one; an I/O error from fsync itself stops the log for good (the
kernel may have dropped the dirty pages), which ``failure`` reports.

The fsync function is injectable (tests prove the ordering with it). It is called with file
descriptors duplicated for the round (or opened by path when the target closed its own), so
closing a segment during a round is harmless.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from gateway.model import ErrorCode, GatewayError

TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOSPC, errno.EDQUOT, errno.ENOMEM})
"""Errors that say "not now" (no descriptor to sync with, no space), not "the data is gone":
only other errors of fsync itself (EIO above all) stop the log from acknowledging writes."""


class Syncer:
    def __init__(self, fsync: Callable[[int], None] = os.fsync) -> None:
        self._fsync = fsync
        self._dirty: dict[int, Any] = {}
        self._written = 0  # tickets handed out
        self._synced = 0  # every ticket <= this is durable
        self._running = False
        self._round_done = trio.Event()
        self.failure: str = ""
        self.rounds = 0

    @property
    def pending(self) -> bool:
        return bool(self._dirty)

    def mark(self, target: Any) -> int:
        """Note that ``target`` (has ``.fd``, or is a directory Path) was written; returns the
        ticket to pass to ``sync_through``."""
        self._dirty[id(target)] = target
        self._written += 1
        return self._written

    async def sync_through(self, ticket: int) -> None:
        """Return once every write up to ``ticket`` is on disk."""
        while self._synced < ticket:
            if self.failure:
                raise GatewayError(ErrorCode.BACKEND_UNAVAILABLE, self.failure)
            if self._running:
                await self._round_done.wait()
            else:
                await self._round()
        if self.failure:
            raise GatewayError(ErrorCode.BACKEND_UNAVAILABLE, self.failure)

    async def sync_all(self) -> None:
        await self.sync_through(self._written)

    async def _round(self) -> None:
        self._running = True
        ticket = self._written
        targets = list(self._dirty.values())
        self._dirty.clear()
        fds: list[int] = []
        try:
            for target in targets:
                if isinstance(target, Path):
                    try:
                        fds.append(os.open(target, os.O_RDONLY))
                    except FileNotFoundError:  # the directory was deleted since
                        continue
                elif target.fd >= 0:
                    fds.append(os.dup(target.fd))
                elif getattr(target, "path", None) is not None:
                    # closed since it was written (a sealed segment whose descriptor was let go):
                    # fsync through any descriptor flushes the file
                    try:
                        fds.append(os.open(target.path, os.O_RDONLY))
                    except FileNotFoundError:  # deleted since
                        continue
            await trio.to_thread.run_sync(self._fsync_all, fds)
            self._synced = max(self._synced, ticket)
            self.rounds += 1
        except OSError as exc:
            if exc.errno in TRANSIENT:
                # out of descriptors or space: nothing was lost, the next round covers it all
                for target in targets:
                    self._dirty.setdefault(id(target), target)
                raise GatewayError(
                    ErrorCode.BACKEND_UNAVAILABLE, f"cannot sync the embedded log now: {exc}"
                ) from None
            # after a failed fsync the kernel may have dropped the dirty pages: stop acknowledging
            self.failure = f"fsync failed: {exc}; the embedded log stops accepting writes"
            raise GatewayError(ErrorCode.BACKEND_UNAVAILABLE, self.failure) from exc
        except BaseException:
            # cancelled (perhaps before the thread ran): the next round must cover these again
            for target in targets:
                self._dirty.setdefault(id(target), target)
            raise
        finally:
            for fd in fds:
                os.close(fd)
            self._running = False
            done, self._round_done = self._round_done, trio.Event()
            done.set()

    def _fsync_all(self, fds: list[int]) -> None:
        for fd in fds:
            self._fsync(fd)
