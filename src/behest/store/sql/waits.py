"""Runs that wait (domain/waits.py): which runs may go on, and answers to their calls.

Answers to one run are serialised: `submit_answers` locks the run's row, then its calls'
(PostgreSQL; SQLite's writers are serialised anyway). So of two requests answering a run's
last two calls, the later sees the earlier's answer and reports that nothing waits any more;
and a run cannot end, nor a call time out, between the checks and the answers' UPDATE. Other
writers of pending_calls lock in the same order (writes.apply_writes), so none deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.executions import ExecutionStatus, ToolExecution, Transition, Verdict
from behest.domain.runs import RunStatus
from behest.domain.waits import Answer, PendingCall, Submitted, WaitKind
from behest.errors import FailedPrecondition, InvalidArgument, NotFound, quote
from behest.store.sql import executions, rows
from behest.store.sql import tables as t
from behest.store.sql.writes import TERMINAL
from behest.store.writes import RecordExecution

_calls = t.pending_calls.c

# The run has a call unanswered and unexpired at b_now.
_STILL_WAITS = (
    sa.select(_calls.run_id)
    .where(
        _calls.run_id == t.runs.c.id,
        _calls.answered_at.is_(None),
        _calls.expires_at > sa.bindparam("b_now"),
    )
    .exists()
)
# Unfinished runs but the WAITING_FOR_INPUT ones that still wait, oldest first.
_ITS_TURN = (
    sa.select(t.sessions.c.id)
    .where(t.sessions.c.id == t.runs.c.session_id, t.sessions.c.active_run_id == t.runs.c.id)
    .exists()
)
RESUMABLE_RUNS = (
    sa.select(t.runs)
    .where(
        t.runs.c.status.not_in(TERMINAL),
        sa.or_(t.runs.c.status != int(RunStatus.WAITING_FOR_INPUT), ~_STILL_WAITS),
        # Queued on a busy session: not before its turn (its session's active run).
        sa.or_(t.runs.c.queued_at.is_(None), _ITS_TURN),
    )
    .order_by(t.runs.c.created_at, t.runs.c.id)
)
PENDING_CALLS = (
    sa.select(t.pending_calls)
    .where(_calls.run_id == sa.bindparam("b_run"))
    .order_by(_calls.ordinal, _calls.call_id)
)
ALWAYS_ALLOWED = (
    sa.select(_calls.tool_name)
    .distinct()
    .where(
        _calls.session_id == sa.bindparam("b_session"),
        _calls.decision == sa.bindparam("b_decision"),
    )
)
_LOCK_RUN = sa.select(t.runs.c.status).where(t.runs.c.id == sa.bindparam("b_run")).with_for_update()
_LOCK_CALLS = PENDING_CALLS.with_for_update()
# Conditional although the row is locked: an answer never overwrites another.
_ANSWER = (
    sa.update(t.pending_calls)
    .where(
        _calls.run_id == sa.bindparam("b_run"),
        _calls.call_id == sa.bindparam("b_call"),
        _calls.answered_at.is_(None),
    )
    .values(
        decision=sa.bindparam("b_decision"),
        text=sa.bindparam("b_text"),
        is_error=sa.bindparam("b_is_error"),
        answered_by=sa.bindparam("b_by"),
        answered_at=sa.bindparam("b_now"),
        verdict=sa.bindparam("b_verdict"),
        action=sa.bindparam("b_action"),
    )
)


def distinct_answers(answers: Sequence[Answer]) -> list[Answer]:
    """One answer per call id, the first; InvalidArgument if a later one differs from it."""
    first: dict[str, Answer] = {}
    for answer in answers:
        earlier = first.setdefault(answer.call_id, answer)
        if not earlier.same_as(answer):
            raise InvalidArgument(
                f"answers: call {quote(answer.call_id)} is answered twice, differently"
            )
    return list(first.values())


def submit_answers(
    conn: Connection,
    run_id: str,
    answers: Sequence[Answer],
    *,
    kind: WaitKind,
    by: str,
    now: datetime,
) -> Submitted:
    """Check every answer, then store the new ones (one write transaction, all or none)."""
    status = conn.execute(_LOCK_RUN, {"b_run": run_id}).scalar()
    if status is None:
        raise NotFound(f"run {run_id} not found")
    calls = [rows.pending_call_from_row(r) for r in conn.execute(_LOCK_CALLS, {"b_run": run_id})]
    by_id = {call.call_id: call for call in calls}
    if RunStatus(status).is_terminal:
        if all(_repeats(by_id.get(a.call_id), a, kind) for a in answers):
            return Submitted(waiting_call_ids=())  # a retry of answers it took: harmless
        raise FailedPrecondition(
            f"run {run_id} already ended {RunStatus(status).name}; its calls take no answers"
        )
    new = [a for a in answers if _is_new(run_id, by_id.get(a.call_id), a, kind=kind, now=now)]
    if new:
        conn.execute(_ANSWER, [_answer_params(run_id, a, by=by, now=now) for a in new])
    answered = {a.call_id for a in new}
    return Submitted(
        waiting_call_ids=tuple(
            call.call_id
            for call in calls
            if call.call_id not in answered and call.answer is None and not call.expired(now)
        )
    )


def _is_new(
    run_id: str, call: PendingCall | None, answer: Answer, *, kind: WaitKind, now: datetime
) -> bool:
    """Whether `answer` is one to store; False if the call has it already, else it raises."""
    name = quote(answer.call_id)
    if call is None or call.kind != kind:
        what = _WHAT[kind]
        raise NotFound(f"run {run_id} has no {what} {name}")
    if _repeats(call, answer, kind):
        return False
    if call.answer is not None:
        when = call.answered_at.isoformat() if call.answered_at else "?"
        raise FailedPrecondition(
            f"call {name} was already answered otherwise ({_how(call.answer)}) at {when}"
        )
    if call.expired(now):
        raise FailedPrecondition(
            f"call {name} expired at {call.expires_at.isoformat()}; it was treated as timed out"
        )
    return True


_WHAT = {
    WaitKind.APPROVAL: "approval request",
    WaitKind.CLIENT_TOOL: "client tool call",
    WaitKind.OUTCOME_UNKNOWN: "call waiting for a reconciliation",
    WaitKind.ELICITATION: "question",
}


def _repeats(call: PendingCall | None, answer: Answer, kind: WaitKind) -> bool:
    """Whether `answer` is the one the call has already."""
    return (
        call is not None
        and call.kind == kind
        and call.answer is not None
        and call.answer.same_as(answer)
    )


def _how(answer: Answer) -> str:
    """How a call was answered, for an error message (a client tool's output is not shown)."""
    if answer.verdict is not None:
        return answer.verdict.name
    if answer.action is not None:
        return answer.action.name
    if answer.decision is None:
        return "an error result" if answer.is_error else "a result"
    if answer.text:
        return f"{answer.decision.name}, reason {quote(answer.text, 40)}"
    return answer.decision.name


def _answer_params(run_id: str, answer: Answer, *, by: str, now: datetime) -> dict[str, object]:
    return {
        "b_run": run_id,
        "b_call": answer.call_id,
        "b_decision": None if answer.decision is None else int(answer.decision),
        "b_text": answer.text,
        "b_is_error": answer.is_error,
        "b_verdict": None if answer.verdict is None else int(answer.verdict),
        "b_action": None if answer.action is None else int(answer.action),
        "b_by": by,
        "b_now": now,
    }


def reconcile(
    conn: Connection, execution_id: str, answer: Answer, *, by: str, now: datetime
) -> tuple[ToolExecution, Submitted]:
    """Store.reconcile_execution, in the writer's transaction: it locks as every answer
    does, the run's row, then its calls', then the execution's (which the event log
    changes after the runs' and calls', in the same order)."""
    row = conn.execute(executions.EXECUTION, {"b_id": execution_id}).first()
    if row is None:
        raise NotFound(f"tool execution {quote(execution_id)} not found")
    execution = executions.execution_from_row(row)
    if execution.status not in (ExecutionStatus.OUTCOME_UNKNOWN, ExecutionStatus.RECONCILED):
        raise FailedPrecondition(
            f"tool execution {execution_id} is {execution.status.name}: only one whose outcome "
            "is unknown (OUTCOME_UNKNOWN) is reconciled"
        )
    answer = replace(answer, call_id=execution.call_id)
    submitted = submit_answers(
        conn, execution.run_id, [answer], kind=WaitKind.OUTCOME_UNKNOWN, by=by, now=now
    )
    if execution.status == ExecutionStatus.OUTCOME_UNKNOWN:
        assert answer.verdict is not None
        done = execution.reconciled(answer.verdict, answer.text, answer.is_error, now)
        reason = answer.text if answer.verdict != Verdict.RAN else ""
        change = Transition(status=ExecutionStatus.RECONCILED, at=now, actor=by, reason=reason)
        executions.apply_records(conn, [RecordExecution(done, change)])
        execution = done
    return execution, submitted
