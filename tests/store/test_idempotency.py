"""client_request_id makes run creation idempotent, per identity (SEMANTICS §4)."""

from __future__ import annotations

import asyncio

import pytest

from behest.domain.runs import CreatedRun, RunStatus
from behest.errors import AlreadyExists
from behest.store.sql.store import SqlStore
from tests.store.helpers import IDENTITY, TRACEPARENT, at, create, finish, new_id, request


async def _create(
    store: SqlStore, *, key: str, identity: str = IDENTITY, **fields: str | None
) -> CreatedRun:
    return await store.create_run(
        request(client_request_id=key, **fields),  # type: ignore[arg-type]
        run_id=new_id(),
        identity=identity,
        now=at(),
        traceparent=TRACEPARENT,
    )


async def test_same_key_and_request_returns_the_same_run(store: SqlStore) -> None:
    key = new_id()
    first = await _create(store, key=key)

    again = await _create(store, key=key)

    assert first.created
    assert not again.created
    assert again.run == first.run


async def test_same_key_on_a_busy_session_returns_the_run_instead_of_aborting(
    store: SqlStore,
) -> None:
    earlier = await create(store)
    await finish(store, earlier.id)
    key = new_id()
    first = await _create(store, key=key, session_id=earlier.session_id)

    again = await _create(store, key=key, session_id=earlier.session_id)

    assert not again.created
    assert again.run.id == first.run.id
    assert again.run.session_id == earlier.session_id


async def test_same_key_returns_the_run_after_it_ended(store: SqlStore) -> None:
    key = new_id()
    first = await _create(store, key=key)
    await finish(store, first.run.id, RunStatus.FAILED)

    again = await _create(store, key=key)

    assert not again.created
    assert again.run.id == first.run.id
    assert again.run.status == RunStatus.FAILED


@pytest.mark.parametrize(
    "changed",
    [{"input": "something else"}, {"model": "other"}, {"metadata": '{"a": 1}'}],
    ids=["input", "model", "metadata"],
)
async def test_same_key_with_a_different_request_is_already_exists_naming_the_run(
    store: SqlStore, changed: dict[str, str]
) -> None:
    key = new_id()
    first = await _create(store, key=key)

    with pytest.raises(AlreadyExists, match=first.run.id):
        await _create(store, key=key, **changed)

    runs = await store.list_runs(session_id=first.run.session_id, status=None, limit=10, offset=0)
    assert [r.id for r in runs] == [first.run.id]


async def test_same_key_under_another_identity_is_independent(store: SqlStore) -> None:
    key = new_id()
    mine = await _create(store, key=key, identity="alice")

    theirs = await _create(store, key=key, identity="bob", input="a different request")

    assert mine.created and theirs.created
    assert theirs.run.id != mine.run.id
    assert theirs.run.input == "a different request"


async def test_two_identical_requests_racing_create_one_run(store: SqlStore) -> None:
    key = new_id()
    run_ids = [new_id(), new_id()]

    outcomes = await asyncio.gather(
        *(
            store.create_run(
                request(client_request_id=key),
                run_id=run_id,
                identity=IDENTITY,
                now=at(),
                traceparent=TRACEPARENT,
            )
            for run_id in run_ids
        )
    )

    assert sorted(o.created for o in outcomes) == [False, True]
    assert outcomes[0].run == outcomes[1].run
    winner = outcomes[0].run.id
    assert winner in run_ids
    (loser,) = set(run_ids) - {winner}
    assert await store.get_run(loser) is None
    runs = await store.list_runs(
        session_id=outcomes[0].run.session_id, status=None, limit=10, offset=0
    )
    assert [r.id for r in runs] == [winner]


async def test_many_identical_requests_racing_on_a_session_create_one_run(
    store: SqlStore,
) -> None:
    earlier = await create(store)
    await finish(store, earlier.id)
    key = new_id()

    outcomes = await asyncio.gather(
        *(_create(store, key=key, session_id=earlier.session_id) for _ in range(8))
    )

    assert sum(o.created for o in outcomes) == 1
    assert len({o.run.id for o in outcomes}) == 1
    runs = await store.list_runs(session_id=earlier.session_id, status=None, limit=20, offset=0)
    assert [r.id for r in runs] == [outcomes[0].run.id, earlier.id]
