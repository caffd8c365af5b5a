"""TLS certificate and key pairs are checked before they are used: at start-up, on SIGHUP
and by ``gateway check-config``. A pair that does not load is a config problem naming the
listener and the keys; a reload with one keeps the running contexts."""

from __future__ import annotations

import dataclasses
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trustme

from gateway.config import ConfigError, load_config, parse_config
from gateway.tls import check_tls, tls_problems
from tests.support import make_config, serving, write_toml


def write_pair(directory: Path, ca: trustme.CA, name: str) -> tuple[str, str]:
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = directory / f"{name}-cert.pem", directory / f"{name}-key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


@pytest.fixture
def pairs(tmp_path: Path) -> tuple[trustme.CA, tuple[str, str], tuple[str, str]]:
    ca = trustme.CA()
    return ca, write_pair(tmp_path, ca, "one"), write_pair(tmp_path, ca, "two")


def test_a_mismatched_pair_is_a_config_problem(tmp_path: Path, pairs) -> None:
    _, (cert1, key1), (_, key2) = pairs
    data = make_config(tmp_path, {"kafka08": {"tls_cert": cert1, "tls_key": key2}})
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    [problem] = [p for p in err.value.problems if "tls" in p]
    assert problem.startswith("listeners.kafka08.tls_cert/tls_key: got cert=")
    assert "KEY_VALUES_MISMATCH" in problem
    good = parse_config(make_config(tmp_path, {"kafka08": {"tls_cert": cert1, "tls_key": key1}}))
    assert check_tls(good.listeners) == []


def test_a_file_that_is_not_pem_is_a_config_problem(tmp_path: Path, pairs) -> None:
    _, (cert1, _), _ = pairs
    junk = tmp_path / "junk.pem"
    junk.write_text("not a key\n")
    cfg = parse_config(make_config(tmp_path, {"kafka08": {}})).listeners["kafka08"]
    problems = tls_problems(dataclasses.replace(cfg, tls_cert=cert1, tls_key=str(junk)))
    assert len(problems) == 1 and "expected PEM files that load" in problems[0]


def test_check_config_refuses_a_mismatched_pair(tmp_path: Path, pairs) -> None:
    _, (cert1, key1), (_, key2) = pairs
    path = tmp_path / "gw.toml"
    path.write_text(
        write_toml(make_config(tmp_path, {"kafka08": {"tls_cert": cert1, "tls_key": key2}}))
    )
    run = subprocess.run(
        [sys.executable, "-m", "gateway", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stdout  # a config problem
    assert "listeners.kafka08.tls_cert/tls_key" in run.stderr
    assert "KEY_VALUES_MISMATCH" in run.stderr
    assert "Traceback" not in run.stderr


async def test_reload_with_a_mismatched_pair_keeps_the_running_context(
    tmp_path: Path, pairs
) -> None:
    ca, (cert1, key1), (_, key2) = pairs
    data = make_config(tmp_path, {"kafka08": {"tls_cert": cert1, "tls_key": key1}})
    path = tmp_path / "gw.toml"
    path.write_text(write_toml(data))
    async with serving(load_config(path)) as server:
        state = server.listeners["kafka08"]
        before = state.ssl_context
        shutil.copy(key2, key1)  # the key no longer belongs to the certificate
        assert server.reload() is False
        assert state.ssl_context is before
        host, port = server.addresses()["kafka08"]
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        stream = trio.SSLStream(
            await trio.open_tcp_stream(host, port), ctx, server_hostname="127.0.0.1"
        )
        with trio.fail_after(10):
            await stream.do_handshake()
        await stream.aclose()
