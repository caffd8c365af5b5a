"""Iggy users: password hashes and the ``gateway hash-password`` subcommand.

A configured user has ``password`` (plain text) or ``password_hash`` =
``scrypt$<salt hex>$<hash hex>`` (hashlib.scrypt, n=16384, r=8, p=1, 32 bytes).
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import hmac
import os
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import trio
from prometheus_client import Gauge

from gateway.observability import REGISTRY

SCRYPT_N, SCRYPT_R, SCRYPT_P, SCRYPT_LEN = 16384, 8, 1, 32


def _scrypt(password: str, salt: bytes) -> bytes:
    return hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=SCRYPT_LEN
    )


def hash_password(password: str, salt: bytes | None = None) -> str:
    """``scrypt$<salt hex>$<hash hex>`` for ``password`` (a random 16-byte salt by default)."""
    salt = os.urandom(16) if salt is None else salt
    return f"scrypt${salt.hex()}${_scrypt(password, salt).hex()}"


def parse_hash(stored: str) -> tuple[bytes, bytes]:
    """(salt, hash) of a stored hash; ValueError when it is not ``scrypt$hex$hex``."""
    parts = stored.split("$")
    if len(parts) != 3 or parts[0] != "scrypt":
        raise ValueError("expected scrypt$<salt hex>$<hash hex>")
    salt, digest = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
    if not salt or len(digest) != SCRYPT_LEN:
        raise ValueError(f"expected a non-empty salt and a {SCRYPT_LEN}-byte hash")
    return salt, digest


def verify_password(stored: str, password: str) -> bool:
    try:
        salt, digest = parse_hash(stored)
    except ValueError:
        return False
    return hmac.compare_digest(_scrypt(password, salt), digest)


def user_problems(users: Sequence[Mapping[str, Any]]) -> list[str]:
    """Config problems of the ``users`` list (one line each)."""
    problems = []
    seen = set()
    for i, user in enumerate(users):
        where = f"users[{i}]"
        unknown = set(user) - {"username", "password", "password_hash"}
        if unknown:
            problems.append(f"{where}: unknown keys {sorted(unknown)}")
        name = user.get("username")
        if not isinstance(name, str) or not 1 <= len(name.encode()) <= 255:
            problems.append(f"{where}.username: got {name!r}, expected a 1-255 byte string")
        elif name in seen:
            problems.append(f"{where}.username: duplicate user {name!r}")
        seen.add(name)
        has_pw, has_hash = "password" in user, "password_hash" in user
        if has_pw == has_hash:
            problems.append(f"{where}: set exactly one of password and password_hash")
        elif has_hash:
            try:
                parse_hash(str(user["password_hash"]))
            except ValueError as exc:
                problems.append(f"{where}.password_hash: {exc}")
        elif not isinstance(user["password"], str):
            problems.append(f"{where}.password: expected a string")
    return problems


def check_credentials(
    users: Sequence[Mapping[str, Any]], username: str, password: str
) -> int | None:
    """The user id (1-based position in ``users``) when the credentials match, else None.
    Runs scrypt for a hashed password: call it from a worker thread."""
    for i, user in enumerate(users, start=1):
        if user.get("username") != username:
            continue
        if "password_hash" in user:
            ok = verify_password(str(user["password_hash"]), password)
        else:
            ok = hmac.compare_digest(str(user.get("password", "")).encode(), password.encode())
        return i if ok else None
    return None


# ----------------------------------------------------------------------------- throttling

LOGIN_PEERS = Gauge(
    "gateway_iggy_login_peers",
    "Client addresses whose failed Iggy logins are remembered (max_login_peers)",
    registry=REGISTRY,
)

FREE_FAILURES = 3
"""Failed logins from one address before it is made to wait (a mistyped password or two)."""
BACKOFF_DOUBLINGS = 6
"""The wait doubles with each further failure, up to ``login_backoff_s`` * 2**6."""


def peer_host(peer: str) -> str:
    """The address part of a connection's ``host:port`` / ``[v6]:port`` peer string."""
    return peer.rsplit(":", 1)[0].strip("[]") if ":" in peer else peer


class LoginGuard:
    """One Iggy listener's password checks: at most ``max_concurrent_logins`` at once (each
    hashed check is a 16 MiB scrypt in a worker thread), and a per-address backoff: after
    FREE_FAILURES failed logins from one address, its further attempts are refused without a
    check for ``login_backoff_s``, doubling with each further failure. A successful login
    forgets the address; the table keeps the ``max_login_peers`` most recent addresses."""

    def __init__(self, max_concurrent: int, backoff_s: float, max_peers: int) -> None:
        self.limiter = trio.CapacityLimiter(max_concurrent)
        self.backoff_s = backoff_s
        self.max_peers = max_peers
        # address -> (failures, refused until) in least recently failed order
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def configure(self, max_concurrent: int, backoff_s: float, max_peers: int) -> None:
        """Apply a reloaded listener config."""
        if self.limiter.total_tokens != max_concurrent:
            self.limiter.total_tokens = max_concurrent
        self.backoff_s, self.max_peers = backoff_s, max_peers

    def refused_for(self, host: str, now: float) -> float:
        """Seconds ``host`` must still wait before its next attempt is checked (0: none)."""
        entry = self._failures.get(host)
        if entry is None:
            return 0.0
        failures, until = entry
        if now >= until + self.backoff_s * 2**BACKOFF_DOUBLINGS:  # quiet long enough: forgiven
            del self._failures[host]
            LOGIN_PEERS.set(len(self._failures))
            return 0.0
        return max(0.0, until - now)

    def failed(self, host: str, now: float) -> None:
        failures = self._failures.pop(host, (0, 0.0))[0] + 1
        extra = failures - FREE_FAILURES
        until = now + self.backoff_s * 2 ** min(extra - 1, BACKOFF_DOUBLINGS) if extra > 0 else now
        self._failures[host] = (failures, until)
        while len(self._failures) > self.max_peers:
            self._failures.popitem(last=False)
        LOGIN_PEERS.set(len(self._failures))

    def succeeded(self, host: str) -> None:
        if self._failures.pop(host, None) is not None:
            LOGIN_PEERS.set(len(self._failures))

    def __len__(self) -> int:
        return len(self._failures)


# ----------------------------------------------------------------------------- CLI


def add_cli(sub: Any) -> None:
    """Register ``gateway hash-password`` on the CLI's subparsers."""
    p = sub.add_parser(
        "hash-password",
        help="print an Iggy listener password_hash (scrypt) for [listeners.iggy] users",
    )
    p.add_argument(
        "password", nargs="?", default=None, help="the password (default: prompt, or stdin)"
    )
    p.set_defaults(func=cmd_hash_password)


def cmd_hash_password(args: argparse.Namespace) -> int:
    password = args.password
    if password is None:
        if sys.stdin.isatty():
            password = getpass.getpass("password: ")
        else:
            password = sys.stdin.readline().rstrip("\n")
    if not password:
        print("error: empty password", file=sys.stderr)
        return 1
    print(hash_password(password))
    return 0
