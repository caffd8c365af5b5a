"""Iggy login throttling: at most ``max_concurrent_logins`` password checks at once per
listener, and a per-address backoff after repeated failed logins."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import trio

from gateway.config import ConfigError, parse_config
from gateway.observability import LIMIT_HITS
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy import session as iggy_session
from gateway.protocols.iggy.auth import (
    BACKOFF_DOUBLINGS,
    FREE_FAILURES,
    LOGIN_PEERS,
    LoginGuard,
    hash_password,
    peer_host,
)
from gateway.protocols.iggy.client import IggyClient
from tests.support import make_config, serving


def hits(limit: str) -> float:
    return LIMIT_HITS.labels(limit, "iggy")._value.get()


def test_peer_host_strips_the_port() -> None:
    assert peer_host("10.0.0.1:5000") == "10.0.0.1"
    assert peer_host("[2001:db8::1]:443") == "2001:db8::1"
    assert peer_host("?") == "?"


def test_backoff_starts_after_the_free_failures_and_doubles() -> None:
    guard = LoginGuard(1, backoff_s=1.0, max_peers=100)
    for _ in range(FREE_FAILURES):
        guard.failed("a", 100.0)
        assert guard.refused_for("a", 100.0) == 0.0
    guard.failed("a", 100.0)
    assert guard.refused_for("a", 100.0) == 1.0
    guard.failed("a", 101.0)
    assert guard.refused_for("a", 101.0) == 2.0
    for _ in range(20):
        guard.failed("a", 200.0)
    assert guard.refused_for("a", 200.0) == 2.0**BACKOFF_DOUBLINGS  # capped
    assert guard.refused_for("b", 200.0) == 0.0  # other addresses are not affected
    guard.succeeded("a")
    assert guard.refused_for("a", 200.0) == 0.0


def test_a_quiet_address_is_forgiven_and_the_table_is_bounded() -> None:
    guard = LoginGuard(1, backoff_s=1.0, max_peers=3)
    for _ in range(FREE_FAILURES + 1):
        guard.failed("a", 0.0)
    assert guard.refused_for("a", 0.5) > 0
    assert guard.refused_for("a", 1.0 + 2**BACKOFF_DOUBLINGS) == 0.0
    assert len(guard) == 0
    for i in range(10):
        guard.failed(f"10.0.0.{i}", 0.0)
    assert len(guard) == 3
    assert LOGIN_PEERS._value.get() == 3
    assert guard.refused_for("10.0.0.0", 0.0) == 0.0  # the oldest went first


def test_config_keys_are_validated(tmp_path: Path) -> None:
    bad = {"max_concurrent_logins": 0, "login_backoff_s": -1.0, "max_login_peers": 0}
    with pytest.raises(ConfigError) as err:
        parse_config(make_config(tmp_path, {"iggy": bad}))
    text = "\n".join(err.value.problems)
    for key in bad:
        assert f"listeners.iggy.{key}: got" in text


async def status_of(client: IggyClient, req: c.Request) -> int:
    return (await client.request(req)).status


async def test_repeated_failures_from_one_address_are_refused_then_forgiven(
    tmp_path: Path,
) -> None:
    users = [{"username": "u", "password": "secret"}]
    listener = {"users": users, "allow_anonymous": False, "login_backoff_s": 0.3}
    cfg = parse_config(make_config(tmp_path, {"iggy": listener}, backend="memory"))
    before = hits("login_backoff_s")
    async with serving(cfg) as server, await IggyClient.connect(*server.addresses()["iggy"]) as cl:
        for _ in range(FREE_FAILURES + 1):
            assert await status_of(cl, c.LoginUser("u", "wrong")) == c.Status.INVALID_CREDENTIALS
        # the right password too is refused while the address backs off, unchecked
        assert await status_of(cl, c.LoginUser("u", "secret")) == c.Status.INVALID_CREDENTIALS
        assert hits("login_backoff_s") == before + 1
        # so is a new connection from the same address
        async with await IggyClient.connect(*server.addresses()["iggy"]) as other:
            assert await status_of(other, c.LoginUser("u", "secret")) == (
                c.Status.INVALID_CREDENTIALS
            )
        await trio.sleep(0.35)
        assert await cl.login("u", "secret") == 1


async def test_hashed_checks_run_at_most_max_concurrent_logins_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running, peak = 0, 0
    lock = threading.Lock()
    real_check = iggy_session.check_credentials

    def counting_check(*args: object) -> int | None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        try:
            time.sleep(0.05)  # hold the slot long enough for the others to pile up
            return real_check(*args)  # type: ignore[arg-type]
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(iggy_session, "check_credentials", counting_check)
    users = [{"username": "u", "password_hash": hash_password("secret")}]
    listener = {"users": users, "max_concurrent_logins": 2}
    cfg = parse_config(make_config(tmp_path, {"iggy": listener}, backend="memory"))
    before = hits("max_concurrent_logins")
    results: list[int] = []
    async with serving(cfg) as server:

        async def login() -> None:
            async with await IggyClient.connect(*server.addresses()["iggy"]) as cl:
                results.append(await cl.login("u", "secret"))

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(login)
    assert results == [1] * 8  # every login got its answer
    assert peak == 2
    assert hits("max_concurrent_logins") > before
