"""One statement of several tables' rows (store/sql/single_statement.py) on PostgreSQL, run by
`Writer.execute_once`; and the PostgreSQL engine's pooled connections (store/sql/engine.py).

The PostgreSQL tests share the session's database with every other test: each uses fresh
ids, and a channel of its own for notifications.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

from behest.domain.runs import CreatedRun
from behest.store.sql import rows
from behest.store.sql import tables as t
from behest.store.sql.creation import fresh_rows
from behest.store.sql.single_statement import OneStatement, one_statement
from behest.store.sql.store import SqlStore
from behest.store.writes import AppendEvent, AppendMessage, Fence, PutSnapshot, Write
from tests.store.helpers import new_run, real_first_step, request
from tests.support import CI, NO_POSTGRES, POSTGRES_URL

needs_postgres = pytest.mark.skipif(not POSTGRES_URL and not CI, reason=NO_POSTGRES)
WAIT_S = 10.0


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[SqlStore]:
    started = SqlStore(postgres_url)
    await started.start()
    try:
        yield started
    finally:
        await started.close()


async def execute(store: SqlStore, one: OneStatement) -> None:
    await store.engines.writer.execute_once(one.statement, one.params)


def creations(count: int) -> tuple[OneStatement, list[tuple[CreatedRun, list[Write]]]]:
    """`count` fresh creations (a new session, no key) with their first steps, as the one
    statement that inserts them, and their outcomes."""
    sessions, runs, events, messages, snapshots = [], [], [], [], []
    outcomes = []
    for _ in range(count):
        new = new_run(request(), first_step=real_first_step)
        session, run, created, writes = fresh_rows(new)
        sessions.append(session)
        runs.append(run)
        generation = 0
        for write in writes:
            match write:
                case Fence(generation=generation):
                    pass  # the creator's own claim: it labels the run's events
                case AppendEvent(event):
                    events.append(rows.event_to_row(event, generation))
                case AppendMessage(message):
                    messages.append(rows.message_to_row(message))
                case PutSnapshot(snapshot):
                    snapshots.append(rows.snapshot_to_row(snapshot))
                case _:
                    raise AssertionError(f"not a first step's write: {write}")
        outcomes.append((created, writes))
    one = one_statement(
        [(t.sessions, sessions), (t.runs, runs), (t.messages, messages), (t.events, events)],
        [(t.snapshots, "run_id", snapshots)],
    )
    return one, outcomes


def session_row(session_id: str | None = None) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "id": session_id or str(uuid.uuid4()),
        "created_at": now,
        "updated_at": now,
        "active_run_id": None,
        "tenant": "single-statement",
    }


def run_row(session_id: str) -> dict[str, Any]:
    """A run naming only the columns without a default (others get theirs)."""
    now = datetime.now(UTC)
    return {
        "id": str(uuid.uuid4()),
        "session_id": session_id,
        "status": 1,
        "provider": "local",
        "model": "echo",
        "input": "hi",
        "metadata": "",
        "tool_choice": "",
        "created_at": now,
        "updated_at": now,
        "iterations": 0,
        "finish_reason": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "error": "",
        "traceparent": "",
    }


async def count(store: SqlStore, table: sa.Table, column: str, values: Sequence[str]) -> int:
    query = sa.select(sa.func.count()).select_from(table).where(table.c[column].in_(values))
    async with store.engines.reader.connect() as conn:
        return int((await conn.execute(query)).scalar_one())


# --- rows land, all or none ----------------------------------------------------------------


@needs_postgres
async def test_fresh_creations_land_whole_and_read_back_as_created(store: SqlStore) -> None:
    one, outcomes = creations(3)

    await execute(store, one)

    for created, writes in outcomes:
        run = created.run
        assert await store.get_run(run.id) == run
        session = await store.get_session(run.session_id)
        assert session is not None
        assert (session.active_run_id, session.run_count) == (run.id, 1)
        [started, message, snapshot] = [w for w in writes if not isinstance(w, Fence)]
        assert isinstance(started, AppendEvent)
        assert isinstance(message, AppendMessage)
        assert isinstance(snapshot, PutSnapshot)
        assert await store.read_events(run.id, after=0, limit=10) == [started.event]
        assert await store.run_messages(run.id) == [message.message]
        assert await store.get_snapshot(run.id) == snapshot.snapshot


@needs_postgres
async def test_a_failure_in_the_last_cte_leaves_nothing(store: SqlStore) -> None:
    landed, [(created, writes)] = creations(1)
    await execute(store, landed)
    [started] = [w for w in writes if isinstance(w, AppendEvent)]
    session = session_row()
    run = run_row(session["id"])

    # The event is stored already: the last group fails, and with it the whole statement.
    again = [rows.event_to_row(started.event)]
    failing = one_statement([(t.sessions, [session]), (t.runs, [run]), (t.events, again)])
    with pytest.raises(IntegrityError, match="events"):
        await execute(store, failing)

    assert await count(store, t.sessions, "id", [session["id"]]) == 0
    assert await count(store, t.runs, "id", [run["id"]]) == 0
    assert await store.get_run(created.run.id) == created.run


@needs_postgres
async def test_foreign_keys_are_checked_at_the_end_of_the_statement(store: SqlStore) -> None:
    # The parent in a later CTE than its child: still there when the key is checked.
    session = session_row()
    run = run_row(session["id"])
    await execute(store, one_statement([(t.runs, [run]), (t.sessions, [session])]))
    assert await count(store, t.runs, "id", [run["id"]]) == 1

    # A parent in no CTE and not stored: the key fails the statement, and nothing lands.
    other, orphan = session_row(), run_row(str(uuid.uuid4()))
    with pytest.raises(IntegrityError, match="foreign key"):
        await execute(store, one_statement([(t.sessions, [other]), (t.runs, [orphan])]))
    assert await count(store, t.sessions, "id", [other["id"]]) == 0


@needs_postgres
async def test_an_upsert_updates_the_columns_it_names_and_keeps_the_others(
    store: SqlStore,
) -> None:
    tenant = f"single-statement-{uuid.uuid4()}"
    opened = datetime.now(UTC).replace(microsecond=0)
    breaker = {"tenant": tenant, "consecutive_failures": 3, "opened_at": opened}
    await execute(store, one_statement([], [(t.circuit_breaker, "tenant", [breaker])]))

    failures = {"tenant": tenant, "consecutive_failures": 4}
    await execute(store, one_statement([], [(t.circuit_breaker, "tenant", [failures])]))

    query = sa.select(t.circuit_breaker).where(t.circuit_breaker.c.tenant == tenant)
    async with store.engines.reader.connect() as conn:
        row = (await conn.execute(query)).one()
    assert (row.consecutive_failures, row.opened_at) == (4, opened)


@needs_postgres
async def test_a_string_too_long_for_its_column_is_refused_not_cut(store: SqlStore) -> None:
    # The arrays are cast without lengths: an explicit cast to VARCHAR(36) would cut it.
    long_id = str(uuid.uuid4()) + "-and-then-some"

    with pytest.raises(DBAPIError, match="too long"):
        await execute(store, one_statement([(t.sessions, [session_row(long_id)])]))

    assert await count(store, t.sessions, "id", [long_id, long_id[:36]]) == 0


# --- notifications -------------------------------------------------------------------------


@needs_postgres
async def test_notifications_are_delivered_only_when_the_statement_commits(
    store: SqlStore, postgres_url: str
) -> None:
    channel = f"behest_test_{uuid.uuid4().hex}"
    received: asyncio.Queue[str] = asyncio.Queue()
    url = make_url(postgres_url).set(drivername="postgresql")
    listener = await asyncpg.connect(url.render_as_string(hide_password=False))
    try:
        await listener.add_listener(channel, lambda *args: received.put_nowait(args[-1]))
        taken = session_row()
        await execute(store, one_statement([(t.sessions, [taken])]))

        failing = one_statement([(t.sessions, [taken])], notify=[(channel, "failed")])
        with pytest.raises(IntegrityError):
            await execute(store, failing)
        landed = one_statement(
            [(t.sessions, [session_row()])], notify=[(channel, "first"), (channel, "second")]
        )
        await execute(store, landed)

        # Notifications arrive in commit order: one of the failed statement would be first.
        got = [await asyncio.wait_for(received.get(), WAIT_S) for _ in range(2)]
        assert got == ["first", "second"]
        assert received.empty()
    finally:
        await listener.close()


# --- one text per shape, prepared once ------------------------------------------------------


def test_the_text_does_not_depend_on_how_many_rows() -> None:
    one = one_statement([(t.sessions, [session_row()])])
    three = one_statement([(t.sessions, [session_row() for _ in range(3)])])

    assert one.statement is three.statement
    assert one.params.keys() == three.params.keys()
    dialect = postgresql.asyncpg.dialect()
    assert str(one.statement.compile(dialect=dialect)).startswith("WITH w0 AS")


@needs_postgres
async def test_a_connection_prepares_the_statement_once_for_any_row_count(
    store: SqlStore,
) -> None:
    prepared = sa.text(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'WITH w0 AS%'"
    )
    async with store.engines.reader.connect() as conn:
        for size in (1, 3, 2):
            one = one_statement([(t.sessions, [session_row() for _ in range(size)])])
            await conn.execute(one.statement, one.params)
        assert (await conn.execute(prepared)).scalar_one() == 1


def test_rows_of_a_group_name_the_same_known_columns() -> None:
    full, partial = session_row(), session_row()
    del partial["tenant"]
    with pytest.raises(ValueError, match="different columns"):
        one_statement([(t.sessions, [full, partial])])
    with pytest.raises(ValueError, match="different columns"):
        one_statement([(t.sessions, [partial, full])])
    with pytest.raises(ValueError, match="no columns"):
        one_statement([(t.sessions, [{**full, "colour": "blue"}])])
    with pytest.raises(ValueError, match="key"):
        one_statement([], [(t.sessions, "id", [{"tenant": "x"}])])


async def test_sqlite_runs_one_statement_in_a_transaction(tmp_path: Path) -> None:
    store = SqlStore(f"sqlite+aiosqlite:///{tmp_path / 'behest.db'}")
    await store.start()
    try:
        session = session_row()
        rows_back = await store.engines.writer.execute_once(
            sa.insert(t.sessions).returning(t.sessions.c.id), session
        )
        assert [tuple(row) for row in rows_back] == [(session["id"],)]
        assert await count(store, t.sessions, "id", [session["id"]]) == 1
    finally:
        await store.close()


# --- the engine: reads without a transaction, a pool without pre-ping ----------------------


@needs_postgres
async def test_each_read_is_a_transaction_of_its_own(store: SqlStore) -> None:
    # No BEGIN and ROLLBACK around reads: two statements, two transactions.
    xid = sa.text("SELECT txid_current()")
    async with store.engines.reader.connect() as conn:
        first = (await conn.execute(xid)).scalar_one()
        second = (await conn.execute(xid)).scalar_one()
    assert first != second


async def pooled_backends(store: SqlStore, how_many: int) -> list[int]:
    """Fill a fresh pool with `how_many` connections; their server processes."""
    await store.engines.reader.dispose()
    connections = [await store.engines.reader.connect() for _ in range(how_many)]
    query = sa.text("SELECT pg_backend_pid()")
    pids = [int((await conn.execute(query)).scalar_one()) for conn in connections]
    for conn in connections:
        await conn.close()
    return pids


async def terminate(store: SqlStore, pids: list[int], *, wait: bool) -> None:
    """End the server processes (as a restart or an administrator would), from outside the
    pool; with `wait`, until they are gone."""
    url = make_url(str(store.engines.reader.url)).set(drivername="postgresql")
    admin = await asyncpg.connect(url.render_as_string(hide_password=False))
    try:
        for pid in pids:
            await admin.execute("SELECT pg_terminate_backend($1, $2)", pid, 5000 if wait else 0)
    finally:
        await admin.close()


@needs_postgres
async def test_connections_the_server_closed_are_replaced_at_checkout(store: SqlStore) -> None:
    pids = await pooled_backends(store, 3)
    await terminate(store, pids, wait=True)
    await asyncio.sleep(0.05)  # the event loop reads each connection's end

    one, [(created, _)] = creations(1)
    await execute(store, one)
    assert await store.get_run(created.run.id) == created.run
    [result] = await store.apply_batch([new_run(request(), first_step=real_first_step)])
    assert not isinstance(result, BaseException)
    assert set(await pooled_backends(store, 1)).isdisjoint(pids)


@needs_postgres
async def test_a_write_whose_connection_just_died_runs_again_on_a_new_one(
    store: SqlStore,
) -> None:
    for _ in range(3):
        # Told to end but not gone yet: the pool cannot tell, the transaction finds out.
        await terminate(store, await pooled_backends(store, 1), wait=False)
        new = new_run(request(), first_step=real_first_step)
        [result] = await store.apply_batch([new])
        assert not isinstance(result, BaseException)
        assert await store.get_run(new.run_id) is not None
