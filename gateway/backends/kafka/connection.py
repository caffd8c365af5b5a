"""One connection to a Kafka broker, in trio: kio entities in, kio entities out, pipelined.

Requests are framed (``size i32 | request header | body``) with kio's writers; a reader task
matches responses to requests by correlation id. A broken connection fails every request in flight
with ``ErrorCode.BACKEND_UNAVAILABLE`` (retriable); the owner opens a new one on the next call.
"""

from __future__ import annotations

import io
import itertools
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from gateway.model import ErrorCode, GatewayError

SIZE = struct.Struct(">i")
CORRELATION = struct.Struct(">i")


def unavailable(message: str) -> GatewayError:
    return GatewayError(ErrorCode.BACKEND_UNAVAILABLE, message)


def response_class(request: Any) -> Any:
    import importlib

    module = type(request).__module__.rsplit(".", 1)[0] + ".response"
    name = type(request).__name__.replace("Request", "Response")
    return getattr(importlib.import_module(module), name)


_RESPONSE_CLASSES: dict[type, Any] = {}


class _Slot:
    __slots__ = ("event", "body", "error", "response_cls")

    def __init__(self, response_cls: Any) -> None:
        self.event = trio.Event()
        self.body: bytes = b""
        self.error: GatewayError | None = None
        self.response_cls = response_cls


Authenticate = Callable[["BrokerConnection"], Awaitable[None]]


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        max_response_bytes: int,
        ssl_context: ssl.SSLContext | None = None,
        server_name: str = "",
        authenticate: Authenticate | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self.ssl_context = ssl_context
        self.server_name = server_name
        self.authenticate = authenticate  # SASL, run once connected, before any other request
        self._stream: trio.abc.Stream | None = None
        self._correlation = itertools.count(1)
        self._pending: dict[int, _Slot] = {}
        self._send_lock = trio.Lock()
        self.closed = False

    async def connect(self, nursery: trio.Nursery, timeout: float) -> None:
        try:
            with trio.fail_after(timeout):
                sock = await trio.open_tcp_stream(self.host, self.port)
                if self.ssl_context is None:
                    self._stream = sock
                else:
                    tls = trio.SSLStream(
                        sock, self.ssl_context, server_hostname=self.server_name or self.host
                    )
                    try:
                        await tls.do_handshake()
                    except BaseException:
                        await trio.aclose_forcefully(sock)
                        raise
                    self._stream = tls
        except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
            self.closed = True
            if isinstance(exc, trio.BrokenResourceError):  # trio's wrapper of an SSL error
                reason = f"TLS handshake failed: {exc.__cause__ or exc}"
            else:
                reason = str(exc) or type(exc).__name__
            raise unavailable(
                f"cannot connect to Kafka broker {self.host}:{self.port}: {reason}"
            ) from None
        nursery.start_soon(self._reader)
        if self.authenticate is not None:
            try:
                await self.authenticate(self)
            except BaseException:
                await self.aclose()
                raise

    def _fail_all(self, reason: str) -> None:
        self.closed = True
        pending, self._pending = self._pending, {}
        for slot in pending.values():
            slot.error = unavailable(f"Kafka broker {self.host}:{self.port}: {reason}")
            slot.event.set()

    async def _reader(self) -> None:
        stream = self._stream
        assert stream is not None
        buf = bytearray()
        try:
            while True:
                data = await stream.receive_some(1 << 20)
                if not data:
                    raise trio.BrokenResourceError("connection closed by the broker")
                buf += data
                while len(buf) >= 4:
                    (size,) = SIZE.unpack_from(buf, 0)
                    if size < 4 or size > self.max_response_bytes:
                        raise trio.BrokenResourceError(f"bad response size {size}")
                    if len(buf) < 4 + size:
                        break
                    with memoryview(buf) as view:
                        body = bytes(view[4 : 4 + size])  # one copy (not a bytearray first)
                    del buf[: 4 + size]
                    (corr,) = CORRELATION.unpack_from(body, 0)
                    slot = self._pending.pop(corr, None)
                    if slot is not None:
                        slot.body = body
                        slot.event.set()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._fail_all(str(exc) or type(exc).__name__)
        finally:
            self._fail_all("connection closed")
            await trio.aclose_forcefully(stream)

    async def aclose(self) -> None:
        self._fail_all("closed")
        if self._stream is not None:
            await trio.aclose_forcefully(self._stream)

    async def call(
        self, request: Any, timeout: float, on_sent: Callable[[], None] | None = None
    ) -> Any:
        """Send ``request`` (a kio request entity), return the parsed kio response entity.
        ``on_sent`` is called once the request is written (requests of one connection are
        answered in the order they were written)."""
        if self.closed or self._stream is None:
            raise unavailable(f"Kafka broker {self.host}:{self.port} is not connected")
        corr = next(self._correlation)
        header_cls = request.__header_schema__
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        entity_writer(header_cls)(
            buf,
            header_cls(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=i32(corr),
                client_id=self.client_id,
            ),
        )
        entity_writer(type(request))(buf, request)
        data = buf.getbuffer()
        SIZE.pack_into(data, 0, len(data) - 4)
        cls = _RESPONSE_CLASSES.get(type(request))
        if cls is None:
            cls = _RESPONSE_CLASSES[type(request)] = response_class(request)
        slot = _Slot(cls)
        self._pending[corr] = slot
        try:
            with trio.move_on_after(timeout) as scope:
                async with self._send_lock:
                    await self._stream.send_all(bytes(data))
                if on_sent is not None:
                    on_sent()
                await slot.event.wait()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._fail_all(str(exc))
            raise unavailable(f"Kafka broker {self.host}:{self.port}: {exc}") from None
        finally:
            self._pending.pop(corr, None)
        if scope.cancelled_caught:
            # the connection is now out of step (a late answer would be misread): drop it
            self._fail_all("request timed out")
            raise GatewayError(
                ErrorCode.TIMEOUT,
                f"Kafka broker {self.host}:{self.port} did not answer "
                f"{type(request).__name__} within {timeout}s",
            )
        if slot.error is not None:
            raise slot.error
        # flexible responses (except ApiVersions) have a tagged-field section after the id
        offset = 4
        if cls.__flexible__ and cls.__name__ != "ApiVersionsResponse":
            offset = 5
        try:
            result, _size = entity_reader(cls)(slot.body, offset)
        except Exception as exc:  # kio raises several types for a malformed response
            raise GatewayError(
                ErrorCode.INTERNAL, f"cannot parse {cls.__name__} from Kafka: {exc}"
            ) from exc
        return result
