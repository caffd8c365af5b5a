"""Two gateway replicas on one nats-server behind a real load balancer (HAProxy, TCP mode,
``send-proxy-v2``; the gateways require the PROXY header): consumer groups whose members the
balancer spreads over both replicas are one group, a replica killed with SIGKILL takes nothing
with it but its connections, and kafka-python producers carry on through the other replica."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from cursus import Consumer, ConsumerConfig
from cursus.types import ConsumerMode

from gateway.backends.kafka import KafkaBackend, KafkaConfig
from gateway.backends.nats import NatsBackend, NatsConfig
from gateway.core.engine import Core
from gateway.model import Fetch
from gateway.protocols.cursus.client import CursusClient
from gateway.protocols.iggy import codec as c
from gateway.protocols.iggy.client import IggyClient
from tests.backends.servers import HaproxyTcp, NatsServer, TansuServer
from tests.protocols.kafka08.conftest import venv_python
from tests.support import GatewayProcess, write_toml

SESSION_MS = 3000  # Cursus session timeout
LEASE_MS = 2000  # server.group_lease_ms
PROTOCOLS = ("cursus", "iggy", "kafka08")
PRODUCER = Path(__file__).parent / "clients" / "kafka_python_producer.py"
USERS = [{"username": "iggy", "password": "iggy"}]
KAFKA_GROUP_TIMINGS = {
    "group_session_timeout_ms": 3000,
    "group_heartbeat_ms": 300,
    "group_rebalance_timeout_ms": 1000,
}


class Replicas:
    def __init__(
        self, backend: dict[str, Any], gateways: list[GatewayProcess], lb: HaproxyTcp
    ) -> None:
        self.backend, self.gateways, self.lb = backend, gateways, lb

    def front(self, protocol: str) -> tuple[str, int]:
        return "127.0.0.1", self.lb.frontends[protocol][0]

    def describe(self, gw: GatewayProcess, group: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{gw.admin_url}/v1/groups/{group}", timeout=10) as resp:
            return json.loads(resp.read())


@contextmanager
def backend_server(tmp_path: Path, kind: str) -> Iterator[dict[str, Any]]:
    """A nats-server or a Tansu broker; the gateways' backend table entry for it."""
    if kind == "nats":
        with NatsServer(tmp_path / "nats") as nats:
            yield {"type": "nats", "url": nats.url}
    else:
        with TansuServer() as tansu:
            # shorter group timings than the defaults (6 s session, 3 s rounds): each join
            # waits out one rebalance round, and a killed replica leaves after its session
            yield {"type": "kafka", "bootstrap": tansu.bootstrap} | KAFKA_GROUP_TIMINGS


def reserve_port() -> socket.socket:
    """A loopback port held (bound, not listening, SO_REUSEPORT) until HAProxy, which sets
    SO_REUSEPORT too, listens on it: no other process can take it meanwhile."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def replicas(tmp_path: Path, kind: str = "nats") -> Iterator[Replicas]:
    held = {p: reserve_port() for p in PROTOCOLS}
    fronts = {p: sock.getsockname()[1] for p, sock in held.items()}
    try:
        with backend_server(tmp_path, kind) as backend:
            gateways = []
            for i in range(2):
                listeners: dict[str, dict[str, Any]] = {
                    p: {
                        "proxy_protocol": "required",
                        "advertised_host": "127.0.0.1",
                        "advertised_port": fronts[p],
                    }
                    for p in PROTOCOLS
                }
                listeners["cursus"]["session_timeout_ms"] = SESSION_MS
                listeners["iggy"]["users"] = USERS
                gateways.append(
                    GatewayProcess(
                        tmp_path / f"gw{i}",
                        listeners=listeners,
                        backends={"js": backend},
                        server={"group_lease_ms": LEASE_MS},
                        name=f"gw{i}",
                    )
                )
            with gateways[0], gateways[1]:
                frontends = {
                    p: (fronts[p], [gw.address(p)[1] for gw in gateways]) for p in PROTOCOLS
                }
                with HaproxyTcp(tmp_path, frontends) as lb:
                    for sock in held.values():
                        sock.close()
                    yield Replicas(backend, gateways, lb)
    finally:
        for sock in held.values():
            sock.close()


def cli_describe(gw: GatewayProcess, group: str) -> dict[str, Any]:
    """``gateway groups describe GROUP --json`` with the replica's config and the admin port it
    listens on (the CLI then asks that replica's admin API)."""
    config = json.loads(json.dumps(gw.config))
    config["admin"]["port"] = gw.address("admin")[1]
    path = gw.tmp_path / "cli.toml"
    path.write_text(write_toml(config))
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "groups", "describe", group, "--json",
         "--config", str(path)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


def owners(desc: dict[str, Any]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for m in desc["members"]:
        for _, p in m["assignment"]:
            out.setdefault(p, []).append(m["member_id"])
    return out


def wait_stable(r: Replicas, group: str, members: int, gws: list[GatewayProcess]) -> dict:
    """Until every replica in ``gws`` describes the same generation with ``members`` members
    and each of the 8 partitions owned by exactly one of them."""
    deadline = time.monotonic() + 30
    while True:
        descs = [r.describe(gw, group) for gw in gws]
        first = descs[0]
        same = all(
            (d["generation"], d["members"]) == (first["generation"], first["members"])
            for d in descs
        )
        own = owners(first)
        if (
            same
            and len(first["members"]) == members
            and sorted(own) == list(range(8))
            and all(len(v) == 1 for v in own.values())
        ):
            return first
        assert time.monotonic() < deadline, descs
        time.sleep(0.1)


class Collector:
    """A cursus-client Consumer iterated in a thread, as an application would: the client ends
    its iteration when a rebalance arrives while it hands out messages, and raises when a
    command's connection dies (a replica killed under it); the loop then iterates again, which
    rejoins under the same member id. ``restarts`` counts those."""

    def __init__(self, addr: str, name: str) -> None:
        self.consumer = Consumer(
            ConsumerConfig(
                brokers=[addr], topic="t", group_id="g", consumer_id=name,
                mode=ConsumerMode.STREAMING, heartbeat_interval_ms=300,
            )
        )  # fmt: skip
        self.got: list[tuple[int, str]] = []
        self.errors: list[BaseException] = []
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.closed.is_set():
            try:
                for m in self.consumer:
                    self.got.append((m.partition, m.payload))
            except Exception as exc:  # reported by the test
                self.errors.append(exc)
                self.closed.wait(0.2)

    def close(self) -> None:
        self.closed.set()
        self.consumer.close()
        self.thread.join(10)


def close_all(collectors: list[Collector]) -> None:
    """Close the consumers at once (each close waits about a second for its worker threads)."""
    threads = [threading.Thread(target=col.close) for col in collectors]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def produce(r: Replicas, tmp_path: Path, tag: str, count: int) -> subprocess.Popen[str]:
    args = {
        "port": r.front("kafka08")[1],
        "topic": "t",
        "count": count,
        "tag": tag,
        "progress": str(tmp_path / f"{tag}.progress"),
    }
    return subprocess.Popen(
        [venv_python("kafka-python-3"), str(PRODUCER), json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def acked(proc: subprocess.Popen[str]) -> list[str]:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])["acked"]


def progress(tmp_path: Path, tag: str) -> int:
    try:
        return int((tmp_path / f"{tag}.progress").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def stored_values(backend: dict[str, Any], topic: str, partitions: int) -> list[str]:
    """Every record value of ``topic``, read straight from the backend."""

    async def main() -> list[str]:
        async with trio.open_nursery() as n:
            if backend["type"] == "nats":
                store: Any = NatsBackend("js", NatsConfig(url=backend["url"]))
            else:
                store = KafkaBackend("js", KafkaConfig(bootstrap=backend["bootstrap"]))
            await store.open(n)
            core = Core({"js": store}, [("*", "js")])
            values = []
            for p in range(partitions):
                offset = 0
                while True:
                    res = await core.execute(Fetch(topic, p, offset, 10_000, 8 << 20))
                    records = res.records
                    if not records:
                        break
                    values += [(rec.value or b"").decode() for rec in records]
                    offset = records[-1].offset + 1
            await store.close()
            n.cancel_scope.cancel()
        return values

    return trio.run(main)


def cursus_text(addr: tuple[str, int], *commands: str) -> list[str]:
    async def main() -> list[str]:
        async with await CursusClient.connect(*addr) as cl:
            return [await cl.text(cmd) for cmd in commands]

    return trio.run(main)


def test_cursus_group_over_two_replicas_survives_a_sigkill(tmp_path: Path) -> None:
    """The group lives in the NATS key-value bucket. (On Tansu this scenario does not settle:
    docs/scaling.md, "Tested".)"""
    with replicas(tmp_path) as r:
        a, b = r.gateways
        host, port = r.front("cursus")
        assert "8 partitions" in cursus_text((host, port), "CREATE topic=t partitions=8")[0]
        collectors = [Collector(f"{host}:{port}", f"m{i}") for i in range(4)]
        try:
            # settled: the same generation a second apart (the members' STREAM connections
            # start on the assignment; a member the client restarted rejoins first, which on a
            # loaded machine can take one more rebalance)
            desc = wait_stable(r, "g", 4, [a, b])
            deadline = time.monotonic() + 60
            while True:
                time.sleep(1.0)
                again = wait_stable(r, "g", 4, [a, b])
                if again["generation"] == desc["generation"]:
                    break
                assert time.monotonic() < deadline, (desc, again)
                desc = again
            # the operator's view: `gateway groups describe` through either replica's admin API
            views = [cli_describe(gw, "g") for gw in (a, b)]
            assert [(v["generation"], v["members"]) for v in views] == [
                (desc["generation"], desc["members"])
            ] * 2
            before = acked(produce(r, tmp_path, "before", 100))
            assert len(before) == 100
            # two producers at once, their connections spread over both replicas
            during = [produce(r, tmp_path, f"during{i}", 150) for i in range(2)]
            deadline = time.monotonic() + 60
            while min(progress(tmp_path, f"during{i}") for i in range(2)) < 30:
                assert time.monotonic() < deadline and all(p.poll() is None for p in during)
                time.sleep(0.02)
            b.stop(signal.SIGKILL)
            during_acked = [v for p in during for v in acked(p)]
            # the producers reconnected through the balancer: most of their records landed
            assert len(during_acked) >= 250, len(during_acked)
            want = set(before) | set(during_acked)
            deadline = time.monotonic() + (SESSION_MS + LEASE_MS) / 1000 + 30
            while not want <= {v for col in collectors for _, v in col.got}:
                assert time.monotonic() < deadline, want - {v for c in collectors for _, v in c.got}
                time.sleep(0.1)
            final = wait_stable(r, "g", 4, [a])
            assert final["generation"] >= desc["generation"]
            # what each member consumed (before closing: a member leaving starts a rebalance
            # whose new owners re-read from the committed offsets, as they should)
            got = [list(col.got) for col in collectors]
        finally:
            close_all(collectors)
        # (errors are the dying replica's connections, retried; printed for the record)
        print("client errors:", [[repr(e) for e in col.errors] for col in collectors])
        # one owner per partition, so no record reached two members
        seen: dict[str, int] = {}
        for i, records in enumerate(got):
            for _, value in records:
                assert seen.setdefault(value, i) == i, value
        # every acknowledged record is stored (counted on the backend)
        stored = stored_values(r.backend, "t", 8)
        assert want <= set(stored)


def test_stale_member_commit_gets_gen_mismatch_and_offset_stays(tmp_path: Path) -> None:
    with replicas(tmp_path) as r:
        front = r.front("cursus")
        first = cursus_text(
            front,
            "CREATE topic=s partitions=8",
            "JOIN_GROUP topic=s group=sg member=old",
        )[1]
        member = first.split("member=")[1].split()[0]
        assert "generation=1" in first
        cursus_text(front, f"COMMIT_OFFSET topic=s partition=0 group=sg offset=3 "
                           f"generation=1 member={member}")  # fmt: skip
        # another member joins (through the balancer: the other replica): generation 2
        assert "generation=2" in cursus_text(front, "JOIN_GROUP topic=s group=sg member=new")[0]
        for _ in range(2):  # whichever replica answers
            reply = cursus_text(
                front,
                f"COMMIT_OFFSET topic=s partition=0 group=sg offset=7 generation=1 member={member}",
            )[0]
            assert reply.startswith("ERROR: GEN_MISMATCH current=2 requested=1"), reply
            assert cursus_text(front, "FETCH_OFFSET topic=s partition=0 group=sg") == [
                "OK offset=3"
            ]


@pytest.mark.parametrize("kind", ["nats", "tansu"])
def test_iggy_group_over_two_replicas_rebalances_after_a_sigkill(tmp_path: Path, kind: str) -> None:
    """On NATS the group lives in the key-value bucket; on Tansu in the cluster's own group
    coordinator (each replica one Kafka member for its local members)."""
    with replicas(tmp_path, kind) as r:
        a, b = r.gateways

        async def main() -> None:
            front = r.front("iggy")
            clients = []
            for _ in range(3):  # the balancer alternates: a, b, a
                cl = await IggyClient.connect(*front)
                await cl.login("iggy", "iggy")
                clients.append(cl)
            s, t = c.Identifier(1), c.Identifier(1)
            await clients[0].call(c.CreateStream(1, "s"))
            await clients[0].call(c.CreateTopic(s, 1, 8, 0, "t"))
            await clients[0].call(c.CreateConsumerGroup(s, t, 7))
            async with trio.open_nursery() as nursery:  # each join waits for a round
                for cl in clients:
                    nursery.start_soon(cl.call, c.JoinConsumerGroup(s, t, 7))
            group = c.Consumer(c.ConsumerKind.CONSUMER_GROUP, c.Identifier(7))
            records = [c.Message(0, b"r%d" % i) for i in range(80)]
            await clients[0].send_messages(1, 1, records)
            await trio.to_thread.run_sync(wait_stable, r, "7", 3, [a, b])
            got: dict[int, list[bytes]] = {i: [] for i in range(3)}

            async def drain(i: int, cl: IggyClient) -> None:
                empty = 0  # each poll reads the member's next partition: 8 empty in a row
                while empty < 8:
                    polled = await cl.poll(1, 1, 0, count=10, auto_commit=True, consumer=group)
                    empty = 0 if polled.messages else empty + 1
                    got[i] += [m.payload for m in polled.messages]

            for i in range(3):
                await drain(i, clients[i])
            before = [v for i in range(3) for v in got[i]]
            assert sorted(before) == sorted(m.payload for m in records)  # each once
            b.stop(signal.SIGKILL)
            survivors = []
            for i, cl in enumerate(clients):
                try:
                    await cl.ping()
                    survivors.append(i)
                except (EOFError, OSError, trio.BrokenResourceError):
                    pass
            assert 1 <= len(survivors) <= 2, survivors  # the balancer spread the three
            # the dead replica's members leave once their lease runs out: survivors own all
            with trio.fail_after(LEASE_MS / 1000 + 20):
                while True:
                    desc = await trio.to_thread.run_sync(r.describe, a, "7")
                    own = owners(desc)
                    if len(desc["members"]) == len(survivors) and sorted(own) == list(range(8)):
                        break
                    await trio.sleep(0.1)
            assert all(len(v) == 1 for v in own.values())
            late = [c.Message(0, b"late%d" % i) for i in range(16)]
            await clients[survivors[0]].send_messages(1, 1, late)
            after: list[bytes] = []
            for i in survivors:
                got[i] = []
                await drain(i, clients[i])
                after += got[i]
            assert sorted(after) == sorted(m.payload for m in late)
            for i in survivors:
                await clients[i].aclose()

        trio.run(main)


def test_workers_on_nats_form_one_group(tmp_path: Path) -> None:
    """``serve --workers 2`` on NATS: the kernel spreads eight members' connections over both
    workers, and they still join one group (eight generations, eight members)."""
    with NatsServer(tmp_path / "nats") as nats:
        gw = GatewayProcess(
            tmp_path / "gw",
            listeners={"cursus": {"session_timeout_ms": 30_000}},
            backends={"js": {"type": "nats", "url": nats.url}},
            extra_args=("--workers", "2"),
        )
        with gw:
            addr = gw.address("cursus")
            cursus_text(addr, "CREATE topic=w partitions=8")
            replies = [
                cursus_text(addr, f"JOIN_GROUP topic=w group=wg member=m{i}")[0] for i in range(8)
            ]
            assert [r.split()[1] for r in replies] == [f"generation={i}" for i in range(1, 9)]
            status = json.loads(cursus_text(addr, "GROUP_STATUS group=wg")[0])
            assert status["member_count"] == 8 and status["generation"] == 8
            assert gw.stop() == 0
        assert "workers_do_not_share" not in gw.log_text()


def test_liftbridge_pause_and_readonly_hold_on_every_replica(tmp_path: Path) -> None:
    """Flags set through one gateway reach the other through the NATS key-value store."""
    import grpc

    from gateway.protocols.liftbridge import liftbridge_api_pb2 as pb
    from tests.protocols.liftbridge.grpc_stub import grpc_module

    def code_of(fn, *args) -> grpc.StatusCode | None:  # type: ignore[no-untyped-def]
        try:
            fn(*args)
        except grpc.RpcError as exc:
            return exc.code()
        return None

    def eventually(check) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 10
        while not check():
            assert time.monotonic() < deadline
            time.sleep(0.1)

    with NatsServer(tmp_path / "nats") as nats:
        backends = {"js": {"type": "nats", "url": nats.url}}
        gws = [
            GatewayProcess(tmp_path / n, listeners={"liftbridge": {}}, backends=backends, name=n)
            for n in ("a", "b")
        ]
        with gws[0], gws[1]:
            chans = [grpc.insecure_channel("{}:{}".format(*gw.address("liftbridge"))) for gw in gws]
            a, b = (grpc_module().APIStub(ch) for ch in chans)
            a.CreateStream(pb.CreateStreamRequest(subject="lb", name="lb", partitions=1))
            b.Publish(pb.PublishRequest(stream="lb", value=b"x"))
            a.SetStreamReadonly(pb.SetStreamReadonlyRequest(name="lb", readonly=True))
            publish = pb.PublishRequest(stream="lb", value=b"y")
            # b read the stream's flags for its publish just now: it sees the change once its
            # copy is older than a second
            eventually(lambda: code_of(b.Publish, publish) == grpc.StatusCode.FAILED_PRECONDITION)
            md = pb.FetchPartitionMetadataRequest(stream="lb", partition=0)
            assert b.FetchPartitionMetadata(md).metadata.readonly
            a.SetStreamReadonly(pb.SetStreamReadonlyRequest(name="lb", readonly=False))
            eventually(lambda: code_of(b.Publish, publish) is None)
            # paused through b: a reports it
            b.PauseStream(pb.PauseStreamRequest(name="lb", partitions=[0]))
            eventually(lambda: a.FetchPartitionMetadata(md).metadata.paused)
            for ch in chans:
                ch.close()


def test_kafka_python_producers_through_haproxy_on_tansu_survive_a_sigkill(tmp_path: Path) -> None:
    """The same balancer and kill with a Kafka backend (Tansu): producers reconnect to the other
    replica and every acknowledged record is in the cluster."""
    with replicas(tmp_path, "tansu") as r:
        assert "8 partitions" in cursus_text(r.front("cursus"), "CREATE topic=t partitions=8")[0]
        before = acked(produce(r, tmp_path, "before", 50))
        assert len(before) == 50
        during = produce(r, tmp_path, "during", 200)
        deadline = time.monotonic() + 60
        while progress(tmp_path, "during") < 30:
            assert time.monotonic() < deadline and during.poll() is None
            time.sleep(0.02)
        r.gateways[1].stop(signal.SIGKILL)
        during_acked = acked(during)
        assert len(during_acked) >= 150, len(during_acked)
        stored = stored_values(r.backend, "t", 8)
        assert set(before) | set(during_acked) <= set(stored)
