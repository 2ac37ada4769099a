"""How a run starts: its first step (RunStarted, the user's message, the first snapshot)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from behest.domain import events as ev
from behest.domain.content import ContentPart, joined_text
from behest.domain.messages import Message, Role
from behest.domain.runs import BusyPolicy, Run, RunStatus
from behest.domain.snapshots import Snapshot
from behest.domain.spend import TokenUsage
from behest.events.run_log import numbered
from behest.store.writes import AppendEvent, AppendMessage, Fence, PutSnapshot, Write

# The run a new one cancelled to start, and the policy that said so (domain/runs.py).
Busy = tuple[str, BusyPolicy]


def run_started(
    run: Run, content: tuple[ContentPart, ...] = (), busy: Busy = ("", BusyPolicy.UNSPECIFIED)
) -> ev.RunStarted:
    """RunStarted; the run's content parts as references (never their bytes), and the run
    it cancelled to start (`busy`: its id, the policy)."""
    references = tuple(part.reference() for part in content)
    agent = (run.agent.name, run.agent.version) if run.agent else ("", 0)
    if run.queued_after:  # it waited for its turn (BusyPolicy.ENQUEUE)
        return ev.RunStarted(
            run.session_id,
            run.provider,
            run.model,
            references,
            *agent,
            on_busy=BusyPolicy.ENQUEUE,
            waited_for_run_id=run.queued_after,
        )
    return ev.RunStarted(run.session_id, run.provider, run.model, references, *agent, *busy)


def user_message(run: Run, position: int, content: tuple[ContentPart, ...] = ()) -> Message:
    """The run's input (then its content parts, if any) as the session's next message."""
    parts: tuple[ContentPart, ...] = ()
    if content:  # the input, when given, is the first part
        parts = ((ContentPart.text_part(run.input),) if run.input else ()) + content
    return Message(
        id=str(uuid.uuid4()),
        session_id=run.session_id,
        run_id=run.id,
        position=position,
        role=Role.USER,
        text=joined_text(parts) if parts else run.input,
        created_at=datetime.now(UTC),
        parts=parts,
    )


def initial_snapshot(run: Run) -> Snapshot:
    """Where a run is once started: session loaded, nothing done yet."""
    return Snapshot(
        run_id=run.id,
        session_id=run.session_id,
        status=RunStatus.SESSION_LOADED,
        iteration=0,
        usage=TokenUsage(),
        updated_at=datetime.now(UTC),
    )


def first_step(
    run: Run,
    position: int,
    *,
    trace_id: str,
    span_id: str,
    content: tuple[ContentPart, ...] = (),
    busy: Busy = ("", BusyPolicy.UNSPECIFIED),
) -> list[Write]:
    """The writes that start a run: RunStarted (sequence 1), the user's message (with the
    request's content parts), the state."""
    (event,) = numbered(
        run.id,
        0,
        [run_started(run, content, busy)],
        datetime.now(UTC),
        trace_id=trace_id,
        span_id=span_id,
    )
    # The store creates the run in status SESSION_LOADED already.
    return [
        Fence(run.id, run.lease_generation),  # the creator's claim wrote it
        AppendEvent(event),
        AppendMessage(user_message(run, position, content)),
        PutSnapshot(initial_snapshot(run)),
    ]
