"""A small pool of client connections to one upstream server, with timeouts and error mapping.

``async with pool.connection() as client:`` hands out an idle connection (or opens one, at most
``size`` at a time). Whatever goes wrong on the wire is mapped onto the model's errors here, once:

- cannot connect, connection reset or closed, the peer's bytes not valid for its protocol:
  the connection is dropped and ``BACKEND_UNAVAILABLE`` (retriable) is raised;
- no answer within the request timeout: the connection is dropped (a late answer would be
  misread) and ``TIMEOUT`` is raised.

Connections are opened again on the next call, so the backend recovers by itself once the
upstream is back (no reconnect loop, no restart).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import trio

from gateway.model import ErrorCode, GatewayError

C = TypeVar("C")

WIRE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    EOFError,
    ConnectionError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
)


class Pool(Generic[C]):
    def __init__(
        self,
        name: str,
        connect: Callable[[], Awaitable[C]],
        close: Callable[[C], Awaitable[None]],
        *,
        size: int = 4,
        connect_timeout: float = 3.0,
        request_timeout: float = 10.0,
        protocol_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.name = name
        self._connect = connect
        self._close = close
        self._idle: list[C] = []
        self._slots = trio.Semaphore(max(1, size))
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._broken = WIRE_ERRORS + tuple(protocol_errors)
        self.opened = 0  # connections opened so far (reconnects included)

    async def _open(self) -> C:
        try:
            with trio.fail_after(self.connect_timeout):
                client = await self._connect()
        except trio.TooSlowError:
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE,
                f"{self.name}: no connection within {self.connect_timeout}s",
            ) from None
        except self._broken as exc:
            raise GatewayError(
                ErrorCode.BACKEND_UNAVAILABLE, f"{self.name}: cannot connect: {exc}"
            ) from None
        self.opened += 1
        return client

    async def _discard(self, client: C) -> None:
        with trio.CancelScope(shield=True):
            try:
                await self._close(client)
            except Exception:  # noqa: BLE001 - a broken connection may fail to close
                pass

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[C]:
        """A connection for one request/answer exchange (``timeout``: this call's deadline,
        default the pool's request timeout)."""
        async with self._slots:
            client = self._idle.pop() if self._idle else await self._open()
            limit = self.request_timeout if timeout is None else timeout
            ok = False
            try:
                with trio.fail_after(limit):
                    yield client
                ok = True
            except trio.TooSlowError:
                raise GatewayError(
                    ErrorCode.TIMEOUT, f"{self.name}: no answer within {limit}s"
                ) from None
            except self._broken as exc:
                raise GatewayError(
                    ErrorCode.BACKEND_UNAVAILABLE,
                    f"{self.name}: {type(exc).__name__}: {exc}",
                ) from None
            except GatewayError:
                ok = True  # an answered error: the connection is still in step
                raise
            except Exception as exc:  # a bug or a record the codec cannot encode: say so
                raise GatewayError(
                    ErrorCode.INTERNAL, f"{self.name}: {type(exc).__name__}: {exc}"
                ) from exc
            finally:
                if ok:
                    self._idle.append(client)
                else:
                    await self._discard(client)

    async def call(self, fn: Callable[[C], Awaitable[Any]], retry: bool = True) -> Any:
        """``fn(client)`` on a pooled connection. ``retry``: a request that is safe to repeat
        is tried once more on a fresh connection when a pooled one turns out to be dead."""
        try:
            async with self.connection() as client:
                return await fn(client)
        except GatewayError as exc:
            if not retry or exc.code is not ErrorCode.BACKEND_UNAVAILABLE:
                raise
        async with self.connection() as client:
            return await fn(client)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for client in idle:
            await self._discard(client)
