"""Ownership of unfinished runs: claims, leases, renewals (ARCHITECTURE: Runs, ownership)."""

from __future__ import annotations

import asyncio

from behest.domain.runs import RunStatus
from behest.store.sql.store import SqlStore
from tests.store.conftest import OpenStore
from tests.store.helpers import at, create, finish, new_id


async def test_a_run_is_created_claimed_by_its_creator(store: SqlStore) -> None:
    lease = at(30)
    run = await create(store, owner="node-a", lease_until=lease)

    assert (run.owner, run.lease_expires_at) == ("node-a", lease)
    assert not await store.claim_run(run.id, owner="node-b", now=at(), lease_until=at(60))
    assert await store.get_run(run.id) == run


async def test_a_lapsed_or_unowned_run_is_taken_and_an_own_one_renewed(store: SqlStore) -> None:
    lapsed = await create(store, owner="node-a", lease_until=at(-1))
    unowned = await create(store)
    mine = await create(store, owner="node-b", lease_until=at(5))
    until = at(60)

    for run in (lapsed, unowned, mine):
        assert await store.claim_run(run.id, owner="node-b", now=at(), lease_until=until)
        claimed = await store.get_run(run.id)
        assert claimed is not None
        assert (claimed.owner, claimed.lease_expires_at) == ("node-b", until)


async def test_an_ended_or_unknown_run_cannot_be_claimed(store: SqlStore) -> None:
    ended = await create(store, owner="node-a", lease_until=at(-1))
    await finish(store, ended.id, RunStatus.CANCELLED)

    assert not await store.claim_run(ended.id, owner="node-b", now=at(), lease_until=at(60))
    assert not await store.claim_run(new_id(), owner="node-b", now=at(), lease_until=at(60))
    stored = await store.get_run(ended.id)
    assert stored is not None and stored.owner == "node-a"


async def test_renewal_extends_only_the_owners_unfinished_runs(store: SqlStore) -> None:
    # Owners of their own: on PostgreSQL other tests' runs share the database.
    me, them = f"node-{new_id()}", f"node-{new_id()}"
    before = at(5)
    mine = await create(store, owner=me, lease_until=before)
    ended = await create(store, owner=me, lease_until=before)
    await finish(store, ended.id)
    theirs = await create(store, owner=them, lease_until=before)
    until = at(60)

    await store.renew_leases(owner=me, lease_until=until)

    leases = {}
    for run in (mine, ended, theirs):
        stored = await store.get_run(run.id)
        assert stored is not None
        leases[run.id] = stored.lease_expires_at
    assert leases == {mine.id: until, ended.id: before, theirs.id: before}


async def test_two_stores_claiming_a_lapsed_run_one_wins(
    store: SqlStore, open_store: OpenStore
) -> None:
    other = await open_store()
    for _ in range(5):
        run = await create(store, owner="gone", lease_until=at(-1))

        won = await asyncio.gather(
            store.claim_run(run.id, owner="node-a", now=at(), lease_until=at(60)),
            other.claim_run(run.id, owner="node-b", now=at(), lease_until=at(60)),
        )

        assert sorted(won) == [False, True]
        claimed = await store.get_run(run.id)
        assert claimed is not None
        assert claimed.owner == ("node-a" if won[0] else "node-b")
