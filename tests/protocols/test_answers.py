"""The process-wide pool of answer memory (``[server] max_answer_memory``): an answer takes
its budget before reading, gets less when the pool is short, waits a bounded time below the
floor, and gives everything back however it ends."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gateway.observability import ANSWER_MEMORY
from gateway.protocols import answers
from gateway.protocols.answers import (
    FLOOR_BYTES,
    LIMIT,
    MEMORY_LIMIT,
    AnswerBudget,
    AnswerMemory,
    holding,
)

MiB = 1 << 20


def gauge() -> float:
    return ANSWER_MEMORY._value.get()


async def test_an_answer_takes_what_it_asks_up_to_the_cap_and_gives_it_back_once_sent() -> None:
    pool = AnswerMemory(64 * MiB)
    with holding(pool) as held:
        budget = await AnswerBudget.take(100 * MiB, 16 * MiB)  # capped by max_answer_bytes
        assert (budget.limit, budget.key) == (16 * MiB, LIMIT)
        assert pool.held == held.size == 16 * MiB and gauge() == 16 * MiB
        small = await AnswerBudget.take(1000, 16 * MiB)  # a second read of the same answer
        assert pool.held == 16 * MiB + 1000
        budget.spend(3 * MiB)
        budget.trim()  # built: what it did not use goes back at once
        assert pool.held == 3 * MiB + 1000
        small.release()  # dropped before it was sent
        assert pool.held == 3 * MiB
    assert pool.held == 0 and gauge() == 0  # sent


async def test_a_short_pool_gives_what_is_left_and_names_max_answer_memory() -> None:
    pool = AnswerMemory(20 * MiB)
    with holding(pool):
        first = await AnswerBudget.take(16 * MiB, 16 * MiB)
        with holding(pool):
            second = await AnswerBudget.take(16 * MiB, 16 * MiB)
            assert (second.limit, second.key) == (4 * MiB, MEMORY_LIMIT)
            assert second.share(5 * MiB) == (4 * MiB, True)
            assert pool.held == pool.limit
        assert first.limit == 16 * MiB and pool.held == 16 * MiB
    assert pool.held == 0


async def test_below_the_floor_an_answer_waits_for_memory_given_back() -> None:
    pool = AnswerMemory(FLOOR_BYTES * 4)
    got: list[AnswerBudget] = []
    taken: list[int] = []

    async def second() -> None:
        with holding(pool):
            got.append(await AnswerBudget.take(FLOOR_BYTES * 2, 16 * MiB))
            taken.append(pool.held)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            with holding(pool):
                await AnswerBudget.take(16 * MiB, 16 * MiB)  # the whole pool
                nursery.start_soon(second)
                await trio.testing.wait_all_tasks_blocked()
                assert not got  # waiting, holding nothing
            # the first answer was sent: the waiter gets its whole ask
    assert got[0].key == LIMIT and taken == [FLOOR_BYTES * 2]
    assert pool.held == 0


async def test_the_wait_is_bounded_then_the_answer_gets_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(answers, "WAIT_S", 0.2)
    pool = AnswerMemory(FLOOR_BYTES * 4)
    with holding(pool):
        await AnswerBudget.take(16 * MiB, 16 * MiB)
        with trio.fail_after(5), holding(pool):
            starved = await AnswerBudget.take(MiB, 16 * MiB)
        assert (starved.limit, starved.key) == (0, MEMORY_LIMIT)
        assert starved.share(100) == (0, True)
    assert pool.held == 0


async def test_every_way_an_answer_ends_gives_its_share_back() -> None:
    pool = AnswerMemory(64 * MiB)
    with pytest.raises(RuntimeError):
        with holding(pool):
            await AnswerBudget.take(8 * MiB, 16 * MiB)
            raise RuntimeError("the backend failed")
    assert pool.held == 0
    with trio.move_on_after(0.05):  # cancelled mid-send (the connection ended)
        with holding(pool):
            await AnswerBudget.take(8 * MiB, 16 * MiB)
            await trio.sleep_forever()
    assert pool.held == 0


async def test_a_waiter_whose_answer_ended_meanwhile_keeps_nothing() -> None:
    pool = AnswerMemory(FLOOR_BYTES * 4)
    with holding(pool) as first:
        await AnswerBudget.take(16 * MiB, 16 * MiB)
        async with trio.open_nursery() as nursery:
            with holding(pool) as held:
                nursery.start_soon(held.take, FLOOR_BYTES)
                await trio.testing.wait_all_tasks_blocked()
            # the waiter's answer is over; the pool frees while it still waits
            first.give_back(first.size)
        assert pool.held == 0 and held.size == 0


async def test_outside_holding_nothing_is_taken() -> None:
    """A session driven directly (unit tests) gets its cap and the pool is untouched."""
    before = answers.MEMORY.held
    budget = await AnswerBudget.take(100 * MiB, 16 * MiB)
    assert budget.limit == 16 * MiB and answers.MEMORY.held == before
    budget.trim()
    assert answers.MEMORY.held == before
