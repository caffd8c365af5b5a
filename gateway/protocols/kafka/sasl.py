"""SaslHandshake v1 and SaslAuthenticate v0-v2: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 against
the listener's ``sasl_users`` (SCRAM by ``scramp``), as a Kafka broker does it:

- the handshake names a mechanism; one not in ``sasl_mechanisms`` gets
  UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the connection closes;
- SaslAuthenticate carries the mechanism's messages (one for PLAIN, two for SCRAM); a wrong
  user or password gets SASL_AUTHENTICATION_FAILED, then the connection closes;
- one exchange per connection: a second handshake, or SaslAuthenticate out of turn, gets
  ILLEGAL_SASL_STATE and the connection closes. So a client holds at most one exchange's state
  (a few hundred bytes) per connection, for at most the listener's ``idle_timeout_s``.

Before authentication only ApiVersions and these two are answered (``dispatch.serve``).
Handshake v0 (raw SASL tokens after it, outside Kafka framing) is not offered.
"""

from __future__ import annotations

import hmac
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode as K
from scramp import ScramException, ScramMechanism

from gateway.observability import protocol_error
from gateway.protocols.kafka.codec import build, response_class
from gateway.protocols.kafka.context import PROTOCOL, KafkaContext, RequestHeader

SCRAM_ITERATIONS = 4096


class _Exchange:
    __slots__ = ("mechanism", "server", "user", "step")

    def __init__(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self.server: Any = None
        self.user = ""
        self.step = 0


_DONE = "done"


@cache
def _scram_credentials(mechanism: str, user: str, password: str) -> tuple[Any, ...]:
    """(salt, stored key, server key, iterations): computed once per configured user."""
    salt, stored, server = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=SCRAM_ITERATIONS
    )[:3]
    return salt, stored, server, SCRAM_ITERATIONS


def _password(ctx: KafkaContext, user: str) -> str | None:
    for entry in ctx.listener.sasl_users:
        if entry.get("username") == user:
            return entry.get("password")
    return None


def _fail(ctx: KafkaContext, api: str, kind: str, message: str, **fields: Any) -> None:
    protocol_error(ctx.log, PROTOCOL, kind, error=message, **fields)
    ctx.count(api, kind)
    ctx.closing = True


async def handshake(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(17, header.api_version)
    enabled = tuple(ctx.listener.sasl_mechanisms)
    if ctx.sasl is not None or ctx.principal:
        _fail(ctx, "sasl_handshake", "illegal_sasl_state", "a second SASL handshake")
        return cls(error_code=K.illegal_sasl_state, mechanisms=enabled)
    if request.mechanism not in enabled:
        _fail(
            ctx,
            "sasl_handshake",
            "unsupported_sasl_mechanism",
            f"mechanism {request.mechanism!r}, enabled: {', '.join(enabled)}",
        )
        return cls(error_code=K.unsupported_sasl_mechanism, mechanisms=enabled)
    ctx.sasl = _Exchange(request.mechanism)
    ctx.count("sasl_handshake", "ok")
    return cls(error_code=K.none, mechanisms=enabled)


def _answer(cls: Any, code: K, message: str | None, data: bytes = b"") -> Any:
    return build(
        cls,
        error_code=code,
        error_message=message,
        auth_bytes=data,
        session_lifetime=_NO_LIFETIME,
    )


async def authenticate(ctx: KafkaContext, header: RequestHeader, request: Any) -> Any:
    cls = response_class(36, header.api_version)
    exchange = ctx.sasl
    if not isinstance(exchange, _Exchange):
        _fail(ctx, "sasl_authenticate", "illegal_sasl_state", "SaslAuthenticate out of turn")
        return _answer(cls, K.illegal_sasl_state, "SaslAuthenticate before SaslHandshake")
    try:
        if exchange.mechanism == "PLAIN":
            user = _plain(ctx, bytes(request.auth_bytes))
            return _authenticated(ctx, cls, user, b"")
        if exchange.step == 0:

            def credentials(user: str) -> tuple[Any, ...]:
                exchange.user = user
                return _scram_credentials(exchange.mechanism, user, _known(ctx, user))

            exchange.server = ScramMechanism(exchange.mechanism).make_server(credentials)
            exchange.server.set_client_first(bytes(request.auth_bytes).decode("utf-8"))
            exchange.step = 1
            ctx.count("sasl_authenticate", "continue")
            return _answer(cls, K.none, None, exchange.server.get_server_first().encode())
        exchange.server.set_client_final(bytes(request.auth_bytes).decode("utf-8"))
        return _authenticated(ctx, cls, exchange.user, exchange.server.get_server_final().encode())
    except (ScramException, ValueError, _Refused, KeyError) as exc:  # ValueError: bad UTF-8
        user = exchange.user or getattr(exc, "user", "")
        _fail(
            ctx,
            "sasl_authenticate",
            "sasl_authentication_failed",
            f"{exchange.mechanism} authentication failed",
            user=user,
        )
        return _answer(
            cls,
            K.sasl_authentication_failed,
            "Authentication failed: invalid username or password",
        )


class _Refused(Exception):
    def __init__(self, user: str) -> None:
        super().__init__(user)
        self.user = user


def _known(ctx: KafkaContext, user: str) -> str:
    password = _password(ctx, user)
    if password is None:
        raise _Refused(user)
    return password


def _plain(ctx: KafkaContext, data: bytes) -> str:
    """The user of a PLAIN message ``authzid NUL user NUL password`` whose password matches."""
    parts = data.split(b"\0")
    if len(parts) != 3:
        raise _Refused("")
    authzid, user_b, given = parts
    user = user_b.decode("utf-8")
    if authzid and authzid != user_b:
        raise _Refused(user)  # acting as another user is not supported
    password = _known(ctx, user)
    if not hmac.compare_digest(password.encode("utf-8"), given):
        raise _Refused(user)
    return user


def _authenticated(ctx: KafkaContext, cls: Any, user: str, data: bytes) -> Any:
    ctx.principal = user
    ctx.sasl = _DONE
    ctx.count("sasl_authenticate", "ok")
    ctx.log.info("sasl_authenticated", user=user)
    return _answer(cls, K.none, None, data)


def _no_lifetime() -> Any:
    import datetime

    from kio.static.primitive import i64Timedelta

    return i64Timedelta.parse(datetime.timedelta(0))


_NO_LIFETIME = _no_lifetime()
