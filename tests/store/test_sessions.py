"""Sessions as SessionService lists them: a tenant's, newest first, with run and message
counts; a session by id (whichever tenant's); a transcript's pages by position."""

from __future__ import annotations

from dataclasses import replace

import pytest

from behest.domain.runs import RunStatus
from behest.errors import NotFound
from behest.store.sql.store import SqlStore
from behest.store.writes import AppendMessage
from tests.store.helpers import TENANT, at, create, finish, message, new_id, request


async def test_list_sessions_is_the_tenants_newest_first_with_counts(store: SqlStore) -> None:
    tenant = new_id()
    first = await create(store, tenant=tenant, now=at(-3))
    await store.apply([AppendMessage(message(first, p)) for p in range(3)])
    await finish(store, first.id)
    again = await create(store, request(session_id=first.session_id), tenant=tenant, now=at(-2))
    await store.apply([AppendMessage(message(again, 3))])
    second = await create(store, tenant=tenant, now=at(-1))
    await create(store, tenant=new_id())  # another tenant's

    listed = await store.list_sessions(tenant=tenant, limit=100, offset=0)

    assert [s.id for s in listed] == [second.session_id, first.session_id]
    assert [(s.run_count, s.message_count) for s in listed] == [(1, 0), (2, 4)]
    assert {s.tenant for s in listed} == {tenant}
    # The second run of the first session is still active on it; the other session's run too.
    assert [s.active_run_id for s in listed] == [second.id, again.id]
    assert listed[1].created_at < listed[0].created_at


async def test_list_sessions_pages_with_limit_and_offset(store: SqlStore) -> None:
    tenant = new_id()
    made = [(await create(store, tenant=tenant, now=at(i - 10))).session_id for i in range(5)]
    newest_first = made[::-1]

    pages = [
        [s.id for s in await store.list_sessions(tenant=tenant, limit=2, offset=offset)]
        for offset in (0, 2, 4, 6)
    ]

    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:], []]


async def test_list_sessions_of_a_tenant_without_any_is_empty(store: SqlStore) -> None:
    await create(store)
    assert await store.list_sessions(tenant=new_id(), limit=100, offset=0) == []


async def test_get_session_counts_and_says_whose_it_is(store: SqlStore) -> None:
    tenant = new_id()
    run = await create(store, tenant=tenant)
    await store.apply([AppendMessage(message(run, p)) for p in range(2)])

    found = await store.get_session(run.session_id)

    assert found is not None
    assert (found.id, found.tenant, found.active_run_id) == (run.session_id, tenant, run.id)
    assert (found.run_count, found.message_count) == (1, 2)
    await finish(store, run.id, RunStatus.FAILED)
    idle = await store.get_session(run.session_id)
    assert idle is not None and idle.active_run_id == ""
    assert idle.updated_at >= found.updated_at


async def test_get_session_of_an_unknown_id_is_none(store: SqlStore) -> None:
    assert await store.get_session(new_id()) is None


async def test_session_messages_page_by_position(store: SqlStore) -> None:
    run = await create(store)
    written = [message(run, p, text=f"m{p}") for p in range(7)]
    await store.apply([AppendMessage(m) for m in written])
    other = await create(store)
    await store.apply([AppendMessage(message(other, 0))])

    async def page(start: int, limit: int) -> list[int]:
        found = await store.session_messages_page(run.session_id, from_position=start, limit=limit)
        assert {m.session_id for m in found} <= {run.session_id}
        return [m.position for m in found]

    assert await page(0, 3) == [0, 1, 2]
    assert await page(3, 3) == [3, 4, 5]
    assert await page(6, 3) == [6]
    assert await page(7, 3) == []
    assert await page(2**31 - 1, 3) == []
    assert await page(2**32 - 1, 3) == []  # past what a position can be
    assert await store.session_messages_page(run.session_id, from_position=0, limit=100) == (
        written
    )


async def test_start_session_starts_one_with_the_chosen_id_then_continues_it(
    store: SqlStore,
) -> None:
    chosen = new_id()
    starting = replace(request(session_id=chosen), start_session=True)

    first = await create(store, starting)
    await finish(store, first.id)
    again = await create(store, replace(starting, input="again"))

    assert first.session_id == again.session_id == chosen
    found = await store.get_session(chosen)
    assert found is not None and found.tenant == TENANT
    assert (found.run_count, found.active_run_id) == (2, again.id)


async def test_start_session_with_another_tenants_id_is_not_found_and_writes_nothing(
    store: SqlStore,
) -> None:
    theirs = await create(store, tenant=new_id())
    starting = replace(request(session_id=theirs.session_id), start_session=True)

    with pytest.raises(NotFound) as refused:
        await create(store, starting)

    assert str(refused.value) == f"session {theirs.session_id} not found"
    found = await store.get_session(theirs.session_id)
    assert found is not None and found.run_count == 1


async def test_a_session_that_was_not_started_is_still_not_found(store: SqlStore) -> None:
    missing = new_id()
    with pytest.raises(NotFound):
        await create(store, request(session_id=missing))
    assert await store.get_session(missing) is None
