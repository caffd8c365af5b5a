"""The running gateway's admin endpoint as the data commands of the command line reach it
(topics, produce, consume, groups, matrix), and the fallback when no gateway answers: the
configured backends opened in this process."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from gateway.admin_tls import (
    CERT_HINT,
    ClientTLS,
    connect,
    connection,
    describe,
    dropped,
    plain_to_tls,
    speaks_tls,
)
from gateway.cli_errors import CliError
from gateway.config import GatewayConfig

PLAIN_TO_TLS_FIX = (
    "this config's [admin] has no tls_cert; run the command with the gateway's own config "
    "(--config FILE), or set [admin] tls_cert and tls_key as the gateway has them"
)


class AdminClient:
    """Talks to a running gateway's admin endpoint (HTTPS with ``tls``)."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float = 30.0,
        token: str | None = None,
        tls: ClientTLS | None = None,
    ) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.token = token  # the data API's bearer token (gateway/admin_auth.py client_token)
        self.tls = tls  # gateway/admin_tls.py; None: plain HTTP

    def _open(self, timeout: float) -> http.client.HTTPConnection:
        """A connection, TCP and (with ``tls``) the TLS handshake done."""
        conn = connection(self.host, self.port, self.tls, timeout)
        try:
            connect(conn, self.host, self.port, self.tls)
        except BaseException:
            conn.close()
            raise
        return conn

    def _exchange(
        self, conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, bytes]:
        """(status, body) of one request. TLS failures become one :class:`AdminTLSError`; so
        does a plain request that reached a TLS port."""
        headers = {"content-type": "application/json"} if body is not None else {}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:  # after the handshake
            raise dropped(exc, self.host, self.port) from None
        except ssl.SSLError as exc:
            raise describe(exc, self.host, self.port, self.tls or ClientTLS()) from None
        except (http.client.HTTPException, ConnectionError) as exc:
            if self.tls is not None:
                raise dropped(exc, self.host, self.port) from None
            if speaks_tls(self.host, self.port):
                raise plain_to_tls(self.host, self.port, PLAIN_TO_TLS_FIX) from None
            raise

    def request(self, method: str, path: str, body: Any = None) -> Any:
        payload = None if body is None else json.dumps(body).encode()
        conn = self._open(self.timeout)
        try:
            status, data = self._exchange(conn, method, path, payload)
        finally:
            conn.close()
        obj = json.loads(data) if data else None
        if status >= 400:
            message = obj.get("error") if isinstance(obj, dict) else data.decode(errors="replace")
            if status == 401 and self.tls is not None and "client certificate" in str(message):
                message = f"{message} ({CERT_HINT})"
            raise CliError(f"the gateway at {self.host}:{self.port} answered {status}: {message}")
        return obj

    def alive(self) -> bool:
        """True when a gateway answers on the admin port; False when none does (the caller
        may then open the backends itself). Raises :class:`AdminTLSError` when something
        answers but TLS stands between: never a reason to open the backends here."""
        try:
            conn = self._open(1.0)
        except (OSError, http.client.HTTPException):
            return False  # nothing listens (AdminTLSError is neither: it goes up)
        try:
            return self._exchange(conn, "GET", "/healthz")[0] == 200
        except (OSError, http.client.HTTPException):
            return False  # a plain HTTP peer that is not a gateway
        finally:
            conn.close()

    def data_client(self) -> Any:
        """A keep-alive client of the records API (binary batches) at the same endpoint, with
        the same credential and TLS settings."""
        from gateway.pipeline.client import GatewayClient

        return GatewayClient(
            f"{self.host}:{self.port}", timeout=self.timeout, token=self.token, tls=self.tls
        )


def admin_client(host: str, port: int, config: GatewayConfig | None = None) -> AdminClient:
    """The client of the admin endpoint at ``host:port`` that every command uses (the one
    place that gives it the data API's credential and the TLS settings from ``config``)."""
    from gateway.admin_auth import client_token
    from gateway.admin_tls import from_config

    if config is None:
        return AdminClient(host, port)
    return AdminClient(host, port, token=client_token(config), tls=from_config(config.admin, host))


def admin_host(config: GatewayConfig) -> str:
    host = config.admin.host
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def admin_for(config: GatewayConfig) -> AdminClient | None:
    if not config.admin.enabled or config.admin.port == 0:
        return None
    client = admin_client(admin_host(config), config.admin.port, config)
    return client if client.alive() else None


def no_gateway(config: GatewayConfig) -> str:
    if not config.admin.enabled or config.admin.port == 0:
        return "the config has no admin endpoint"
    return f"no gateway answers at {admin_host(config)}:{config.admin.port}"


def serve_hint(config: GatewayConfig) -> str:
    where = "" if config.source == "<defaults>" else f" --config {config.source}"
    return f"gateway serve{where}"


def check_data_dirs(config: GatewayConfig) -> None:
    """One clear line for a data directory that cannot be used, before a backend tries."""
    from gateway.cli_checks import data_dir_problem, data_dirs

    for key, path in data_dirs(config):
        problem = data_dir_problem(key, path)
        if problem:
            raise CliError(problem)


def direct(config: GatewayConfig, fn: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``fn(core)`` against the configured backends opened in this process. A backend
    that lives only inside a gateway process (memory) cannot be reached this way."""
    from gateway.server import build_backends, build_core

    check_data_dirs(config)
    inside = [n for n, b in config.backends.items() if b.type == "memory"]
    if inside:
        raise CliError(
            f"{no_gateway(config)}, and backend {inside[0]!r} (memory) lives inside the "
            f"gateway process: start it ({serve_hint(config)})"
        )

    async def main() -> Any:
        backends = build_backends(config)
        opened: list[Any] = []
        async with trio.open_nursery() as nursery:
            try:
                for backend in backends.values():
                    await backend.open(nursery)
                    opened.append(backend)
                return await fn(build_core(config, backends))
            finally:
                with trio.CancelScope(shield=True):
                    for backend in opened:
                        await backend.flush()
                        await backend.close()
                nursery.cancel_scope.cancel()

    return trio.run(main)
