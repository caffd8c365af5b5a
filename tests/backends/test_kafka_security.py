"""The Kafka backend into a secured cluster: TLS through a real TLS terminator (HAProxy, since
Tansu 0.6's own TLS options cannot be combined) in front of Tansu, an untrusted certificate's
clear failure (one log line, /readyz 503 naming it, retriable errors, no crash), and the SASL
exchanges (PLAIN, SCRAM-SHA-256/512)."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import scramp
import trio
import trustme
from kio.schema.errors import ErrorCode as KErr
from kio.schema.sasl_authenticate.v1 import request as auth_req
from kio.schema.sasl_authenticate.v1 import response as auth_resp
from kio.schema.sasl_handshake.v1 import request as hs_req
from kio.schema.sasl_handshake.v1 import response as hs_resp
from kio.serial import entity_reader, entity_writer

from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.backends.kafka.connection import BrokerConnection
from gateway.backends.kafka.sasl import SaslLogin
from gateway.model import ErrorCode, GatewayError, Record, RecordBatch
from tests.backends.servers import HaproxyTls, TansuServer, free_port, http_json
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """(bootstrap, trusted CA file, untrusted CA file): Tansu behind HAProxy's TLS."""
    work = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        work / "server.pem"
    )
    ca.cert_pem.write_to_path(work / "ca.pem")
    trustme.CA().cert_pem.write_to_path(work / "other-ca.pem")
    tls_port = free_port()
    tansu = TansuServer(advertised_port=tls_port).start()
    proxy = HaproxyTls(work, work / "server.pem", tansu.port, tls_port).start()
    try:
        yield f"127.0.0.1:{tls_port}", work / "ca.pem", work / "other-ca.pem"
    finally:
        proxy.stop()
        tansu.stop()


async def test_tls_round_trip_through_the_terminator(tls_cluster):
    bootstrap, ca, _ = tls_cluster
    backend = KafkaBackend("k", KafkaConfig(bootstrap=bootstrap, tls=True, tls_ca_file=str(ca)))
    async with trio.open_nursery() as nursery:
        await backend.open(nursery)
        topic = f"tls-{uuid.uuid4().hex[:6]}"
        await backend.create_topic(topic, 1)
        await backend.append(topic, 0, RecordBatch([Record(b"k", b"over tls")]))
        got = await backend.read(topic, 0, 0, 10, 1 << 20)
        assert [r.value for b in got for r in b.records] == [b"over tls"]
        await backend.close()
        nursery.cancel_scope.cancel()


def test_untrusted_certificate_fails_clearly_without_a_crash(tls_cluster, tmp_path):
    bootstrap, _, other = tls_cluster
    gw = GatewayProcess(
        tmp_path,
        listeners={"kafka08": {}},
        backends={"k": {"type": "kafka", "bootstrap": bootstrap, "tls_ca_file": str(other)}},
    ).start()
    try:
        for _ in range(3):
            status, body = http_json("GET", gw.admin_url + "/readyz")
            assert status == 503
        reason = json.dumps(body)
        assert "certificate verify failed" in reason and bootstrap in reason, reason
        assert gw.proc is not None and gw.proc.poll() is None  # still running
    finally:
        assert gw.stop() == 0
    lines = [line for line in gw.log_text().splitlines() if "cannot connect" in line]
    assert len(lines) == 1, lines  # one line per distinct cause, however often it is met
    assert "certificate verify failed" in lines[0] and "Traceback" not in gw.log_text()


# ------------------------------------------------------------------ SASL exchanges
# No broker installable here speaks SASL to librdkafka (Tansu 0.6 does not); the exchange is
# checked against scramp's server side, an implementation independent of the client code.


async def sasl_broker(
    mechanisms: list[str], user: str, password: str, task_status=trio.TASK_STATUS_IGNORED
) -> None:
    """A listener answering SaslHandshake v1 and SaslAuthenticate v1 like a Kafka broker."""
    salted = {
        m: scramp.ScramMechanism(m).make_auth_info(password, iteration_count=4096)
        for m in mechanisms
        if m.startswith("SCRAM")
    }

    async def handle(stream: trio.SocketStream) -> None:
        buf = b""
        mech = ""
        server = None
        step = 0

        async def frames():
            nonlocal buf
            while True:
                while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                n = int.from_bytes(buf[:4], "big")
                frame, buf = buf[4 : 4 + n], buf[4 + n :]
                yield frame

        async def answer(corr: int, entity) -> None:
            import io

            out = io.BytesIO()
            out.write(corr.to_bytes(4, "big"))
            entity_writer(type(entity))(out, entity)
            body = out.getvalue()
            await stream.send_all(len(body).to_bytes(4, "big") + body)

        async for frame in frames():
            api = int.from_bytes(frame[:2], "big")
            corr = int.from_bytes(frame[4:8], "big")
            cid_len = int.from_bytes(frame[8:10], "big", signed=True)
            body_at = 10 + max(cid_len, 0)
            if api == 17:
                req, _ = entity_reader(hs_req.SaslHandshakeRequest)(frame, body_at)
                mech = req.mechanism
                ok = mech in mechanisms
                await answer(
                    corr,
                    hs_resp.SaslHandshakeResponse(
                        error_code=KErr(0 if ok else 33), mechanisms=tuple(mechanisms)
                    ),
                )
                if mech.startswith("SCRAM") and ok:
                    server = scramp.ScramMechanism(mech).make_server(lambda u, m=mech: salted[m])
            elif api == 36:
                req, _ = entity_reader(auth_req.SaslAuthenticateRequest)(frame, body_at)
                error, out = 0, b""
                try:
                    if mech == "PLAIN":
                        _, u, p = req.auth_bytes.decode().split("\0")
                        if (u, p) != (user, password):
                            raise scramp.ScramException("Authentication failed")
                    elif step == 0:
                        server.set_client_first(req.auth_bytes.decode())
                        out = server.get_server_first().encode()
                    else:
                        server.set_client_final(req.auth_bytes.decode())
                        out = server.get_server_final().encode()
                except scramp.ScramException as exc:
                    error, out = 58, str(exc).encode()
                step += 1
                await answer(
                    corr,
                    auth_resp.SaslAuthenticateResponse(
                        error_code=KErr(error),
                        error_message="Authentication failed: bad credentials" if error else None,
                        auth_bytes=b"" if error else out,
                        session_lifetime=datetime.timedelta(0),
                    ),
                )

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_login_and_a_wrong_password(nursery, mechanism):
    port = await nursery.start(sasl_broker, [mechanism], "gw", "pa55")

    async def login(password: str) -> None:
        conn = BrokerConnection(
            "127.0.0.1", port, "t", 1 << 20, authenticate=SaslLogin(mechanism, "gw", password)
        )
        await conn.connect(nursery, 5)
        await conn.aclose()

    await login("pa55")
    with pytest.raises(GatewayError) as info:
        await login("wrong-secret")
    assert info.value.code is ErrorCode.BACKEND_UNAVAILABLE
    assert f"refused SASL {mechanism} login of user 'gw'" in info.value.message
    assert "wrong-secret" not in info.value.message and "wrong-secret" not in repr(
        SaslLogin(mechanism, "gw", "wrong-secret")
    )


async def test_sasl_mechanism_the_broker_does_not_offer(nursery):
    port = await nursery.start(sasl_broker, ["PLAIN"], "gw", "pa55")
    conn = BrokerConnection(
        "127.0.0.1", port, "t", 1 << 20, authenticate=SaslLogin("SCRAM-SHA-256", "gw", "pa55")
    )
    with pytest.raises(GatewayError) as info:
        await conn.connect(nursery, 5)
    assert "does not offer SCRAM-SHA-256 (offers: PLAIN)" in info.value.message


def test_config_problems_name_their_keys(tmp_path):
    problems = KafkaConfig(
        isolation="dirty", sasl_mechanism="GSSAPI", tls_cert_file=str(tmp_path / "none")
    ).validate()
    text = "\n".join(problems)
    assert "isolation: got 'dirty'" in text and "sasl_mechanism: got 'GSSAPI'" in text
    assert "tls_cert_file/tls_key_file" in text and "sasl_username" in text
