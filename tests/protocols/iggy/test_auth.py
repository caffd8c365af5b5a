"""Users of the Iggy listener: scrypt hashes, `gateway hash-password`, config validation."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gateway.config import ConfigError, parse_config
from gateway.protocols.iggy.auth import check_credentials, hash_password, verify_password


def test_hash_password_cli_makes_a_hash_that_verifies() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "hash-password", "s3cret"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out.startswith("scrypt$")
    _, salt, digest = out.split("$")
    assert len(bytes.fromhex(salt)) == 16 and len(bytes.fromhex(digest)) == 32
    assert verify_password(out, "s3cret")
    assert not verify_password(out, "other")
    piped = subprocess.run(
        [sys.executable, "-m", "gateway", "hash-password"],
        input="from-stdin\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert verify_password(piped, "from-stdin")


def test_known_hash_vector() -> None:
    # hashlib.scrypt(b"iggy", salt=bytes(16), n=16384, r=8, p=1, dklen=32)
    stored = hash_password("iggy", bytes(16))
    assert stored.startswith("scrypt$" + "00" * 16 + "$")
    assert verify_password(stored, "iggy")


def test_check_credentials() -> None:
    users = [
        {"username": "a", "password": "pa"},
        {"username": "b", "password_hash": hash_password("pb")},
    ]
    assert check_credentials(users, "a", "pa") == 1
    assert check_credentials(users, "b", "pb") == 2
    assert check_credentials(users, "b", "pa") is None
    assert check_credentials(users, "c", "pa") is None


@pytest.mark.parametrize(
    "users,problem",
    [
        ([{"username": "a"}], "exactly one of password and password_hash"),
        ([{"username": "a", "password": "x", "password_hash": "y"}], "exactly one"),
        ([{"username": "a", "password_hash": "md5$00$00"}], "scrypt$"),
        ([{"password": "x"}], "username"),
        ([{"username": "a", "password": "x"}, {"username": "a", "password": "y"}], "duplicate"),
    ],
)
def test_bad_users_are_config_errors(users: list, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(
            {"listeners": {"iggy": {"users": users}}, "backends": {"m": {"type": "memory"}}}
        )
    assert any(problem in p and "listeners.iggy" in p for p in info.value.problems)
