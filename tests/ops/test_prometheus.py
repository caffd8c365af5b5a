"""The Grafana dashboard and the alert rules against a real Prometheus scraping a real gateway.

Prometheus (Debian package ``prometheus``, .ci/deps/prometheus.sh) scrapes the admin port every
second while clients drive every listener; then every query of every dashboard panel and every
alert expression is evaluated through Prometheus's HTTP API and must be valid and return data.
The gateway runs two workers (``serve --workers 2``): Prometheus sees one set of series and no
counter resets. Stopping the NATS server behind one backend makes GatewayBackendUnreachable fire.
"""

from __future__ import annotations

import json
import re
import select
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.iggy.client import IggyClient
from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
from gateway.protocols.liftbridge.client import LiftbridgeClient
from gateway.protocols.tank.client import TankClient
from tests.backends.servers import NatsServer, free_port, http_json, wait_port
from tests.support import REPO_ROOT, GatewayProcess

DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "gateway.json"
RULES = REPO_ROOT / "deploy" / "prometheus" / "alerts.yaml"
KAFKA08 = ["-X", "api.version.request=false", "-X", "broker.version.fallback=0.8.2.2"]
COMPARISON = re.compile(r"\s*(==|!=|>=|<=|>|<)\s*-?[0-9][0-9.e+-]*(?=\s|\)|$)")


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing: run .ci/deps/prometheus.sh (Debian package prometheus)"
    return path


def panel_queries() -> list[tuple[str, str]]:
    """(panel title, expression) for every target of every panel of the dashboard."""
    dash = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dash["panels"]
        for target in panel.get("targets", [])
    ]


def alert_rules(path: Path = RULES) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def signal_of(expr: str) -> str:
    """An alert expression without its thresholds: what it watches, which must exist even while
    the alert does not fire (``a > 0.05`` -> ``a``, ``a > 0 and b > 1000`` -> ``a and b``)."""
    return COMPARISON.sub("", expr)


class Prometheus:
    def __init__(self, tmp: Path, target: str, rules: Path) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "500ms", "evaluation_interval": "500ms"},
            "rule_files": [str(rules)],
            "scrape_configs": [{"job_name": "gateway", "static_configs": [{"targets": [target]}]}],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = open(tmp / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={tmp / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        wait_port(self.port, timeout=30)

    def api(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # a bad query: 400 with Prometheus's reason
            body = json.loads(exc.read())
        assert body["status"] == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return self.api("query", query=expr)["result"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@contextmanager
def prometheus(tmp: Path, target: str, rules: Path) -> Iterator[Prometheus]:
    prom = Prometheus(tmp, target, rules)
    try:
        yield prom
    finally:
        prom.stop()


def test_promtool_checks_the_rules() -> None:
    proc = subprocess.run(
        [tool("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_every_alert_has_a_runbook() -> None:
    for rule in alert_rules():
        notes = rule["annotations"]
        assert notes.get("summary") and len(notes.get("runbook", "")) > 80, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]


def kcat(*args: str, stdin: str | None = None) -> str:
    exe = shutil.which("kcat")
    assert exe, "kcat is installed by .ci/deps/kafka08.sh"
    proc = subprocess.run(
        [exe, *args, *KAFKA08], input=stdin, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


async def drive_traffic(gw: GatewayProcess, n: int) -> None:
    """Round ``n`` of something on every listener, and of every kind of event a panel or an
    alert watches (run twice: a rate needs the counters to move between scrapes)."""
    url = gw.admin_url
    # kafka08: a real client (kcat) produces and consumes
    host, port = gw.address("kafka08")
    kcat("-b", f"{host}:{port}", "-P", "-t", f"orders{n}", "-p", "0", stdin="a\nb\nc\n")
    consumed = kcat("-b", f"{host}:{port}", "-C", "-t", f"orders{n}", "-p", "0", "-e")
    assert consumed.split() == ["a", "b", "c"]
    # a group that committed the start of the topic: lag 3
    reset = {"topic": f"orders{n}", "to": "earliest"}
    assert http_json("POST", url + "/v1/groups/billing/reset-offsets", reset)[0] == 200
    # tank: produce and consume, a topic the ACL denies, garbage (a protocol error)
    tank = await TankClient.connect(*gw.address("tank"))
    try:
        assert await tank.create_topic(f"events{n}", 1) == 0
        assert await tank.produce(f"events{n}", 0, [(None, b"hello", 1)]) == 0
        messages, _ = await tank.consume(f"events{n}", 0, 0)
        assert [m.content for m in messages] == [b"hello"]
        assert await tank.create_topic(f"secret-{n}", 1) != 0  # refused by write_deny
    finally:
        await tank.aclose()
    with socket.create_connection(gw.address("tank")) as raw:
        raw.sendall(b"\xff" * 64)
        raw.settimeout(10)
        try:
            while raw.recv(4096):
                pass
        except OSError:
            pass
    # iggy: pings; connections over max_connections = 1 (per worker) are refused: closed at once
    iggy = await IggyClient.connect(*gw.address("iggy"))
    extras = [socket.create_connection(gw.address("iggy")) for _ in range(4)]
    try:
        for _ in range(3):
            await iggy.ping()
        closed, _, _ = select.select(extras, [], [], 10)
        assert any(s.recv(1) == b"" for s in closed)
    finally:
        for s in extras:
            s.close()
        await iggy.aclose()
    # cursus: a member joins a group (members, a rebalance), a produce
    cursus = await CursusClient.connect(*gw.address("cursus"))
    try:
        await cursus.text(f"CREATE topic=jobs{n} partitions=1")
        reply = await cursus.text(f"JOIN_GROUP topic=jobs{n} group=workers member=m{n}")
        assert reply.startswith("OK"), reply
    finally:
        await cursus.aclose()
    # liftbridge: a stream and its metadata
    async with await LiftbridgeClient.connect(*gw.address("liftbridge")) as lb:
        await lb.call("CreateStream", pb.CreateStreamRequest(name=f"lb{n}", subject=f"lb{n}"))
        await lb.call("FetchMetadata", pb.FetchMetadataRequest(streams=[f"lb{n}"]))
    # topics and records over the admin API, and an error (unknown topic)
    topic = {"name": f"js.audit{n}", "partitions": 1}
    assert http_json("POST", url + "/v1/topics", topic)[0] == 201
    record = {"records": [{"value": "aGVsbG8=", "partition": 0}]}
    assert http_json("POST", url + f"/v1/topics/js.audit{n}/records", record)[0] == 200
    assert http_json("GET", url + "/v1/topics/missing/records?partition=0&offset=0")[0] == 404


def wait_for(what: str, check: Any, timeout: float = 40.0) -> Any:
    """A generous deadline proving Prometheus still answers, not a timing assertion."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.5)


def substitute(expr: str, instance: str) -> str:
    """The dashboard's variables as Grafana fills them in (a regex in a PromQL string)."""
    return (
        expr.replace("$instance", re.escape(instance).replace("\\", "\\\\"))
        .replace("$protocol", ".*")
        .replace("$__rate_interval", "1m")
    )


async def test_dashboard_and_alerts_against_a_live_gateway(tmp_path: Path) -> None:
    nats = NatsServer(tmp_path / "nats").start()
    try:
        gw = GatewayProcess(
            tmp_path / "gw",
            listeners={
                "kafka08": {},
                "tank": {"write_deny": ["secret-*"]},
                "iggy": {"max_connections": 1},
                "cursus": {},
                "liftbridge": {},
            },
            # two workers on one shared backend; "spare" (unused) shows only "js" goes down
            backends={"js": {"type": "nats", "url": nats.url}, "spare": {"type": "memory"}},
            routes=[{"topic": "*", "backend": "js"}],
            extra_args=("--workers", "2"),
        ).start()
        try:
            rules = tmp_path / "alerts.yaml"  # the shipped rules with `for:` short enough
            rules.write_text(re.sub(r"for: \S+", "for: 1s", RULES.read_text()))
            host, port = gw.addresses["admin"]
            target = f"{host}:{port}"
            with prometheus(tmp_path, target, rules) as prom:
                await drive_traffic(gw, 1)
                scraped = 'count_over_time(gateway_build_info{job="gateway"}[1m]) >= '
                wait_for("scrapes of the first round", lambda: prom.query(scraped + "3"))
                await drive_traffic(gw, 2)
                wait_for("scrapes of the second round", lambda: prom.query(scraped + "6"))
                dash = json.loads(DASHBOARD.read_text())
                for var in dash["templating"]["list"]:
                    if var["type"] == "query":
                        m = re.fullmatch(r"label_values\((.*), (\w+)\)", var["definition"])
                        assert m, var["definition"]
                        series = substitute(m.group(1), target)
                        values = prom.api(f"label/{m.group(2)}/values", **{"match[]": series})
                        assert values, f"variable {var['name']}: no values"
                empty = []
                for title, expr in panel_queries():
                    result = prom.query(substitute(expr, target))
                    if not any(r["value"][1] not in ("NaN", "+Inf", "-Inf") for r in result):
                        empty.append((title, expr, result))
                assert not empty, f"panels without data: {empty}"
                # one label style for operation names, across every protocol and the core
                for label in ("api", "command", "operation"):
                    values = prom.api(f"label/{label}/values")
                    assert values and all(re.fullmatch(r"[a-z][a-z0-9_]*", v) for v in values)
                # one view of both workers: Prometheus never saw a counter go down
                assert prom.query("gateway_workers == 2")
                assert not prom.query("resets(gateway_requests_total[5m]) > 0")
                assert not prom.query("resets(gateway_connections_total[5m]) > 0")
                for rule in alert_rules():
                    prom.query(rule["expr"])  # valid (the API answers 400 otherwise)
                    signal = signal_of(rule["expr"])
                    assert signal != rule["expr"] and prom.query(signal), (rule["alert"], signal)
                # the forced condition: the NATS server behind backend "js" stops
                assert not prom.query('gateway_backend_up{backend="js"} == 0')
                nats.kill()

                def fired() -> list[dict[str, Any]]:
                    return [
                        a
                        for a in prom.api("alerts")["alerts"]
                        if a["labels"]["alertname"] == "GatewayBackendUnreachable"
                        and a["state"] == "firing"
                    ]

                alerts = wait_for("firing GatewayBackendUnreachable", fired)
                assert [a["labels"]["backend"] for a in alerts] == ["js"]
                assert "runbook" in alerts[0]["annotations"]
        finally:
            gw.stop()
    finally:
        nats.stop()
