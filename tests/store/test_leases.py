"""Ownership of unfinished runs: claims, leases, renewals (ARCHITECTURE: Runs, ownership)."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from behest.domain.runs import Cancel, RunStatus
from behest.domain.spend import CancelSource
from behest.errors import FailedPrecondition, Fenced
from behest.store.base import NodeRecord, Renewal
from behest.store.sql import tables as t
from behest.store.sql.store import SqlStore
from behest.store.writes import Fence
from tests.store.conftest import OpenStore
from tests.store.helpers import at, create, events, finish, new_id, update


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

        claimed = await store.get_run(run.id)
        assert claimed is not None
        assert sorted(won) == [0, claimed.lease_generation] and claimed.lease_generation == 2
        assert claimed.owner == ("node-a" if won[0] else "node-b")


# --- fencing: a claim raises the generation, and a stale step writes nothing ---------------


async def event_generations(store: SqlStore, run_id: str) -> dict[int, int]:
    """Each stored event's sequence → the lease generation that wrote it."""
    query = sa.select(t.events.c.sequence, t.events.c.generation).where(t.events.c.run_id == run_id)
    async with store.engines.reader.connect() as conn:
        return {int(seq): int(gen) for seq, gen in await conn.execute(query)}


async def test_every_claim_raises_the_generation_and_force_takes_a_live_one(
    store: SqlStore,
) -> None:
    run = await create(store, owner="node-a", lease_until=at(60))
    assert run.lease_generation == 1  # the creator's claim

    assert await store.claim_run(run.id, owner="node-b", now=at(), lease_until=at(60)) == 0
    taken = await store.claim_run(run.id, owner="node-b", now=at(), lease_until=at(60), force=True)
    again = await store.claim_run(run.id, owner="node-b", now=at(), lease_until=at(60))

    assert (taken, again) == (2, 3)
    stored = await store.get_run(run.id)
    assert stored is not None and (stored.owner, stored.lease_generation) == ("node-b", 3)


async def test_a_step_under_a_lost_claim_writes_nothing_and_fails_alone(store: SqlStore) -> None:
    lost = await create(store, owner="node-a", lease_until=at(-1))
    kept = await create(store, owner="node-a", lease_until=at(60))
    await store.apply([Fence(lost.id, 1), *events(lost.id, 1, 2)])
    assert await store.claim_run(lost.id, owner="node-b", now=at(), lease_until=at(60)) == 2

    results = await store.apply_batch(
        [
            [Fence(lost.id, 1), *events(lost.id, 3, 3), update(lost.id, RunStatus.FAILED)],
            [Fence(kept.id, 1), *events(kept.id, 1, 1)],
            [Fence(lost.id, 2), *events(lost.id, 3, 4)],  # the new owner's step
        ]
    )

    assert isinstance(results[0], Fenced)
    assert (results[0].run_id, results[0].generation) == (lost.id, 1)
    assert results[1:] == [None, None]
    stored = await store.get_run(lost.id)
    assert stored is not None and stored.status != RunStatus.FAILED
    assert await store.last_sequence(kept.id) == 1
    assert await event_generations(store, lost.id) == {1: 1, 2: 1, 3: 2, 4: 2}


async def test_a_claim_waits_for_a_step_in_flight_and_the_step_lands_whole(
    store: SqlStore, open_store: OpenStore
) -> None:
    # Two stores (replicas): steps and a claim race; every event lands under the generation
    # that was current when its step committed, and none after the claim under the old one.
    other = await open_store()
    for _ in range(5):
        run = await create(store, owner="node-a", lease_until=at(-1))
        steps = [store.apply_batch([[Fence(run.id, 1), *events(run.id, n, n)]]) for n in (1, 2)]
        claim = other.claim_run(run.id, owner="node-b", now=at(), lease_until=at(60))
        outcome = await asyncio.gather(*steps, claim)
        assert outcome[2] == 2
        landed = await event_generations(store, run.id)
        assert set(landed.values()) <= {1}
        # A step after the claim under the old generation is refused.
        (late,) = await store.apply_batch([[Fence(run.id, 1), *events(run.id, 9, 9)]])
        assert isinstance(late, Fenced)


# --- a cancel asked of a run another node executes ----------------------------------------


async def test_a_cancel_request_is_kept_the_first_stands_and_renewal_reports_it(
    store: SqlStore,
) -> None:
    owner = f"node-{new_id()}"
    run = await create(store, owner=owner, lease_until=at(60))
    other = await create(store, owner=owner, lease_until=at(60))

    first = Cancel("alice", "too slow", CancelSource.CALLER)
    assert await store.request_cancel(run.id, first, now=at())
    assert await store.request_cancel(run.id, Cancel("bob", "later"), now=at())

    stored = await store.get_run(run.id)
    assert stored is not None and stored.cancel_request == first
    renewal = await store.renew_leases(owner=owner, lease_until=at(60))
    assert renewal == Renewal(held=frozenset({run.id, other.id}), cancel_asked=frozenset({run.id}))
    untouched = await store.get_run(other.id)
    assert untouched is not None and untouched.cancel_request is None
    await finish(store, run.id, RunStatus.CANCELLED)
    assert not await store.request_cancel(run.id, first, now=at())  # ended: nothing to ask
    assert not await store.request_cancel(new_id(), first, now=at())


async def test_a_stopping_node_lets_go_of_its_unfinished_runs(store: SqlStore) -> None:
    owner = f"node-{new_id()}"
    running = await create(store, owner=owner, lease_until=at(60))
    ended = await create(store, owner=owner, lease_until=at(60))
    await finish(store, ended.id)

    assert await store.release_runs(owner=owner) == 1

    stored = await store.get_run(running.id)
    assert stored is not None and (stored.owner, stored.lease_expires_at) == ("", None)
    assert await store.claim_run(running.id, owner="next", now=at(), lease_until=at(60)) == 2


# --- the nodes serving the database --------------------------------------------------------


async def test_a_node_name_held_by_a_live_process_is_refused(store: SqlStore) -> None:
    name = f"node-{new_id()}"
    first = NodeRecord(name=name, instance="one", host="host-a", pid=101)
    second = NodeRecord(name=name, instance="two", host="host-b", pid=202)
    before = await store.live_nodes(now=at())
    await store.register_node(first, now=at(), until=at(60))
    assert await store.live_nodes(now=at()) == before + 1

    with pytest.raises(FailedPrecondition, match="pid 101 on 'host-a'"):
        await store.register_node(second, now=at(), until=at(60))
    await store.register_node(first, now=at(), until=at(60))  # itself again: fine

    await store.unregister_node(first)
    await store.register_node(second, now=at(), until=at(60))
    await store.unregister_node(second)
    assert await store.live_nodes(now=at()) == before


async def test_a_lapsed_node_name_is_taken_by_the_next_process(store: SqlStore) -> None:
    name = f"node-{new_id()}"
    gone = NodeRecord(name=name, instance="gone", host="h", pid=1)
    await store.register_node(gone, now=at(-60), until=at(-30))
    after = NodeRecord(name=name, instance="after", host="h", pid=2)
    await store.register_node(after, now=at(), until=at(60))
    await store.unregister_node(gone)  # the old instance's goodbye removes nothing of the new
    with pytest.raises(FailedPrecondition):
        await store.register_node(gone, now=at(), until=at(60))
    await store.unregister_node(after)


async def test_a_claim_does_not_wait_long_for_a_stalled_writers_lock(postgres_url: str) -> None:
    # PostgreSQL only (SQLite's writers are serialised: no row locks to wait for). A writer
    # frozen inside a step's transaction holds its runs' rows (FOR SHARE): claims give up
    # after a moment (tried again at the next round) instead of waiting it out.
    store, other = SqlStore(postgres_url), SqlStore(postgres_url)
    await store.start()
    await other.start()
    try:
        run = await create(store, owner="frozen", lease_until=at(-1))
        async with store.engines.reader.connect() as conn:
            stalled = await conn.execution_options(isolation_level="READ COMMITTED")
            async with stalled.begin():
                lock = sa.select(t.runs.c.id).where(t.runs.c.id == run.id)
                await stalled.execute(lock.with_for_update(read=True))
                async with asyncio.timeout(5):
                    taken = await other.claim_run(
                        run.id, owner="next", now=at(), lease_until=at(60)
                    )
                assert taken == 0
        assert await other.claim_run(run.id, owner="next", now=at(), lease_until=at(60)) == 2
    finally:
        await other.close()
        await store.close()
