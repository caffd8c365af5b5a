"""Security with real clients: per-listener topic ACLs (kcat on Kafka 0.8 sees a denied topic as
unknown; the Cursus client gets an authorization error), counted and logged; no secret in logs."""

from __future__ import annotations

import subprocess
import urllib.request

import trio

from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Message
from tests.protocols.iggy.test_iggy_py import drive
from tests.protocols.kafka08.conftest import metric
from tests.support import GatewayProcess

KAFKA08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]
ACL = {"read_allow": ["open.*"], "write_allow": ["open.*"], "write_deny": ["open.ro"]}


def kcat(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kcat", *args, *KAFKA08], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_kafka08_listener_acl_hides_denied_topics(tmp_path) -> None:
    listeners = {"kafka08": ACL, "cursus": {}}
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        bs = "{}:{}".format(*gw.address("kafka08"))
        ok = kcat("-b", bs, "-P", "-t", "open.data", "-p", "0", stdin="fine\n")
        assert ok.returncode == 0, ok.stderr
        # librdkafka waits topic.metadata.propagation.max.ms (30 s) for an unknown topic to
        # appear before it fails the message; the answer is the same after one second
        denied = kcat(
            *("-b", bs, "-P", "-t", "closed", "-p", "0"),
            *("-X", "topic.metadata.propagation.max.ms=1000"),
            stdin="nope\n",
        )
        assert denied.returncode != 0
        assert "Unknown topic" in denied.stderr or "unknown topic" in denied.stderr.lower()
        assert metric(gw, "gateway_acl_denied_total", protocol="kafka08") >= 1
        assert '"event": "acl_denied"' in gw.log_text()
        listing = kcat("-b", bs, "-L")
        assert "open.data" in listing.stdout and "closed" not in listing.stdout

        async def over_cursus() -> str:
            async with await CursusClient.connect(*gw.address("cursus")) as client:
                await client.text("CREATE topic=closed partitions=1")
                return await client.produce("closed", 0, [Message(payload=b"x")])

        # the Cursus listener has no ACL: the same topic is writable there
        assert trio.run(over_cursus).status == "OK"


def test_cursus_listener_acl_answers_an_authorization_error(tmp_path) -> None:
    with GatewayProcess(tmp_path, listeners={"cursus": ACL}) as gw:
        req = urllib.request.Request(  # the admin API is not behind the listener's ACL
            gw.admin_url + "/v1/topics",
            data=b'{"name": "open.ro", "partitions": 1}',
            headers={"content-type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=10).close()

        async def scenario() -> tuple[object, object]:
            async with await CursusClient.connect(*gw.address("cursus")) as client:
                created = await client.text("CREATE topic=secret partitions=1")
                produced = await client.produce("open.ro", 0, [Message(payload=b"x")])
                return created, produced

        created, produced = trio.run(scenario)
        assert "not allowed" in str(created)
        assert "not allowed" in str(produced)
        assert metric(gw, "gateway_acl_denied_total", protocol="cursus", operation="write") == 2


def test_iggy_passwords_never_reach_the_log(tmp_path) -> None:
    secret = "s3cr3t-Pa55word"
    users = [{"username": "iggy", "password": secret}]
    with GatewayProcess(tmp_path, listeners={"iggy": {"users": users}}) as gw:
        try:
            drive(gw.address("iggy"), "next")
        except AssertionError:
            pass  # the driver logs in as iggy/iggy: refused, which is what we want logged
        log = gw.log_text()
        assert "iggy" in log
        assert secret not in log
