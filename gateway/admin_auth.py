"""Who may use the admin endpoint's data and control API.

The admin port has two surfaces:

- **open**: ``/healthz``, ``/readyz``, ``/metrics``, and ``/v1/status`` and ``/`` without the
  details that name clients, topics and groups. Load balancers, probes and Prometheus need these.
- **data and control**: records, topics, groups, offset resets, the full status. It needs a
  credential when one is configured: the bearer token of ``[admin] token_file`` (compared in
  constant time) or a client certificate signed by ``[admin] tls_client_ca``. Either one is
  enough. With neither configured it is open when the admin binds a loopback address (only
  local processes reach it) and off otherwise (403 saying how to turn it on).

Clients (the CLI, the pipeline) find the token in ``GATEWAY_ADMIN_TOKEN`` or in the file the
config's ``[admin] token_file`` names (:func:`client_token`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from gateway.observability import PROTOCOL_ERRORS

log = structlog.get_logger("gateway.admin")

TOKEN_ENV = "GATEWAY_ADMIN_TOKEN"
MAX_TOKEN_BYTES = 4096


_REFUSAL_LOGGED: dict[str, float] = {}
REFUSAL_LOG_INTERVAL_S = 60.0

OFF_MESSAGE = (
    "the admin data API is off: the admin endpoint binds a non-loopback address and no "
    "credential is configured; set [admin] token_file (a bearer token) or tls_client_ca "
    "(client certificates), or bind [admin] host to 127.0.0.1"
)


class TokenError(Exception):
    """What is wrong with a token file, phrased as what was expected."""


def read_token(path: str) -> str:
    """The token in ``path`` (surrounding whitespace removed), or TokenError."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise TokenError(f"a readable file holding the token ({exc.strerror})") from None
    if len(raw) > MAX_TOKEN_BYTES:
        raise TokenError(f"a token of at most {MAX_TOKEN_BYTES} bytes")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise TokenError("a token of printable ASCII characters") from None
    if not token:
        raise TokenError("a file holding a non-empty token")
    if not token.isprintable() or any(c.isspace() for c in token):
        raise TokenError("a token of printable ASCII characters without spaces")
    return token


def is_loopback(host: str) -> bool:
    """True for an address only local processes can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def client_token(config: Any = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The token a client sends: ``GATEWAY_ADMIN_TOKEN``, else the config's
    ``[admin] token_file``, else None."""
    env = os.environ if environ is None else environ
    token = env.get(TOKEN_ENV, "").strip()
    if token:
        return token
    path = getattr(getattr(config, "admin", None), "token_file", "")
    if path:
        try:
            return read_token(path)
        except TokenError:
            return None  # the gateway answers 401, which says what is missing
    return None


def make_admin_ssl_context(cfg: Any) -> ssl.SSLContext | None:
    """The admin port's TLS context, or None for plain HTTP. A client CA makes the server ask
    for a certificate without requiring one (health and metrics stay open); a certificate
    that is presented must verify."""
    if not cfg.tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    if cfg.tls_client_ca:
        context.verify_mode = ssl.CERT_OPTIONAL
        context.load_verify_locations(cfg.tls_client_ca)
    return context


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int  # 401: no or wrong credential; 403: the API is off
    reason: str  # the metric label
    message: str


@dataclass(frozen=True)
class AdminAuth:
    """The admin data API's access rule, fixed at start."""

    token: bytes | None
    client_ca: bool
    loopback: bool

    @classmethod
    def from_config(cls, cfg: Any) -> AdminAuth:
        token = read_token(cfg.token_file).encode() if cfg.token_file else None
        return cls(token, bool(cfg.tls_client_ca), is_loopback(cfg.host))

    @property
    def needs_credential(self) -> bool:
        return self.token is not None or self.client_ca

    @property
    def off(self) -> bool:
        """No credential configured and a non-loopback bind: the data API answers 403."""
        return not self.needs_credential and not self.loopback

    def describe(self) -> str:
        if self.off:
            return "off"
        ways = [w for w, on in (("token", self.token), ("client_cert", self.client_ca)) if on]
        return " or ".join(ways) if ways else "open (loopback bind)"

    def check(self, authorization: bytes | None, client_cert: bool) -> Refusal | None:
        """None when the request may use the data API; otherwise why not (count and log it
        with :func:`note_refusal` when the request is refused for it). ``authorization`` is
        the request's Authorization header, ``client_cert`` whether the TLS peer presented a
        certificate the client CA verified."""
        if self.off:
            return Refusal(403, "api_off", OFF_MESSAGE)
        if not self.needs_credential:
            return None
        if self.client_ca and client_cert:
            return None
        if self.token is not None and authorization is not None:
            scheme, _, presented = authorization.strip().partition(b" ")
            if scheme.lower() == b"bearer" and hmac.compare_digest(presented.strip(), self.token):
                return None
            return Refusal(401, "bad_token", "the bearer token is wrong")
        wanted = " or ".join(
            w
            for w, on in (
                ("an Authorization: Bearer <token> header", self.token is not None),
                ("a client certificate", self.client_ca),
            )
            if on
        )
        return Refusal(401, "no_credential", f"this route needs {wanted}")


def note_refusal(refusal: Refusal) -> None:
    """Count a refused request and log it: the first of each reason, then at most once a
    minute, so a client hammering the port cannot flood the log."""
    PROTOCOL_ERRORS.labels(protocol="admin", kind=refusal.reason).inc()
    now = time.monotonic()
    last = _REFUSAL_LOGGED.get(refusal.reason)
    if last is None or now - last >= REFUSAL_LOG_INTERVAL_S:
        _REFUSAL_LOGGED[refusal.reason] = now
        log.warning("admin_request_refused", reason=refusal.reason, status=refusal.status)
