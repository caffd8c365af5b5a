"""The NATS backend into secured and clustered deployments, against real nats-servers: TLS,
user/password, token and NKey authentication (each server configured for it), a wrong
credential's clear failure, and a three-node JetStream cluster that loses a node while records
are produced."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import nkeys
import pytest
import trio
import trustme

from gateway.backends.nats import NatsBackend, NatsConfig
from gateway.config import ConfigError
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from tests.backends.nats_accounts import operator_setup
from tests.backends.servers import NatsServer, free_port, opened


def nats(config: NatsConfig) -> NatsBackend:
    return NatsBackend("nats", config)


def names(tag: str) -> dict[str, str]:
    return {"stream_prefix": tag, "subject_prefix": tag, "kv_bucket": tag}


async def round_trip(backend: NatsBackend, n: int = 3) -> None:
    topic = f"t{uuid.uuid4().hex[:6]}"
    await backend.create_topic(topic, 1)
    batch = RecordBatch([Record(b"k", f"v{i}".encode()) for i in range(n)])
    await backend.append(topic, 0, batch)
    got = await backend.read(topic, 0, 0, 100, 1 << 20)
    assert [r.value for b in got for r in b.records] == [f"v{i}".encode() for i in range(n)]


@pytest.fixture
def server_factory(tmp_path):
    started: list[NatsServer] = []

    def start(config: str, name: str = "") -> NatsServer:
        server = NatsServer(tmp_path / f"nats-{len(started)}", config, name)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


async def test_tls_with_a_ca_file_and_an_untrusted_certificate(server_factory, tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_and_cert_chain_pem.write_to_path(tmp_path / "server.pem")
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    trustme.CA().cert_pem.write_to_path(tmp_path / "other-ca.pem")
    pem = tmp_path / "server.pem"
    server = server_factory(f'tls {{ cert_file: "{pem}"\n key_file: "{pem}" }}\n')
    ok = NatsConfig(url=server.url, tls=True, tls_ca_file=str(tmp_path / "ca.pem"), **names("tls"))
    async with opened(nats(ok)) as backend:
        await round_trip(backend)
    bad = NatsConfig(url=server.url, tls_ca_file=str(tmp_path / "other-ca.pem"), **names("tls2"))
    async with opened(nats(bad)) as backend:
        healthy, reason = await backend.health()
        assert not healthy
        assert "certificate verify failed" in reason and server.url.split("//")[1] in reason
        with pytest.raises(GatewayError) as info:
            await backend.create_topic("x", 1)
        assert info.value.code is ErrorCode.BACKEND_UNAVAILABLE
    plain = NatsConfig(url=server.url, connect_timeout_ms=500, **names("tls3"))
    async with opened(nats(plain)) as backend:
        healthy, reason = await backend.health()
        assert not healthy and "requires TLS" in reason


async def test_user_and_password_and_a_wrong_password(server_factory):
    server = server_factory('authorization { user: "gw"\n password: "s3cret" }\n')
    async with opened(
        nats(NatsConfig(url=server.url, user="gw", password="s3cret", **names("up")))
    ) as b:
        await round_trip(b)
    wrong = NatsConfig(url=server.url, user="gw", password="nope", **names("up2"))
    async with opened(nats(wrong)) as backend:
        healthy, reason = await backend.health()
        assert not healthy and "Authorization Violation" in reason
        assert "nope" not in reason


async def test_token(server_factory):
    server = server_factory('authorization { token: "t0ken" }\n')
    async with opened(nats(NatsConfig(url=server.url, token="t0ken", **names("tok")))) as backend:
        await round_trip(backend)


async def test_nkey_seed_file(server_factory, tmp_path):
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    (tmp_path / "user.nk").write_bytes(seed + b"\n")
    server = server_factory(f'authorization {{ users: [ {{ nkey: "{public}" }} ] }}\n')
    config = NatsConfig(url=server.url, nkey_seed_file=str(tmp_path / "user.nk"), **names("nk"))
    async with opened(nats(config)) as backend:
        await round_trip(backend)


async def test_creds_file_in_operator_mode(server_factory, tmp_path):
    """A user JWT and its NKey seed (a ``.creds`` file), against a server in operator mode."""
    workdir = tmp_path / "accounts"
    workdir.mkdir()
    conf, creds = operator_setup(workdir)
    server = server_factory(conf)
    config = NatsConfig(url=server.url, creds_file=str(creds), **names("cr"))
    async with opened(nats(config)) as backend:
        await round_trip(backend)
    other_workdir = tmp_path / "other"
    other_workdir.mkdir()
    _, foreign = operator_setup(other_workdir)  # a user of another operator
    async with opened(
        nats(NatsConfig(url=server.url, creds_file=str(foreign), **names("cr2")))
    ) as b:
        healthy, reason = await b.health()
        assert not healthy and "Authorization Violation" in reason


def test_credential_problems_are_config_errors_naming_the_key(tmp_path):
    (tmp_path / "not-a-seed").write_text("SAAGARBAGE\n")
    with pytest.raises(ConfigError) as info:
        NatsBackend("n1", NatsConfig(nkey_seed_file=str(tmp_path / "not-a-seed")))
    assert "backends.n1" in str(info.value) and "user seed" in str(info.value)
    problems = NatsConfig(user="a", token="b", tls_cert_file="/nope").validate()
    assert any(p.startswith("user/token:") for p in problems)
    assert any(p.startswith("tls_cert_file/tls_key_file:") for p in problems)


# ------------------------------------------------------------------ a three-node cluster


def cluster_configs(tmp_path: Path) -> list[tuple[str, str, int]]:
    routes = [free_port() for _ in range(3)]
    ports = [free_port() for _ in range(3)]
    out = []
    for i in range(3):
        others = ", ".join(f"nats-route://127.0.0.1:{routes[j]}" for j in range(3) if j != i)
        conf = f'cluster {{ name: "gw", listen: "127.0.0.1:{routes[i]}", routes: [{others}] }}\n'

        out.append((conf, f"n{i}", ports[i]))
    return out


async def test_three_node_cluster_loses_a_node_during_a_produce_loop(server_factory, tmp_path):
    nodes = []
    for conf, name, port in cluster_configs(tmp_path):
        server = NatsServer(tmp_path / name, conf, name)
        server.port = port
        nodes.append(server)
    await trio.to_thread.run_sync(lambda: [n.start() for n in nodes])
    try:
        config = NatsConfig(
            urls=tuple(n.url for n in nodes),
            replicas=3,
            request_timeout_ms=1500,
            **names(f"cl{uuid.uuid4().hex[:4]}"),
        )
        async with opened(nats(config)) as backend:
            topic = "replicated"
            with trio.fail_after(30):
                while True:  # the cluster elects its meta leader first
                    try:
                        await backend.create_topic(topic, 1)
                        break
                    except GatewayError:
                        await trio.sleep(0.5)
            acked: list[bytes] = []
            first = backend.client.port
            victim = next(n for n in nodes if n.port == first)
            with trio.fail_after(60):
                i = 0
                while len(acked) < 300:
                    if i == 100:
                        victim.kill()  # the node the gateway is connected to, mid-loop
                    value = f"r{i}".encode()
                    try:
                        await backend.append(topic, 0, RecordBatch([Record(None, value)]))
                        acked.append(value)
                    except GatewayError as exc:
                        assert exc.code in (ErrorCode.BACKEND_UNAVAILABLE, ErrorCode.TIMEOUT)
                        await trio.sleep(0.2)
                    i += 1
            assert backend.client.port != first  # it reconnected to another node
            got: list[bytes] = []
            offset = 0
            with trio.fail_after(30):
                while True:
                    batches = await backend.read(topic, 0, offset, 1000, 1 << 20)
                    if not batches:
                        break
                    for b in batches:
                        got += [r.value for r in b.records]
                        offset = b.last_offset + 1
            stored = set(got)
            assert all(v in stored for v in acked), "an acknowledged record is missing"
            assert len(got) == len(stored)  # nothing stored twice
    finally:
        for n in nodes:
            n.stop()
