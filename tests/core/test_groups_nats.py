"""Two gateway processes on one nats-server share committed offsets (JetStream KV) whatever the
protocol that committed them, and see one group (kept in the JetStream key-value store)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import trio

from gateway.protocols.cursus.client import CursusClient
from tests.backends.servers import NatsServer
from tests.protocols.kafka08.conftest import run_client
from tests.support import GatewayProcess

LISTENERS = {"cursus": {}, "kafka08": {}}


def cursus(addr: tuple[str, int], *commands: str) -> list[str]:
    async def main() -> list[str]:
        async with await CursusClient.connect(*addr) as cl:
            return [await cl.text(cmd) for cmd in commands]

    return trio.run(main)


def get(gw: GatewayProcess, path: str) -> object:
    with urllib.request.urlopen(gw.admin_url + path, timeout=30) as resp:
        return json.loads(resp.read())


def test_two_gateways_on_one_nats_share_offsets_and_groups(tmp_path: Path) -> None:
    with NatsServer(tmp_path / "nats") as nats:
        backends = {"js": {"type": "nats", "url": nats.url}}
        a = GatewayProcess(tmp_path / "a", listeners=LISTENERS, backends=backends, name="a")
        b = GatewayProcess(tmp_path / "b", listeners=LISTENERS, backends=backends, name="b")
        with a, b:
            # Cursus on A commits; Cursus on B reads it at once (no cache in front of the KV)
            assert (
                cursus(
                    a.address("cursus"),
                    "CREATE topic=t partitions=2",
                    "REGISTER_GROUP topic=t group=g",
                    "COMMIT_OFFSET topic=t partition=0 group=g offset=5",
                )[2]
                == "OK"
            )
            assert cursus(b.address("cursus"), "FETCH_OFFSET topic=t partition=0 group=g") == [
                "OK offset=5"
            ]
            assert cursus(a.address("cursus"), "COMMIT_OFFSET topic=t partition=0 group=g offset=6")
            assert cursus(b.address("cursus"), "FETCH_OFFSET topic=t partition=0 group=g") == [
                "OK offset=6"
            ]
            # kafka-python (0.8.2) on B commits; Cursus on A reads it
            out = run_client(
                "kafka-python-3",
                "kafka_python_client.py",
                {"port": b.address("kafka08")[1], "api_version": [0, 8, 2], "topic": "kt",
                 "count": 3, "group": "k", "expect": 3},
            )  # fmt: skip
            assert out["committed"] == 3
            assert cursus(a.address("cursus"), "FETCH_OFFSET topic=kt partition=0 group=k") == [
                "OK offset=3"
            ]
            # a member joined on A: B lists the group and describes its stored snapshot
            joined = cursus(a.address("cursus"), "JOIN_GROUP topic=t group=live member=m")[0]
            assert joined.startswith("OK generation=1 ")
            names = {g["name"] for g in get(b, "/v1/groups")}
            assert {"g", "k", "live"} <= names
            desc = get(b, "/v1/groups/g")
            assert [(o["topic"], o["partition"], o["committed"]) for o in desc["offsets"]] == [
                ("t", 0, 6)
            ]
            # the group itself is shared: B sees the member that joined on A, live
            live = get(b, "/v1/groups/live")
            assert live["source"] == "live" and live["generation"] == 1
            assert [m["member_id"] for m in live["members"]] == [
                joined.split("member=")[1].split()[0]
            ]
            assert {g["name"] for g in get(a, "/v1/status")["groups"]} >= {"g", "k", "live"}
            with urllib.request.urlopen(b.admin_url + "/", timeout=30) as resp:
                page = resp.read().decode()
            assert '<table id="groups">' in page and "<td>live</td>" in page
