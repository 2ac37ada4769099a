"""Steers in the store (store/sql/steers.py), on both backends: a message added to an active
run until the run closes its steering (a write of its ending step); the steers that came
first stay for the run to take, and a steer after it is refused (it then starts a queued run
instead)."""

from __future__ import annotations

from behest.domain.runs import RunStatus
from behest.domain.spend import TokenUsage
from behest.store.sql.store import SqlStore
from behest.store.writes import CloseSteering, TakeSteers, UpdateRun
from tests.store.helpers import at, create


async def test_steers_are_added_until_the_run_closes_its_steering(store: SqlStore) -> None:
    run = await create(store)
    first = await store.add_steer(run.id, "one", now=at())
    second = await store.add_steer(run.id, "two", now=at(1))
    assert first is not None and second is not None
    assert [s.text for s in await store.pending_steers(run.id)] == ["one", "two"]
    await store.apply([CloseSteering(run.id)])
    assert await store.add_steer(run.id, "too late", now=at(2)) is None
    # The two that came first wait for the run's last look, which takes them.
    assert [s.text for s in await store.pending_steers(run.id)] == ["one", "two"]
    await store.apply([TakeSteers((first.id, second.id))])
    assert await store.pending_steers(run.id) == []


async def test_an_ended_run_takes_no_steer(store: SqlStore) -> None:
    run = await create(store)
    ended = UpdateRun(run_id=run.id, status=RunStatus.COMPLETED, iterations=1, usage=TokenUsage())
    await store.apply([ended])
    assert await store.add_steer(run.id, "hello?", now=at()) is None
    assert await store.add_steer("no-such-run", "hello?", now=at()) is None
