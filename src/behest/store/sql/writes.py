"""The event log's writes, applied in one transaction: multi-row inserts and executemany."""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite

from behest.domain.events import Event
from behest.domain.runs import RunStatus
from behest.domain.snapshots import Snapshot
from behest.domain.waits import WaitKind
from behest.store.sql import channel_payloads, executions, rows, workers
from behest.store.sql import tables as t
from behest.store.sql import tool_tables as tt
from behest.store.sql.steers import CLOSE_STEERING, TAKE_STEERS
from behest.store.writes import (
    AppendEvent,
    AppendMessage,
    ClearToolResults,
    CloseSteering,
    DeleteSnapshot,
    EnqueueTask,
    ExpireCalls,
    Fence,
    PutSnapshot,
    RecordExecution,
    ReleaseRun,
    RequestInput,
    SetRunAgent,
    SetRunOutput,
    TakeSteers,
    UpdateRun,
    Write,
)

TERMINAL = [int(s) for s in RunStatus if s.is_terminal]

# Built once: SQLAlchemy then only looks each up in its compiled cache. Building them per
# call (their clauses, `excluded` columns) cost more than SQLite spent executing them.
_INSERT_EVENTS = sa.insert(t.events)
_INSERT_MESSAGES = sa.insert(t.messages)
_INSERT_BLOBS = sa.insert(t.content_blobs)
_CLEAR_TOOL_RESULTS = (
    sa.update(t.messages)
    .where(
        t.messages.c.session_id == sa.bindparam("b_session"),
        t.messages.c.role == "tool",
        t.messages.c.position <= sa.bindparam("b_through"),
    )
    .values(text=sa.bindparam("b_text"))
)
_UPDATE_RUNS = (
    sa.update(t.runs)
    # No NOT IN: an expanding parameter cannot be used with executemany.
    .where(t.runs.c.id == sa.bindparam("b_id"), *(t.runs.c.status != s for s in TERMINAL))
    .values(
        status=sa.bindparam("b_status"),
        iterations=sa.bindparam("b_iterations"),
        input_tokens=sa.bindparam("b_input"),
        output_tokens=sa.bindparam("b_output"),
        cached_input_tokens=sa.bindparam("b_cached"),
        cache_write_tokens=sa.bindparam("b_cache_write"),
        reasoning_tokens=sa.bindparam("b_reasoning"),
        finish_reason=sa.bindparam("b_finish"),
        error=sa.bindparam("b_error"),
        failure_code=sa.bindparam("b_failure"),
        cost=sa.bindparam("b_cost"),
        currency=sa.bindparam("b_currency"),
        updated_at=sa.bindparam("b_now"),
    )
)
_SET_OUTPUTS = (
    sa.update(t.runs)
    .where(t.runs.c.id == sa.bindparam("b_id"), *(t.runs.c.status != s for s in TERMINAL))
    .values(output=sa.bindparam("b_output"))
)
_SET_AGENTS = (
    sa.update(t.runs)
    .where(t.runs.c.id == sa.bindparam("b_id"), *(t.runs.c.status != s for s in TERMINAL))
    .values(current_agent=sa.bindparam("b_agent"))
)
_QUEUED = t.runs.alias("queued")
# A session its run's end frees: its first run queued (BusyPolicy.ENQUEUE) becomes its active
# run, nobody's and PENDING, which any node then takes up (adoption); else none is.
_FIRST_IN_LINE = (
    sa.select(_QUEUED.c.id)
    .where(
        _QUEUED.c.session_id == t.sessions.c.id,
        _QUEUED.c.queued_at.is_not(None),
        _QUEUED.c.status == int(RunStatus.PENDING),
    )
    .order_by(_QUEUED.c.queued_at, _QUEUED.c.id)
    .limit(1)
    .correlate(t.sessions)
    .scalar_subquery()
)
_END_SESSIONS_RUNS = (
    sa.update(t.sessions)
    .where(t.sessions.c.active_run_id.in_(sa.bindparam("b_ended", expanding=True)))
    .values(active_run_id=_FIRST_IN_LINE, updated_at=sa.bindparam("b_now"))
)
_INSERT_PENDING_CALLS = sa.insert(t.pending_calls)
_INSERT_TASKS = sa.insert(tt.worker_tasks)
_RELEASE_RUNS = (
    sa.update(t.runs)
    .where(t.runs.c.id == sa.bindparam("b_id"))
    .values(owner=None, lease_expires_at=None)
)
# Per call rather than call_id IN (…): executemany then covers every run's calls at once.
_EXPIRE_CALLS = (
    sa.update(t.pending_calls)
    .where(
        t.pending_calls.c.run_id == sa.bindparam("b_run"),
        t.pending_calls.c.call_id == sa.bindparam("b_call"),
        t.pending_calls.c.answered_at.is_(None),
    )
    .values(timed_out=True, answered_at=sa.bindparam("b_now"))
)
_DELETE_SNAPSHOTS = sa.delete(t.snapshots).where(
    t.snapshots.c.run_id.in_(sa.bindparam("b_gone", expanding=True))
)


@dataclass
class _Rows:
    """One batch's writes, sorted by the statement that applies them."""

    events: list[Event] = field(default_factory=list)
    generations: dict[str, int] = field(default_factory=lambda: collections.defaultdict(int))
    messages: list[dict[str, Any]] = field(default_factory=list)
    blobs: list[dict[str, Any]] = field(default_factory=list)
    run_updates: dict[str, UpdateRun] = field(default_factory=dict)
    snapshots: dict[str, Snapshot | None] = field(default_factory=dict)
    clears: list[dict[str, Any]] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    reconciling: list[dict[str, Any]] = field(default_factory=list)  # waiting for a verdict
    releases: list[dict[str, Any]] = field(default_factory=list)
    expiries: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    agents: list[dict[str, Any]] = field(default_factory=list)  # handoffs
    steers: list[str] = field(default_factory=list)  # taken
    closing: list[dict[str, Any]] = field(default_factory=list)  # steering closed
    records: list[RecordExecution] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)


def _sorted(writes: list[Write]) -> _Rows:
    rows_of = _Rows()
    for write in writes:
        match write:
            case AppendEvent(event):
                rows_of.events.append(event)
            case Fence(run_id, generation):  # labels the run's events with their claim
                rows_of.generations[run_id] = generation
            case AppendMessage(message):
                rows_of.messages.append(rows.message_to_row(message))
                rows_of.blobs.extend(rows.blob_rows(message))
            case UpdateRun():
                # One UPDATE per run; as if applied in order, the first terminal one sticks.
                earlier = rows_of.run_updates.get(write.run_id)
                if earlier is None or not earlier.status.is_terminal:
                    rows_of.run_updates[write.run_id] = write
            case SetRunOutput(run_id, output):
                rows_of.outputs.append({"b_id": run_id, "b_output": output})
            case SetRunAgent(run_id, agent):
                rows_of.agents.append({"b_id": run_id, "b_agent": agent})
            case TakeSteers(ids):
                rows_of.steers.extend(ids)
            case CloseSteering(run_id):
                rows_of.closing.append({"b_id": run_id})
            case PutSnapshot(saved):
                rows_of.snapshots[saved.run_id] = saved
            case DeleteSnapshot(run_id):
                rows_of.snapshots[run_id] = None
            case ClearToolResults(session_id=session, through_position=through, text=text):
                rows_of.clears.append({"b_session": session, "b_through": through, "b_text": text})
            case RequestInput(requested):
                for call in requested:
                    unknown = call.kind == WaitKind.OUTCOME_UNKNOWN
                    into = rows_of.reconciling if unknown else rows_of.calls
                    into.append(rows.pending_call_to_row(call))
            case RecordExecution():
                rows_of.records.append(write)
            case EnqueueTask(task):
                rows_of.tasks.append(workers.task_to_row(task))
            case ReleaseRun(run_id):
                rows_of.releases.append({"b_id": run_id})
            case ExpireCalls():
                rows_of.expiries.extend((write.run_id, call_id) for call_id in write.call_ids)
    return rows_of


def apply_writes(conn: Connection, writes: list[Write]) -> None:
    """Apply the writes of one or more steps (their Fences were checked by the caller: each
    only labels its run's events with the generation that wrote them)."""
    r = _sorted(writes)
    _execute(conn, _INSERT_MESSAGES, r.messages)
    _execute(conn, _INSERT_BLOBS, r.blobs)
    events = [rows.event_to_row(e, r.generations[e.run_id]) for e in r.events]
    _execute(conn, _INSERT_EVENTS, events)
    for clear in r.clears:  # one by one, in order: a later prune of a session wins
        conn.execute(_CLEAR_TOOL_RESULTS, clear)
    _execute(conn, _INSERT_PENDING_CALLS, r.calls)
    # Before the runs' updates: a step that ends a run may carry its output.
    _execute(conn, _SET_OUTPUTS, r.outputs)
    _execute(conn, _SET_AGENTS, r.agents)
    if r.steers:
        conn.execute(TAKE_STEERS, {"b_ids": r.steers})
    _execute(conn, CLOSE_STEERING, r.closing)
    update_runs(conn, list(r.run_updates.values()))
    _execute(conn, _RELEASE_RUNS, r.releases)
    # After the runs: submit_answers locks a run, then its calls; the same order cannot deadlock.
    expire_calls(conn, r.expiries)
    # A call waited for before (an approval) waits again, for its reconciliation: its row
    # is replaced, after the runs' rows are locked (as submit_answers locks them).
    replace_calls(conn, r.reconciling)
    executions.apply_records(conn, r.records)
    _execute(conn, _INSERT_TASKS, r.tasks)
    put_snapshots(conn, r.snapshots)


def notifications(node: str, writes: Iterable[Write]) -> list[tuple[str, str]]:
    """The NOTIFYs (channel, payload) telling the other replicas which runs' logs `writes`
    extend, to each run's last sequence, and which tenants' workers have a task queued; none
    without a node name (store/sql/channel_payloads.py)."""
    last: dict[str, int] = {}
    queued: set[str] = set()  # tenants with a new task for their workers
    for write in writes:
        if isinstance(write, AppendEvent):
            event = write.event
            last[event.run_id] = max(last.get(event.run_id, 0), event.sequence)
        elif isinstance(write, EnqueueTask):
            queued.add(write.task.tenant)
    if not node:
        return []
    sent = [
        (
            channel_payloads.SIGNALS,
            channel_payloads.signal_payload(node, channel_payloads.TASK_QUEUED, tenant),
        )
        for tenant in sorted(queued)
    ]
    if last:
        sent += [
            (channel_payloads.EVENTS, payload)
            for payload in channel_payloads.events_payloads(node, last)
        ]
    return sent


def _execute(conn: Connection, statement: sa.Executable, params: list[dict[str, Any]]) -> None:
    """One (multi-row) statement for all `params`; none if there are none."""
    if params:
        conn.execute(statement, params)


def update_runs(conn: Connection, updates: list[UpdateRun]) -> None:
    """One executemany for every run's progress; an ended run is never changed again."""
    if not updates:
        return
    now = rows.now()
    conn.execute(_UPDATE_RUNS, [_update_params(u, now) for u in updates])
    ended = [u.run_id for u in updates if u.status.is_terminal]
    if ended:
        conn.execute(_END_SESSIONS_RUNS, {"b_ended": ended, "b_now": now})


def _update_params(update: UpdateRun, now: datetime) -> dict[str, Any]:
    """The bind parameters of _UPDATE_RUNS for one run."""
    usage = update.usage
    cost, currency = rows.money_to_columns(update.cost)
    return {
        "b_id": update.run_id,
        "b_status": int(update.status),
        "b_iterations": update.iterations,
        "b_input": usage.input_tokens,
        "b_output": usage.output_tokens,
        "b_cached": usage.cached_input_tokens,
        "b_cache_write": usage.cache_write_tokens,
        "b_reasoning": usage.reasoning_tokens,
        "b_finish": int(update.finish_reason),
        "b_error": update.error,
        "b_failure": int(update.failure_code),
        "b_cost": cost,
        "b_currency": currency,
        "b_now": now,
    }


def expire_calls(conn: Connection, expiries: list[tuple[str, str]]) -> None:
    """Mark unanswered calls (run id, call id) as timed out, now; answered ones keep theirs."""
    if expiries:
        now = rows.now()
        params = [{"b_run": run, "b_call": call, "b_now": now} for run, call in expiries]
        conn.execute(_EXPIRE_CALLS, params)


_DELETE_CALL = sa.delete(t.pending_calls).where(
    t.pending_calls.c.run_id == sa.bindparam("b_run"),
    t.pending_calls.c.call_id == sa.bindparam("b_call"),
)


def replace_calls(conn: Connection, calls: list[dict[str, Any]]) -> None:
    """Insert pending calls in place of the runs' earlier rows of the same calls."""
    if calls:
        conn.execute(_DELETE_CALL, [{"b_run": c["run_id"], "b_call": c["call_id"]} for c in calls])
        conn.execute(_INSERT_PENDING_CALLS, calls)


def put_snapshots(conn: Connection, snapshots: dict[str, Snapshot | None]) -> None:
    """Upsert the saved snapshots and delete the removed ones, each in one statement."""
    gone = [run_id for run_id, snapshot in snapshots.items() if snapshot is None]
    saved = [rows.snapshot_to_row(s) for s in snapshots.values() if s is not None]
    if gone:
        conn.execute(_DELETE_SNAPSHOTS, {"b_gone": gone})
    if saved:
        conn.execute(upsert(conn.dialect.name, t.snapshots, "run_id"), saved)


@functools.cache
def upsert(dialect_name: str, table: sa.Table, key: str) -> Any:
    """INSERT … ON CONFLICT (key) DO UPDATE of every other column, for either backend; built
    once per table. Rows given to it name every column."""
    insert = (postgresql if dialect_name == "postgresql" else sqlite).insert(table)
    changed = {c.name: insert.excluded[c.name] for c in table.c if c.name != key}
    return insert.on_conflict_do_update(index_elements=[key], set_=changed)
