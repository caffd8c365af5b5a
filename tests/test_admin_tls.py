"""The command line and the pipeline's client against an admin endpoint that speaks TLS, with
real gateway processes: a self-signed admin certificate verified from the same config file, a
client-certificate requirement (``tls_client_ca``), and the failures (a certificate that does
not verify, has expired or does not hold the name; TLS on one side only) as one line with exit
status 2, never a fall-back to opening the backends in the command's own process."""

from __future__ import annotations

import argparse
import ipaddress
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.admin_tls import ENV_VARS, AdminTLSError, ClientTLS, from_config, from_env
from gateway.cli_checks import admin_client_tls_problem
from gateway.config import ConfigError, parse_config
from gateway.model import Record
from gateway.pipeline.client import GatewayClient
from tests.support import REPO_ROOT, GatewayProcess, write_toml

NAME = "gw.example.test"


def self_signed(directory: Path, stem: str, names: list[str], expired: bool = False) -> dict:
    """A self-signed certificate for ``names`` (DNS names or IP addresses) and its key, as an
    operator makes one with ``openssl req -x509``: {"cert": path, "key": path}."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    start = now - timedelta(days=2 if expired else 1)
    end = now - timedelta(days=1) if expired else now + timedelta(days=1)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    alt = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    paths = {"cert": directory / f"{stem}.pem", "key": directory / f"{stem}.key"}
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return {k: str(v) for k, v in paths.items()}


def clean_env() -> dict[str, str]:
    """This process's environment without any admin credential or TLS setting."""
    drop = {*ENV_VARS, "GATEWAY_ADMIN_TOKEN"}
    return {k: v for k, v in os.environ.items() if k not in drop}


class Cli:
    """``gateway ...`` in a subprocess with a config for the admin endpoint of ``gw``: the
    gateway's own [admin] (its real port) and, as its backend, an embedded log in a directory
    of its own, which exists afterwards only if the command opened the backends itself."""

    def __init__(self, gw: GatewayProcess | None, tmp: Path, port: int | None = None) -> None:
        self.tmp = tmp
        self.direct_dir = tmp / "direct-data"
        admin = dict(gw.config["admin"]) if gw is not None else {"host": "127.0.0.1"}
        admin["port"] = port if port is not None else gw.address("admin")[1]
        self.config = {
            "server": {"data_dir": str(self.direct_dir)},
            "admin": admin,
            "backends": {"default": {"type": "embedded"}},
        }

    def __call__(
        self, *args: str, stdin: str | None = None, env: dict | None = None, **admin: str
    ) -> subprocess.CompletedProcess:
        config = {**self.config, "admin": {**self.config["admin"], **admin}}
        config["admin"] = {k: v for k, v in config["admin"].items() if v is not None}
        path = self.tmp / "cli.toml"
        path.write_text(write_toml(config))
        return subprocess.run(
            [sys.executable, "-m", "gateway", *args, "--config", str(path)],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            env={**clean_env(), **(env or {})},
            timeout=60,
        )


def assert_one_line_exit_2(res: subprocess.CompletedProcess, cli: Cli, *phrases: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for phrase in phrases:
        assert phrase in lines[0], (phrase, lines[0])
    assert not cli.direct_dir.exists(), "the command opened the backends itself"


@pytest.fixture(scope="module")
def self_signed_gw(tmp_path_factory):
    """An admin port speaking TLS with a self-signed certificate that names only NAME (not
    127.0.0.1, the address the command line reaches): the data API open (loopback bind)."""
    tmp = tmp_path_factory.mktemp("selfsigned")
    pair = self_signed(tmp, "admin", [NAME])
    proc = GatewayProcess(tmp)
    proc.config["admin"].update({"tls_cert": pair["cert"], "tls_key": pair["key"]})
    with proc as gw:
        yield gw


def test_topics_produce_consume_over_tls_from_the_same_config(self_signed_gw, tmp_path) -> None:
    cli = Cli(self_signed_gw, tmp_path)
    res = cli("topics", "create", "orders", "--partitions", "1")
    assert res.returncode == 0 and "created orders" in res.stdout, res.stderr
    res = cli("produce", "orders", stdin="one\ntwo\nthree\n")
    assert res.returncode == 0 and "produced 3 record(s)" in res.stderr, res.stderr
    res = cli("consume", "orders", "--from-beginning")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["one", "two", "three"]
    res = cli("topics", "list")
    assert res.returncode == 0 and "orders\t1" in res.stdout, res.stderr
    res = cli("groups", "list", "--json")
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stderr
    assert not cli.direct_dir.exists()  # all of it through the running gateway


def test_certificate_failures_are_one_line_and_no_direct_open(self_signed_gw, tmp_path) -> None:
    cli = Cli(self_signed_gw, tmp_path)
    res = cli("topics", "list", tls_server_name="wrong.example.test")
    assert_one_line_exit_2(res, cli, "speaks TLS", "not valid for the name", "tls_server_name")
    # a config whose tls_cert is another certificate: the gateway's one is not trusted
    other = self_signed(tmp_path, "other", [NAME])
    res = cli("consume", "orders", "--from-beginning", tls_cert=other["cert"], tls_key=other["key"])
    assert_one_line_exit_2(res, cli, "speaks TLS", "does not verify", "cli_tls_ca")
    # ... unless the gateway's certificate is trusted explicitly
    gw_cert = self_signed_gw.config["admin"]["tls_cert"]
    res = cli("topics", "list", tls_cert=other["cert"], tls_key=other["key"], cli_tls_ca=gw_cert)
    assert res.returncode == 0 and "orders" in res.stdout, res.stderr
    # a plain HTTP client (a config without tls_cert) reaching the TLS port
    res = cli("produce", "orders", stdin="x\n", tls_cert=None, tls_key=None)
    assert_one_line_exit_2(res, cli, f"127.0.0.1:{self_signed_gw.address('admin')[1]}")
    assert "speaks TLS (HTTPS)" in res.stderr and "tls_cert" in res.stderr
    assert self_signed_gw.proc.poll() is None


def test_the_direct_fall_back_is_seen_when_no_gateway_answers(tmp_path) -> None:
    """The control of the checks above: with nothing on the admin port the command opens the
    backends itself, and the directory the tests watch appears."""
    with socket_port() as port:
        cli = Cli(None, tmp_path, port=port)
    res = cli("topics", "create", "alone")
    assert res.returncode == 0, res.stderr
    assert cli.direct_dir.exists()


def socket_port():
    """A free port, given back when the block ends (nothing listens on it afterwards)."""
    import socket

    class Port:
        def __enter__(self) -> int:
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", 0))
            return self.sock.getsockname()[1]

        def __exit__(self, *exc: object) -> None:
            self.sock.close()

    return Port()


def test_expired_certificate(tmp_path) -> None:
    pair = self_signed(tmp_path, "expired", [NAME], expired=True)
    proc = GatewayProcess(tmp_path / "gw")
    proc.config["admin"].update({"tls_cert": pair["cert"], "tls_key": pair["key"]})
    with proc as gw:
        cli = Cli(gw, tmp_path)
        res = cli("topics", "list")
        assert_one_line_exit_2(res, cli, "speaks TLS", "has expired")


def test_tls_client_reaching_a_plain_port(tmp_path) -> None:
    pair = self_signed(tmp_path, "admin", [NAME])
    with GatewayProcess(tmp_path / "gw") as gw:
        cli = Cli(gw, tmp_path)
        res = cli("topics", "list", tls_cert=pair["cert"], tls_key=pair["key"])
        assert_one_line_exit_2(res, cli, "does not complete a TLS handshake")
        plain = GatewayClient(f"https://127.0.0.1:{gw.address('admin')[1]}", tls=ClientTLS())
        with plain, pytest.raises(AdminTLSError, match="does not complete a TLS handshake"):
            plain.topics()


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("ops.example")
    stranger = trustme.CA().issue_cert("intruder.example")
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
        blob.write_to_path(str(tmp / name))
    return {name: str(tmp / name) for name in blobs}


@pytest.fixture(scope="module")
def mtls_gw(tmp_path_factory, pki):
    """An admin on 0.0.0.0 whose data API needs a client certificate signed by the CA; its
    own certificate is a leaf of that CA (only the leaf in tls_cert)."""
    proc = GatewayProcess(tmp_path_factory.mktemp("mtls"))
    proc.config["admin"].update(
        {
            "host": "0.0.0.0",
            "tls_cert": pki["server.pem"],
            "tls_key": pki["server.key"],
            "tls_client_ca": pki["ca.pem"],
        }
    )
    with proc as gw:
        yield gw


def test_cli_with_a_client_certificate(mtls_gw, pki, tmp_path) -> None:
    cli = Cli(mtls_gw, tmp_path)
    cert = {"cli_tls_cert": pki["client.pem"], "cli_tls_key": pki["client.key"]}
    res = cli("topics", "create", "audit", "--partitions", "1", **cert)
    assert res.returncode == 0, res.stderr
    res = cli("produce", "audit", stdin="a\nb\n", **cert)
    assert res.returncode == 0 and "produced 2 record(s)" in res.stderr, res.stderr
    res = cli("consume", "audit", "--from-beginning", **cert)
    assert res.returncode == 0 and res.stdout.splitlines() == ["a", "b"], res.stderr
    # the same certificate from the environment
    env = {"GATEWAY_ADMIN_TLS_CERT": pki["client.pem"], "GATEWAY_ADMIN_TLS_KEY": pki["client.key"]}
    res = cli("topics", "list", env=env)
    assert res.returncode == 0 and "audit\t1" in res.stdout, res.stderr
    # without one: the gateway's 401, with what to set
    res = cli("topics", "list")
    assert res.returncode == 1 and "401" in res.stderr and "cli_tls_cert" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    # a certificate of another CA: the gateway ends the connection (TLS 1.3: after the
    # client's side of the handshake, so the client sees a connection closed unanswered, or
    # an alert)
    env = {
        "GATEWAY_ADMIN_TLS_CERT": pki["stranger.pem"],
        "GATEWAY_ADMIN_TLS_KEY": pki["stranger.key"],
    }
    res = cli("topics", "list", env=env)
    assert_one_line_exit_2(res, cli, "127.0.0.1", "cli_tls_cert", "tls_client_ca")
    # a certificate without its key
    res = cli("topics", "list", env={"GATEWAY_ADMIN_TLS_CERT": pki["client.pem"]})
    assert_one_line_exit_2(res, cli, "GATEWAY_ADMIN_TLS_CERT/GATEWAY_ADMIN_TLS_KEY", "both")


def test_pipeline_client_reads_and_writes_over_https(mtls_gw, pki, monkeypatch) -> None:
    address = f"127.0.0.1:{mtls_gw.address('admin')[1]}"
    tls = ClientTLS(
        ca_files=(pki["ca.pem"],), cert_file=pki["client.pem"], key_file=pki["client.key"]
    )
    with GatewayClient(f"https://{address}", tls=tls) as client:
        client.create_topic("pipe", 1)
        assert client.produce_batch("pipe", [Record(b"k", b"v1"), Record(None, b"v2")], 0) == 2
        answer = client.fetch("pipe", 0, 0)
        assert [(r.key, r.value) for r in answer.records] == [(b"k", b"v1"), (None, b"v2")]
        cols, high, _ = client.fetch_columns("pipe", 0, 1)
        assert cols.values == [b"v2"] and high == 2
    # what the Spark workers do: an https:// bootstrap and the GATEWAY_ADMIN_TLS_* variables
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GATEWAY_ADMIN_TLS_CA", pki["ca.pem"])
    monkeypatch.setenv("GATEWAY_ADMIN_TLS_CERT", pki["client.pem"])
    monkeypatch.setenv("GATEWAY_ADMIN_TLS_KEY", pki["client.key"])
    with GatewayClient(f"https://{address}") as client:
        assert client.healthy()
        assert [p.high_watermark for p in client.offsets("pipe")] == [2]
    # a plain client, and a client that does not trust the gateway's CA
    with GatewayClient(address) as plain, pytest.raises(AdminTLSError, match="speaks TLS"):
        plain.healthy()
    monkeypatch.setenv("GATEWAY_ADMIN_TLS_CA", pki["stranger.pem"])
    with GatewayClient(f"https://{address}") as client:
        with pytest.raises(AdminTLSError, match="does not verify"):
            client.healthy()


def test_pipeline_command_refuses_an_unverified_gateway_before_spark(mtls_gw, tmp_path) -> None:
    address = f"https://127.0.0.1:{mtls_gw.address('admin')[1]}"
    res = subprocess.run(
        [sys.executable, "-m", "gateway", "pipeline", "export", "t", str(tmp_path / "out")]
        + ["--bootstrap", address],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=clean_env(),
        timeout=60,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()], res.stderr
    assert "does not verify" in res.stderr and "GATEWAY_ADMIN_TLS_CA" in res.stderr
    assert "Spark" not in res.stderr and not (tmp_path / "out").exists()


def test_pipeline_command_passes_the_tls_settings_to_its_workers(pki, monkeypatch, tmp_path):
    """``gateway pipeline ... --config``: an https:// bootstrap, and the settings in the
    variables the Spark workers it starts inherit (GatewayClient reads them)."""
    from gateway.pipeline.cli import _bootstrap

    for var in ENV_VARS:
        monkeypatch.setenv(var, "")  # recorded, so the test's values are undone
        monkeypatch.delenv(var)
    cfg = tmp_path / "gw.toml"
    admin = {
        "host": "0.0.0.0",
        "port": 19644,
        "tls_cert": pki["server.pem"],
        "tls_key": pki["server.key"],
        "cli_tls_cert": pki["client.pem"],
        "cli_tls_key": pki["client.key"],
    }
    cfg.write_text(write_toml({"admin": admin}))
    assert _bootstrap(argparse.Namespace(bootstrap=None, config=str(cfg))) == (
        "https://127.0.0.1:19644"
    )
    tls = GatewayClient("https://127.0.0.1:19644").tls
    assert tls == ClientTLS((pki["server.pem"],), pki["client.pem"], pki["client.key"], "127.0.0.1")


def test_the_name_checked(tmp_path) -> None:
    """tls_server_name when set; else the host reached when the certificate names it; else the
    certificate's first name."""
    both = self_signed(tmp_path, "both", [NAME, "127.0.0.1"])
    only = self_signed(tmp_path, "only", [NAME])
    star = self_signed(tmp_path, "star", ["*.example.test"])

    def name(pair: dict, host: str, **keys: str) -> str:
        admin = parse_config(
            {"admin": {"tls_cert": pair["cert"], "tls_key": pair["key"], **keys}}
        ).admin
        tls = from_config(admin, host, environ={})
        assert tls is not None
        return tls.server_name

    assert name(both, "127.0.0.1") == "127.0.0.1"
    assert name(only, "127.0.0.1") == NAME
    assert name(star, "127.0.0.1") == "admin.example.test"
    assert name(only, "127.0.0.1", tls_server_name="lb.example.test") == "lb.example.test"
    assert from_config(parse_config({}).admin, "127.0.0.1", environ={}) is None


def test_settings_errors_name_the_key_or_variable(tmp_path) -> None:
    pair = self_signed(tmp_path, "admin", [NAME])
    tls_on = {"tls_cert": pair["cert"], "tls_key": pair["key"]}
    cases = [
        ({"cli_tls_cert": pair["cert"]}, "admin.cli_tls_cert", "without tls_cert"),
        ({**tls_on, "cli_tls_cert": pair["cert"]}, "admin.cli_tls_cert/cli_tls_key", "both"),
        ({**tls_on, "cli_tls_ca": str(tmp_path / "nope.pem")}, "admin.cli_tls_ca", "readable"),
        ({**tls_on, "tls_server_name": "a b"}, "admin.tls_server_name", "host name"),
    ]
    for admin, key, expected in cases:
        with pytest.raises(ConfigError) as err:
            parse_config({"admin": admin})
        assert key in str(err.value) and expected in str(err.value), str(err.value)
    # check-config loads them: a client certificate with the key of another one
    other = self_signed(tmp_path, "other", [NAME])
    admin = {**tls_on, "cli_tls_cert": pair["cert"], "cli_tls_key": other["key"]}
    problem = admin_client_tls_problem(parse_config({"admin": admin}))
    assert problem is not None and "does not load" in problem and pair["cert"] in problem
    assert admin_client_tls_problem(parse_config({"admin": tls_on})) is None
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(AdminTLSError, match=f"GATEWAY_ADMIN_TLS_CA: got '{missing}'"):
        from_env({"GATEWAY_ADMIN_TLS_CA": missing})
    with pytest.raises(AdminTLSError, match="GATEWAY_ADMIN_TLS_CERT/GATEWAY_ADMIN_TLS_KEY"):
        from_env({"GATEWAY_ADMIN_TLS_KEY": pair["key"]})
    assert from_env({"GATEWAY_ADMIN_TLS_CA": f"{pair['cert']}{os.pathsep}{pair['cert']}"}) == (
        ClientTLS(ca_files=(pair["cert"], pair["cert"]))
    )


def test_a_reload_that_changes_only_the_clients_keys_is_applied(tmp_path) -> None:
    """tls_server_name and cli_tls_* are read by the CLI and the pipeline, never by the gateway:
    a SIGHUP reload that changes only them is applied (any other [admin] change is refused)."""
    from gateway.config import load_config
    from gateway.server import Server

    pair = self_signed(tmp_path, "admin", [NAME])
    admin = {"port": 0, "tls_cert": pair["cert"], "tls_key": pair["key"]}
    path = tmp_path / "gw.toml"
    backends = {"m": {"type": "memory"}}
    path.write_text(write_toml({"admin": admin, "backends": backends}))
    server = Server(load_config(path, environ={}))
    clients = {"tls_server_name": "lb.example.test", "cli_tls_ca": pair["cert"]}
    path.write_text(write_toml({"admin": {**admin, **clients}, "backends": backends}))
    assert server.reload() is True
    assert server.config.admin.tls_server_name == "lb.example.test"
    path.write_text(
        write_toml({"admin": {**admin, **clients, "host": "0.0.0.0"}, "backends": backends})
    )
    assert server.reload() is False
    assert server.config.admin.host == "127.0.0.1"
