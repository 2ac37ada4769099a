"""Builders for the store suite: requests, creations, events, messages and snapshots with
fresh ids. They use the Store protocol only, and create runs the way production does."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from behest.domain.compaction import CircuitBreakerState
from behest.domain.events import Event, Payload, RunStarted
from behest.domain.messages import Message, Role, ToolCall
from behest.domain.runs import CreatedRun, FinishReason, Run, RunRequest, RunStatus
from behest.domain.snapshots import Snapshot
from behest.domain.spend import TokenUsage
from behest.runs import start
from behest.store.base import Store
from behest.store.writes import AppendEvent, NewRun, UpdateRun, Write

TENANT = "test-tenant"
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


def no_first_step(run: Run, position: int) -> list[Write]:
    """A creation's first step that writes nothing: the test writes the run's events and
    messages itself, from sequence 1 and position 0."""
    return []


def real_first_step(run: Run, position: int) -> list[Write]:
    """The first step production commits with a creation: RunStarted, the user's message,
    the SESSION_LOADED snapshot."""
    return start.first_step(run, position, trace_id=TRACE_ID, span_id=SPAN_ID)


def new_run(
    req: RunRequest | None = None,
    *,
    run_id: str | None = None,
    tenant: str = TENANT,
    now: datetime | None = None,
    owner: str = "",
    lease_until: datetime | None = None,
    first_step: Callable[[Run, int], list[Write]] = no_first_step,
    refused_if_new: str = "",
) -> NewRun:
    """A creation as the executor hands it to the event log (`EventLog.create`)."""
    return NewRun(
        request=req or request(),
        run_id=run_id or new_id(),
        tenant=tenant,
        now=now or at(),
        traceparent=TRACEPARENT,
        owner=owner,
        lease_until=lease_until,
        first_step=first_step,
        refused_if_new=refused_if_new,
    )


async def create_outcome(store: Store, new: NewRun) -> tuple[CreatedRun, list[Write]]:
    """Create through `Store.apply_batch`, the one creation path; raises a refusal."""
    [result] = await store.apply_batch([new])
    if isinstance(result, BaseException):
        raise result
    assert result is not None, "a creation's result is its outcome"
    return result


async def create(
    store: Store,
    req: RunRequest | None = None,
    *,
    run_id: str | None = None,
    tenant: str = TENANT,
    now: datetime | None = None,
    owner: str = "",
    lease_until: datetime | None = None,
    first_step: Callable[[Run, int], list[Write]] = no_first_step,
) -> Run:
    """Create a run that must be new, and return it as stored."""
    new = new_run(
        req,
        run_id=run_id,
        tenant=tenant,
        now=now,
        owner=owner,
        lease_until=lease_until,
        first_step=first_step,
    )
    created, _ = await create_outcome(store, new)
    assert created.created
    assert created.run.id == new.run_id
    stored = await store.get_run(created.run.id)
    assert stored == created.run, "a creation's outcome is the run as stored"
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


async def finish(store: Store, run_id: str, status: RunStatus = RunStatus.COMPLETED) -> None:
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


async def trip_circuit_breaker(store: Store, *, failures: int) -> datetime:
    """Open the breaker with `failures` consecutive failed compactions, the last one now.

    Returns when it opened.
    """
    opened_at = at()
    await store.record_compaction(tenant=TENANT, succeeded=True, threshold=failures, now=opened_at)
    for _ in range(failures):
        breaker = await store.record_compaction(
            tenant=TENANT, succeeded=False, threshold=failures, now=opened_at
        )
    assert breaker == CircuitBreakerState(consecutive_failures=failures, opened_at=opened_at)
    return opened_at
