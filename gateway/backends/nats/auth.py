"""How the NATS backend proves who it is and whom it trusts: the server list, TLS and the
CONNECT credentials (user/password, token, an NKey seed, or a creds file with a user JWT).

The NKey signature of the server's nonce uses ``nkeys`` (the NATS project's own library);
the creds-file parsing is the documented format (two PEM-like armoured blocks), a few lines.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

_CREDS_BLOCK = re.compile(r"-{3,}[^\n]*BEGIN[^\n]*-{3,}\s*\n\s*(\S+)\s*\n\s*-{3,}[^\n]*END")


class NatsAuthError(ValueError):
    """A credential file that cannot be used (names the file and the problem)."""


@dataclass(frozen=True, slots=True)
class Server:
    host: str
    port: int
    user: str | None = None
    password: str | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_servers(urls: Sequence[str]) -> list[Server]:
    """``nats://[user:pass@]host[:port]`` (scheme optional; ``tls://`` as ``nats://``)."""
    out = []
    for url in urls:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        out.append(
            Server(
                parts.hostname or "127.0.0.1",
                parts.port or 4222,
                unquote(parts.username) if parts.username else None,
                unquote(parts.password) if parts.password else None,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Credentials:
    """What goes into CONNECT besides the client's own options."""

    user: str = ""
    password: str = ""
    token: str = ""
    nkey_seed: bytes = b""  # an NKey user seed (S...)
    jwt: str = ""  # a user JWT (from a creds file, with its seed)

    @classmethod
    def load(
        cls,
        *,
        user: str = "",
        password: str = "",
        token: str = "",
        nkey_seed_file: str = "",
        creds_file: str = "",
    ) -> Credentials:
        seed = b""
        jwt = ""
        if nkey_seed_file:
            seed = _read(nkey_seed_file).strip().encode()
        if creds_file:
            blocks = _CREDS_BLOCK.findall(_read(creds_file))
            if len(blocks) < 2:
                raise NatsAuthError(
                    f"creds_file {creds_file!r}: expected a user JWT block and an NKey seed block"
                )
            jwt, seed = blocks[0], blocks[1].encode()
        if seed and not seed.startswith(b"SU"):
            raise NatsAuthError("the NKey seed is not a user seed (it must start with 'SU')")
        return cls(user, password, token, seed, jwt)

    def connect_options(self, server: Server, nonce: str | None) -> dict[str, Any]:
        """CONNECT fields for ``server`` (whose URL may carry its own user and password)."""
        opts: dict[str, Any] = {}
        user = server.user or self.user
        if user:
            opts["user"] = user
            opts["pass"] = server.password or self.password
        if self.token:
            opts["auth_token"] = self.token
        if self.nkey_seed:
            import nkeys  # only deployments with NKeys need it loaded

            kp = nkeys.from_seed(bytearray(self.nkey_seed))
            try:
                if self.jwt:
                    opts["jwt"] = self.jwt
                else:
                    opts["nkey"] = kp.public_key.decode()
                if nonce is not None:
                    sig = kp.sign(nonce.encode())
                    opts["sig"] = base64.urlsafe_b64encode(sig).decode().rstrip("=")
            finally:
                kp.wipe()
        return opts


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise NatsAuthError(f"cannot read {path!r}: {exc.strerror or exc}") from None
