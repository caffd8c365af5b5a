"""The current broker's dialect (``dialect = "2026-08"``): the exchanges of vectors_2026_08.py
replayed byte for byte in both roles (the gateway as the broker, the in-repo client as the SDK),
and the per-connection choice of ``dialect = "auto"``."""

from __future__ import annotations

import json
import re

import pytest
import trio
import trio.testing

from gateway.config import ConfigError, parse_config
from gateway.protocols.cursus import codec
from gateway.protocols.cursus.client import CursusClient, CursusError, Joined
from gateway.protocols.cursus.codec import FrameBuffer, Message
from gateway.protocols.cursus.dialect import marks_2026_08
from gateway.protocols.cursus.gotext import go_parse_error, go_quote
from tests.support import make_config

from .conftest import cursus_gateway
from .vectors_2026_08 import DEFAULT_POLICY, SCENARIO


def envelope(request: str) -> str:
    return "admin" if request.startswith("CREATE") else ""


def fill(text: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


async def replay(c: CursusClient, host: str, port: int) -> dict[str, str]:
    """Send every request of the scenario; compare each reply byte for byte."""
    members: dict[str, str] = {}
    where = {"host": host, "port": str(port), "addr": f"{host}:{port}"}
    for request, reply in SCENARIO:
        request = fill(request, members)
        reply = fill(reply, where)
        await c.send_body(codec.encode_text(request, envelope(request)))
        got = (await c.read_frame() or b"").decode()
        pattern = re.escape(reply)
        for name in ("m1", "m2"):
            if "{" + name + "}" not in reply:
                continue
            if name in members:
                pattern = pattern.replace(re.escape("{" + name + "}"), re.escape(members[name]))
            else:  # the first JOIN_GROUP reply that shows it hands it out
                member = request.split("member=")[1].split()[0]
                pattern = pattern.replace(
                    re.escape("{" + name + "}"), f"(?P<{name}>{re.escape(member)}-[0-9]{{4}})", 1
                ).replace(re.escape("{" + name + "}"), f"(?P={name})")
        pattern = pattern.replace(re.escape("{ts}"), r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z")
        m = re.fullmatch(pattern, got)
        assert m, f"{request!r}: got {got!r}, expected {reply!r}"
        members.update({k: v for k, v in m.groupdict().items() if v})
    return members


async def test_gateway_answers_the_2026_vectors(tmp_path):
    async with cursus_gateway(tmp_path, dialect="2026-08") as addr:
        async with await CursusClient.connect(*addr) as c:
            members = await replay(c, *addr)
    assert set(members) == {"m1", "m2"}


async def test_auto_switches_a_connection_on_the_current_sdks_create(tmp_path):
    async with cursus_gateway(tmp_path) as addr:  # dialect = "auto" (the default)
        async with await CursusClient.connect(*addr) as new:
            # the connection answers in the current dialect once its CREATE said idempotent=
            await replay(new, *addr)
        async with await CursusClient.connect(*addr) as old:
            # the older SDK and cursus-client 0.1.1 send CREATE without idempotent=
            assert await old.text("CREATE topic=t partitions=2", "admin") == (
                "Topic 't' now has 2 partitions"
            )
            reply = await old.text("JOIN_GROUP topic=t group=g member=a")
            member = reply.split("member=")[1].split()[0]
            assert await old.text(f"HEARTBEAT topic=t group=g member={member}") == "OK"
            assert await old.text("LEAVE_GROUP topic=t group=g member=nobody") == (
                "\u2705 Left group 'g'"
            )
            assert await old.text("LIST") == "orders, t"


async def test_a_fixed_2026_04_dialect_ignores_the_markers(tmp_path):
    async with cursus_gateway(tmp_path, dialect="2026-04") as addr:
        async with await CursusClient.connect(*addr) as c:
            assert await c.text("CREATE topic=t partitions=2 idempotent=false", "admin") == (
                "Topic 't' now has 2 partitions"
            )
            assert await c.text("FETCH_OFFSET topic=t partition=0") == (
                "FETCH_OFFSET requires group parameter"
            )


def test_dialect_option_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="dialect.*'2024'.*expected one of"):
        parse_config(make_config(tmp_path, {"cursus": {"dialect": "2024"}}))


def test_markers_and_go_quote():
    assert marks_2026_08("CREATE TOPIC=T IDEMPOTENT=FALSE", "CREATE topic=t idempotent=false")
    assert not marks_2026_08("CREATE TOPIC=T PARTITIONS=2", "CREATE topic=t partitions=2")
    assert marks_2026_08("LEAVE_GROUP T", "LEAVE_GROUP topic=t group=g member=m generation=3")
    assert not marks_2026_08("LEAVE_GROUP T", "LEAVE_GROUP topic=t group=g member=m")
    assert not marks_2026_08("CONSUME T", "CONSUME topic=t partition=0 offset=0 member=m batch=10")
    assert not marks_2026_08("HEARTBEAT T", "HEARTBEAT topic=t group=g member=m generation=1")
    assert go_quote('a"b\\c\n\x01é') == '"a\\"b\\\\c\\n\\x01é"'
    assert go_parse_error("ParseUint", "-1") == 'strconv.ParseUint: parsing "-1": invalid syntax'
    assert go_parse_error("Atoi", "9" * 20) == (
        f'strconv.Atoi: parsing "{"9" * 20}": value out of range'
    )


# ---------------------------------------------------------------------- the client role


class ScriptedBroker:
    """Answers each request with the scenario's next reply for exactly that request (m1/m2
    fixed; a request sent again gets its next occurrence's reply), and fails the test on a
    request the scenario does not contain."""

    def __init__(self, members: dict[str, str]) -> None:
        self.replies: dict[tuple[str, str], list[str]] = {}
        for request, reply in SCENARIO:
            request, reply = fill(request, members), fill(reply, members)
            self.replies.setdefault((envelope(request), request), []).append(reply)
        self.seen: list[str] = []

    async def serve(self, stream: trio.abc.Stream) -> None:
        buf = FrameBuffer()
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            buf.feed(data)
            while (body := buf.next_frame()) is not None:
                cmd = codec.decode_text(body)
                self.seen.append(cmd.text)
                reply = self.replies[(cmd.envelope or "", cmd.text)].pop(0)
                await stream.send_all(codec.frame(reply.encode()))


async def test_in_repo_client_speaks_2026_against_the_vectors():
    m1, m2 = "c1-0042", "c2-0007"
    broker = ScriptedBroker({"m1": m1, "m2": m2})
    client_end, broker_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.serve, broker_end)
        c = CursusClient(client_end, dialect="2026-08")
        assert await c.create_topic("orders", 2) == f"OK topic=orders partitions=2 {DEFAULT_POLICY}"
        with pytest.raises(CursusError) as err:
            await c.fetch_offset("orders", 0, "g1")
        assert (err.value.code, err.value.fields) == ("group_not_found", {"group": "g1"})
        assert await c.join_group("orders", "g1", "c1") == Joined(1, m1, [0, 1])
        assert await c.sync_group("orders", "g1", m1, 1) == [0, 1]
        assert await c.heartbeat("orders", "g1", m1, 1) == f"OK member={m1} generation=1"
        assert await c.fetch_offset("orders", 0, "g1") == 0
        assert await c.commit_offset("orders", 0, "g1", 5, 1, m1) == "OK"
        assert await c.fetch_offset("orders", 0, "g1") == 5
        with pytest.raises(CursusError) as err:
            await c.commit_offset("orders", 0, "g1", 3, 1, m1)
        assert err.value.code == "offset_regression"
        assert await c.batch_commit("orders", "g1", 1, m1, {1: 2, 0: 6}) == "OK batched=2"
        resumed = await c.join_group("orders", "g1", m1, generation=1)
        assert resumed == Joined(1, m1, [0, 1])
        assert await c.join_group("orders", "g1", "c2") == Joined(2, m2, [1])
        with pytest.raises(CursusError) as err:
            await c.heartbeat("orders", "g1", m1, 1)
        assert err.value.code == "GEN_MISMATCH"
        assert err.value.fields["current"] == "2"
        assert await c.sync_group("orders", "g1", m1, 2) == [0]
        assert await c.leave_group("orders", "g1", m2, 2) == f"OK group=g1 member={m2} left=true"
        await c.aclose()
        nursery.cancel_scope.cancel()
    assert broker.seen[0] == "CREATE topic=orders partitions=2 idempotent=false"
    assert broker.seen[-1] == f"LEAVE_GROUP topic=orders group=g1 member={m2} generation=2"


def test_cursus_error_reads_tokens_and_fields():
    e = CursusError("ERROR: GEN_MISMATCH current=2 requested=1 group=g member=m")
    assert (e.code, e.fields["current"], e.fields["member"]) == ("GEN_MISMATCH", "2", "m")
    e = CursusError('ERROR: offset_regression reason="offset regression group=g current=5 got=3"')
    assert e.code == "offset_regression"
    assert e.fields == {"reason": "offset regression group=g current=5 got=3"}
    assert CursusError("ERROR: invalid_partition").code == "invalid_partition"
    assert CursusError("ERROR: group 'g' not found").code == ""  # an older-dialect sentence


async def test_batches_on_a_2026_08_listener(tmp_path):
    """produce_handler.go HandleBatchMessage (standalone): decode errors and bad acks as tokens,
    acks 0 answered with a bare OK, an empty batch a broker_error; the JSON ack is unchanged."""

    def body(acks: str = "1", messages: int = 1) -> bytes:
        msgs = [Message(seq=i + 1, producer_id=b"p", payload=b"xyz") for i in range(messages)]
        return codec.encode_batch(codec.make_batch("orders", 0, msgs, acks=acks))

    async def send(c: CursusClient, data: bytes) -> bytes:
        await c.send_body(data)
        return await c.read_frame() or b""

    async with cursus_gateway(tmp_path, dialect="2026-08") as addr:
        async with await CursusClient.connect(*addr) as c:
            await c.text("CREATE topic=orders partitions=1 idempotent=false", "admin")
            assert await send(c, body()) == (
                b'{"status":"OK","last_offset":0,"producer_epoch":0,"producer_id":"p",'
                b'"seq_start":1,"seq_end":1}'
            )
            assert await send(c, body(acks="0")) == b"OK"
            assert await send(c, body(acks="2")) == b"ERROR: invalid_acks value=2"
            assert await send(c, body()[:-20]) == (
                b'ERROR: batch_decode_failed reason="failed to read message[0] payload length: '
                b'unexpected EOF"'
            )
            assert await send(c, body(messages=0)) == (
                b'ERROR: broker_error reason="empty batch messages"'
            )
            assert await send(c, body(acks="0", messages=0)) == b"OK"
            desc = json.loads(await c.text("DESCRIBE topic=orders"))
            assert desc["partitions"][0]["hwm"] == 2
