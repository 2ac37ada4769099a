"""Builders for the store suite: requests, events, messages and snapshots with fresh ids."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.events import Event, Payload, RunStarted
from behest.domain.messages import Message, Role, ToolCall
from behest.domain.runs import FinishReason, Run, RunRequest, RunStatus, TokenUsage
from behest.domain.snapshots import Snapshot
from behest.store.base import AppendEvent, UpdateRun, Write
from behest.store.sql import tables as t
from behest.store.sql.store import SqlStore

IDENTITY = "test-identity"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
SPAN_ID = "b7ad6b7169203331"


def new_id() -> str:
    return str(uuid.uuid4())


def at(seconds: float = 0.0) -> datetime:
    """A UTC instant `seconds` after now, at the microsecond precision both backends keep."""
    return datetime.now(UTC) + timedelta(seconds=seconds)


def request(
    *,
    session_id: str | None = None,
    input: str = "hello",
    client_request_id: str = "",
    model: str = "echo",
    metadata: str = "",
) -> RunRequest:
    return RunRequest(
        session_id=session_id,
        provider="local",
        model=model,
        input=input,
        metadata=metadata,
        client_request_id=client_request_id,
    )


async def create(
    store: SqlStore,
    req: RunRequest | None = None,
    *,
    run_id: str | None = None,
    identity: str = IDENTITY,
    now: datetime | None = None,
) -> Run:
    """Create a run that must be new, and return it."""
    created = await store.create_run(
        req or request(),
        run_id=run_id or new_id(),
        identity=identity,
        now=now or at(),
        traceparent=TRACEPARENT,
    )
    assert created.created
    return created.run


def update(
    run_id: str,
    status: RunStatus,
    *,
    iterations: int = 1,
    usage: TokenUsage | None = None,
    finish_reason: FinishReason = FinishReason.UNSPECIFIED,
    error: str = "",
) -> UpdateRun:
    return UpdateRun(
        run_id=run_id,
        status=status,
        iterations=iterations,
        usage=usage or TokenUsage(10, 5),
        finish_reason=finish_reason,
        error=error,
    )


async def finish(store: SqlStore, run_id: str, status: RunStatus = RunStatus.COMPLETED) -> None:
    """End a run with a terminal UpdateRun, which frees its session."""
    await store.apply([update(run_id, status, finish_reason=FinishReason.STOP)])


def event(run_id: str, sequence: int, payload: Payload | None = None) -> Event:
    return Event(
        run_id=run_id,
        sequence=sequence,
        payload=payload or RunStarted(session_id="s", provider="local", model="echo"),
        timestamp=at(),
        trace_id=TRACE_ID,
        span_id=SPAN_ID,
    )


def events(run_id: str, first: int, last: int) -> list[Write]:
    """AppendEvent writes for sequences first..last."""
    return [AppendEvent(event(run_id, n)) for n in range(first, last + 1)]


def message(
    run: Run,
    position: int,
    *,
    role: Role = Role.USER,
    text: str = "hi",
    tool_calls: tuple[ToolCall, ...] = (),
    tool_call_id: str = "",
    tool_name: str = "",
    is_error: bool = False,
) -> Message:
    return Message(
        id=new_id(),
        session_id=run.session_id,
        run_id=run.id,
        position=position,
        role=role,
        text=text,
        created_at=at(),
        tool_calls=tool_calls,
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        is_error=is_error,
    )


def snapshot(
    run: Run,
    *,
    status: RunStatus = RunStatus.CALLING_MODEL,
    iteration: int = 1,
    usage: TokenUsage | None = None,
    model_calls: int = 1,
    pending_tool_calls: tuple[str, ...] = (),
) -> Snapshot:
    return Snapshot(
        run_id=run.id,
        session_id=run.session_id,
        status=status,
        iteration=iteration,
        usage=usage or TokenUsage(100, 20),
        updated_at=at(),
        model_calls=model_calls,
        pending_tool_calls=pending_tool_calls,
    )


async def trip_circuit_breaker(store: SqlStore, *, failures: int) -> datetime:
    """Open the breaker directly in the database (the Store protocol only reads it).

    Returns when it opened.
    """
    opened_at = at()
    values = {"consecutive_failures": failures, "opened_at": opened_at}

    def trip(conn: Connection) -> None:
        breaker = t.circuit_breaker
        updated = conn.execute(sa.update(breaker).where(breaker.c.id == 1).values(**values))
        if updated.rowcount == 0:
            conn.execute(sa.insert(breaker).values(id=1, **values))

    await store.engines.writer.write(trip)
    return opened_at
