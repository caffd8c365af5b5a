"""SASL for the Kafka backend: SaslHandshake v1, then SaslAuthenticate v1 rounds, with PLAIN or
SCRAM-SHA-256/512 (the SCRAM exchange is ``scramp``'s, a maintained implementation of RFC 5802/7677,
not ours). The password never appears in an error or a log line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import scramp
from kio.schema.sasl_authenticate.v1 import request as auth_req
from kio.schema.sasl_handshake.v1 import request as hs_req

from gateway.model import ErrorCode, GatewayError

if TYPE_CHECKING:
    from gateway.backends.kafka.connection import BrokerConnection


class LoginRefused(GatewayError):
    """The broker refused the login (BACKEND_UNAVAILABLE, as before; its own type so that a
    produce is not retried against a broker that will refuse again)."""


@dataclass(frozen=True, slots=True, repr=False)  # no repr: it holds the password
class SaslLogin:
    mechanism: str  # "PLAIN" | "SCRAM-SHA-256" | "SCRAM-SHA-512"
    username: str
    password: str

    async def __call__(self, conn: BrokerConnection) -> None:
        """Authenticate ``conn`` (called once, right after it connects)."""
        where = f"Kafka broker {conn.host}:{conn.port}"
        timeout = 10.0
        hs = await conn.call(hs_req.SaslHandshakeRequest(mechanism=self.mechanism), timeout)
        if int(hs.error_code):
            offered = ", ".join(hs.mechanisms) or "none"
            raise self._refused(where, f"it does not offer {self.mechanism} (offers: {offered})")
        if self.mechanism == "PLAIN":
            await self._round(conn, where, f"\0{self.username}\0{self.password}".encode(), timeout)
            return
        client = scramp.ScramClient([self.mechanism], self.username, self.password)
        first = await self._round(conn, where, client.get_client_first().encode(), timeout)
        try:
            client.set_server_first(first.decode())
            final = await self._round(conn, where, client.get_client_final().encode(), timeout)
            client.set_server_final(final.decode())
        except scramp.ScramException as exc:
            raise self._refused(where, f"SCRAM exchange failed: {exc}") from None

    async def _round(
        self, conn: BrokerConnection, where: str, data: bytes, timeout: float
    ) -> bytes:
        answer = await conn.call(auth_req.SaslAuthenticateRequest(auth_bytes=data), timeout)
        if int(answer.error_code):
            raise self._refused(where, answer.error_message or f"error {int(answer.error_code)}")
        return bytes(answer.auth_bytes)

    def _refused(self, where: str, why: str) -> GatewayError:
        return LoginRefused(
            ErrorCode.BACKEND_UNAVAILABLE,
            f"{where} refused SASL {self.mechanism} login of user {self.username!r}: {why}",
        )
