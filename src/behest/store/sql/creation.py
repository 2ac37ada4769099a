"""Creating runs: the checks of CreateRun (session, busy, idempotency key) and the rows."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from behest.domain.runs import CreatedRun, FinishReason, Run, RunRequest, RunStatus
from behest.errors import Aborted, AlreadyExists, BehestError, NotFound, quote
from behest.store.base import BatchResult, NewRun, Write
from behest.store.sql import rows
from behest.store.sql import tables as t
from behest.store.sql.writes import apply_writes

INSERT_SESSIONS = sa.insert(t.sessions)
INSERT_RUNS = sa.insert(t.runs)


def create_run(
    conn: Connection,
    request: RunRequest,
    *,
    run_id: str,
    identity: str,
    now: datetime,
    traceparent: str,
    owner: str,
    lease_until: datetime | None,
    status: RunStatus = RunStatus.PENDING,
) -> CreatedRun:
    key = request.client_request_id
    fingerprint = request.fingerprint()
    if key:
        found = (
            conn.execute(
                sa.select(t.idempotency_keys).where(
                    t.idempotency_keys.c.identity == identity, t.idempotency_keys.c.key == key
                )
            )
        ).first()
        if found is not None:
            if found.fingerprint != fingerprint:
                raise AlreadyExists(
                    f"client_request_id {quote(key)} was already used for run {found.run_id} "
                    "with a different request"
                )
            existing = get_run(conn, found.run_id)
            assert existing is not None
            return CreatedRun(existing, created=False)
        # Inserted first so that a racing twin blocks here and then finds this run.
        conn.execute(
            sa.insert(t.idempotency_keys).values(
                identity=identity,
                key=key,
                fingerprint=fingerprint,
                run_id=run_id,
                created_at=now,
            )
        )
    session_id = request.session_id
    if session_id:
        # FOR UPDATE (PostgreSQL; SQLite's writers are serialised anyway): a racing twin
        # waits here and then reads the winner's active_run_id, which the Aborted names.
        session = (
            conn.execute(
                sa.select(t.sessions).where(t.sessions.c.id == session_id).with_for_update()
            )
        ).first()
        if session is None:
            raise NotFound(f"session {session_id} not found")
        claimed = conn.execute(
            sa.update(t.sessions)
            .where(t.sessions.c.id == session_id, t.sessions.c.active_run_id.is_(None))
            .values(active_run_id=run_id, updated_at=now)
        )
        if claimed.rowcount != 1:
            raise Aborted(
                f"session {session_id} already has an active run {session.active_run_id}; "
                "wait for it to end or cancel it"
            )
    else:
        session_id = str(uuid.uuid4())
        conn.execute(
            sa.insert(t.sessions).values(
                id=session_id, created_at=now, updated_at=now, active_run_id=run_id
            )
        )
    values = run_row(
        request,
        run_id=run_id,
        session_id=session_id,
        now=now,
        traceparent=traceparent,
        owner=owner,
        lease_until=lease_until,
        status=status,
    )
    conn.execute(INSERT_RUNS, values)
    return CreatedRun(rows.run_from_values(values), created=True)


def get_run(conn: Connection, run_id: str) -> Run | None:
    row = (conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id))).first()
    return None if row is None else rows.run_from_row(row)


def create_in_batch(conn: Connection, new: NewRun) -> BatchResult:
    """One run creation with its first step, in a savepoint: a refusal fails it alone."""
    for attempt in range(2):
        try:
            with conn.begin_nested():
                created = create_run(
                    conn,
                    new.request,
                    run_id=new.run_id,
                    identity=new.identity,
                    now=new.now,
                    traceparent=new.traceparent,
                    owner=new.owner,
                    lease_until=new.lease_until,
                    status=RunStatus.SESSION_LOADED,
                )
                writes: list[Write] = []
                if created.created:
                    writes = new.first_step(
                        created.run, next_position(conn, created.run.session_id)
                    )
                    apply_writes(conn, writes)
                return created, writes
        except BehestError as exc:
            return exc
        except IntegrityError as exc:
            # A twin with the same key committed meanwhile: the next attempt finds its run.
            if attempt == 1 or not new.request.client_request_id:
                return exc
    raise AssertionError("unreachable")


def next_position(conn: Connection, session_id: str) -> int:
    query = sa.select(sa.func.max(t.messages.c.position)).where(
        t.messages.c.session_id == session_id
    )
    last = (conn.execute(query)).scalar()
    return 0 if last is None else int(last) + 1


def fresh_run(
    new: NewRun,
) -> tuple[dict[str, Any], dict[str, Any], CreatedRun, list[Write]]:
    """Rows and result of a creation that cannot be refused (new session, no key)."""
    session_id = str(uuid.uuid4())
    session = {
        "id": session_id,
        "created_at": new.now,
        "updated_at": new.now,
        "active_run_id": new.run_id,
    }
    run = run_row(
        new.request,
        run_id=new.run_id,
        session_id=session_id,
        now=new.now,
        traceparent=new.traceparent,
        owner=new.owner,
        lease_until=new.lease_until,
        status=RunStatus.SESSION_LOADED,
    )
    created = CreatedRun(rows.run_from_values(run), created=True)
    return session, run, created, new.first_step(created.run, 0)


def run_row(
    request: RunRequest,
    *,
    run_id: str,
    session_id: str,
    now: datetime,
    traceparent: str,
    owner: str,
    lease_until: datetime | None,
    status: RunStatus,
) -> dict[str, Any]:
    return {
        "id": run_id,
        "session_id": session_id,
        "status": int(status),
        "provider": request.provider,
        "model": request.model,
        "input": request.input,
        "metadata": request.metadata,
        "tool_choice": request.tool_choice,
        "created_at": now,
        "updated_at": now,
        "iterations": 0,
        "finish_reason": int(FinishReason.UNSPECIFIED),
        "input_tokens": 0,
        "output_tokens": 0,
        "error": "",
        "traceparent": traceparent,
        "instructions": request.instructions,
        "tools": json.dumps(list(request.tools)),
        "max_iterations": request.max_iterations,
        "owner": owner or None,
        "lease_expires_at": lease_until,
    }
