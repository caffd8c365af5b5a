"""``max_answer_bytes`` on the Cursus listener: a CONSUME or STREAM answer never grows past it,
whatever ``batch=`` asks for; the rest comes with the next request or push. Hostile-client
shape: a real gateway process, a bystander on the admin port, a bounded footprint."""

from __future__ import annotations

import urllib.request

import trio

from gateway.protocols.cursus import codec
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Batch, Keepalive, Message
from tests.reliability.hostile import Bystander, Footprint
from tests.support import GatewayProcess

CAP = 100_000
PAYLOAD = 9_000  # 11 messages fit in CAP


def hits(gw: GatewayProcess) -> float:
    text = urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith("gateway_limit_hits_total{") and 'limit="max_answer_bytes"' in line:
            if 'protocol="cursus"' in line:
                return float(line.rsplit(" ", 1)[1])
    return 0.0


async def fill(c: CursusClient) -> None:
    await c.text("CREATE topic=big partitions=1", "admin")
    for b in range(3):  # 3 batches of 40 messages: each batch alone is over the cap
        msgs = [Message(seq=b * 40 + i + 1, payload=bytes([65 + b]) * PAYLOAD) for i in range(40)]
        ack = await c.produce("big", 0, msgs)
        assert not isinstance(ack, str) and ack.status == "OK", ack


async def consume_all(c: CursusClient, member: str) -> list[int]:
    offsets: list[int] = []
    while len(offsets) < 120:
        cmd = f"CONSUME topic=big partition=0 offset={len(offsets)} member={member} group=g"
        await c.send_body(codec.encode_text(cmd + " batch=100000"))
        body = await c.read_frame()
        assert body is not None and len(body) + 4 <= CAP, len(body or b"")
        reply = codec.decode_reply(body)
        assert isinstance(reply, Batch) and reply.count > 0, reply
        offsets += [m.offset for m in reply.messages()]
    return offsets


async def stream_all(c: CursusClient, member: str, generation: int) -> list[int]:
    await c.send_body(codec.encode_text(
        f"STREAM topic=big partition=0 group=g member={member} generation={generation} offset=0"
    ))  # fmt: skip
    offsets: list[int] = []
    with trio.fail_after(30):
        while len(offsets) < 120:
            body = await c.read_frame()
            assert body is not None and len(body) + 4 <= CAP, len(body or b"")
            reply = codec.decode_reply(body)
            if isinstance(reply, Keepalive):
                continue
            assert isinstance(reply, Batch), reply
            offsets += [m.offset for m in reply.messages()]
    return offsets


def test_consume_and_stream_answers_stay_within_max_answer_bytes(tmp_path):
    listeners = {"cursus": {"max_answer_bytes": CAP}}
    with GatewayProcess(tmp_path, listeners=listeners) as gw:
        baseline = Footprint.of(gw)
        before = hits(gw)

        async def attack() -> None:
            async with await CursusClient.connect(*gw.address("cursus")) as c:
                await fill(c)
                reply = await c.text("JOIN_GROUP topic=big group=g member=m")
                words = dict(w.split("=", 1) for w in reply.split()[1:])
                assert await consume_all(c, words["member"]) == list(range(120))
            async with await CursusClient.connect(*gw.address("cursus")) as c:
                got = await stream_all(c, words["member"], int(words["generation"]))
                assert got == list(range(120))

        with Bystander(gw) as bystander:
            trio.run(attack)
        bystander.check()
        Footprint.of(gw).check_within(baseline)
        assert hits(gw) > before
