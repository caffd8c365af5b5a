"""Hostile clients against the gateway's connection layer, each against a real gateway process
while a well-behaved client keeps getting answers (tests/reliability/hostile.py):

- connections that never start their TLS handshake are held to ``max_connections``: the
  process never runs out of file descriptors, the admin port and other listeners stay up;
- a request trickled in one byte at a time is cut ``read_timeout_s`` after its first byte;
- an Iggy login flood against hashed passwords runs at most ``max_concurrent_logins`` scrypt
  checks at once, and repeated failures from one address are refused without a check;
- SIGHUP with a certificate that does not match its key is refused, the gateway keeps serving
  TLS with the pair it has.
"""

from __future__ import annotations

import resource
import shutil
import signal
import socket
import ssl
import struct
import time
import urllib.request
from pathlib import Path

import trio
import trustme
from prometheus_client.parser import text_string_to_metric_families

from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.auth import FREE_FAILURES, hash_password
from gateway.protocols.iggy.client import IggyClient
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess


def metric(gw: GatewayProcess, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def wait_for(check, timeout: float = 20.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.05)


def iggy_pings(gw: GatewayProcess, source: str = "127.0.0.1") -> bool:
    """A well-behaved Iggy client: connect, ping, within a generous deadline."""

    async def main() -> None:
        host, port = gw.address("iggy")
        with trio.fail_after(10):
            stream = await trio.open_tcp_stream(host, port, local_address=source)
            async with IggyClient(stream) as client:
                await client.ping()

    trio.run(main)
    return True


def write_pair(directory: Path, ca: trustme.CA, name: str) -> tuple[str, str]:
    issued = ca.issue_cert("127.0.0.1")
    cert, key = directory / f"{name}-cert.pem", directory / f"{name}-key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    return str(cert), str(key)


def tls_handshake(gw: GatewayProcess, ca: trustme.CA) -> None:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    with socket.create_connection(gw.address("kafka08"), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
            pass  # the handshake completed


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


# --------------------------------------------------------------------------- stalled TLS


def test_stalled_tls_handshakes_are_held_to_max_connections(tmp_path: Path) -> None:
    """150 connections that never send a ClientHello to a TLS listener with max_connections =
    20, the gateway's file limit lowered to 40 above what it holds idle: 20 are held (in their
    handshake), the rest are closed at once (refused, max_connections), the file limit is
    never reached, the admin port and the Iggy listener keep answering."""
    ca = trustme.CA()
    cert, key = write_pair(tmp_path, ca, "server")
    listeners = {
        "kafka08": {"tls_cert": cert, "tls_key": key, "max_connections": 20, "read_timeout_s": 60},
        "iggy": {},
    }
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        assert gw.proc is not None
        idle = Footprint.of(gw)
        limit = idle.open_files + 40
        hard = resource.prlimit(gw.proc.pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(gw.proc.pid, resource.RLIMIT_NOFILE, (limit, hard))
        baseline = Footprint.of(gw)
        assert baseline.file_limit == limit
        refused_before = metric(
            gw, "gateway_connections_refused_total", protocol="kafka08", reason="max_connections"
        )
        stalled: list[socket.socket] = []
        try:
            with Bystander(gw) as bystander:
                for _ in range(150):
                    stalled.append(socket.create_connection(gw.address("kafka08"), timeout=10))
                wait_for(
                    lambda: (
                        metric(
                            gw,
                            "gateway_connections_refused_total",
                            protocol="kafka08",
                            reason="max_connections",
                        )
                        >= refused_before + 130
                    ),
                    what="130 refusals",
                )
                assert metric(gw, "gateway_connections_handshaking", protocol="kafka08") == 20
                during = Footprint.of(gw)
                assert iggy_pings(gw)
            bystander.check()
            # the refused ones were closed by the gateway, the 20 held ones were not
            closed = 0
            for s in stalled:
                s.settimeout(0.05)
                try:
                    closed += closed_by_peer(s)
                except TimeoutError:
                    pass
            assert closed == 130
            during.check_within(baseline)
            assert during.open_files < limit
            assert "accept_failed" not in gw.log_text()  # never out of descriptors
            assert metric(gw, "gateway_limit_hits_total", limit="max_connections") >= 130
        finally:
            for s in stalled:
                s.close()
        # the slots come back: a real TLS client gets through
        wait_for(
            lambda: metric(gw, "gateway_connections_handshaking", protocol="kafka08") == 0,
            what="handshakes released",
        )
        tls_handshake(gw, ca)
        Footprint.of(gw).check_within(baseline)


# --------------------------------------------------------------------------- slowloris


def test_trickled_requests_are_cut_at_the_read_timeout(tmp_path: Path) -> None:
    """20 connections fill an Iggy listener with max_connections = 20, each trickling one byte
    of a request every 0.25 s (each byte well within read_timeout_s = 1.5): every one is closed
    as a read timeout, so the listener answers again; without the bound from the first byte
    they would hold it forever."""
    listeners = {"iggy": {"max_connections": 20, "read_timeout_s": 1.5, "idle_timeout_s": 60}}
    request = c.ClientConnection().send(c.LoginUser("u", "p" * 200, "0.6.202", ""))
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        baseline = Footprint.of(gw)
        socks = [socket.create_connection(gw.address("iggy"), timeout=10) for _ in range(20)]
        open_socks = set(range(20))
        sent = 0
        with Bystander(gw) as bystander:
            deadline = time.monotonic() + 30  # bounded: far beyond the 1.5 s read timeout
            started = time.monotonic()
            while open_socks and time.monotonic() < deadline:
                for i in list(open_socks):
                    s = socks[i]
                    try:
                        s.sendall(request[sent : sent + 1])
                        s.settimeout(0.001)
                        if closed_by_peer(s):
                            open_socks.discard(i)
                    except TimeoutError:
                        pass
                    except (BrokenPipeError, ConnectionResetError):
                        open_socks.discard(i)
                sent += 1
                assert sent < len(request), "the trickle completed a request"
                time.sleep(0.25)
            took = time.monotonic() - started
            assert not open_socks, f"{len(open_socks)} trickling connections still open"
            assert took >= 1.5
            assert iggy_pings(gw)  # the listener has room again
        bystander.check()
        for s in socks:
            s.close()
        timeouts = metric(gw, "gateway_protocol_errors_total", protocol="iggy", kind="read_timeout")
        assert timeouts == 20
        assert metric(gw, "gateway_limit_hits_total", limit="read_timeout_s", protocol="iggy") == 20
        Footprint.of(gw).check_within(baseline)


# --------------------------------------------------------------------------- login flood

LOGIN_RSS_BOUND = 150 * 1024 * 1024  # 4 scrypt checks at 16 MiB each, plus slack


def test_an_iggy_login_flood_is_bounded_and_backs_off(tmp_path: Path) -> None:
    """16 connections, each from its own loopback address, send wrong passwords against a
    hashed user, FREE_FAILURES + 2 each, all at once. At most max_concurrent_logins (4) scrypt
    checks run at once (peak RSS stays within 150 MiB of idle, where 16 concurrent checks take
    ~250 MiB more), each address's last attempt is refused without a check (status 42, counted
    as login_backoff_s), and the right password from another address logs in meanwhile."""
    users = [{"username": "u", "password_hash": hash_password("secret")}]
    listeners = {"iggy": {"users": users, "allow_anonymous": False, "login_backoff_s": 60.0}}
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        baseline = Footprint.of(gw)
        answers: dict[str, list[int]] = {}
        legit: list[int] = []

        async def attacker(source: str) -> None:
            host, port = gw.address("iggy")
            stream = await trio.open_tcp_stream(host, port, local_address=source)
            async with IggyClient(stream) as client:
                got = answers.setdefault(source, [])
                for _ in range(FREE_FAILURES + 2):
                    resp = await client.request(c.LoginUser("u", "wrong", "0.6.202", ""))
                    got.append(resp.status)

        async def legit_login() -> None:
            await trio.sleep(0.5)  # while the flood runs
            host, port = gw.address("iggy")
            stream = await trio.open_tcp_stream(host, port, local_address="127.0.0.2")
            async with IggyClient(stream) as client:
                legit.append(await client.login("u", "secret"))

        async def main() -> None:
            with trio.fail_after(60):  # generous: the checks queue behind the flood
                async with trio.open_nursery() as nursery:
                    for i in range(16):
                        nursery.start_soon(attacker, f"127.0.1.{i + 1}")
                    nursery.start_soon(legit_login)

        with Bystander(gw) as bystander:
            trio.run(main)
        bystander.check()
        assert legit == [1]
        assert len(answers) == 16
        for source, statuses in answers.items():
            assert statuses == [c.Status.INVALID_CREDENTIALS] * (FREE_FAILURES + 2), source
        # each address's last attempt, after its free failures and one more, was not checked
        backoffs = metric(gw, "gateway_limit_hits_total", limit="login_backoff_s")
        assert backoffs == 16
        assert metric(gw, "gateway_limit_hits_total", limit="max_concurrent_logins") > 0
        Footprint.of(gw).check_within(baseline, rss_bound=LOGIN_RSS_BOUND)


# --------------------------------------------------------------------------- SIGHUP


def test_sighup_with_a_mismatched_certificate_keeps_serving(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert, key = write_pair(tmp_path, ca, "server")
    _, other_key = write_pair(tmp_path, ca, "other")
    listeners = {"kafka08": {"tls_cert": cert, "tls_key": key}}
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        assert gw.proc is not None
        baseline = Footprint.of(gw)
        with Bystander(gw) as bystander:
            shutil.copy(key, tmp_path / "good-key.pem")
            shutil.copy(other_key, key)  # the key no longer belongs to the certificate
            gw.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "config_reload_refused" in gw.log_text(), what="the refusal")
            tls_handshake(gw, ca)  # the running context still serves
            shutil.copy(tmp_path / "good-key.pem", key)
            gw.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "config_reloaded" in gw.log_text(), what="the reload")
            tls_handshake(gw, ca)
        bystander.check()
        refusals = [line for line in gw.log_text().splitlines() if "config_reload_refused" in line]
        assert len(refusals) == 1
        assert "KEY_VALUES_MISMATCH" in refusals[0] and "listeners.kafka08" in refusals[0]
        assert "Traceback" not in gw.log_text()
        Footprint.of(gw).check_within(baseline)


# --------------------------------------------------------------------------- names


def _kafka_offset_fetch(group: str, topic: str) -> bytes:
    def string(s: str) -> bytes:
        return struct.pack(">h", len(s.encode())) + s.encode()

    body = (
        struct.pack(">hhi", 9, 0, 7)  # OffsetFetch v0, correlation id 7
        + string("hostile")
        + string(group)
        + struct.pack(">i", 1)
        + string(topic)
        + struct.pack(">ii", 1, 0)
    )
    return struct.pack(">i", len(body)) + body


def _kafka_offset_fetch_error(sock: socket.socket, group: str) -> int:
    sock.sendall(_kafka_offset_fetch(group, "t"))
    size = struct.unpack(">i", _recv_exactly(sock, 4))[0]
    return struct.unpack(">h", _recv_exactly(sock, size)[-2:])[0]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the gateway closed the connection"
        data += chunk
    return data


def test_names_with_control_characters_get_each_protocols_error(tmp_path: Path) -> None:
    """A group or topic name with a control character gets the protocol's error for an invalid
    request on every listener, the connection stays usable, nothing is logged as a failure."""
    from gateway.protocols.cursus.client import CursusClient
    from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
    from gateway.protocols.liftbridge.client import GrpcStatusError, LiftbridgeClient
    from gateway.protocols.tank.client import TankClient
    from gateway.protocols.tank.codec import CT_INVALID

    listeners: dict[str, dict[str, object]] = {
        p: {} for p in ("kafka08", "iggy", "tank", "liftbridge", "cursus")
    }
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        request = urllib.request.Request(
            gw.admin_url + "/v1/topics",
            data=b'{"name": "t", "partitions": 1}',
            headers={"content-type": "application/json"},
        )
        urllib.request.urlopen(request, timeout=10).read()
        with Bystander(gw) as bystander:
            with socket.create_connection(gw.address("kafka08"), timeout=10) as sock:
                assert _kafka_offset_fetch_error(sock, "g\x01") == -1  # 0.8's "unknown"
                assert _kafka_offset_fetch_error(sock, "g") != -1  # same connection, fine

            async def main() -> None:
                with trio.fail_after(30):
                    async with await CursusClient.connect(*gw.address("cursus")) as cur:
                        reply = await cur.text("FETCH_OFFSET topic=t partition=0 group=g\x01")
                        assert reply.startswith("ERROR: invalid_request: invalid group name")
                        assert await cur.text("FETCH_OFFSET topic=t partition=0 group=g")
                    async with await LiftbridgeClient.connect(*gw.address("liftbridge")) as lb:
                        bad = pb.FetchCursorRequest(stream="t", partition=0, cursorId="c\x01")
                        try:
                            await lb.call("FetchCursor", bad)
                            raise AssertionError("a cursor id with a control character passed")
                        except GrpcStatusError as exc:
                            assert exc.status == 3  # INVALID_ARGUMENT
                        good = pb.FetchCursorRequest(stream="t", partition=0, cursorId="c")
                        assert (await lb.call("FetchCursor", good)).offset == -1
                    async with await TankClient.connect(*gw.address("tank")) as tank:
                        assert await tank.create_topic("t\x01", 1) == CT_INVALID
                        assert await tank.discover_partitions("t\x01") == []  # none can exist
                        assert len(await tank.discover_partitions("t")) == 1
                    async with await IggyClient.connect(*gw.address("iggy")) as iggy:
                        await iggy.call(c.CreateStream(7, "s7"))
                        bad_topic = c.CreateTopic(c.Identifier(7), 2, 1, 0, "t\x01")
                        status = (await iggy.request(bad_topic)).status
                        assert status == c.Status.INVALID_TOPIC_NAME
                        await iggy.ping()

            trio.run(main)
        bystander.check()
        assert "connection_failed" not in gw.log_text()
        assert "Traceback" not in gw.log_text()
