"""Test support: a NATS operator-mode setup made with ``nkeys`` (what ``nsc`` would make): an
operator, a system account and an application account with JetStream, and a user's ``.creds``
file, so nats-server authenticates the gateway by a user JWT signed with the user's NKey."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
from pathlib import Path

import nkeys

_UNLIMITED = {k: -1 for k in ("subs", "data", "payload", "imports", "exports", "conn", "leaf")}
_JETSTREAM = {k: -1 for k in ("mem_storage", "disk_storage", "streams", "consumer")}


def _keypair(prefix: int) -> tuple[bytes, nkeys.KeyPair]:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    return seed, nkeys.from_seed(bytearray(seed))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(claims: dict, signer: nkeys.KeyPair) -> str:
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    claims = {**claims, "iat": int(time.time())}
    digest = hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    body = _b64(json.dumps(claims).encode())
    return f"{header}.{body}.{_b64(signer.sign(f'{header}.{body}'.encode()))}"


def operator_setup(workdir: Path) -> tuple[str, Path]:
    """(nats-server config text, path of the user's creds file)."""
    _, op = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
    _, app = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    _, sys_account = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    user_seed, user = _keypair(nkeys.PREFIX_BYTE_USER)
    opk, appk, sysk, userk = (k.public_key.decode() for k in (op, app, sys_account, user))
    op_jwt = _jwt(
        {"iss": opk, "sub": opk, "name": "op", "nats": {"type": "operator", "version": 2}}, op
    )

    def account(sub: str, name: str, limits: dict) -> str:
        nats = {"type": "account", "version": 2, "limits": {**limits, "wildcards": True}}
        return _jwt({"iss": opk, "sub": sub, "name": name, "nats": nats}, op)

    user_nats = {"type": "user", "version": 2, "pub": {}, "sub": {}, **_UNLIMITED}
    user_jwt = _jwt({"iss": appk, "sub": userk, "name": "gw", "nats": user_nats}, app)
    (workdir / "op.jwt").write_text(op_jwt)
    config = (
        f'operator: "{workdir / "op.jwt"}"\n'
        f"system_account: {sysk}\n"
        "resolver: MEMORY\n"
        "resolver_preload: {\n"
        f'  {appk}: "{account(appk, "app", {**_UNLIMITED, **_JETSTREAM})}"\n'
        f'  {sysk}: "{account(sysk, "SYS", _UNLIMITED)}"\n'
        "}\n"
    )
    creds = workdir / "gateway.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user_seed.decode()}\n"
        "------END USER NKEY SEED------\n"
    )
    for kp in (op, app, sys_account, user):
        kp.wipe()
    return config, creds
