"""Snapshots of runs in flight: put (upsert), get, list, delete (SEMANTICS §7)."""

from __future__ import annotations

from behest.domain.runs import RunStatus
from behest.domain.spend import TokenUsage
from behest.store.sql.store import SqlStore
from behest.store.writes import DeleteSnapshot, PutSnapshot
from tests.store.helpers import TENANT, create, events, new_id, snapshot


async def test_put_snapshot_then_get_returns_it(store: SqlStore) -> None:
    run = await create(store)
    saved = snapshot(
        run,
        status=RunStatus.WAITING_FOR_TOOLS,
        iteration=3,
        usage=TokenUsage(4_000_000_000, 77),
        model_calls=4,
        pending_tool_calls=("call_1", "call_2"),
    )

    await store.apply([PutSnapshot(saved)])

    assert await store.get_snapshot(run.id) == saved


async def test_put_snapshot_twice_keeps_one_with_the_latest_values(store: SqlStore) -> None:
    run = await create(store)
    first = snapshot(run, status=RunStatus.CALLING_MODEL, iteration=1, pending_tool_calls=("a",))
    latest = snapshot(run, status=RunStatus.PERSISTING, iteration=2, usage=TokenUsage(9, 8))

    await store.apply([PutSnapshot(first)])
    await store.apply([PutSnapshot(latest)])

    assert await store.get_snapshot(run.id) == latest
    assert [s for s in await store.list_snapshots(tenant=TENANT) if s.run_id == run.id] == [latest]


async def test_list_snapshots_shows_every_run_in_flight(store: SqlStore) -> None:
    runs = [await create(store) for _ in range(3)]
    saved = [snapshot(run, iteration=i) for i, run in enumerate(runs)]
    await store.apply([PutSnapshot(s) for s in saved])

    listed = {s.run_id: s for s in await store.list_snapshots(tenant=TENANT)}

    assert [listed.get(run.id) for run in runs] == saved


async def test_delete_snapshot_removes_it(store: SqlStore) -> None:
    kept, deleted = await create(store), await create(store)
    kept_snapshot = snapshot(kept)
    await store.apply([PutSnapshot(kept_snapshot), PutSnapshot(snapshot(deleted))])

    await store.apply([DeleteSnapshot(deleted.id)])

    assert await store.get_snapshot(deleted.id) is None
    assert await store.get_snapshot(kept.id) == kept_snapshot
    listed = {s.run_id for s in await store.list_snapshots(tenant=TENANT)}
    assert deleted.id not in listed
    assert kept.id in listed


async def test_delete_of_a_missing_snapshot_is_a_no_op(store: SqlStore) -> None:
    run = await create(store)
    kept = snapshot(run, iteration=2)
    await store.apply([PutSnapshot(kept)])
    missing = new_id()

    # The rest of its step still commits: a run ending twice is not an error.
    await store.apply([DeleteSnapshot(missing), *events(run.id, 1, 1)])

    assert await store.get_snapshot(missing) is None
    assert await store.get_snapshot(run.id) == kept
    assert await store.last_sequence(run.id) == 1


async def test_get_snapshot_of_unknown_run_is_none(store: SqlStore) -> None:
    assert await store.get_snapshot(new_id()) is None
