"""Server operations with a test-only line protocol: connection limits, PROXY protocol v1/v2,
TLS and mutual TLS, idle and read timeouts, SIGHUP reload, drain."""

from __future__ import annotations

import json
import signal
import ssl
import threading
import urllib.request

import pytest
import trio
import trustme

from gateway import protocols
from gateway.config import parse_config
from gateway.observability import CONNECTIONS_REFUSED, PROTOCOL_ERRORS
from gateway.proxy_protocol import encode_v1, encode_v2
from tests.support import GatewayProcess, make_config, serving


@pytest.fixture(autouse=True)
def echo_protocol():
    protocols.REGISTRY["echo"] = "tests.echo_protocol"
    protocols.get_protocol.cache_clear()
    yield
    del protocols.REGISTRY["echo"]
    protocols.get_protocol.cache_clear()


def config_with(tmp_path, **listener):
    return parse_config(make_config(tmp_path, listeners={"echo": listener}))


async def connect(server) -> trio.SocketStream:
    host, port = server.addresses()["echo"]
    return await trio.open_tcp_stream(host, port)


async def ask(stream: trio.abc.Stream, line: bytes) -> bytes:
    await stream.send_all(line + b"\n")
    data = b""
    with trio.fail_after(30):
        while not data.endswith(b"\n"):
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return data


async def closed_by_server(stream: trio.abc.Stream) -> bool:
    with trio.fail_after(30):
        try:
            while True:
                if await stream.receive_some(4096) == b"":
                    return True
        except trio.BrokenResourceError:
            return True


def refused(reason: str) -> float:
    return CONNECTIONS_REFUSED.labels(protocol="echo", reason=reason)._value.get()


async def test_max_connections_refuses_beyond_the_limit_and_keeps_others(tmp_path) -> None:
    before = refused("max_connections")
    async with serving(config_with(tmp_path, max_connections=2)) as server:
        a, b = await connect(server), await connect(server)
        assert await ask(a, b"hi") == b"HI\n"
        assert await ask(b, b"hi") == b"HI\n"
        c = await connect(server)
        assert await closed_by_server(c)
        assert refused("max_connections") == before + 1
        assert await ask(a, b"still") == b"STILL\n"
        await a.aclose()
        with trio.fail_after(20):
            while len(server.listeners["echo"].connections) > 1:
                await trio.sleep(0.01)
        d = await connect(server)
        assert await ask(d, b"now") == b"NOW\n"


@pytest.mark.parametrize("encode", [encode_v1, encode_v2], ids=["v1", "v2"])
async def test_proxy_header_sets_the_client_address(tmp_path, encode) -> None:
    async with serving(config_with(tmp_path, proxy_protocol="required")) as server:
        s = await connect(server)
        await s.send_all(encode(("203.0.113.7", 51234), ("10.0.0.1", 9092)))
        assert await ask(s, b"WHO") == b"203.0.113.7:51234\n"
        conns = server.listeners["echo"].connections
        assert [c.peer for c in conns] == ["203.0.113.7:51234"]


async def test_proxy_required_refuses_a_connection_without_header(tmp_path) -> None:
    before = refused("proxy_header")
    async with serving(config_with(tmp_path, proxy_protocol="required")) as server:
        s = await connect(server)
        await s.send_all(b"hello\n")
        assert await closed_by_server(s)
        assert refused("proxy_header") == before + 1
        ok = await connect(server)
        await ok.send_all(encode_v1(("192.0.2.1", 1000), ("192.0.2.2", 2000)))
        assert await ask(ok, b"WHO") == b"192.0.2.1:1000\n"


async def test_proxy_optional_accepts_both(tmp_path) -> None:
    async with serving(config_with(tmp_path, proxy_protocol="optional")) as server:
        plain = await connect(server)
        assert (await ask(plain, b"WHO")).startswith(b"127.0.0.1:")
        proxied = await connect(server)
        await proxied.send_all(encode_v2(("2001:db8::1", 443), ("2001:db8::2", 9092)))
        assert await ask(proxied, b"WHO") == b"[2001:db8::1]:443\n"


@pytest.fixture
def pki(tmp_path):
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    cert, key, ca_file = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem"
    server_cert.cert_chain_pems[0].write_to_path(str(cert))
    for pem in server_cert.cert_chain_pems[1:]:
        pem.write_to_path(str(cert), append=True)
    server_cert.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    return ca, str(cert), str(key), str(ca_file)


async def tls_connect(server, ca, client_cert=None) -> trio.SSLStream:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if client_cert is not None:
        client_cert.configure_cert(ctx)
    stream = trio.SSLStream(await connect(server), ctx, server_hostname="127.0.0.1")
    await stream.do_handshake()
    return stream


async def test_tls_listener_serves_tls_and_refuses_plain_text(tmp_path, pki) -> None:
    ca, cert, key, _ = pki
    before = refused("tls")
    async with serving(config_with(tmp_path, tls_cert=cert, tls_key=key)) as server:
        s = await tls_connect(server, ca)
        assert await ask(s, b"secure") == b"SECURE\n"
        plain = await connect(server)
        await plain.send_all(b"plain text\n")
        assert await closed_by_server(plain)
        assert refused("tls") == before + 1


async def test_mutual_tls_requires_a_client_certificate(tmp_path, pki) -> None:
    ca, cert, key, ca_file = pki
    async with serving(
        config_with(tmp_path, tls_cert=cert, tls_key=key, tls_client_ca=ca_file)
    ) as server:
        good = await tls_connect(server, ca, ca.issue_cert("client@example"))
        assert await ask(good, b"mtls") == b"MTLS\n"
        other_ca = trustme.CA()
        with pytest.raises((trio.BrokenResourceError, ssl.SSLError)):
            bad = await tls_connect(server, ca, other_ca.issue_cert("intruder"))
            await ask(bad, b"x")
            assert await closed_by_server(bad)
            raise trio.BrokenResourceError


async def test_idle_connection_is_closed_and_counted(tmp_path) -> None:
    before = PROTOCOL_ERRORS.labels(protocol="echo", kind="idle_timeout")._value.get()
    async with serving(config_with(tmp_path, idle_timeout_s=0.2)) as server:
        s = await connect(server)
        assert await ask(s, b"a") == b"A\n"
        assert await closed_by_server(s)
    assert PROTOCOL_ERRORS.labels(protocol="echo", kind="idle_timeout")._value.get() == before + 1


async def test_half_sent_request_hits_the_read_timeout(tmp_path) -> None:
    before = PROTOCOL_ERRORS.labels(protocol="echo", kind="read_timeout")._value.get()
    async with serving(config_with(tmp_path, read_timeout_s=0.2, idle_timeout_s=60)) as server:
        slow = await connect(server)
        await slow.send_all(b"never finished")
        healthy = await connect(server)
        assert await closed_by_server(slow)
        assert await ask(healthy, b"fine") == b"FINE\n"
    assert PROTOCOL_ERRORS.labels(protocol="echo", kind="read_timeout")._value.get() == before + 1


def http_json(url: str, body: object | None = None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method="POST" if data else "GET",
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=15) as resp:
        return resp.status, json.loads(resp.read())


def test_sighup_applies_new_routes_and_refuses_a_bad_file(tmp_path) -> None:
    backends = {"a": {"type": "memory"}, "b": {"type": "memory"}}
    with GatewayProcess(tmp_path, backends=backends, routes=[{"topic": "*", "backend": "a"}]) as gw:
        gw.config["routes"] = [{"topic": "x.*", "backend": "b"}, {"topic": "*", "backend": "a"}]
        gw.write_config()
        gw.proc.send_signal(signal.SIGHUP)
        for _ in range(100):
            if "config_reloaded" in gw.log_text():
                break
            threading.Event().wait(0.05)
        http_json(gw.admin_url + "/v1/topics", {"name": "x.one", "partitions": 1})
        http_json(gw.admin_url + "/v1/topics", {"name": "plain", "partitions": 1})
        status = http_json(gw.admin_url + "/v1/status")[1]
        assert {t["name"]: t["backend"] for t in status["topics"]} == {"x.one": "b", "plain": "a"}

        gw.config_path.write_text("[server\n")
        gw.proc.send_signal(signal.SIGHUP)
        for _ in range(100):
            if "config_reload_refused" in gw.log_text():
                break
            threading.Event().wait(0.05)
        assert "config_reload_refused" in gw.log_text()
        assert http_json(gw.admin_url + "/healthz".replace("healthz", "readyz"))[0] == 200


def test_sigterm_drain_answers_a_long_poll_in_flight_and_exits_0(tmp_path) -> None:
    with GatewayProcess(tmp_path, backend="memory") as gw:
        http_json(gw.admin_url + "/v1/topics", {"name": "t", "partitions": 1})
        results: list[object] = []

        def long_poll() -> None:
            results.append(http_json(gw.admin_url + "/v1/topics/t/records?max_wait_ms=1500"))

        poller = threading.Thread(target=long_poll)
        poller.start()
        for _ in range(200):  # until the poll is waiting inside the gateway
            with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10) as resp:
                if b"gateway_long_poll_waits_total 1.0" in resp.read():
                    break
            threading.Event().wait(0.05)
        else:
            raise AssertionError("the long poll never reached the gateway")
        assert gw.stop(signal.SIGTERM) == 0
        poller.join(10)
        assert results and results[0][0] == 200 and results[0][1]["records"] == []


async def _until(predicate, timeout: float = 20.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


@pytest.mark.parametrize("stall", ["tls", "proxy"])
async def test_connections_stalled_in_their_handshake_count_toward_max_connections(
    tmp_path, pki, stall
) -> None:
    """Connections that never finish their TLS handshake (or PROXY header) hold a slot: the
    next one beyond max_connections is refused, and the slots come back when they go."""
    ca, cert, key, _ = pki
    listener: dict[str, object] = {"max_connections": 3, "read_timeout_s": 60}
    if stall == "tls":
        listener.update(tls_cert=cert, tls_key=key)
    else:
        listener.update(proxy_protocol="required")
    before = refused("max_connections")
    async with serving(config_with(tmp_path, **listener)) as server:
        state = server.listeners["echo"]
        stalled = [await connect(server) for _ in range(3)]
        await _until(lambda: state.handshaking == 3)
        extra = await connect(server)
        assert await closed_by_server(extra)
        assert refused("max_connections") == before + 1
        assert state.connections == set()  # none got as far as the protocol
        for s in stalled:
            await s.aclose()
        await _until(lambda: state.handshaking == 0)
        if stall == "tls":
            ok = await tls_connect(server, ca)
        else:
            ok = await connect(server)
            await ok.send_all(encode_v1(("203.0.113.9", 1000), ("10.0.0.1", 9092)))
        assert await ask(ok, b"back") == b"BACK\n"


async def test_a_trickled_request_is_cut_at_the_read_timeout(tmp_path) -> None:
    """One byte at a time, each well within the read timeout, never completes a request: the
    connection is closed read_timeout_s after the request's first byte."""
    before = PROTOCOL_ERRORS.labels(protocol="echo", kind="read_timeout")._value.get()
    async with serving(config_with(tmp_path, read_timeout_s=0.5, idle_timeout_s=60)) as server:
        slow = await connect(server)
        started = trio.current_time()
        closed = False
        with trio.fail_after(20):
            while not closed:
                try:
                    await slow.send_all(b"x")
                except trio.BrokenResourceError:
                    break
                with trio.move_on_after(0.1):
                    try:
                        closed = await slow.receive_some(100) == b""
                    except trio.BrokenResourceError:
                        closed = True
        took = trio.current_time() - started
        assert 0.5 <= took < 10
    assert PROTOCOL_ERRORS.labels(protocol="echo", kind="read_timeout")._value.get() == before + 1
