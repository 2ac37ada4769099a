"""Retention and erasure (store/sql/erasure.py): a session deleted with everything of it, and
finished runs pruned with everything of them, on both backends."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from behest.domain.callers import Caller
from behest.domain.executions import ExecutionStatus, ToolExecution, Transition
from behest.domain.messages import Role
from behest.domain.runs import Run, RunStatus
from behest.domain.waits import PendingCall, WaitKind
from behest.domain.workers import StoredQuestion, Task, TaskQuestion, TaskState
from behest.errors import FailedPrecondition, NotFound, quote
from behest.runs.tickets import StreamTickets
from behest.store.sql import tables as t
from behest.store.sql.store import SqlStore
from behest.store.writes import (
    AppendMessage,
    EnqueueTask,
    PutSnapshot,
    RecordExecution,
    ReleaseRun,
    RequestInput,
)
from tests.store.conftest import OpenStore
from tests.store.helpers import (
    TENANT,
    at,
    create,
    create_outcome,
    events,
    message,
    new_id,
    new_run,
    real_first_step,
    request,
    snapshot,
    update,
)

MICROSECOND = timedelta(microseconds=1)
# The tables a session's or a run's rows are in; each must be emptied of them.
OWNED = {
    "sessions",
    "runs",
    "events",
    "messages",
    "snapshots",
    "pending_calls",
    "idempotency_keys",
    "tool_executions",
    "tool_execution_transitions",
    "worker_tasks",
    "worker_questions",
    "stream_tickets",
    "steers",
}


def task(run: Run) -> Task:
    """A worker's task of the run, queued."""
    return Task(
        execution_id=new_id(),
        attempt=1,
        run_id=run.id,
        session_id=run.session_id,
        tenant=run.tenant,
        call_id="call-1",
        tool_name="lookup_order",
        arguments="{}",
        idempotency_key="key",
        created_at=at(),
        schedule_deadline=at(60),
        timeout_s=30.0,
    )


def execution(run: Run) -> RecordExecution:
    """A tool execution of the run, started, with its first transition."""
    started = ToolExecution(
        id=new_id(),
        run_id=run.id,
        tenant=run.tenant,
        call_id="call-1",
        tool_name="shell",
        source="builtin",
        attempt=1,
        status=ExecutionStatus.STARTED,
        executor="node node-a",
        idempotent=False,
        started_at=at(),
    )
    return RecordExecution(
        started, Transition(status=ExecutionStatus.STARTED, at=at(), actor="node node-a")
    )


def pending(run: Run, call_id: str = "call-1") -> PendingCall:
    return PendingCall(
        run_id=run.id,
        call_id=call_id,
        session_id=run.session_id,
        tenant=run.tenant,
        kind=WaitKind.APPROVAL,
        tool_name="shell",
        arguments='{"command": "ls"}',
        ordinal=0,
        requested_at=at(),
        expires_at=at(600),
    )


async def full_run(
    store: SqlStore,
    *,
    session_id: str | None = None,
    status: RunStatus | None = RunStatus.COMPLETED,
) -> Run:
    """A run with rows in every table: its key, events, messages, snapshot, a pending call,
    a worker's task that asked a question, and a stream ticket; ended in `status`
    (terminal), waiting (WAITING_FOR_INPUT), or running (None)."""
    req = request(session_id=session_id, client_request_id=new_id())
    run = await create(store, req, owner="node-a", lease_until=at(60), first_step=real_first_step)
    leased = replace(task(run), state=TaskState.LEASED, worker_id="w-1", lease_until=at(60))
    position = max(m.position for m in await store.session_messages(run.session_id)) + 1
    await store.apply(
        [
            *events(run.id, 2, 4),
            AppendMessage(message(run, position, role=Role.ASSISTANT, text="done")),
            PutSnapshot(snapshot(run)),
            RequestInput((pending(run),)),
            execution(run),
            EnqueueTask(leased),
        ]
    )
    question = TaskQuestion(leased.execution_id, 1, "How many?", '{"type": "object"}')
    asked = await store.ask_task_question("w-1", question, now=at())
    assert isinstance(asked, StoredQuestion)
    await StreamTickets(store, ttl_s=600).mint(Caller("alice", run.tenant), run.id)
    assert await store.add_steer(run.id, "and one more thing", now=at()) is not None
    if status == RunStatus.WAITING_FOR_INPUT:
        await store.apply([update(run.id, status), ReleaseRun(run.id)])
    elif status is not None:
        await store.apply([update(run.id, status)])
    stored = await store.get_run(run.id)
    assert stored is not None
    return stored


async def footprint(
    store: SqlStore, *, runs: list[Run], sessions: set[str] | None = None
) -> dict[str, int]:
    """How many rows each table holds that name these runs or sessions."""
    run_ids = [run.id for run in runs]
    session_ids = sorted(sessions if sessions is not None else {run.session_id for run in runs})
    counts = {}
    async with store.engines.reader.connect() as conn:
        for table in t.metadata.sorted_tables:
            where = _naming(table, run_ids, session_ids)
            if where is not None:
                query = sa.select(sa.func.count()).select_from(table).where(where)
                counts[table.name] = int((await conn.execute(query)).scalar_one())
    assert set(counts) == OWNED
    return counts


def _naming(
    table: sa.Table, run_ids: list[str], session_ids: list[str]
) -> sa.ColumnElement[bool] | None:
    """Rows of `table` naming a run or a session; None if it names neither."""
    c = table.c
    if table.name == "sessions":
        return c.id.in_(session_ids)
    if table.name == "runs":
        return sa.or_(c.id.in_(run_ids), c.session_id.in_(session_ids))
    terms = [c.run_id.in_(run_ids)] if "run_id" in c else []
    if "session_id" in c:
        terms.append(c.session_id.in_(session_ids))
    return sa.or_(*terms) if terms else None


async def session_exists(store: SqlStore, session_id: str) -> bool:
    query = sa.select(sa.func.count()).where(t.sessions.c.id == session_id)
    async with store.engines.reader.connect() as conn:
        return bool((await conn.execute(query)).scalar_one())


async def drain(store: SqlStore, older_than: datetime) -> None:
    """Prune what earlier tests left in the database (PostgreSQL's is the session's)."""
    while await store.prune_runs(older_than=older_than, limit=500):
        pass


# --- delete_session ------------------------------------------------------------------------


async def test_delete_session_erases_exactly_its_rows_in_every_table(store: SqlStore) -> None:
    first = await full_run(store)
    second = await full_run(store, session_id=first.session_id, status=RunStatus.FAILED)
    other = await full_run(store)
    before = await footprint(store, runs=[first, second])
    others = await footprint(store, runs=[other])
    assert all(before.values()), before  # every table had some of the session's rows
    assert all(others.values()), others

    deleted = await store.delete_session(tenant=TENANT, session_id=first.session_id)

    assert deleted == 2
    assert await footprint(store, runs=[first, second]) == dict.fromkeys(OWNED, 0)
    assert await footprint(store, runs=[other]) == others
    assert await store.get_run(first.id) is None
    assert await store.get_run(other.id) == other
    with pytest.raises(NotFound):
        await store.delete_session(tenant=TENANT, session_id=first.session_id)


async def test_a_deleted_runs_key_makes_a_new_run_again(store: SqlStore) -> None:
    key = new_id()
    run = await create(store, request(client_request_id=key), first_step=real_first_step)
    await store.apply([update(run.id, RunStatus.COMPLETED)])

    await store.delete_session(tenant=TENANT, session_id=run.session_id)

    created, _ = await create_outcome(store, new_run(request(client_request_id=key)))
    assert created.created and created.run.id != run.id


async def test_delete_session_of_another_tenant_or_none_is_not_found_alike(
    store: SqlStore,
) -> None:
    run = await full_run(store)
    before = await footprint(store, runs=[run])
    missing = new_id()

    with pytest.raises(NotFound) as theirs:
        await store.delete_session(tenant="another-tenant", session_id=run.session_id)
    with pytest.raises(NotFound) as nobodys:
        await store.delete_session(tenant=TENANT, session_id=missing)

    assert str(theirs.value) == f"session {quote(run.session_id)} not found"
    assert str(nobodys.value) == f"session {quote(missing)} not found"
    assert await footprint(store, runs=[run]) == before


@pytest.mark.parametrize("status", [None, RunStatus.WAITING_FOR_INPUT], ids=["running", "waiting"])
async def test_delete_session_with_an_active_run_fails_and_keeps_everything(
    store: SqlStore, status: RunStatus | None
) -> None:
    ended = await full_run(store)
    active = await full_run(store, session_id=ended.session_id, status=status)
    before = await footprint(store, runs=[ended, active])

    with pytest.raises(FailedPrecondition, match=f"active run {active.id}"):
        await store.delete_session(tenant=TENANT, session_id=ended.session_id)

    assert await footprint(store, runs=[ended, active]) == before


async def test_an_unfinished_run_counts_as_active_even_if_the_session_names_none(
    store: SqlStore,
) -> None:
    run = await full_run(store, status=None)
    await store.engines.writer.write(
        lambda conn: conn.execute(sa.update(t.sessions).values(active_run_id=None))
    )

    with pytest.raises(FailedPrecondition, match=f"active run {run.id}"):
        await store.delete_session(tenant=TENANT, session_id=run.session_id)


# --- prune_runs ----------------------------------------------------------------------------


async def test_prune_deletes_exactly_the_finished_runs_before_the_cut(store: SqlStore) -> None:
    await drain(store, at())
    old = [await full_run(store, status=s) for s in RunStatus if s.is_terminal]
    running = await full_run(store, status=None)
    waiting = await full_run(store, status=RunStatus.WAITING_FOR_INPUT)
    # A session whose old run goes and whose newer one stays: the session stays too.
    kept_session_old = await full_run(store)
    newer = await full_run(store, session_id=kept_session_old.session_id)
    # Just after the cut: a microsecond after, it stays.
    cut = newer.updated_at - MICROSECOND
    assert all(run.updated_at < cut for run in [*old, running, waiting, kept_session_old])
    assert await store.count_prunable(older_than=cut) == len(old) + 1

    assert await store.prune_runs(older_than=cut, limit=100) == len(old) + 1

    gone = await footprint(store, runs=[*old, kept_session_old], sessions=set())
    assert gone == {**dict.fromkeys(OWNED, 0), "sessions": 0}
    for run in old:
        assert not await session_exists(store, run.session_id)
    for run in [running, waiting, newer]:
        assert await store.get_run(run.id) == run
        assert all((await footprint(store, runs=[run])).values())
    assert await session_exists(store, newer.session_id)
    assert [m.run_id for m in await store.session_messages(newer.session_id)] == [newer.id] * 2
    assert await store.count_prunable(older_than=cut) == 0
    assert await store.prune_runs(older_than=cut, limit=100) == 0


async def test_prune_keeps_the_finished_runs_of_a_session_a_run_is_active_on(
    store: SqlStore,
) -> None:
    ended = await full_run(store)
    waiting = await full_run(store, session_id=ended.session_id, status=RunStatus.WAITING_FOR_INPUT)
    before = await footprint(store, runs=[ended, waiting])

    await store.prune_runs(older_than=at(60), limit=100)

    assert await footprint(store, runs=[ended, waiting]) == before


async def test_prune_is_bounded_by_its_limit(store: SqlStore) -> None:
    await drain(store, at())
    runs = [await full_run(store) for _ in range(5)]
    cut = at(1)
    assert await store.count_prunable(older_than=cut) == 5

    batches = [await store.prune_runs(older_than=cut, limit=2) for _ in range(4)]

    assert batches == [2, 2, 1, 0]
    assert await footprint(store, runs=runs) == dict.fromkeys(OWNED, 0)


async def test_prune_deletes_a_runs_key_so_it_makes_a_new_run_again(store: SqlStore) -> None:
    key = new_id()
    run = await create(store, request(client_request_id=key), first_step=real_first_step)
    await store.apply([update(run.id, RunStatus.CANCELLED)])

    await drain(store, at(1))

    assert await store.get_run(run.id) is None
    created, _ = await create_outcome(store, new_run(request(client_request_id=key)))
    assert created.created and created.run.id != run.id


async def test_two_stores_pruning_at_once_delete_each_run_once(
    store: SqlStore, open_store: OpenStore
) -> None:
    await drain(store, at())
    runs = [await full_run(store) for _ in range(12)]
    replica = await open_store()
    cut = at(1)

    async def prune_all(s: SqlStore) -> int:
        total = 0
        while pruned := await s.prune_runs(older_than=cut, limit=2):
            total += pruned
        return total

    totals = await asyncio.gather(prune_all(store), prune_all(replica))

    assert sum(totals) == len(runs)
    assert await footprint(store, runs=runs) == dict.fromkeys(OWNED, 0)
