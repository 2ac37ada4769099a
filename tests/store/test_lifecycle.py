"""start/close, restarts and migrations: what is stored survives a new process (§2, §4)."""

from __future__ import annotations

import asyncio

import pytest
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from behest.errors import Aborted
from behest.store.sql import tables as t
from behest.store.sql.migrate import MIGRATIONS
from behest.store.sql.store import SqlStore
from behest.store.writes import AppendEvent
from tests.store.conftest import OpenStore
from tests.store.helpers import (
    create,
    create_outcome,
    event,
    events,
    new_id,
    new_run,
    request,
)


def _head_revision() -> str:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


async def _schema_revision(store: SqlStore) -> str | None:
    async with store.engines.reader.connect() as conn:
        return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())


async def test_a_new_store_on_the_same_database_keeps_runs_and_events(
    store: SqlStore, open_store: OpenStore
) -> None:
    run = await create(store)
    await store.apply(events(run.id, 1, 3))
    await store.apply([AppendEvent(event(run.id, 4))])
    before = await store.read_events(run.id, after=0, limit=10)
    await store.close()

    reopened = await open_store()

    assert await reopened.get_run(run.id) == run
    assert await reopened.read_events(run.id, after=0, limit=10) == before
    assert await reopened.last_sequence(run.id) == 4
    assert run.id in {r.id for r in await reopened.unfinished_runs()}


async def test_sequence_continues_after_a_restart(store: SqlStore, open_store: OpenStore) -> None:
    run = await create(store)
    await store.apply(events(run.id, 1, 2))
    await store.close()
    reopened = await open_store()

    await reopened.apply(events(run.id, await reopened.last_sequence(run.id) + 1, 3))

    assert [e.sequence for e in await reopened.read_events(run.id, after=0, limit=10)] == [1, 2, 3]


async def test_idempotency_key_survives_a_restart(store: SqlStore, open_store: OpenStore) -> None:
    key = new_id()
    first = await create(store, request(client_request_id=key))
    await store.close()
    reopened = await open_store()

    again, writes = await create_outcome(reopened, new_run(request(client_request_id=key)))

    assert not again.created
    assert again.run == first
    assert writes == []


async def test_busy_session_stays_busy_across_a_restart(
    store: SqlStore, open_store: OpenStore
) -> None:
    run = await create(store)
    await store.close()
    reopened = await open_store()

    with pytest.raises(Aborted, match=run.id):
        await create(reopened, request(session_id=run.session_id))
    assert await reopened.get_run(run.id) == run


async def test_start_runs_migrations_again_without_error(
    store: SqlStore, open_store: OpenStore
) -> None:
    before = await create(store)
    await store.apply(events(before.id, 1, 2))

    await store.start()
    second = await open_store()
    third = await open_store()

    for opened in (store, second, third):
        assert await _schema_revision(opened) == _head_revision()
    after = await create(third)
    for opened in (store, second, third):
        # Migrating again kept what was there, and each store sees what another wrote.
        assert await opened.get_run(before.id) == before
        assert await opened.last_sequence(before.id) == 2
        assert await opened.get_run(after.id) == after


async def test_stores_starting_at_once_all_come_up(open_store: OpenStore) -> None:
    stores = await asyncio.gather(*(open_store() for _ in range(4)))

    for opened in stores:
        assert await _schema_revision(opened) == _head_revision()
    assert await asyncio.gather(*(s.last_sequence(new_id()) for s in stores)) == [0, 0, 0, 0]


async def test_close_twice_is_harmless_and_a_closed_store_starts_again(store: SqlStore) -> None:
    run = await create(store)
    await store.apply(events(run.id, 1, 3))

    await store.close()
    await store.close()
    await store.start()

    assert await store.get_run(run.id) == run
    assert await store.last_sequence(run.id) == 3
    await store.apply(events(run.id, 4, 4))
    assert await store.last_sequence(run.id) == 4


async def test_migrated_schema_matches_the_table_definitions(store: SqlStore) -> None:
    async with store.engines.reader.connect() as conn:
        diff = await conn.run_sync(
            lambda c: compare_metadata(MigrationContext.configure(c), t.metadata)
        )

    assert diff == []
