"""The pipeline's admin client and the binary record format, against a running gateway."""

from __future__ import annotations

import base64
import http.client
import json
import struct

import pytest

from gateway.canonical import (
    CANONICAL,
    HEADER,
    VERSION,
    VERSION_STARTS,
    check_block,
    without_starts,
)
from gateway.pipeline.client import (
    GatewayClient,
    GatewayClientError,
    columns_to_records,
    decode_binary_fetch,
)
from gateway.pipeline.columnar import decode_fetch_arrow
from gateway.pipeline.source import arrow_schema
from tests.pipeline.records import BASE_TS, as_tuple, make_records


def test_binary_and_json_fetch_agree(client: GatewayClient, bootstrap: str, topic: str) -> None:
    recs = make_records(500)
    client.create_topic(topic, 2)
    assert client.produce_batch(topic, recs[:300], 0) == 300
    # the JSON produce path (the documented API) for the rest
    assert (
        client.produce(topic, [(r.key, r.value, r.headers, r.timestamp_us, 1) for r in recs[300:]])
        == 200
    )
    with GatewayClient(bootstrap, wire_format="json") as jclient:
        for p, expect in ((0, recs[:300]), (1, recs[300:])):
            binary = client.fetch(topic, p, 0, max_records=1000).records
            js = jclient.fetch(topic, p, 0, max_records=1000).records
            assert binary == js
            assert [as_tuple(r) for r in binary] == [as_tuple(r) for r in expect]
            assert [r.offset for r in binary] == list(range(len(expect)))


def test_fetch_from_the_middle_and_limits(client: GatewayClient, topic: str) -> None:
    recs = make_records(100)
    client.create_topic(topic, 1)
    for i in range(0, 100, 10):  # ten stored blocks, so fetches start inside and across them
        client.produce_batch(topic, recs[i : i + 10], 0)
    cols, hw, lso = client.fetch_columns(topic, 0, 15, max_records=20)
    assert (hw, lso) == (100, 0)
    assert cols.offsets == list(range(15, 35))
    assert cols.values == [r.value for r in recs[15:35]]
    cols.truncate(3)
    assert cols.offsets == [15, 16, 17] and len(cols.header_counts) == 3
    assert len(cols.header_names) == sum(cols.header_counts)
    empty, hw, _ = client.fetch_columns(topic, 0, 100)
    assert len(empty) == 0 and hw == 100


def test_offsets_by_time(client: GatewayClient, topic: str) -> None:
    client.create_topic(topic, 1)
    client.produce_batch(topic, make_records(10), 0)  # timestamps BASE_TS + i ms
    assert client.offsets_for_time(topic, BASE_TS + 4000) == {0: 4}
    assert client.offsets_for_time(topic, BASE_TS + 3500) == {0: 4}
    assert client.offsets_for_time(topic, BASE_TS + 10**9) == {0: 10}


def test_binary_produce_without_partition_hashes_keys(client: GatewayClient, topic: str) -> None:
    from gateway.model import Record

    client.create_topic(topic, 4)
    recs = [Record(b"same-key", b"v%d" % i, (), BASE_TS) for i in range(20)]
    assert client.produce_batch(topic, recs) == 20
    counts = [o.high_watermark for o in client.offsets(topic)]
    assert sorted(counts) == [0, 0, 0, 20]


def test_binary_produce_rejects_a_bad_block(bootstrap: str, topic: str) -> None:
    host, port = bootstrap.split(":")
    good = CANONICAL.encode(make_records(3))
    for body in (b"", b"\x01garbage", good[:-1], good + b"x"):
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("POST", f"/v1/topics/{topic}/records?format=binary", body=body)
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        conn.close()
        assert resp.status == 400, body
        assert "canonical" in answer["error"] or "no records" in answer["error"]
    with GatewayClient(bootstrap) as c, pytest.raises(GatewayClientError):
        c.offsets(topic)  # nothing was created by the rejected requests


def test_json_api_still_answers_json(bootstrap: str, client: GatewayClient, topic: str) -> None:
    client.create_topic(topic, 1)
    client.produce_batch(topic, make_records(2), 0)
    with GatewayClient(bootstrap, wire_format="json") as c:
        recs = c._json("GET", f"/v1/topics/{topic}/records?partition=0&offset=0")["records"]
    assert base64.b64decode(recs[1]["value"]) == make_records(2)[1].value


def raw_blocks(client: GatewayClient, topic: str, offset: int, starts: bool) -> list[bytes]:
    """The canonical blocks of one binary fetch answer of partition 0."""
    data = client.fetch_binary(topic, 0, offset, 1000, starts=starts)
    (n,) = struct.unpack_from("<I", data, 16)
    pos, out = 20, []
    for _ in range(n):
        _, length = struct.unpack_from("<qI", data, pos)
        out.append(data[pos + 12 : pos + 12 + length])
        pos += 12 + length
    return out


def test_tables_go_only_to_readers_that_ask(client: GatewayClient, topic: str) -> None:
    """Stored blocks have start tables (the gateway made them while checking the produced
    body); ``&starts=1`` gets them as stored, a reader that predates them gets version 1."""
    recs = make_records(120)
    client.create_topic(topic, 1)
    client.produce_batch(topic, recs[:50], 0)
    client.produce_batch(topic, recs[50:], 0)
    new = raw_blocks(client, topic, 0, starts=True)
    old = raw_blocks(client, topic, 0, starts=False)
    assert [b[0] for b in new] == [VERSION_STARTS] * 2 and [b[0] for b in old] == [VERSION] * 2
    assert [without_starts(b) for b in new] == old
    assert [check_block(b)[0] for b in new] == new  # the tables are what a walk finds
    for starts in (True, False):
        data = client.fetch_binary(topic, 0, 0, 1000, starts=starts)
        assert [as_tuple(r) for r in columns_to_records(decode_binary_fetch(data)[0])] == [
            as_tuple(r) for r in recs
        ]
        page = decode_fetch_arrow(data, topic, 0, 10**9, arrow_schema())
        assert [r["offset"] for r in page.batch.to_pylist()] == list(range(120))
    # a window inside a stored block is cut out by its table, as version 1
    [window, whole] = raw_blocks(client, topic, 30, starts=True)
    assert window[0] == VERSION and whole[0] == VERSION_STARTS
    assert [as_tuple(r) for r in client.fetch(topic, 0, 30, 1000).records] == [
        as_tuple(r) for r in recs[30:]
    ]


def test_binary_produce_takes_both_versions_and_refuses_wrong_tables(
    bootstrap: str, client: GatewayClient, topic: str
) -> None:
    host, port = bootstrap.split(":")
    recs = make_records(30)
    client.create_topic(topic, 1)

    def post(body: bytes) -> tuple[int, dict]:
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request("POST", f"/v1/topics/{topic}/records?format=binary&partition=0", body=body)
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        conn.close()
        return resp.status, answer

    v3 = CANONICAL.encode(recs[:10])
    assert post(v3)[0] == 200
    assert post(CANONICAL.encode(recs[10:20], starts=False))[0] == 200
    bad = bytearray(CANONICAL.encode(recs[20:]))
    struct.pack_into("<I", bad, HEADER.size + 8, 3)
    status, answer = post(bytes(bad))
    assert status == 400 and "record start table says record 2 starts at 3" in answer["error"]
    assert client.offsets(topic)[0].high_watermark == 20  # nothing of the bad body was stored
    assert raw_blocks(client, topic, 0, starts=True)[0] == v3  # stored as it came
    assert [as_tuple(r) for r in client.fetch(topic, 0, 0, 100).records] == [
        as_tuple(r) for r in recs[:20]
    ]
