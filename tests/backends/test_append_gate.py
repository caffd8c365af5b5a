"""AppendGate (gateway/backends/base.py): the per-partition shared/exclusive gate that the Kafka
and upstream backends hold around conditional appends."""

from __future__ import annotations

import trio
import trio.testing

from gateway.backends.base import AppendGate


async def test_shared_holders_overlap_and_exclusive_waits_for_them() -> None:
    gate = AppendGate()
    log: list[str] = []
    release = trio.Event()

    async def shared(name: str) -> None:
        async with gate.shared("t", 0):
            log.append(f"{name} in")
            await release.wait()
            log.append(f"{name} out")

    async def exclusive() -> None:
        async with gate.exclusive("t", 0):
            log.append("x in")
            log.append("x out")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(shared, "a")
        nursery.start_soon(shared, "b")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(exclusive)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(log) == ["a in", "b in"]  # both shared at once; the exclusive one waits
        release.set()
    assert log[-2:] == ["x in", "x out"]
    assert not gate._gates  # nothing left behind


async def test_waiting_exclusive_holds_off_new_shared_holders() -> None:
    """No starvation: once an exclusive holder waits, later shared holders queue behind it."""
    gate = AppendGate()
    log: list[str] = []
    release = trio.Event()

    async def first() -> None:
        async with gate.shared("t", 0):
            await release.wait()
        log.append("first out")

    async def exclusive() -> None:
        async with gate.exclusive("t", 0):
            log.append("x")

    async def late() -> None:
        async with gate.shared("t", 0):
            log.append("late")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(exclusive)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(late)
        await trio.testing.wait_all_tasks_blocked()
        assert log == []
        release.set()
    assert log == ["first out", "x", "late"]


async def test_other_partitions_are_not_held_and_a_cancelled_waiter_leaves_nothing() -> None:
    gate = AppendGate()
    release = trio.Event()

    async def hold() -> None:
        async with gate.shared("t", 0):
            await release.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold)
        await trio.testing.wait_all_tasks_blocked()
        with trio.move_on_after(0.05) as scope:
            async with gate.exclusive("t", 0):
                raise AssertionError("entered while a shared holder is inside")
        assert scope.cancelled_caught
        with trio.fail_after(1):  # the cancelled waiter no longer holds shared entrants off
            async with gate.shared("t", 0):
                pass
            async with gate.exclusive("t", 1):  # another partition: free
                pass
        release.set()
    assert not gate._gates
