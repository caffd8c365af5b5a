"""Every command of cursus.md sections 4-7 and 9.6 with its exact success and error replies,
through the in-repo client (gateway.protocols.cursus.client) against a running gateway."""

from __future__ import annotations

import json
import re

import trio

from gateway.protocols.cursus import codec
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Ack, Batch, Keepalive, Message

from .conftest import cursus_gateway


def msg(payload: bytes, seq: int = 1, key: bytes = b"", **extra) -> Message:
    return Message(seq=seq, producer_id=b"p", key=key, payload=payload, **extra)


async def join(c: CursusClient, topic: str, group: str, member: str) -> tuple[str, int, str]:
    reply = await c.text(f"JOIN_GROUP topic={topic} group={group} member={member}")
    m = re.fullmatch(rf"OK generation=(\d+) member=({member}-\d{{4}}) assignments=(\[.*\])", reply)
    assert m, reply
    return m.group(2), int(m.group(1)), m.group(3)


async def test_topic_commands(client):
    c = client
    assert await c.text("LIST") == "(no topics)"
    assert await c.text("CREATE topic=t1", "admin") == "Topic 't1' now has 4 partitions"
    assert await c.text("CREATE topic=t1 partitions=2") == "Topic 't1' now has 4 partitions"
    assert await c.text("CREATE topic=t1 partitions=6") == "Topic 't1' now has 6 partitions"
    assert await c.text("CREATE topic=t2 partitions=3") == "Topic 't2' now has 3 partitions"
    assert await c.text("LIST") == "t1, t2"
    assert await c.text("CREATE partitions=3") == (
        "missing topic parameter. Expected: CREATE topic=<name> [partitions=<N>]"
    )
    assert await c.text("CREATE topic=x partitions=0") == "partitions must be a positive integer"
    assert await c.text("CREATE topic=x partitions=z") == "partitions must be a positive integer"
    assert await c.text("CREATE topic=x replication_factor=0") == (
        "replication_factor must be a positive integer"
    )
    desc = json.loads(await c.text("DESCRIBE topic=t2"))
    assert desc == {
        "topic": "t2",
        "partitions": [
            {"id": i, "leader": "", "replicas": None, "isr": None, "leo": 0, "hwm": 0}
            for i in range(3)
        ],
    }
    assert (await c.text("DESCRIBE topic=t2")).startswith('{\n  "topic": "t2",\n  "partitions": [')
    assert await c.text("DESCRIBE topic=nope") == "topic 'nope' not found"
    assert (
        await c.text("DESCRIBE x=1") == "missing topic parameter. Expected: DESCRIBE topic=<name>"
    )
    assert await c.text("DELETE topic=t1") == "\U0001f5d1\ufe0f Topic 't1' deleted"
    assert await c.text("DELETE topic=t1") == "topic 't1' not found"
    assert await c.text("DELETE x=1") == "missing topic parameter. Expected: DELETE topic=<name>"
    assert await c.text("LIST") == "t2"
    assert await c.text("LIST topic=x") == "ERROR: unknown command: LIST topic=x"
    assert await c.text("LIST_CLUSTER") == "ERROR: distribution not enabled"
    assert (await c.text("HELP")).startswith("Available commands:\nCREATE topic=<name>")
    assert (await c.text("HELP")).endswith("HELP - show this help\nEXIT - exit")
    # keywords are matched case-insensitively; the parameters keep their case
    assert await c.text("list") == "t2"
    # the newer dialect (docs/protocols/cursus.md): METADATA and FIND_COORDINATOR
    host, port = c.stream.socket.getpeername()[:2]
    assert await c.text("METADATA topic=t2") == (
        f"OK topic=t2 partitions=3 leaders={host}:{port},{host}:{port},{host}:{port} epochs=0,0,0"
    )
    assert await c.text("METADATA topic=zz") == "ERROR: topic_not_found topic=zz"
    assert await c.text("METADATA x=1") == "ERROR: missing_topic command=METADATA"
    assert await c.text("FIND_COORDINATOR group=g") == (
        f"OK coordinator_id=standalone host={host} port={port}"
    )
    assert await c.text("FIND_COORDINATOR x=1") == "ERROR: missing_group command=FIND_COORDINATOR"


async def test_publish(client):
    c = client
    await c.text("CREATE topic=t partitions=1")
    ack = codec.decode_ack(
        (await c.text("PUBLISH topic=t acks=1 producerId=p message=a b=c")).encode()
    )
    assert ack == Ack("OK", 0, 0, "p", 0, 0)
    raw = await c.text("PUBLISH topic=t acks=1 producerId=p seqNum=7 epoch=9 message=x")
    assert raw == (
        '{"status":"OK","last_offset":1,"producer_epoch":9,"producer_id":"p",'
        '"seq_start":7,"seq_end":7}'
    )
    assert await c.text("PUBLISH topic=t acks=0 producerId=p message=y") == "OK"
    assert await c.text("PUBLISH topic=nope acks=1 producerId=p message=y") == (
        "ERROR: topic 'nope' does not exist"
    )
    assert await c.text("PUBLISH topic=t acks=1 message=y") == "ERROR: missing producerID parameter"
    assert await c.text("PUBLISH topic=t acks=1 producerId=p") == "ERROR: missing message parameter"
    assert await c.text("PUBLISH acks=1 producerId=p message=y") == "ERROR: missing topic parameter"
    assert await c.text("PUBLISH topic=t acks=7 producerId=p message=y") == (
        "ERROR: invalid acks value: 7. Expected -1 (all), 0, or 1"
    )
    assert await c.text("PUBLISH topic=t isIdempotent=maybe producerId=p message=y") == (
        "ERROR: invalid isIdempotent value: maybe. Expected 'true' or 'false'"
    )
    assert await c.text("PUBLISH topic=t producerId=p seqNum=x message=y") == (
        'ERROR: invalid seqNum: strconv.ParseUint: parsing "x": invalid syntax'
    )
    member, _, _ = await join(c, "t", "g", "m")
    batch = await c.consume("t", 0, 0, member, group="g")
    assert [m.payload for m in batch.messages()] == [b"a b=c", b"x", b"y"]
    assert [m.offset for m in batch.messages()] == [0, 1, 2]


async def test_batches_and_acks(client):
    c = client
    await c.text("CREATE topic=b partitions=2")
    msgs = [msg(b"one", 1, b"k1"), msg(b"two", 2, b"k2", event_type=b"Created", schema_version=3,
                                    aggregate_version=4, metadata=b"{}")]  # fmt: skip
    ack = await c.produce("b", 1, msgs)
    assert ack == Ack("OK", 1, 0, "p", 1, 2)  # last_offset: the last assigned offset
    assert await c.produce("b", 1, [msg(b"three", 3)], acks="all") == Ack("OK", 2, 0, "p", 3, 3)
    assert await c.produce("b", 1, [msg(b"four", 4)], acks="0") == Ack("OK", 3, 0, "p", 4, 4)
    assert await c.produce("b", 1, [msg(b"x")], acks="zz") == (
        "ERROR: invalid acks value in batch: zz. Expected -1 (all), 0, or 1"
    )
    assert await c.produce("nope", 0, [msg(b"x")]) == "ERROR: topic_not_found topic=nope"
    assert await c.produce("b", 9, [msg(b"x")]) == "ERROR: partition_not_found partition=9"
    assert await c.produce("b", 0, []) == Ack("ERROR", error="empty batch messages")
    member, _, assignments = await join(c, "b", "g", "m")
    assert assignments == "[0 1]"
    batch = await c.consume("b", 1, 0, member, group="g")
    assert (batch.topic, batch.partition, batch.acks, batch.count) == ("b", 1, "1", 4)
    assert (batch.seq_start, batch.seq_end) == (1, 4)
    got = batch.messages()
    assert [m.offset for m in got] == [0, 1, 2, 3]
    assert got[1] == msgs[1]._replace(offset=1)  # keys and the event-sourcing fields come back
    assert (await c.consume("b", 0, 0, member, group="g")).count == 0  # header partition honoured
    # a window in the middle of a stored batch
    part = await c.consume("b", 1, 1, member, group="g", batch=1)
    assert [m.payload for m in part.messages()] == [b"two"]


async def test_idempotent_producer(client):
    c = client
    await c.text("CREATE topic=i partitions=1")
    first = [msg(b"a", 1), msg(b"b", 2)]
    assert (await c.produce("i", 0, first, idempotent=True)).status == "OK"
    retry = await c.produce("i", 0, first, idempotent=True)
    assert retry == Ack("OK", 1, 0, "p", 1, 2)  # the same offsets, not stored twice
    gap = await c.produce("i", 0, [msg(b"d", 5)], idempotent=True)
    assert gap.status == "ERROR" and gap.error.startswith("idempotency_gap")
    assert (await c.produce("i", 0, [msg(b"c", 3)], idempotent=True)) == Ack("OK", 2, 0, "p", 3, 3)
    assert '"hwm": 3' in await c.text("DESCRIBE topic=i")


async def test_consume_errors_and_long_poll(client, gw):
    c = client
    await c.text("CREATE topic=c partitions=3")
    member, generation, _ = await join(c, "c", "g", "m")
    assert await c.text("CONSUME topic=c partition=0 offset=0") == "ERROR: invalid CONSUME syntax"
    assert await c.text("CONSUME topic=zz partition=0 offset=0 member=m") == (
        "ERROR: topic 'zz' does not exist"
    )
    assert await c.text("CONSUME topic=c partition=9 offset=0 member=m group=g") == (
        "ERROR: partition 9 out of range for topic 'c' (0-2)"
    )
    assert await c.text("CONSUME topic=c partition=x offset=0 member=m") == (
        "ERROR: invalid partition value: x"
    )
    assert await c.text("CONSUME topic=c partition=0 offset=0 member=ghost group=g") == (
        "ERROR: heartbeat failed: consumer 'ghost' not found"
    )
    assert await c.text("CONSUME topic=c partition=0 offset=0 member=m group=nog") == (
        "ERROR: heartbeat failed: group 'nog' not found"
    )
    assert await c.text(f"CONSUME topic=c partition=0 offset=5 member={member} group=g") == (
        "ERROR: OFFSET_OUT_OF_RANGE requested=5 earliest=0 latest=0"
    )
    stale = await c.consume("c", 0, 0, member, group="g", generation=generation + 5)
    assert isinstance(stale, Batch) and stale.count == 0  # stale generation: empty batch
    # wait_ms long-polls until a record arrives
    async with await CursusClient.connect(*gw) as producer:

        async def later() -> None:
            await trio.sleep(0.2)
            await producer.produce("c", 2, [msg(b"late")])

        async with trio.open_nursery() as n:
            n.start_soon(later)
            batch = await c.consume("c", 2, 0, member, group="g", wait_ms=5000)
    assert [m.payload for m in batch.messages()] == [b"late"]


async def test_group_lifecycle_and_offsets(client):
    c = client
    await c.text("CREATE topic=g1 partitions=3")
    assert await c.text("JOIN_GROUP topic=g1 group=g") != ""
    assert await c.text("JOIN_GROUP topic=g1 member=m") == "JOIN_GROUP requires group parameter"
    assert await c.text("JOIN_GROUP group=g member=m") == "JOIN_GROUP requires topic parameter"
    assert await c.text("JOIN_GROUP topic=g1 group=g") == "JOIN_GROUP requires member parameter"
    assert await c.text("JOIN_GROUP topic=zz group=new member=m") == "topic 'zz' not found"
    alice, gen1, a1 = await join(c, "g1", "grp", "alice")
    assert (gen1, a1) == (1, "[0 1 2]")
    bob, gen2, b2 = await join(c, "g1", "grp", "bob")
    assert (gen2, b2) == (2, "[2]")
    assert await c.text(f"SYNC_GROUP topic=g1 group=grp member={alice} generation=1") == (
        "OK assignments=[0 1]"
    )
    assert await c.text("SYNC_GROUP topic=g1 group=grp member=who") == "OK assignments=[]"
    assert await c.text("SYNC_GROUP topic=g1 group=nog member=who") == (
        "member who not found in group or no assignments"
    )
    # rebalance tokens on HEARTBEAT (docs/protocols/cursus.md)
    assert await c.text(f"HEARTBEAT topic=g1 group=grp member={bob} generation=2") == "OK"
    assert await c.text(f"HEARTBEAT topic=g1 group=grp member={alice} generation=1") == (
        f"ERROR: GEN_MISMATCH current=2 requested=1 group=grp member={alice}"
    )
    assert await c.text("HEARTBEAT topic=g1 group=grp member=who generation=2") == (
        "ERROR: member_not_found member=who group=grp"
    )
    assert await c.text("HEARTBEAT topic=g1 group=nog member=who") == (
        "ERROR: group_not_found group=nog"
    )
    assert await c.text("HEARTBEAT topic=g1 group=grp") == "HEARTBEAT requires member parameter"
    # commits: the April form, the newer clients' ownership check, batch commits
    assert await c.text("COMMIT_OFFSET topic=g1 partition=0 group=grp offset=5") == "OK"
    assert await c.text("FETCH_OFFSET topic=g1 partition=0 group=grp") == "OK offset=5"
    assert await c.text("FETCH_OFFSET topic=g1 partition=1 group=grp") == "OK offset=0"
    assert (
        await c.text(
            f"COMMIT_OFFSET topic=g1 partition=2 group=grp offset=1 generation=2 member={alice}"
        )
        == f"ERROR: NOT_OWNER partition=2 member={alice} group=grp generation=2"
    )
    assert (
        await c.text(
            f"COMMIT_OFFSET topic=g1 partition=0 group=grp offset=1 generation=1 member={alice}"
        )
        == f"ERROR: GEN_MISMATCH current=2 requested=1 group=grp member={alice}"
    )
    assert await c.text("COMMIT_OFFSET topic=other partition=0 group=grp offset=1") == (
        "ERROR topic_not_assigned_to_group: g1 other"
    )
    assert await c.text("COMMIT_OFFSET topic=g1 partition=0 group=nog offset=1") == (
        "ERROR: group 'nog' not found"
    )
    assert await c.text("COMMIT_OFFSET topic=g1 partition=0 offset=1") == (
        "COMMIT_OFFSET requires groupID parameter"
    )
    assert await c.text("COMMIT_OFFSET topic=g1 partition=x group=grp offset=1") == (
        "invalid partition"
    )
    assert await c.text("COMMIT_OFFSET topic=g1 partition=0 group=grp offset=-1") == (
        "invalid offset"
    )
    assert (
        await c.text(
            f"BATCH_COMMIT topic=g1 group=grp member={alice} generation=2 P0:10,P1:20,P2:30"
        )
        == "OK batched=2"
    )
    assert (
        await c.text(f"BATCH_COMMIT topic=g1 group=grp member={alice} generation=1 P0:11")
        == "ERROR: no_valid_offsets"
    )
    assert await c.text("FETCH_OFFSET topic=g1 partition=1 group=grp") == "OK offset=20"
    assert await c.text("FETCH_OFFSET topic=g1 partition=2 group=grp") == "OK offset=0"
    assert await c.text("FETCH_OFFSET topic=g1 partition=0 group=nog") == (
        "ERROR: group_not_found group=nog"
    )
    assert await c.text("FETCH_OFFSET topic=zz partition=0 group=grp") == (
        "ERROR: topic_not_assigned_to_group expected=g1 actual=zz"
    )
    assert await c.text("FETCH_OFFSET topic=g1 group=grp") == (
        "FETCH_OFFSET requires partition parameter"
    )
    status = json.loads(await c.text("GROUP_STATUS group=grp"))
    assert {k: status[k] for k in ("group_name", "topic_name", "state", "generation")} == {
        "group_name": "grp", "topic_name": "g1", "state": "Stable", "generation": 2,
    }  # fmt: skip
    assert (status["member_count"], status["partition_count"]) == (2, 3)
    assert sorted((m["member_id"], m["assignments"]) for m in status["members"]) == [
        (alice, [0, 1]),
        (bob, [2]),
    ]
    assert await c.text("GROUP_STATUS group=nog") == "ERROR: group 'nog' not found"
    assert await c.text("GROUP_STATUS x=1") == "GROUP_STATUS requires group parameter"
    # leave: generation 3, bob gets everything; unknown members leave too
    assert (
        await c.text(f"LEAVE_GROUP topic=g1 group=grp member={alice}") == "\u2705 Left group 'grp'"
    )
    assert await c.text("LEAVE_GROUP topic=g1 group=grp member=who") == "\u2705 Left group 'grp'"
    assert (
        await c.text("LEAVE_GROUP group=grp member=who") == "LEAVE_GROUP requires topic parameter"
    )
    assert await c.text(f"SYNC_GROUP topic=g1 group=grp member={bob}") == "OK assignments=[0 1 2]"
    assert json.loads(await c.text("GROUP_STATUS group=grp"))["generation"] == 3
    # REGISTER_GROUP
    assert (
        await c.text("REGISTER_GROUP topic=g1 group=reg")
        == "\u2705 Group 'reg' registered for topic 'g1'"
    )
    assert await c.text("REGISTER_GROUP topic=zz group=reg2") == "topic 'zz' does not exist"
    assert await c.text("REGISTER_GROUP topic=g1") == "REGISTER_GROUP requires group parameter"
    assert await c.text("FETCH_OFFSET topic=g1 partition=0 group=reg") == "OK offset=0"


async def test_fetch_offset_integer_dialect(tmp_path):
    async with cursus_gateway(tmp_path, fetch_offset_reply="integer") as addr:
        async with await CursusClient.connect(*addr) as c:
            await c.text("CREATE topic=t partitions=1")
            await c.text("REGISTER_GROUP topic=t group=g")
            assert await c.text("FETCH_OFFSET topic=t partition=0 group=g") == "0"
            assert await c.text("COMMIT_OFFSET topic=t partition=0 group=g offset=4") == "OK"
            assert await c.text("FETCH_OFFSET topic=t partition=0 group=g") == "4"
            assert await c.text("FETCH_OFFSET topic=t partition=0 group=x") == (
                "ERROR group_not_found: x"
            )
            assert await c.text("FETCH_OFFSET topic=u partition=0 group=g") == (
                "ERROR topic_not_assigned_to_group: t u"
            )


async def test_session_timeout_rebalances(tmp_path):
    async with cursus_gateway(tmp_path, session_timeout_ms=1500) as addr:
        async with await CursusClient.connect(*addr) as c:
            await c.text("CREATE topic=t partitions=2")
            a, _, _ = await join(c, "t", "g", "a")
            b, gen, _ = await join(c, "t", "g", "b")
            assert gen == 2
            hb = f"HEARTBEAT topic=t group=g member={a} generation=2"
            with trio.fail_after(10):  # a heartbeats, b goes silent and times out
                while (reply := await c.text(hb)) == "OK":
                    await trio.sleep(0.05)
            assert reply == f"ERROR: GEN_MISMATCH current=3 requested=2 group=g member={a}"
            assert b not in await c.text("GROUP_STATUS group=g")
            assert await c.text(f"SYNC_GROUP topic=t group=g member={a}") == "OK assignments=[0 1]"


async def test_stream_pushes_keepalives_and_commits(tmp_path):
    async with cursus_gateway(
        tmp_path, stream_keepalive_ms=200, stream_commit_interval_ms=200
    ) as addr:
        async with await CursusClient.connect(*addr) as c:
            await c.text("CREATE topic=s partitions=1")
            member, gen, _ = await join(c, "s", "g", "m")
            assert await c.text("STREAM topic=s partition=0") == "ERROR: invalid STREAM syntax"
            assert await c.text(f"STREAM topic=s partition=0 group=g member={member}") == (
                "ERROR: not partition owner or generation mismatch"
            )
            await c.produce("s", 0, [msg(b"a", 1), msg(b"b", 2)])
            async with await CursusClient.connect(*addr) as s:
                await s.send_body(codec.encode_text(
                    f"STREAM topic=s partition=0 group=g member={member} generation={gen}"
                ))  # fmt: skip
                first = await s.read_reply()
                assert isinstance(first, Batch) and [m.offset for m in first.messages()] == [0, 1]
                await c.produce("s", 0, [msg(b"c", 3)])
                pushed = await s.read_reply()
                assert isinstance(pushed, Batch) and [m.payload for m in pushed.messages()] == [
                    b"c"
                ]
                assert isinstance(await s.read_reply(), Keepalive)
                # the stream commits its position periodically
                with trio.fail_after(5):
                    while await c.text("FETCH_OFFSET topic=s partition=0 group=g") != "OK offset=3":
                        await trio.sleep(0.05)
                # a rebalance takes the partition away: STREAM_CONTROL, then the close
                other, _, _ = await join(c, "s", "g", "a-other")  # sorts first: gets partition 0
                with trio.fail_after(5):
                    while True:
                        reply = await s.read_reply()
                        if not isinstance(reply, Keepalive):
                            break
                assert reply == "STREAM_CONTROL type=CLOSE reason=removed offset=3"
                assert await s.read_reply() is None
                assert other


async def test_unknown_and_malformed_commands(client, gw):
    c = client
    assert await c.text("CREATEX topic=t") == "ERROR: unknown command: CREATEX topic=t"
    assert await c.text("LIST_GROUPS") == "ERROR: unknown command: LIST_GROUPS"
    assert (await c.text("APPEND_STREAM topic=t key=k version=1 message=x")).startswith("ERROR: ")
    # not a command: the broker answers and closes the connection
    assert await c.text("SUBSCRIBE topic=t") == "ERROR: malformed input - missing topic or payload"
    assert await c.read_frame() is None
    async with await CursusClient.connect(*gw) as bare:
        assert await bare.text("EXIT") == "ERROR: malformed input - missing topic or payload"
        assert await bare.read_frame() is None
    # a bare command without the envelope works; bare garbage is dropped without a reply
    async with await CursusClient.connect(*gw) as bare:
        await bare.stream.send_all(codec.frame(b"LIST"))
        assert await bare.read_frame() == b"(no topics)"
        await bare.stream.send_all(codec.frame(b"hello"))
        assert await bare.read_frame() is None


async def test_positional_form_of_the_java_document(client):
    c = client
    assert await c.text("CREATE pos 2") == "Topic 'pos' now has 2 partitions"
    member, generation, assignments = await join(c, "pos", "pg", "m")  # key=value still works
    assert assignments == "[0 1]"
    joined = await c.text("JOIN_GROUP pos pg n")
    assert joined.startswith("OK generation=2 member=n-")
    assert await c.text(f"SYNC_GROUP pos pg {member} 2") == "OK assignments=[0]"
    assert await c.text(f"HEARTBEAT pos pg consumer {member} 2") == "OK"
    assert await c.text(f"HEARTBEAT pos pg {member}") == "OK"
    assert await c.text("COMMIT pos pg 0 7") == "OK"
    assert await c.text("FETCH_OFFSET pos 0 pg") == "OK offset=7"
    assert await c.text(f"BATCH_COMMIT pos pg {member} 2 P0:9") == "OK batched=1"
    assert await c.text("FETCH_OFFSET pos 0 pg") == "OK offset=9"
    assert (await c.consume("pos", 0, 0, member, group="pg")).count == 0
    assert await c.text(f"CONSUME pos 0 0 {member}") != "ERROR: invalid CONSUME syntax"
    assert await c.text("CONSUME pos 0 0") == "ERROR: invalid CONSUME syntax"  # no member
    assert await c.text(f"LEAVE_GROUP pos pg {member}") == "\u2705 Left group 'pg'"
    assert await c.text("DELETE pos") == "\U0001f5d1\ufe0f Topic 'pos' deleted"
    # SUBSCRIBE is in the Java document only: the broker has no such command
    assert await c.text("SUBSCRIBE pos pg") == "ERROR: malformed input - missing topic or payload"
