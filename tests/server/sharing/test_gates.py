"""The table gates: how many requests of one table hold threads, and how the ones waiting fail."""

from __future__ import annotations

import asyncio

from deltaport.errors import InvalidParameter, StorageUnavailable
from deltaport.server.sharing.gates import TableGates


def _run(coro):
    return asyncio.run(coro)


def test_at_most_width_calls_of_one_table_run_at_once_and_other_tables_are_not_held():
    async def main() -> tuple[int, list[str]]:
        gates, running, most = TableGates(width=3), [0], [0]
        release = asyncio.Event()
        order: list[str] = []

        async def hung() -> None:
            running[0] += 1
            most[0] = max(most[0], running[0])
            await release.wait()
            running[0] -= 1

        async def other() -> None:
            order.append("other")

        waiting = [asyncio.create_task(gates.run("s", "d", "hung", hung)) for _ in range(10)]
        await asyncio.sleep(0.01)
        await gates.run("s", "d", "other", other)  # not behind the hung table's calls
        order.append(f"running {running[0]}")
        release.set()
        await asyncio.gather(*waiting)
        return most[0], [*order, f"gates {len(gates)}"]

    most, order = _run(main())
    assert most == 3
    assert order == ["other", "running 3", "gates 0"]  # no gate kept once no call holds or waits


def test_calls_that_waited_while_a_holder_s_storage_failed_fail_the_same_way_at_once():
    async def main() -> tuple[list[str], int]:
        gates, tries = TableGates(width=2), [0]
        release = asyncio.Event()

        async def store_call() -> str:
            tries[0] += 1
            await release.wait()
            raise StorageUnavailable("the store did not answer", detail="timeout", location="s3://b/t")

        calls = [asyncio.create_task(gates.run("S", "d", "T", store_call)) for _ in range(6)]
        await asyncio.sleep(0.01)
        release.set()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        return [type(o).__name__ + ":" + getattr(o, "message", "") for o in outcomes], tries[0]

    outcomes, tries = _run(main())
    assert outcomes == ["StorageUnavailable:the store did not answer"] * 6
    assert tries == 2  # the two holders tried the store; the four that waited did not


def test_a_call_after_the_failure_tries_again_and_other_errors_are_not_shared():
    async def main() -> list[str]:
        gates = TableGates(width=1)
        seen: list[str] = []

        async def fails(exc: Exception) -> None:
            raise exc

        async def ok() -> str:
            return "ok"

        for call in (
            lambda: fails(StorageUnavailable("down")),
            ok,  # arrived after the failure: tries the store again
            lambda: fails(InvalidParameter("bad")),
            ok,
        ):
            try:
                seen.append(await gates.run("s", "d", "t", call))
            except (StorageUnavailable, InvalidParameter) as exc:
                seen.append(type(exc).__name__)
        return seen

    assert _run(main()) == ["StorageUnavailable", "ok", "InvalidParameter", "ok"]


def test_one_gate_per_table_whatever_the_case_of_its_names():
    async def main() -> int:
        gates, running, most = TableGates(width=1), [0], [0]

        async def call() -> None:
            running[0] += 1
            most[0] = max(most[0], running[0])
            await asyncio.sleep(0.01)
            running[0] -= 1

        await asyncio.gather(gates.run("s", "d", "t", call), gates.run("S", "D", "T", call))
        return most[0]

    assert _run(main()) == 1
