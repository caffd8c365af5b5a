"""The GroupCoordinator beyond the engine tests: sticky assignment, offsets read through (two
cores on one store), snapshots in the backend's store (restart on the embedded backend), and the
operations behind ``gateway groups`` and /v1/groups."""

from __future__ import annotations

import pytest

from gateway.backends.embedded import EmbeddedBackend, EmbeddedConfig
from gateway.backends.memory import MemoryBackend
from gateway.core.engine import Core
from gateway.core.groups import (
    describe_group,
    group_summaries,
    range_assign,
    reset_offsets,
    sticky_assign,
)
from gateway.model import (
    CommitOffset,
    CommittedOffset,
    CreateTopic,
    ErrorCode,
    FetchOffset,
    GatewayError,
    JoinGroup,
    LeaveGroup,
    Produce,
    Record,
    RecordBatch,
)
from tests.backends.conftest import opened


def test_sticky_keeps_survivors_partitions_and_stays_balanced() -> None:
    topics = {m: ("t",) for m in "abc"}
    first = range_assign(["a", "b", "c"], topics, {"t": 7})
    assert first == {"a": tuple(("t", p) for p in (0, 1, 2)), "b": (("t", 3), ("t", 4)),
                     "c": (("t", 5), ("t", 6))}  # fmt: skip
    # b leaves: a and c keep what they had, b's partitions are split between them
    after = sticky_assign(["a", "c"], {"a": ("t",), "c": ("t",)}, {"t": 7}, first)
    assert set(first["a"]) <= set(after["a"]) and set(first["c"]) <= set(after["c"])
    assert sorted(after["a"] + after["c"]) == [("t", p) for p in range(7)]
    assert sorted(len(v) for v in after.values()) == [3, 4]
    # d joins: everyone gives up only what balance needs
    four = sticky_assign(list("acd"), {m: ("t",) for m in "acd"}, {"t": 7}, after)
    assert sorted(len(v) for v in four.values()) == [2, 2, 3]
    assert sorted(four["a"] + four["c"] + four["d"]) == [("t", p) for p in range(7)]
    moved = sum(1 for m in "ac" for tp in after[m] if tp not in four[m])
    assert moved == 2  # exactly the two partitions d needs
    ranged = range_assign(list("acd"), {m: ("t",) for m in "acd"}, {"t": 7})
    assert sum(1 for m in "ac" for tp in after[m] if tp not in ranged[m]) > moved
    # fewer partitions than before: dropped ones vanish, nothing duplicated
    shrunk = sticky_assign(list("acd"), {m: ("t",) for m in "acd"}, {"t": 3}, four)
    assert sorted(shrunk["a"] + shrunk["c"] + shrunk["d"]) == [("t", 0), ("t", 1), ("t", 2)]


async def _member(core: Core, group: str, member: str = "", protocol: str = "range") -> str:
    joined = await core.execute(JoinGroup(group, ("t",), member, 30_000, protocol))
    return joined.member_id


async def test_sticky_protocol_through_the_core() -> None:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    await core.execute(CreateTopic("t", 6))
    ids = [await _member(core, "g", "", "sticky") for _ in range(3)]
    group = core.groups._groups["g"]
    before = dict(group.assignment)
    assert core.groups._protocol(group) == "sticky"
    await core.execute(LeaveGroup("g", ids[0]))
    after = group.assignment
    for m in ids[1:]:
        assert set(before[m]) <= set(after[m])
    assert sorted(after[ids[1]] + after[ids[2]]) == [("t", p) for p in range(6)]
    # a range member in the group: the group falls back to range
    await _member(core, "g", "", "range")
    assert core.groups._protocol(group) == "range"


async def test_server_default_assignment_is_sticky_when_configured(tmp_path) -> None:
    from gateway.config import ConfigError, parse_config
    from gateway.server import build_core
    from tests.support import make_config

    cfg = parse_config(make_config(tmp_path, server={"group_assignment": "sticky"}))
    core = build_core(cfg, {"default": MemoryBackend("default")})
    await core.execute(CreateTopic("t", 4))
    ids = [(await core.execute(JoinGroup("g", ("t",)))).member_id for _ in range(3)]
    group = core.groups._groups["g"]
    assert core.groups._protocol(group) == "sticky"
    before = dict(group.assignment)
    await core.execute(LeaveGroup("g", ids[1]))
    for m in (ids[0], ids[2]):
        assert set(before[m]) <= set(group.assignment[m])
    with pytest.raises(ConfigError):
        parse_config(make_config(tmp_path, server={"group_assignment": "roundrobin"}))


async def test_offsets_are_read_through_so_two_cores_on_one_store_agree() -> None:
    shared = MemoryBackend("m")
    a = Core({"m": shared}, [("*", "m")])
    b = Core({"m": shared}, [("*", "m")])
    await a.execute(CreateTopic("t", 2))
    assert (await b.execute(FetchOffset("g", "t", 0))).offset == -1
    await a.execute(CommitOffset("g", "t", 0, 5, "m1"))
    assert await b.execute(FetchOffset("g", "t", 0)) == CommittedOffset(5, "m1")
    await b.execute(CommitOffset("g", "t", 0, 9))
    assert (await a.execute(FetchOffset("g", "t", 0))).offset == 9


async def test_embedded_restart_keeps_offsets_and_continues_generations(tmp_path) -> None:
    def backend() -> EmbeddedBackend:
        return EmbeddedBackend("e", EmbeddedConfig(fsync="always"), tmp_path)

    async with opened(backend()) as e:
        core = Core({"e": e}, [("*", "e")])
        await core.execute(CreateTopic("t", 3))
        m1 = await _member(core, "g")
        await _member(core, "g")
        await core.execute(CommitOffset("g", "t", 1, 42, "meta"))
        await core.execute(LeaveGroup("g", m1))
        assert core.groups.describe("g").generation == 3
    async with opened(backend()) as e:
        core = Core({"e": e}, [("*", "e")])
        assert await core.execute(FetchOffset("g", "t", 1)) == CommittedOffset(42, "meta")
        assert await core.groups.known_groups() == ["g"]
        stored = await describe_group(core, "g")
        assert (stored["source"], stored["generation"], len(stored["members"])) == ("stored", 3, 1)
        assert stored["offsets"] == [
            {"topic": "t", "partition": 1, "committed": 42, "metadata": "meta",
             "high_watermark": 0, "lag": 0}
        ]  # fmt: skip
        # a new member after the restart: the generation goes on from the stored one
        joined = await core.execute(JoinGroup("g", ("t",), "", 30_000))
        assert joined.generation == 4


async def test_describe_list_and_reset_offsets() -> None:
    core = Core({"m": MemoryBackend("m")}, [("*", "m")])
    await core.execute(CreateTopic("t", 2))
    records = RecordBatch([Record(None, b"v", (), 1000 + i) for i in range(10)])
    await core.execute(Produce("t", records, partition=0))
    await core.execute(CommitOffset("g", "t", 0, 4))
    member = await _member(core, "live")
    summaries = {s["name"]: s for s in await group_summaries(core)}
    assert summaries["g"]["members"] == 0 and summaries["live"]["members"] == 1
    assert summaries["live"]["generation"] == 1
    d = await describe_group(core, "g")
    assert d["offsets"][0] | {} == {"topic": "t", "partition": 0, "committed": 4, "metadata": "",
                                    "high_watermark": 10, "lag": 6}  # fmt: skip
    live = await describe_group(core, "live")
    assert live["source"] == "live"
    assert live["members"] == [{"member_id": member, "topics": ["t"],
                                "assignment": [["t", 0], ["t", 1]]}]  # fmt: skip
    assert await reset_offsets(core, "g", "t", "latest") == [
        {"topic": "t", "partition": 0, "committed": 10},
        {"topic": "t", "partition": 1, "committed": 0},
    ]
    await reset_offsets(core, "g", "t", "earliest", [0])
    assert (await core.execute(FetchOffset("g", "t", 0))).offset == 0
    await reset_offsets(core, "g", "t", 99, [0])  # clamped to the high watermark
    assert (await core.execute(FetchOffset("g", "t", 0))).offset == 10
    await reset_offsets(core, "g", "t", "timestamp:1003", [0])
    assert (await core.execute(FetchOffset("g", "t", 0))).offset == 3
    with pytest.raises(GatewayError) as err:
        await reset_offsets(core, "live", "t", "earliest")
    assert err.value.code is ErrorCode.INVALID_REQUEST
    assert (await reset_offsets(core, "live", "t", "earliest", force=True))[0]["committed"] == 0
    with pytest.raises(GatewayError) as err:
        await reset_offsets(core, "g", "t", "earliest", [5])
    assert err.value.code is ErrorCode.UNKNOWN_PARTITION


def test_cli_text_output_on_the_store_directly(tmp_path, capsys) -> None:
    """No gateway running (admin disabled): ``gateway groups`` opens the embedded log itself."""
    from gateway.cli import main
    from gateway.cli_admin import direct
    from gateway.config import load_config
    from tests.support import make_config, write_toml

    path = tmp_path / "gw.toml"
    path.write_text(write_toml(make_config(tmp_path, backend="embedded", admin=False)))
    records = RecordBatch([Record(None, b"v", (), 1000 + i) for i in range(4)])

    async def setup(core: Core) -> None:
        await core.execute(CreateTopic("t", 2))
        await core.execute(Produce("t", records, partition=1))
        await core.execute(CommitOffset("g", "t", 1, 1, "mine"))

    direct(load_config(str(path)), setup)
    capsys.readouterr()
    assert main(["groups", "list", "--config", str(path)]) == 0
    assert capsys.readouterr().out == "g\tempty\tgeneration=0\tmembers=0\n"
    assert main(["groups", "describe", "g", "--config", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "group g: empty, generation 0, range assignment (none)",
        "TOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tMETADATA",
        "t\t1\t1\t4\t3\tmine",
    ]
    args = ["groups", "reset-offsets", "g", "--topic", "t", "--to-latest", "--config", str(path)]
    assert main(args) == 0
    assert capsys.readouterr().out == "g\tt\t0\t0\ng\tt\t1\t4\n"
    assert main([*args[:5], "--partition", "7", "--to-earliest", "--config", str(path)]) == 1
    assert "has no partition 7" in capsys.readouterr().err


async def test_group_works_when_the_snapshot_store_fails() -> None:
    """The snapshot is for restarts and other gateways: a store error there does not fail a
    join; the stored generation is read once the store answers again."""

    class Flaky(MemoryBackend):
        down = True

        async def kv_get(self, namespace: str, key: str) -> bytes | None:
            if namespace == "groups" and self.down:
                raise GatewayError(ErrorCode.BACKEND_UNAVAILABLE, "down")
            return await super().kv_get(namespace, key)

        async def kv_put(self, namespace: str, key: str, value: bytes) -> None:
            if namespace == "groups" and self.down:
                raise GatewayError(ErrorCode.BACKEND_UNAVAILABLE, "down")
            await super().kv_put(namespace, key, value)

    flaky = Flaky("f")
    await flaky.kv_put("offsets", "x", b"{}")  # the offsets namespace is fine
    flaky.down = False
    await flaky.kv_put("groups", "g", b'{"generation": 41}')
    flaky.down = True
    core = Core({"f": flaky}, [("*", "f")])
    await core.execute(CreateTopic("t", 1))
    joined = await core.execute(JoinGroup("g", ("t",)))
    assert joined.generation == 1  # the stored 41 could not be read
    flaky.down = False
    joined = await core.execute(JoinGroup("g", ("t",)))
    assert joined.generation == 42  # read on the next join: 41, then its rebalance
