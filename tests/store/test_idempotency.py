"""client_request_id makes run creation idempotent, per tenant (SEMANTICS §4).

Every creation here goes the way production sends it: `EventLog.create` → `Store.apply_batch`.
Races run two stores on one database (two engines, as two replicas or processes would have),
each with its own event log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from behest.domain.events import RunStarted
from behest.domain.messages import Role
from behest.domain.runs import CreatedRun, Run, RunFilter, RunRequest, RunStatus
from behest.errors import AlreadyExists, ResourceExhausted
from behest.events.log import EventLog
from behest.store.sql.store import SqlStore
from behest.store.writes import Write
from tests.store.conftest import OpenStore
from tests.store.helpers import TENANT, create, finish, new_id, new_run, real_first_step, request

OpenLog = Callable[[SqlStore], Awaitable[EventLog]]
ROUNDS = 10


@pytest.fixture
async def open_log() -> AsyncIterator[OpenLog]:
    """Start an event log (the group-commit writer) over a store; all are stopped."""
    opened: list[EventLog] = []

    async def open_(store: SqlStore) -> EventLog:
        log = EventLog(store, batch_max=500, window_s=0.0)
        opened.append(log)
        await log.start()
        return log

    try:
        yield open_
    finally:
        for log in opened:
            await log.stop()


@pytest.fixture
async def log(store: SqlStore, open_log: OpenLog) -> EventLog:
    return await open_log(store)


@pytest.fixture
async def two_logs(store: SqlStore, open_store: OpenStore, open_log: OpenLog) -> list[EventLog]:
    """Event logs over two stores on the same database."""
    return [await open_log(store), await open_log(await open_store())]


async def _create(
    log: EventLog, req: RunRequest, *, tenant: str = TENANT, refused_if_new: str = ""
) -> tuple[CreatedRun, list[Write]]:
    new = new_run(req, tenant=tenant, first_step=real_first_step, refused_if_new=refused_if_new)
    return await log.create(new)


def _keyed(key: str, **fields: str | None) -> RunRequest:
    return request(client_request_id=key, **fields)  # type: ignore[arg-type]


async def _assert_one_run_with_one_first_step(store: SqlStore, run: Run) -> None:
    """The run is stored once, its first step committed once: RunStarted, one user message."""
    assert await store.get_run(run.id) == run
    [started] = await store.read_events(run.id, after=0, limit=10)
    assert (started.sequence, type(started.payload)) == (1, RunStarted)
    mine = await store.run_messages(run.id)
    assert [(m.role, m.text) for m in mine] == [(Role.USER, run.input)]


async def test_same_key_and_request_returns_the_same_run(store: SqlStore, log: EventLog) -> None:
    key = new_id()
    first, first_step = await _create(log, _keyed(key))

    again, again_step = await _create(log, _keyed(key))

    assert first.created and len(first_step) == 4
    assert not again.created and again_step == []
    assert again.run == first.run
    await _assert_one_run_with_one_first_step(store, first.run)


async def test_same_key_on_a_busy_session_returns_the_run_instead_of_aborting(
    store: SqlStore, log: EventLog
) -> None:
    earlier = await create(store)
    await finish(store, earlier.id)
    key = new_id()
    first, _ = await _create(log, _keyed(key, session_id=earlier.session_id))

    again, _ = await _create(log, _keyed(key, session_id=earlier.session_id))

    assert not again.created
    assert again.run.id == first.run.id
    assert again.run.session_id == earlier.session_id


async def test_same_key_returns_the_run_after_it_ended(store: SqlStore, log: EventLog) -> None:
    key = new_id()
    first, _ = await _create(log, _keyed(key))
    await finish(store, first.run.id, RunStatus.FAILED)

    again, _ = await _create(log, _keyed(key))

    assert not again.created
    assert again.run.id == first.run.id
    assert again.run.status == RunStatus.FAILED


@pytest.mark.parametrize(
    "changed",
    [{"input": "something else"}, {"model": "other"}, {"metadata": '{"a": 1}'}],
    ids=["input", "model", "metadata"],
)
async def test_same_key_with_a_different_request_is_already_exists_naming_the_run(
    store: SqlStore, log: EventLog, changed: dict[str, str]
) -> None:
    key = new_id()
    first, _ = await _create(log, _keyed(key))

    with pytest.raises(AlreadyExists, match=first.run.id):
        await _create(log, _keyed(key, **changed))

    runs = await store.list_runs(
        tenant=TENANT, wanted=RunFilter(session_id=first.run.session_id, limit=10)
    )
    assert [r.id for r in runs] == [first.run.id]


async def test_without_room_a_key_finds_its_run_and_nothing_new_is_created(
    store: SqlStore, log: EventLog
) -> None:
    """The executor's creation when max_concurrent_runs is reached: a repeat (a retry after a
    lost reply) is answered with its run; anything else is refused as without room."""
    full = "max_concurrent_runs: no room"
    key, other = new_id(), new_id()
    first, _ = await _create(log, _keyed(key))

    again, again_step = await _create(log, _keyed(key), refused_if_new=full)
    with pytest.raises(AlreadyExists, match=first.run.id):
        await _create(log, _keyed(key, input="something else"), refused_if_new=full)
    with pytest.raises(ResourceExhausted, match=f"^{full}$"):
        await _create(log, _keyed(other), refused_if_new=full)

    assert (again.created, again_step, again.run) == (False, [], first.run)
    assert await store.run_of_key(TENANT, other) is None
    await _assert_one_run_with_one_first_step(store, first.run)


async def test_same_key_under_another_tenant_is_independent(log: EventLog) -> None:
    key = new_id()
    mine, _ = await _create(log, _keyed(key), tenant="alice")

    theirs, _ = await _create(log, _keyed(key, input="a different request"), tenant="bob")

    assert mine.created and theirs.created
    assert theirs.run.id != mine.run.id
    assert theirs.run.input == "a different request"


async def test_two_stores_racing_with_one_key_create_one_run(
    store: SqlStore, two_logs: list[EventLog]
) -> None:
    for _ in range(ROUNDS):
        key = new_id()
        # Each store's log gets two twins (usually one batch) and races the other store.
        creations = [new_run(_keyed(key), first_step=real_first_step) for _ in range(4)]
        outcomes = await asyncio.gather(
            *(two_logs[i % 2].create(new) for i, new in enumerate(creations))
        )

        assert sorted(created.created for created, _ in outcomes) == [False, False, False, True]
        winner = next(created.run for created, _ in outcomes if created.created)
        assert all(created.run == winner for created, _ in outcomes)
        assert [len(writes) for created, writes in outcomes if not created.created] == [0] * 3
        proposed = {new.run_id for new in creations}
        assert winner.id in proposed
        for lost in proposed - {winner.id}:
            assert await store.get_run(lost) is None
        runs = await store.list_runs(
            tenant=TENANT, wanted=RunFilter(session_id=winner.session_id, limit=10)
        )
        assert [r.id for r in runs] == [winner.id]
        await _assert_one_run_with_one_first_step(store, winner)
        # A different request with the key is refused by either store, naming the run.
        for log in two_logs:
            with pytest.raises(AlreadyExists, match=winner.id):
                await _create(log, _keyed(key, input="a different request"))


async def test_a_different_request_racing_identical_ones_on_two_stores(
    store: SqlStore, two_logs: list[EventLog]
) -> None:
    for _ in range(ROUNDS):
        key = new_id()
        same = [new_run(_keyed(key), first_step=real_first_step) for _ in range(3)]
        other = new_run(_keyed(key, input="a different request"), first_step=real_first_step)
        creations = [same[0], other, same[1], same[2]]
        outcomes = await asyncio.gather(
            *(two_logs[i % 2].create(new) for i, new in enumerate(creations)),
            return_exceptions=True,
        )

        made = [o[0] for o in outcomes if isinstance(o, tuple)]
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        [winner] = [created.run for created in made if created.created]
        assert all(created.run == winner for created in made)
        assert all(isinstance(e, AlreadyExists) and winner.id in str(e) for e in refused), refused
        if winner.id == other.run_id:  # the different request won: the three are refused
            assert (len(made), len(refused)) == (1, 3)
        else:  # one of the three won: the others found it, the different one is refused
            assert (len(made), len(refused)) == (3, 1)
        for lost in {new.run_id for new in creations} - {winner.id}:
            assert await store.get_run(lost) is None
        await _assert_one_run_with_one_first_step(store, winner)


async def test_two_stores_racing_with_one_key_on_a_session_create_one_run(
    store: SqlStore, two_logs: list[EventLog]
) -> None:
    earlier = await create(store)
    await finish(store, earlier.id)
    key = new_id()
    req = _keyed(key, session_id=earlier.session_id)

    outcomes = await asyncio.gather(*(_create(two_logs[i % 2], req) for i in range(8)))

    assert sum(created.created for created, _ in outcomes) == 1
    assert len({created.run.id for created, _ in outcomes}) == 1
    winner = outcomes[0][0].run
    runs = await store.list_runs(
        tenant=TENANT, wanted=RunFilter(session_id=earlier.session_id, limit=20)
    )
    assert [r.id for r in runs] == [winner.id, earlier.id]
    # The user message follows the session's transcript, written once.
    assert [m.position for m in await store.session_messages(earlier.session_id)] == [0]
    await _assert_one_run_with_one_first_step(store, winner)
