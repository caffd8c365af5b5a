"""The admin endpoint's two surfaces against a real gateway process: health, readiness and
metrics open; the data and control API behind a bearer token or a client certificate, off on a
non-loopback bind without either, and limited by the [admin] topic ACLs. Gateways here bind
0.0.0.0 (a non-loopback bind) and are reached over 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from gateway.admin_auth import AdminAuth, client_token, is_loopback
from gateway.config import ConfigError, parse_config
from gateway.pipeline.client import GatewayClient, GatewayClientError
from tests.protocols.kafka08.conftest import metric
from tests.support import REPO_ROOT, GatewayProcess, write_toml
from tests.test_admin import request

TOKEN = "s3cret-token-0123456789"
AUTH = {"authorization": f"Bearer {TOKEN}"}

# (method, path, body, status with the credential)
DATA_ROUTES = [
    ("GET", "/v1/topics", None, 200),
    ("POST", "/v1/topics", {"name": "fresh", "partitions": 1}, 201),
    ("POST", "/v1/topics/orders/records", {"records": [{"value": "aGk="}]}, 200),
    ("GET", "/v1/topics/orders/records?partition=0&offset=0", None, 200),
    ("HEAD", "/v1/topics/orders/records?partition=0&offset=0", None, 200),
    ("GET", "/v1/topics/orders/offsets", None, 200),
    ("GET", "/v1/groups", None, 200),
    ("GET", "/v1/groups/billing", None, 200),
    ("POST", "/v1/groups/billing/reset-offsets", {"topic": "orders", "to": "earliest"}, 200),
]
OPEN_ROUTES = ["/healthz", "/readyz", "/metrics"]


def refusals(gw: GatewayProcess, *kinds: str) -> float:
    """Data API requests refused for want of a credential (or with the API off)."""
    kinds = kinds or ("no_credential", "bad_token", "api_off")
    return sum(metric(gw, "gateway_protocol_errors_total", protocol="admin", kind=k) for k in kinds)


def local(gw: GatewayProcess) -> tuple[str, int]:
    """The admin address of a gateway bound to 0.0.0.0, reached over loopback."""
    return "127.0.0.1", gw.address("admin")[1]


def start(tmp_path: Path, admin: dict, **kwargs) -> GatewayProcess:
    """A gateway with these [admin] keys, started by ``with``."""
    proc = GatewayProcess(tmp_path, **kwargs)
    proc.config["admin"].update(admin)
    return proc


def call(gw, method, path, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    return request(local(gw), method, path, data, headers)


@pytest.fixture(scope="module")
def token_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("secret") / "admin-token"
    path.write_text(TOKEN + "\n")
    return str(path)


@pytest.fixture(scope="module")
def token_gw(tmp_path_factory, token_file):
    tmp = tmp_path_factory.mktemp("token")
    with start(tmp, {"host": "0.0.0.0", "token_file": token_file}, listeners={"kafka08": {}}) as gw:
        assert call(gw, "POST", "/v1/topics", {"name": "orders"}, AUTH)[0] == 201
        yield gw


@pytest.mark.parametrize(("method", "path", "body", "ok"), DATA_ROUTES)
def test_data_route_needs_the_token(token_gw, method, path, body, ok) -> None:
    before = refusals(token_gw)
    status, headers, answer = call(token_gw, method, path, body)
    assert status == 401
    assert headers["www-authenticate"].startswith("Bearer")
    if method != "HEAD":
        assert "Authorization: Bearer" in json.loads(answer)["error"]
    wrong = {"authorization": "Bearer not-" + TOKEN}
    assert call(token_gw, method, path, body, wrong)[0] == 401
    assert call(token_gw, method, path, body, {"authorization": TOKEN})[0] == 401  # no scheme
    assert refusals(token_gw) >= before + 3
    status, _, answer = call(token_gw, method, path, body, AUTH)
    assert status == ok, answer


@pytest.mark.parametrize("path", OPEN_ROUTES)
def test_health_readiness_and_metrics_need_no_token(token_gw, path) -> None:
    assert call(token_gw, "GET", path)[0] == 200
    assert call(token_gw, "HEAD", path)[0] == 200


def test_status_without_the_token_names_no_client_topic_or_group(token_gw) -> None:
    kafka = socket.create_connection(("127.0.0.1", token_gw.address("kafka08")[1]), timeout=5)
    try:
        refused = refusals(token_gw)
        status, _, body = call(token_gw, "GET", "/v1/status")
        assert status == 200
        public = json.loads(body)
        assert public["ready"] is True
        assert [x["protocol"] for x in public["listeners"]] == ["kafka08"]
        assert "topics" not in public and "groups" not in public
        assert all("clients" not in x for x in public["listeners"])
        assert all(set(b) == {"name", "type", "healthy"} for b in public["backends"])
        status, _, page = call(token_gw, "GET", "/")
        assert status == 200 and b'<table id="listeners">' in page
        assert b"<td>orders</td>" not in page and b'id="details"' in page
        assert refusals(token_gw) == refused  # not refused

        full = json.loads(call(token_gw, "GET", "/v1/status", headers=AUTH)[2])
        assert "orders" in [t["name"] for t in full["topics"]]
        assert any(x["clients"] for x in full["listeners"])
        page = call(token_gw, "GET", "/", headers=AUTH)[2]
        assert b"<td>orders</td>" in page
    finally:
        kafka.close()


def test_cli_and_pipeline_client_send_the_token(token_gw, token_file, tmp_path) -> None:
    # the CLI with the gateway's own config (token_file) and with GATEWAY_ADMIN_TOKEN
    config = dict(token_gw.config)
    config["admin"] = {**config["admin"], "port": token_gw.address("admin")[1]}
    cfg = tmp_path / "cli.toml"
    cfg.write_text(write_toml(config))
    cli = [sys.executable, "-m", "gateway", "topics", "list", "--config"]
    res = subprocess.run([*cli, str(cfg)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert res.returncode == 0 and "orders" in res.stdout, res.stderr
    del config["admin"]["token_file"]
    cfg.write_text(write_toml(config))
    res = subprocess.run([*cli, str(cfg)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert res.returncode != 0 and "401" in res.stderr, (res.stdout, res.stderr)
    env = {"GATEWAY_ADMIN_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}
    res = subprocess.run([*cli, str(cfg)], capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert res.returncode == 0 and "orders" in res.stdout, res.stderr

    bootstrap = f"127.0.0.1:{token_gw.address('admin')[1]}"
    with GatewayClient(bootstrap, token="") as anonymous:
        with pytest.raises(GatewayClientError) as err:
            anonymous.topics()
        assert err.value.status == 401
    with GatewayClient(bootstrap, token=TOKEN) as client:
        assert "orders" in client.topics()
        client.produce("orders", [(None, b"binary", (), None, 0)])
    assert client_token(environ={"GATEWAY_ADMIN_TOKEN": TOKEN}) == TOKEN
    parsed = parse_config({"admin": {"token_file": token_file}})
    assert client_token(parsed, environ={}) == TOKEN


def test_token_is_needed_on_a_loopback_bind_too(tmp_path, token_file) -> None:
    with start(tmp_path, {"token_file": token_file}) as gw:
        assert gw.address("admin")[0] == "127.0.0.1"
        assert request(gw.address("admin"), "GET", "/v1/topics")[0] == 401
        assert request(gw.address("admin"), "GET", "/v1/topics", headers=AUTH)[0] == 200


def test_data_api_is_off_on_a_non_loopback_bind_without_a_credential(tmp_path) -> None:
    with start(tmp_path, {"host": "0.0.0.0"}) as gw:
        for method, path, body, _ in DATA_ROUTES:
            status, _, answer = call(gw, method, path, body)
            assert status == 403, (method, path)
            if method != "HEAD":
                error = json.loads(answer)["error"]
                assert "token_file" in error and "tls_client_ca" in error
            assert call(gw, method, path, body, AUTH)[0] == 403  # no token is configured
        for path in OPEN_ROUTES:
            assert call(gw, "GET", path)[0] == 200
        assert refusals(gw, "api_off") >= len(DATA_ROUTES)
        assert gw.proc.poll() is None
    assert gw.log_text().count("admin_data_api_off") == 1


def test_data_api_applies_the_admin_topic_acls(tmp_path) -> None:
    acl = {"read_allow": ["public.*"], "write_allow": ["public.*"], "write_deny": ["public.ro"]}
    with start(tmp_path, acl) as gw:
        addr = gw.address("admin")
        value = {"records": [{"value": base64.b64encode(b"x").decode()}]}
        ok = request(addr, "POST", "/v1/topics/public.a/records", json.dumps(value).encode())
        assert ok[0] == 200, ok
        for topic in ("secret", "public.ro"):
            status, _, answer = request(
                addr, "POST", f"/v1/topics/{topic}/records", json.dumps(value).encode()
            )
            assert status == 403, answer
            assert json.loads(answer)["code"] == "unauthorized"
        created = request(addr, "POST", "/v1/topics", json.dumps({"name": "secret"}).encode())
        assert created[0] == 403
        assert request(addr, "GET", "/v1/topics/secret/records?partition=0")[0] == 403
        assert request(addr, "GET", "/v1/topics/secret/offsets")[0] == 403
        assert request(addr, "GET", "/v1/topics/public.a/records?partition=0")[0] == 200
        reset = json.dumps({"topic": "secret", "to": "earliest"}).encode()
        assert request(addr, "POST", "/v1/groups/g/reset-offsets", reset)[0] == 403
        names = [t["name"] for t in json.loads(request(addr, "GET", "/v1/topics")[2])]
        assert names == ["public.a"]
        assert metric(gw, "gateway_acl_denied_total", protocol="admin") >= 6


@pytest.fixture
def pki(tmp_path):
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("ops.example")
    stranger = trustme.CA().issue_cert("intruder.example")  # signed by another CA
    blobs = {
        "ca.pem": ca.cert_pem,
        "server.pem": server.cert_chain_pems[0],
        "server.key": server.private_key_pem,
        "client.pem": client.cert_chain_pems[0],
        "client.key": client.private_key_pem,
        "stranger.pem": stranger.cert_chain_pems[0],
        "stranger.key": stranger.private_key_pem,
    }
    for name, blob in blobs.items():
        blob.write_to_path(str(tmp_path / name))
    return {name: str(tmp_path / name) for name in blobs}


def curl(url: str, pki: dict, *extra: str) -> tuple[int, str]:
    """(HTTP status or 0 when the exchange failed, stderr) from the real curl."""
    res = subprocess.run(
        ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"]
        + ["--cacert", pki["ca.pem"], *extra, url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return int(res.stdout or 0), res.stderr


def test_client_certificate_opens_the_data_api(tmp_path, pki, token_file) -> None:
    admin = {
        "host": "0.0.0.0",
        "tls_cert": pki["server.pem"],
        "tls_key": pki["server.key"],
        "tls_client_ca": pki["ca.pem"],
    }
    with start(tmp_path, admin) as gw:
        base = f"https://127.0.0.1:{gw.address('admin')[1]}"
        cert = ("--cert", pki["client.pem"], "--key", pki["client.key"])
        assert curl(base + "/healthz", pki)[0] == 200  # open, over TLS, no certificate
        assert curl(base + "/v1/topics", pki)[0] == 401
        assert curl(base + "/v1/topics", pki, *cert)[0] == 200
        assert curl(base + "/v1/topics", pki, "-H", f"authorization: Bearer {TOKEN}")[0] == 401
        stranger = ("--cert", pki["stranger.pem"], "--key", pki["stranger.key"])
        assert curl(base + "/v1/topics", pki, *stranger)[0] == 0  # refused in the handshake
        with socket.create_connection(local(gw), timeout=5) as sock:  # plain HTTP: no answer
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            try:
                assert not sock.recv(100).startswith(b"HTTP/")
            except ConnectionResetError:
                pass
        assert gw.proc.poll() is None
    # with a token as well, either credential is enough
    with start(tmp_path / "both", {**admin, "token_file": token_file}) as gw:
        base = f"https://127.0.0.1:{gw.address('admin')[1]}"
        assert curl(base + "/v1/topics", pki, "-H", f"authorization: Bearer {TOKEN}")[0] == 200
        cert = ("--cert", pki["client.pem"], "--key", pki["client.key"])
        assert curl(base + "/v1/topics", pki, *cert)[0] == 200
        assert curl(base + "/v1/topics", pki)[0] == 401


def test_access_rule() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("")
    open_local = AdminAuth(None, False, loopback=True)
    assert open_local.check(None, False) is None
    assert AdminAuth(None, False, loopback=False).check(None, False).status == 403
    with_token = AdminAuth(TOKEN.encode(), False, loopback=True)
    assert with_token.check(f"Bearer {TOKEN}".encode(), False) is None
    assert with_token.check(f"bearer  {TOKEN} ".encode(), False) is None
    assert with_token.check(f"Basic {TOKEN}".encode(), False).status == 401
    assert with_token.check(None, True).status == 401  # a certificate, but no client CA
    assert AdminAuth(None, True, loopback=False).check(None, True) is None


def test_config_errors_name_the_key(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    cases = {
        "token_file": (str(tmp_path / "missing"), "readable file"),
        "max_connections": (0, ">= 1"),
        "read_timeout_s": (0, "> 0"),
        "tls_client_ca": (str(tmp_path / "ca.pem"), "without tls_cert"),
    }
    for key, (value, expected) in cases.items():
        with pytest.raises(ConfigError) as err:
            parse_config({"admin": {key: value}})
        text = str(err.value)
        assert f"admin.{key}" in text and str(value) in text, text
        assert expected in text, text
    with pytest.raises(ConfigError) as err:
        parse_config({"admin": {"token_file": str(empty)}})
    assert "admin.token_file" in str(err.value) and "non-empty token" in str(err.value)


def test_sighup_refuses_an_admin_change(tmp_path, token_file) -> None:
    """The admin's credential and ACLs are fixed at start: a reload that changes them is
    refused as a whole (logged), so a running gateway never half-applies them."""
    from gateway.config import load_config
    from gateway.server import Server

    path = tmp_path / "gw.toml"
    path.write_text(write_toml({"admin": {"port": 0}, "backends": {"m": {"type": "memory"}}}))
    server = Server(load_config(path, environ={}))
    assert server.reload() is True
    path.write_text(
        write_toml(
            {"admin": {"port": 0, "token_file": token_file}, "backends": {"m": {"type": "memory"}}}
        )
    )
    assert server.reload() is False
    assert server.config.admin.token_file == ""


def test_pipeline_passes_the_config_token_to_its_workers(tmp_path, token_file, monkeypatch) -> None:
    """``gateway pipeline ... --config``: the token of ``[admin] token_file`` goes into
    GATEWAY_ADMIN_TOKEN, which the Spark workers it starts inherit and GatewayClient reads."""
    import argparse

    from gateway.pipeline.cli import _bootstrap

    monkeypatch.setenv("GATEWAY_ADMIN_TOKEN", "")  # recorded, so the test's value is undone
    monkeypatch.delenv("GATEWAY_ADMIN_TOKEN")
    cfg = tmp_path / "gw.toml"
    cfg.write_text(write_toml({"admin": {"host": "0.0.0.0", "port": 19644}}))
    assert _bootstrap(argparse.Namespace(bootstrap=None, config=str(cfg))) == "127.0.0.1:19644"
    assert "GATEWAY_ADMIN_TOKEN" not in os.environ
    cfg.write_text(write_toml({"admin": {"port": 19644, "token_file": token_file}}))
    assert _bootstrap(argparse.Namespace(bootstrap=None, config=str(cfg))) == "127.0.0.1:19644"
    assert GatewayClient("127.0.0.1:19644").token == TOKEN


def test_public_view_keeps_nothing_that_names_a_client_topic_or_group() -> None:
    from gateway.admin import public_view

    full = {
        "version": "1",
        "uptime_s": 2.0,
        "ready": True,
        "draining": False,
        "workers": [{"index": 0, "ready": True, "connections": 1}],
        "listeners": [
            {"protocol": "kafka08", "address": "a:1", "connections": 1, "clients": ["10.0.0.9:5"]}
        ],
        "topics": [{"name": "payroll"}],
        "groups": [{"name": "billing"}],
        "backends": [{"name": "d", "type": "nats", "healthy": False, "detail": "nats://x:4222"}],
    }
    view = public_view(full)
    text = json.dumps(view)
    for secret in ("10.0.0.9", "payroll", "billing", "nats://"):
        assert secret not in text
    assert view["listeners"][0]["connections"] == 1 and view["workers"] == full["workers"]
    assert view["backends"] == [{"name": "d", "type": "nats", "healthy": False}]
