"""The server as a process: the listening line, the admin endpoint, the data API, SIGTERM."""

from __future__ import annotations

import base64
import json
import signal
import urllib.error
import urllib.request

import pytest

from gateway.config import parse_config
from tests.support import GatewayProcess, make_config, serving


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def post(url: str, body: object) -> tuple[int, object]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def gw(tmp_path):
    with GatewayProcess(tmp_path, backend="memory") as proc:
        yield proc


def test_announces_admin_address_and_answers_health(gw) -> None:
    assert gw.address("admin")[0] == "127.0.0.1"
    assert get(gw.admin_url + "/healthz") == (200, b"ok\n")
    code, body = get(gw.admin_url + "/readyz")
    assert code == 200 and json.loads(body) == {"ready": True}
    code, body = get(gw.admin_url + "/metrics")
    assert code == 200 and b"gateway_connections_total" in body


def test_data_api_round_trip_keeps_every_field(gw) -> None:
    assert post(gw.admin_url + "/v1/topics", {"name": "t", "partitions": 2})[0] == 201
    code, err = post(gw.admin_url + "/v1/topics", {"name": "t", "partitions": 2})
    assert code == 409 and "exists" in err["error"]
    rec = {
        "key": base64.b64encode(b"k").decode(),
        "value": base64.b64encode(b"v").decode(),
        "headers": [["h", base64.b64encode(b"hv").decode()]],
        "timestamp_us": 1234,
        "partition": 1,
    }
    code, res = post(gw.admin_url + "/v1/topics/t/records", {"records": [rec, rec]})
    assert code == 200 and res["appends"] == [{"partition": 1, "base_offset": 0, "last_offset": 1}]
    code, body = get(gw.admin_url + "/v1/topics/t/records?partition=1&offset=1")
    out = json.loads(body)
    assert code == 200 and out["high_watermark"] == 2
    assert out["records"] == [
        {
            "offset": 1,
            "timestamp_us": 1234,
            "key": rec["key"],
            "value": rec["value"],
            "headers": rec["headers"],
        }
    ]
    status = json.loads(get(gw.admin_url + "/v1/status")[1])
    assert status["topics"][0]["name"] == "t"
    assert [p["high_watermark"] for p in status["topics"][0]["partitions"]] == [0, 2]
    code, page = get(gw.admin_url + "/")
    assert code == 200 and b"<td>t</td>" in page


def test_data_api_errors_are_clear(gw) -> None:
    code, body = get(gw.admin_url + "/v1/topics/nope/records")
    assert code == 404 and "nope" in json.loads(body)["error"]
    code, res = post(gw.admin_url + "/v1/topics/t/records", {"records": [{"value": "%%%"}]})
    assert code == 400 and "base64" in res["error"]
    code, body = get(gw.admin_url + "/v1/topics/t/records?offset=abc")
    assert code == 400 and "offset" in json.loads(body)["error"]


def test_sigterm_exits_0(gw) -> None:
    assert gw.stop(signal.SIGTERM) == 0
    assert '"event": "stopped"' in gw.log_text()


def test_port_in_use_is_a_clear_error(tmp_path) -> None:
    with GatewayProcess(tmp_path / "a", backend="memory") as first:
        port = first.address("admin")[1]
        second = GatewayProcess(tmp_path / "b", backend="memory")
        second.config["admin"]["port"] = port
        with pytest.raises(RuntimeError) as info:
            second.start()
        assert "cannot bind" in str(info.value) or "cannot bind" in second.log_text()


async def test_in_process_server_serves_and_stops(tmp_path) -> None:
    config = parse_config(make_config(tmp_path, backend="memory"))
    async with serving(config) as server:
        assert server.ready
        assert "admin" in server.addresses()
    assert server.draining


async def test_sessions_are_imported_before_the_listeners_listen(tmp_path, monkeypatch) -> None:
    """A protocol's session is imported lazily (not with its codec), but by the server as it
    starts, not in the first client's time (the Kafka session's imports take most of a second)."""
    from gateway.protocols import REGISTRY, get_protocol
    from gateway.protocols.base import Lazy

    listeners: dict = {name: {} for name in REGISTRY}
    config = parse_config(make_config(tmp_path, listeners, backend="memory"))
    handlers = {name: get_protocol(name).handle_connection for name in config.listeners}
    assert len(handlers) == 5 and all(isinstance(h, Lazy) for h in handlers.values())
    for handler in handlers.values():
        monkeypatch.setattr(handler, "_target", None)  # as in a fresh process
    async with serving(config):
        assert [n for n, h in handlers.items() if h._target is None] == []
