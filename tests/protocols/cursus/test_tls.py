"""The Cursus listener behind the server's optional TLS (cursus-client 0.1.1 takes TLS paths in
its configs but never passes them to its connections, so the in-repo client is the TLS client)."""

from __future__ import annotations

import ssl

import trio
import trustme

from gateway.protocols.cursus import codec
from gateway.protocols.cursus.client import CursusClient

from .conftest import cursus_gateway


async def test_cursus_over_tls(tmp_path):
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    for pem in issued.cert_chain_pems[1:]:
        pem.write_to_path(str(cert), append=True)
    issued.private_key_pem.write_to_path(str(key))
    async with cursus_gateway(tmp_path, tls_cert=str(cert), tls_key=str(key)) as (host, port):
        ctx = ssl.create_default_context()
        ca.configure_trust(ctx)
        stream = trio.SSLStream(
            await trio.open_tcp_stream(host, port), ctx, server_hostname="127.0.0.1"
        )
        async with CursusClient(stream) as c:
            assert await c.text("CREATE topic=t partitions=1") == "Topic 't' now has 1 partitions"
            ack = await c.produce("t", 0, [codec.Message(seq=1, payload=b"secret")])
            assert ack.status == "OK"
            member = (await c.text("JOIN_GROUP topic=t group=g member=m")).split()[2][7:]
            batch = await c.consume("t", 0, 0, member, group="g")
            assert [m.payload for m in batch.messages()] == [b"secret"]
