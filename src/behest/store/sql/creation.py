"""Creating runs: the checks of CreateRun (idempotency key, room, session, busy) and the rows.

There is one way to create a run: a NewRun in `SqlStore.apply_batch`, committed with its
first step. A creation that cannot be refused (a new session, no key) is only rows, which the
batch inserts with its other creations (`fresh_rows`) — on PostgreSQL, a batch of nothing else
as one statement, one round trip (`fresh_statement`); any other is checked in a savepoint of
its own (`create_checked`), so that a refusal fails it alone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from behest.domain.runs import BusyPolicy, CreatedRun, FinishReason, Run, RunStatus
from behest.domain.spend import FailureCode
from behest.errors import Aborted, AlreadyExists, BehestError, NotFound, ResourceExhausted, quote
from behest.store.sql import rows, run_rows
from behest.store.sql import tables as t
from behest.store.sql.single_statement import OneStatement, one_statement
from behest.store.sql.writes import apply_writes, notifications
from behest.store.writes import (
    AppendEvent,
    AppendMessage,
    BatchResult,
    Fence,
    NewRun,
    PutSnapshot,
    Write,
)

INSERT_SESSIONS = sa.insert(t.sessions)
INSERT_RUNS = sa.insert(t.runs)
# A creation is stored as started: its first step (RunStarted, the user's message, the first
# snapshot) commits with it.
CREATED_STATUS = RunStatus.SESSION_LOADED
# The one retry rule. A creation naming a client_request_id can lose the race for its key:
# a twin in another transaction (another request, replica or store) inserts the same key and
# commits first, and this insert fails with an IntegrityError (PostgreSQL; SQLite's writers
# are serialised, so the twin's key is simply found). The creation is tried again once, in a
# new savepoint, which finds the twin's run. The same holds for a session a request starts
# (start_session): a twin that started it first is found the second time. Any other failure is
# not retried.
KEY_RACE_RETRIES = 1


def create_checked(conn: Connection, new: NewRun) -> BatchResult:
    """A creation that names a session or a key, with its first step, in a savepoint: a
    refusal (NotFound, Aborted, AlreadyExists, ResourceExhausted) is returned and fails it
    alone."""
    attempt = 0
    while True:
        try:
            with conn.begin_nested():
                created = _create(conn, new)
                writes: list[Write] = []
                if created.created and not created.run.queued:  # a queued run starts later
                    position = next_position(conn, created.run.session_id)
                    writes = new.first_step(created.run, position)
                    apply_writes(conn, writes)
                return created, writes
        except BehestError as exc:
            return exc
        except IntegrityError as exc:
            racing = new.request.client_request_id or new.request.start_session
            if not racing or attempt >= KEY_RACE_RETRIES:
                return exc
            attempt += 1


def fresh_rows(new: NewRun) -> tuple[dict[str, Any], dict[str, Any], CreatedRun, list[Write]]:
    """The session row, run row, outcome and first step of a creation that cannot be refused
    (a new session, no key): the caller inserts them with the rest of its batch."""
    session = session_row(new, str(uuid.uuid4()))
    run = run_row(new, session["id"])
    created = CreatedRun(run_rows.run_from_values(run), created=True)
    return session, run, created, new.first_step(created.run, 0)


def is_fresh(item: list[Write] | NewRun) -> bool:
    """A creation that cannot be refused: a new session, no key."""
    return (
        isinstance(item, NewRun)
        and not item.request.session_id
        and not item.request.client_request_id
    )


def fresh_statement(
    items: Sequence[list[Write] | NewRun], node: str
) -> tuple[OneStatement, list[BatchResult]] | None:
    """Fresh creations (and their first steps) as one PostgreSQL statement, with their
    outcomes; None if a first step writes what the statement does not carry."""
    sessions, runs, messages, events = [], [], [], []
    snapshots: dict[str, dict[str, Any]] = {}
    results: list[BatchResult] = []
    for item in items:
        assert isinstance(item, NewRun)
        session, run, created, writes = fresh_rows(item)
        sessions.append(session)
        runs.append(run)
        generation = run["lease_generation"]
        for write in writes:
            match write:
                case Fence():
                    pass  # the creator's own claim: the event rows carry its generation
                case AppendEvent(event):
                    events.append(rows.event_to_row(event, generation))
                case AppendMessage(message) if not message.parts:
                    messages.append(rows.message_to_row(message))
                case PutSnapshot(snapshot):
                    snapshots[snapshot.run_id] = rows.snapshot_to_row(snapshot)
                case _:
                    return None
        results.append((created, writes))
    written = (write for r in results if isinstance(r, tuple) for write in r[1])
    statement = one_statement(
        [(t.sessions, sessions), (t.runs, runs), (t.messages, messages), (t.events, events)],
        [(t.snapshots, "run_id", list(snapshots.values()))],
        notifications(node, written),
    )
    return statement, results


def _create(conn: Connection, new: NewRun) -> CreatedRun:
    """Check the key and the session, then insert what is new; raises a refusal."""
    request, key = new.request, new.request.client_request_id
    if key:
        keys, fingerprint = t.idempotency_keys, request.fingerprint()
        found = conn.execute(
            sa.select(keys).where(keys.c.identity == new.tenant, keys.c.key == key)
        ).first()
        if found is not None:
            if found.fingerprint != fingerprint:
                raise AlreadyExists(
                    f"client_request_id {quote(key)} was already used for run {found.run_id} "
                    "with a different request"
                )
            existing = get_run(conn, found.run_id)
            if existing is None:  # pruned (with its key) between the two reads
                raise Aborted(
                    f"the run client_request_id {quote(key)} named was just deleted by "
                    "retention; send the request again"
                )
            return CreatedRun(existing, created=False)
        if new.refused_if_new:  # no room for a run that is not a repeat's
            raise ResourceExhausted(new.refused_if_new)
        # Inserted first so that a racing twin blocks here and then finds this run.
        conn.execute(
            sa.insert(keys).values(
                identity=new.tenant,
                key=key,
                fingerprint=fingerprint,
                run_id=new.run_id,
                created_at=new.now,
            )
        )
    session_id = request.session_id
    queued_after = ""
    if session_id:
        queued_after = _claim_session(conn, session_id, new)
    else:
        session_id = str(uuid.uuid4())
        conn.execute(INSERT_SESSIONS, session_row(new, session_id))
    values = run_row(new, session_id)
    if queued_after:  # it waits for its turn: nobody's, not started
        values.update(
            status=int(RunStatus.PENDING),
            owner=None,
            lease_expires_at=None,
            lease_generation=0,
            queued_at=new.now,
            queued_after=queued_after,
        )
    conn.execute(INSERT_RUNS, values)
    return CreatedRun(run_rows.run_from_values(values), created=True)


def _claim_session(conn: Connection, session_id: str, new: NewRun) -> str:
    """Make the new run the session's one active run, or raise NotFound or Aborted; or, on a
    busy session with on_busy ENQUEUE, queue it: the run it then waits for ("": not queued)."""
    sessions = t.sessions
    # FOR UPDATE (PostgreSQL; SQLite's writers are serialised anyway): a racing twin waits
    # here and then reads the winner's active_run_id, which the Aborted names.
    session = conn.execute(
        sa.select(sessions)
        .where(sessions.c.id == session_id, sessions.c.tenant == new.tenant)
        .with_for_update()
    ).first()
    if session is None and new.request.start_session:
        _start_session(conn, session_id, new)
        return ""
    if session is None:  # another tenant's session is answered as one that does not exist
        raise NotFound(f"session {session_id} not found")
    claimed = conn.execute(
        sa.update(sessions)
        .where(sessions.c.id == session_id, sessions.c.active_run_id.is_(None))
        .values(active_run_id=new.run_id, updated_at=new.now)
    )
    if claimed.rowcount == 1:
        return ""
    if new.request.on_busy == BusyPolicy.ENQUEUE:
        return _last_in_line(conn, session_id) or str(session.active_run_id)
    raise Aborted(
        f"session {session_id} already has an active run {session.active_run_id}; "
        "wait for it to end or cancel it"
    )


def _last_in_line(conn: Connection, session_id: str) -> str:
    """The newest run queued on the session, if any."""
    runs = t.runs
    query = (
        sa.select(runs.c.id)
        .where(
            runs.c.session_id == session_id,
            runs.c.queued_at.is_not(None),
            runs.c.status == int(RunStatus.PENDING),
        )
        .order_by(runs.c.queued_at.desc(), runs.c.id.desc())
        .limit(1)
    )
    return str(conn.execute(query).scalar() or "")


def _start_session(conn: Connection, session_id: str, new: NewRun) -> None:
    """A new session with the id the request chose, the new run its active one; NotFound if
    another tenant's session has that id (answered as any session of another tenant is)."""
    taken = conn.execute(sa.select(t.sessions.c.id).where(t.sessions.c.id == session_id)).first()
    if taken is not None:
        raise NotFound(f"session {session_id} not found")
    conn.execute(INSERT_SESSIONS, session_row(new, session_id))


def get_run(conn: Connection, run_id: str) -> Run | None:
    row = (conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id))).first()
    return None if row is None else run_rows.run_from_row(row)


def next_position(conn: Connection, session_id: str) -> int:
    """After the session's last message (a fork's own follow the history it shares)."""
    query = sa.select(sa.func.max(t.messages.c.position)).where(
        t.messages.c.session_id == session_id
    )
    last = (conn.execute(query)).scalar()
    if last is None:
        last = conn.execute(
            sa.select(t.sessions.c.forked_through).where(t.sessions.c.id == session_id)
        ).scalar()
    return 0 if last is None else int(last) + 1


def session_row(new: NewRun, session_id: str) -> dict[str, Any]:
    """A new session, with the new run as its active one."""
    return {
        "id": session_id,
        "created_at": new.now,
        "updated_at": new.now,
        "active_run_id": new.run_id,
        "tenant": new.tenant,
    }


def run_row(new: NewRun, session_id: str) -> dict[str, Any]:
    request = new.request
    return {
        "id": new.run_id,
        "session_id": session_id,
        "status": int(CREATED_STATUS),
        "provider": request.provider,
        "model": request.model,
        "input": request.input,
        "metadata": request.metadata,
        "tool_choice": request.tool_choice,
        "created_at": new.now,
        "updated_at": new.now,
        "iterations": 0,
        "finish_reason": int(FinishReason.UNSPECIFIED),
        "input_tokens": 0,
        "output_tokens": 0,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "error": "",
        "failure_code": int(FailureCode.UNSPECIFIED),
        "cost": None,
        "currency": "",
        "traceparent": new.traceparent,
        "instructions": request.instructions,
        "tools": json.dumps(list(request.tools)),
        "max_iterations": request.max_iterations,
        "owner": new.owner or None,
        "lease_expires_at": new.lease_until,
        # The creator's claim is the first.
        "lease_generation": 1 if new.owner else 0,
        "cancel_requested_at": None,
        "cancel_by": "",
        "cancel_reason": "",
        "cancel_source": 0,
        "tenant": new.tenant,
        "allow_sub_agents": request.allow_sub_agents,
        "parent_run_id": request.parent_run_id or None,
        "depth": request.depth,
        **run_rows.waits_to_columns(request.waits),
        **run_rows.budget_to_columns(request.budget),
        **run_rows.response_format_to_columns(request.response_format),
        **run_rows.reasoning_to_columns(request.reasoning),
        **run_rows.agent_to_columns(request.agent),
        "queued_at": None,
        "queued_after": "",
    }
