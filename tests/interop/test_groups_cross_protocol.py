"""One group model for every protocol, against a running gateway on the embedded backend: an
offset kafka-python (Kafka 0.8.2 OffsetCommit) commits for group "g" on topic "t" is what Cursus
FETCH_OFFSET for "g" returns (though "g" never joined over Cursus) and the other way round; Iggy
consumer group 7 is the group named "7"; a Liftbridge cursor id is a group name; the offsets
survive a restart; ``gateway groups`` lists, describes and resets them (through the admin API
while the gateway runs, directly on the store when it does not)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import trio

from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.cursus.codec import Message
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from tests.backends.servers import free_port
from tests.protocols.kafka08.conftest import run_client
from tests.support import GatewayProcess

USERS = [{"username": "iggy", "password": "iggy"}]
SI, TI = c.Identifier("s"), c.Identifier("q")
GROUP7 = c.Consumer(c.ConsumerKind.CONSUMER_GROUP, c.Identifier(7))
LISTENERS = {"kafka08": {}, "cursus": {}, "iggy": {"users": USERS}, "liftbridge": {}}


def gateway(tmp_path: Path, admin_port: int) -> GatewayProcess:
    gw = GatewayProcess(tmp_path, listeners=LISTENERS, backend="embedded")
    gw.config["admin"]["port"] = admin_port
    return gw


def cli(config: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "groups", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def kafka(port: int, topic: str, group: str, expect: int | None = None) -> dict:
    args = {"port": port, "api_version": [0, 8, 2], "topic": topic, "group": group}
    return run_client("kafka-python-3", "kafka_python_client.py", {**args, "expect": expect})


def liftbridge(addr: tuple[str, int], call: str, **fields: object) -> int:
    """One cursor RPC through a grpcio stub of the Liftbridge API; the cursor offset."""
    import grpc

    from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
    from tests.protocols.liftbridge.grpc_stub import grpc_module

    with grpc.insecure_channel("%s:%d" % addr) as ch:  # noqa: UP031
        api = grpc_module().APIStub(ch)
        if call == "set":
            api.SetCursor(pb.SetCursorRequest(**fields), timeout=30)
            return int(fields["offset"])  # type: ignore[call-overload]
        return api.FetchCursor(pb.FetchCursorRequest(**fields), timeout=30).offset


def cursus(addr: tuple[str, int], *commands: str) -> list[str]:
    async def main() -> list[str]:
        async with await CursusClient.connect(*addr) as cl:
            return [await cl.text(cmd) for cmd in commands]

    return trio.run(main)


def test_offsets_cross_protocols_survive_restart_and_cli(tmp_path: Path) -> None:
    admin_port = free_port()
    with gateway(tmp_path, admin_port) as gw:
        kport = gw.address("kafka08")[1]
        # kafka-python produces 20 records to t (one partition) and commits 20 for group g
        out = run_client(
            "kafka-python-3",
            "kafka_python_client.py",
            {"port": kport, "api_version": [0, 8, 2], "topic": "t", "count": 20, "group": "g",
             "expect": 20},
        )  # fmt: skip
        assert out["committed"] == 20
        # Cursus: g never joined here, yet its committed offset is Kafka's
        assert cursus(gw.address("cursus"), "FETCH_OFFSET topic=t partition=0 group=g") == [
            "OK offset=20"
        ]
        # a Liftbridge cursor is the group of that name: Kafka's commit is cursor "g"
        lb = gw.address("liftbridge")
        assert liftbridge(lb, "get", stream="t", partition=0, cursorId="g") == 20
        liftbridge(lb, "set", stream="t", partition=0, cursorId="lc", offset=11)
        assert kafka(kport, "t", "lc", expect=0)["committed_before"] == 11
        # the other way: a Cursus commit (group h registered over Cursus) read by kafka-python
        replies = cursus(
            gw.address("cursus"),
            "REGISTER_GROUP topic=t group=h",
            "COMMIT_OFFSET topic=t partition=0 group=h offset=7",
        )
        assert replies[1] == "OK"
        assert kafka(kport, "t", "h", expect=0)["committed_before"] == 7

        # Iggy consumer group 7 is the model group "7": an Iggy store is what Kafka reads
        async def iggy() -> None:
            async with await IggyClient.connect(*gw.address("iggy")) as cl:
                await cl.call(c.CreateStream(9, "s"))
                await cl.call(c.CreateTopic(SI, 1, 1, 0, "q"))
                await cl.send_messages("s", "q", [c.Message(0, b"x%d" % i) for i in range(5)])
                await cl.call(c.CreateConsumerGroup(SI, TI, 7))
                await cl.call(c.StoreConsumerOffset(GROUP7, SI, TI, 1, 2))

        trio.run(iggy)
        assert kafka(kport, "s.q", "7", expect=0)["committed_before"] == 3  # Iggy's last + 1

        # the CLI through the admin API
        listed = json.loads(cli(gw.config_path, "list", "--json"))
        assert {"g", "h", "7"} <= {g["name"] for g in listed}
        desc = json.loads(cli(gw.config_path, "describe", "g", "--json"))
        assert [
            (o["topic"], o["partition"], o["committed"], o["lag"]) for o in desc["offsets"]
        ] == [("t", 0, 20, 0)]
        assert cli(gw.config_path, "reset-offsets", "g", "--topic", "t", "--to-offset", "5") == (
            "g\tt\t0\t5\n"
        )
        status = json.loads(
            subprocess.run(
                ["curl", "-s", f"{gw.admin_url}/v1/status"], capture_output=True, timeout=30
            ).stdout
        )
        assert {"g", "h", "7"} <= {g["name"] for g in status["groups"]}
        assert gw.stop() == 0

    # the gateway is down: the CLI opens the store itself
    desc = json.loads(cli(gw.config_path, "describe", "g", "--json"))
    assert [(o["topic"], o["committed"]) for o in desc["offsets"]] == [("t", 5)]
    assert cli(gw.config_path, "reset-offsets", "g", "--topic", "t", "--to-earliest") == (
        "g\tt\t0\t0\n"
    )

    # restarted: every protocol sees the stored offsets
    with gateway(tmp_path, admin_port) as gw:
        assert cursus(
            gw.address("cursus"),
            "FETCH_OFFSET topic=t partition=0 group=g",
            "FETCH_OFFSET topic=t partition=0 group=h",
        ) == ["OK offset=0", "OK offset=7"]
        assert kafka(gw.address("kafka08")[1], "s.q", "7", expect=0)["committed_before"] == 3

        async def iggy_after() -> int:
            async with await IggyClient.connect(*gw.address("iggy")) as cl:
                got = await cl.call(c.GetConsumerOffset(GROUP7, SI, TI, 1))
                return got.stored_offset

        assert trio.run(iggy_after) == 2


def test_cursus_members_then_kafka_commit_in_one_group(tmp_path: Path) -> None:
    """Members that joined over Cursus, and a Kafka 0.8 commit for the same group name: the
    group's describe shows both the Cursus members and the Kafka commit."""
    with gateway(tmp_path, free_port()) as gw:
        addr = gw.address("cursus")

        async def main() -> dict:
            async with await CursusClient.connect(*addr) as cl:
                await cl.text("CREATE topic=t partitions=2")
                for p in (0, 1):
                    await cl.produce(
                        "t", p, [Message(seq=1, producer_id=b"p", key=b"", payload=b"v")]
                    )
                joined = await cl.text("JOIN_GROUP topic=t group=mixed member=m")
                assert joined.startswith("OK generation=1 member=m-")
                # the member stays connected (the end of its connection would leave the group)
                port = gw.address("kafka08")[1]
                await trio.to_thread.run_sync(lambda: kafka(port, "t", "mixed", expect=1))
                text = await trio.to_thread.run_sync(
                    lambda: cli(gw.config_path, "describe", "mixed", "--json")
                )
                return json.loads(text)

        desc = trio.run(main)
        assert desc["source"] == "live" and desc["generation"] == 1
        assert [m["assignment"] for m in desc["members"]] == [[["t", 0], ["t", 1]]]
        assert [(o["partition"], o["committed"]) for o in desc["offsets"]] == [(0, 1)]
