"""The pipeline's admin client and the binary record format, against a running gateway."""

from __future__ import annotations

import base64
import http.client
import json

import pytest

from gateway.canonical import CANONICAL
from gateway.pipeline.client import GatewayClient, GatewayClientError
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
