"""Tool executions in SQL (domain/executions.py): their records, written with the run's steps
(RecordExecution) and read by run or by id. Reconciling one is an answer to the call its run
waits on (store/sql/waits.py `reconcile`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.executions import ExecutionStatus, ToolExecution, Transition, Verdict
from behest.store.sql import tool_tables as tt
from behest.store.sql.engine import Engines
from behest.store.sql.rows import utc
from behest.store.writes import RecordExecution

_x = tt.tool_executions.c
_RUN_EXECUTIONS = (
    sa.select(tt.tool_executions)
    .where(_x.run_id == sa.bindparam("b_run"))
    .order_by(_x.started_at, _x.call_id, _x.attempt)
)
EXECUTION = sa.select(tt.tool_executions).where(_x.id == sa.bindparam("b_id"))
_TRANSITIONS = (
    sa.select(tt.tool_execution_transitions)
    .where(tt.tool_execution_transitions.c.execution_id == sa.bindparam("b_id"))
    .order_by(tt.tool_execution_transitions.c.id)
)
_INSERT_TRANSITIONS = sa.insert(tt.tool_execution_transitions)
_UPDATE_EXECUTION = (
    sa.update(tt.tool_executions)
    .where(_x.id == sa.bindparam("b_id"))
    .values(
        status=sa.bindparam("b_status"),
        executor=sa.bindparam("b_executor"),
        ended_at=sa.bindparam("b_ended_at"),
        result=sa.bindparam("b_result"),
        is_error=sa.bindparam("b_is_error"),
        result_digest=sa.bindparam("b_digest"),
        verdict=sa.bindparam("b_verdict"),
    )
)


def apply_records(conn: Connection, records: Sequence[RecordExecution]) -> None:
    """Insert new executions, update the others to their latest state, add the transitions."""
    latest: dict[str, ToolExecution] = {}
    for record in records:
        latest[record.execution.id] = record.execution
    if not latest:
        return
    known = set(conn.execute(sa.select(_x.id).where(_x.id.in_(list(latest)))).scalars())
    new = [_row(e) for e in latest.values() if e.id not in known]
    changed = [_changes(e) for e in latest.values() if e.id in known]
    if new:
        conn.execute(sa.insert(tt.tool_executions), new)
    if changed:
        conn.execute(_UPDATE_EXECUTION, changed)
    conn.execute(_INSERT_TRANSITIONS, [_transition_row(r) for r in records])


def _row(execution: ToolExecution) -> dict[str, Any]:
    return {
        "id": execution.id,
        "run_id": execution.run_id,
        "tenant": execution.tenant,
        "call_id": execution.call_id,
        "tool_name": execution.tool_name,
        "source": execution.source,
        "attempt": execution.attempt,
        "status": int(execution.status),
        "executor": execution.executor,
        "idempotent": execution.idempotent,
        "started_at": execution.started_at,
        "ended_at": execution.ended_at,
        "result": execution.result,
        "is_error": execution.is_error,
        "result_digest": execution.result_digest,
        "verdict": None if execution.verdict is None else int(execution.verdict),
    }


def _changes(execution: ToolExecution) -> dict[str, Any]:
    return {
        "b_id": execution.id,
        "b_status": int(execution.status),
        "b_executor": execution.executor,
        "b_ended_at": execution.ended_at,
        "b_result": execution.result,
        "b_is_error": execution.is_error,
        "b_digest": execution.result_digest,
        "b_verdict": None if execution.verdict is None else int(execution.verdict),
    }


def _transition_row(record: RecordExecution) -> dict[str, Any]:
    transition = record.transition
    return {
        "execution_id": record.execution.id,
        "run_id": record.execution.run_id,
        "status": int(transition.status),
        "at": transition.at,
        "actor": transition.actor,
        "reason": transition.reason,
    }


def execution_from_row(row: Any, transitions: tuple[Transition, ...] = ()) -> ToolExecution:
    return ToolExecution(
        id=row.id,
        run_id=row.run_id,
        tenant=row.tenant,
        call_id=row.call_id,
        tool_name=row.tool_name,
        source=row.source,
        attempt=row.attempt,
        status=ExecutionStatus(row.status),
        executor=row.executor,
        idempotent=bool(row.idempotent),
        started_at=utc(row.started_at),
        ended_at=row.ended_at and utc(row.ended_at),
        result=row.result,
        is_error=bool(row.is_error),
        result_digest=row.result_digest,
        verdict=None if row.verdict is None else Verdict(row.verdict),
        transitions=transitions,
    )


def _transition_from_row(row: Any) -> Transition:
    return Transition(
        status=ExecutionStatus(row.status), at=utc(row.at), actor=row.actor, reason=row.reason
    )


def read_execution(conn: Connection, execution_id: str) -> ToolExecution | None:
    row = conn.execute(EXECUTION, {"b_id": execution_id}).first()
    if row is None:
        return None
    found = conn.execute(_TRANSITIONS, {"b_id": execution_id})
    return execution_from_row(row, tuple(_transition_from_row(r) for r in found))


class ToolExecutionsInSql:
    """The Store's tool execution methods, for SqlStore (which has `engines`)."""

    @property
    def engines(self) -> Engines:
        raise NotImplementedError

    async def tool_executions(self, run_id: str) -> list[ToolExecution]:
        async with self.engines.reader.connect() as conn:
            result = await conn.execute(_RUN_EXECUTIONS, {"b_run": run_id})
            return [execution_from_row(row) for row in result]

    async def tool_execution(self, execution_id: str) -> ToolExecution | None:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(read_execution, execution_id)
