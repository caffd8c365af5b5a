from gateway.protocols.cursus import codec


async def test_create_list_produce_consume(client):
    reply = await client.text("CREATE topic=t partitions=2", "admin")
    assert reply == "Topic 't' now has 2 partitions"
    assert await client.text("LIST") == "t"
    ack = await client.produce("t", 1, [codec.Message(seq=1, producer_id=b"p", payload=b"hi")])
    assert ack.status == "OK", ack
    join = await client.text("JOIN_GROUP topic=t group=g member=m")
    member = join.split("member=")[1].split()[0]
    batch = await client.consume("t", 1, 0, member, group="g")
    assert [m.payload for m in batch.messages()] == [b"hi"]
