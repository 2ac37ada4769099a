"""Retention and erasure: a session deleted with everything of it; finished runs pruned.

Everything of a run goes with it, in the same transaction: its events, snapshot, pending
calls, idempotency keys, stream tickets and messages. A session goes when it is deleted
(`delete_session`, only while no run is active on it; the sessions of its runs' sub-agent
runs go with it) or when pruning left it with no runs and no messages.

Pruning keeps every run that is not finished (a WAITING_FOR_INPUT run is not), and also the
finished runs of a session a run is still active on: a waiting or interrupted run reads the
session's transcript again when it goes on, and must find it whole. On PostgreSQL pruners
take their runs FOR UPDATE SKIP LOCKED, so replicas pruning at once take disjoint batches;
a session is locked before it is deleted, so a creation racing for it either wins (and the
session stays) or finds it gone (NotFound).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.runs import RunStatus
from behest.errors import FailedPrecondition, NotFound, quote
from behest.store.sql import forks
from behest.store.sql import tables as t
from behest.store.sql import tool_tables as tt
from behest.store.sql.session_tables import steers
from behest.store.sql.ticket_tables import stream_tickets
from behest.store.sql.writes import TERMINAL

# Ids per IN (…): well under SQLite's oldest bound on variables (999) and asyncpg's (32767).
CHUNK = 500

_runs = t.runs.c
_sessions = t.sessions.c
_others = t.runs.alias("other_runs")
_others_s = t.sessions.alias("forks")
# The run's session has a run active on it: named by the session, or any not finished.
_SESSION_BUSY = sa.or_(
    sa.select(_sessions.id)
    .where(_sessions.id == _runs.session_id, _sessions.active_run_id.is_not(None))
    .exists(),
    sa.select(_others.c.id)
    .where(_others.c.session_id == _runs.session_id, _others.c.status.not_in(TERMINAL))
    .exists(),
)
# Finished runs last updated before b_cut, on sessions no run is active on.
PRUNABLE = sa.select(_runs.id, _runs.session_id, _runs.tenant).where(
    _runs.status.in_(TERMINAL),
    _runs.updated_at < sa.bindparam("b_cut"),
    ~_SESSION_BUSY,
)
COUNT_PRUNABLE = sa.select(sa.func.count()).select_from(PRUNABLE.subquery())
# A session left with nothing: no run active, no runs, no messages, no part in a fork.
_EMPTY_SESSION = sa.and_(
    _sessions.active_run_id.is_(None),
    _sessions.parent_session_id.is_(None),
    _sessions.erased_at.is_(None),
    ~sa.select(_others_s.c.id).where(_others_s.c.parent_session_id == _sessions.id).exists(),
    ~sa.select(_runs.id).where(_runs.session_id == _sessions.id).exists(),
    ~sa.select(t.messages.c.id).where(t.messages.c.session_id == _sessions.id).exists(),
)


def delete_session(conn: Connection, *, tenant: str, session_id: str) -> int:
    """Erase the tenant's idle session and everything of it, its runs' sub-agent runs (and
    their sessions) included; the number of runs erased."""
    session = conn.execute(
        sa.select(_sessions.active_run_id, _sessions.erased_at)
        .where(_sessions.id == session_id, _sessions.tenant == tenant)
        .with_for_update()
    ).first()
    # Another tenant's session is answered as one that does not exist; so is an erased one.
    if session is None or session.erased_at is not None:
        raise NotFound(f"session {quote(session_id)} not found")
    sessions = with_sub_run_sessions(conn, session_id)
    runs = conn.execute(
        sa.select(_runs.id, _runs.status).where(_runs.session_id.in_(sessions))
    ).all()
    unfinished = [run.id for run in runs if not RunStatus(run.status).is_terminal]
    active = session.active_run_id or next(iter(unfinished), None)
    if active:
        raise FailedPrecondition(
            f"session {quote(session_id)} has an active run {active}; "
            "wait for it to end or cancel it, then delete the session"
        )
    deleted = delete_runs(conn, [run.id for run in runs], tenants=[tenant], messages=False)
    for chunk in _chunks(sessions):
        conn.execute(sa.delete(t.pending_calls).where(t.pending_calls.c.session_id.in_(chunk)))
    for erased in sessions:
        _erase_history(conn, erased)
    return deleted


def _erase_history(conn: Connection, session_id: str) -> None:
    """Delete the session's messages and row; what its forks still share stays, in the row
    kept as a tombstone (store/sql/forks.py), until the last of them goes."""
    parent = conn.execute(
        sa.select(_sessions.parent_session_id).where(_sessions.id == session_id)
    ).scalar()
    shared = forks.needed_through(conn, session_id)
    own = t.messages.c.session_id == session_id
    if shared is None:
        _delete_messages(conn, own)
        conn.execute(sa.delete(t.sessions).where(_sessions.id == session_id))
        forks.drop_unneeded(conn, parent)
        return
    _delete_messages(conn, sa.and_(own, t.messages.c.position > shared))
    conn.execute(
        sa.update(t.sessions)
        .where(_sessions.id == session_id)
        .values(erased_at=sa.func.now(), active_run_id=None)
    )


def with_sub_run_sessions(conn: Connection, session_id: str) -> list[str]:
    """The session, then the sessions of its runs' sub-agent runs, of theirs, and so on."""
    found = [session_id]
    frontier = [session_id]
    while frontier:
        children: set[str] = set()
        for chunk in _chunks(frontier):
            parents = sa.select(_runs.id).where(_runs.session_id.in_(chunk))
            query = sa.select(_runs.session_id).where(_runs.parent_run_id.in_(parents))
            children.update(conn.execute(query).scalars())
        frontier = sorted(children - set(found))
        found += frontier
    return found


def prune_runs(conn: Connection, *, older_than: datetime, limit: int) -> int:
    """Delete up to `limit` prunable runs, then their sessions left empty; how many runs."""
    query = PRUNABLE.limit(limit)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=t.runs)
    found = conn.execute(query, {"b_cut": older_than}).all()
    if not found:
        return 0
    deleted = delete_runs(conn, [run.id for run in found], tenants={run.tenant for run in found})
    delete_empty_sessions(conn, {run.session_id for run in found})
    return deleted


def count_prunable(conn: Connection, *, older_than: datetime) -> int:
    """How many runs `prune_runs` would delete, in all its batches, if called now."""
    return int(conn.execute(COUNT_PRUNABLE, {"b_cut": older_than}).scalar_one())


def delete_runs(
    conn: Connection, run_ids: Sequence[str], *, tenants: Iterable[str], messages: bool = True
) -> int:
    """Delete runs and everything of them (their messages too, unless `messages` is False:
    the caller decides, as forks may share them); the number of runs deleted."""
    # Idempotency keys are stored under their run's tenant; no index has their run_id, so
    # the tenants bound the scan.
    keys = t.idempotency_keys.c
    of_tenants = keys.identity.in_(sorted(set(tenants)))
    deleted = 0
    for chunk in _chunks(run_ids):
        conn.execute(sa.delete(t.events).where(t.events.c.run_id.in_(chunk)))
        conn.execute(sa.delete(t.snapshots).where(t.snapshots.c.run_id.in_(chunk)))
        conn.execute(sa.delete(t.pending_calls).where(t.pending_calls.c.run_id.in_(chunk)))
        transitions = tt.tool_execution_transitions
        conn.execute(sa.delete(transitions).where(transitions.c.run_id.in_(chunk)))
        executions = tt.tool_executions
        conn.execute(sa.delete(executions).where(executions.c.run_id.in_(chunk)))
        tasks = tt.worker_tasks
        conn.execute(sa.delete(tasks).where(tasks.c.run_id.in_(chunk)))
        questions = tt.worker_questions
        conn.execute(sa.delete(questions).where(questions.c.run_id.in_(chunk)))
        conn.execute(sa.delete(t.idempotency_keys).where(of_tenants, keys.run_id.in_(chunk)))
        tickets = stream_tickets
        conn.execute(sa.delete(tickets).where(tickets.c.run_id.in_(chunk)))
        conn.execute(sa.delete(steers).where(steers.c.run_id.in_(chunk)))
        if messages:
            _delete_messages(conn, t.messages.c.run_id.in_(chunk))
        deleted += int(conn.execute(sa.delete(t.runs).where(_runs.id.in_(chunk))).rowcount)
    return deleted


_delete_messages = forks.delete_messages


def delete_empty_sessions(conn: Connection, session_ids: Iterable[str]) -> int:
    """Delete those of the sessions that are left with nothing; how many."""
    deleted = 0
    for chunk in _chunks(sorted(set(session_ids))):
        candidates = sa.select(_sessions.id).where(_sessions.id.in_(chunk))
        if conn.dialect.name == "postgresql":
            # A creation claiming one of them holds its row: skip it rather than wait.
            candidates = candidates.with_for_update(skip_locked=True)
        ids = list(conn.execute(candidates).scalars())
        if ids:
            statement = sa.delete(t.sessions).where(_sessions.id.in_(ids), _EMPTY_SESSION)
            deleted += int(conn.execute(statement).rowcount)
    return deleted


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), CHUNK):
        yield list(ids[start : start + CHUNK])
