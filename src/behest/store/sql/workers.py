"""Workers and their tasks in SQL (domain/workers.py): connections registered with the tools
they declare, tasks queued with the run's step (EnqueueTask), taken by one worker at a time,
their leases renewed by heartbeats, and one result per attempt accepted (fenced by attempt and
by the worker that holds the lease).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.workers import (
    ResultRefused,
    Task,
    TaskResult,
    TaskState,
    WorkerRecord,
    WorkerToolSpec,
)
from behest.store.sql import channel_payloads as channel
from behest.store.sql import tool_tables as tt
from behest.store.sql.engine import Engines
from behest.store.sql.rows import utc

_w = tt.workers.c
_k = tt.worker_tasks.c
_TASK = sa.select(tt.worker_tasks).where(_k.execution_id == sa.bindparam("b_id"))


def task_to_row(task: Task) -> dict[str, Any]:
    row = {f.name: getattr(task, f.name) for f in dataclasses.fields(task)}
    row["state"] = int(task.state)
    row["worker_id"] = task.worker_id or None
    return row


def task_from_row(row: Any) -> Task:
    values = {f.name: getattr(row, f.name) for f in dataclasses.fields(Task)}
    for name in ("created_at", "schedule_deadline", "lease_until", "deadline"):
        values[name] = values[name] and utc(values[name])
    values["state"] = TaskState(row.state)
    values["worker_id"] = row.worker_id or ""
    return Task(**values)


def _tools_json(tools: Sequence[WorkerToolSpec]) -> str:
    return json.dumps([dataclasses.asdict(spec) for spec in tools], separators=(",", ":"))


def _record(row: Any) -> WorkerRecord:
    return WorkerRecord(
        id=row.id,
        tenant=row.tenant,
        name=row.name,
        node=row.node,
        tools=tuple(WorkerToolSpec(**spec) for spec in json.loads(row.tools)),
        max_tasks=row.max_tasks,
        connected_at=utc(row.connected_at),
        seen_at=utc(row.seen_at),
    )


def register(conn: Connection, worker: WorkerRecord, *, stale_before: datetime) -> int:
    """Store a new connection. A worker's name is its identity: the connection takes the place
    of the same worker's earlier ones (its tenant and name), and over their leased tasks (a
    worker that reconnects, to this replica or another, still hands their results in). Rows
    of workers not seen since `stale_before` are dropped. How many tasks it took over."""
    earlier = sa.and_(_w.tenant == worker.tenant, _w.name == worker.name)
    conn.execute(sa.delete(tt.workers).where(sa.or_(_w.seen_at < stale_before, earlier)))
    conn.execute(
        sa.insert(tt.workers),
        {
            "id": worker.id,
            "tenant": worker.tenant,
            "name": worker.name,
            "node": worker.node,
            "tools": _tools_json(worker.tools),
            "max_tasks": worker.max_tasks,
            "connected_at": worker.connected_at,
            "seen_at": worker.seen_at,
        },
    )
    if not worker.name:  # an unnamed worker never takes over another's tasks
        return 0
    taken = conn.execute(
        sa.update(tt.worker_tasks)
        .where(
            _k.tenant == worker.tenant,
            _k.worker_name == worker.name,
            _k.state == int(TaskState.LEASED),
            _k.worker_id != worker.id,
        )
        .values(worker_id=worker.id)
    )
    return int(taken.rowcount)


def heartbeat(conn: Connection, worker_id: str, *, now: datetime, lease_until: datetime) -> None:
    """The worker is alive; so are its tasks' leases."""
    conn.execute(sa.update(tt.workers).where(_w.id == worker_id).values(seen_at=now))
    conn.execute(
        sa.update(tt.worker_tasks)
        .where(_k.worker_id == worker_id, _k.state == int(TaskState.LEASED))
        .values(lease_until=lease_until)
    )


def unregister(conn: Connection, worker_id: str) -> None:
    """The connection ended; its leased tasks keep their leases until they lapse (the same
    worker, reconnected, takes them over and may still send their results)."""
    conn.execute(sa.delete(tt.workers).where(_w.id == worker_id))


def claim(
    conn: Connection, worker: WorkerRecord, tools: Sequence[str], *, now: datetime, lease_s: float
) -> Task | None:
    """Lease the oldest queued task of the worker's tenant that it serves, if any."""
    query = (
        sa.select(tt.worker_tasks)
        .where(
            _k.tenant == worker.tenant,
            _k.state == int(TaskState.QUEUED),
            _k.tool_name.in_(list(tools)),
            _k.schedule_deadline > now,
        )
        .order_by(_k.created_at, _k.execution_id)
        .limit(1)
    )
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    row = conn.execute(query).first()
    if row is None:
        return None
    task = task_from_row(row)
    leased = dataclasses.replace(
        task,
        state=TaskState.LEASED,
        worker_id=worker.id,
        worker_name=worker.name,
        lease_until=now + timedelta(seconds=lease_s),
        deadline=now + timedelta(seconds=task.timeout_s),
    )
    conn.execute(
        sa.update(tt.worker_tasks)
        .where(_k.execution_id == task.execution_id, _k.state == int(TaskState.QUEUED))
        .values(
            state=int(leased.state),
            worker_id=leased.worker_id,
            worker_name=leased.worker_name,
            lease_until=leased.lease_until,
            deadline=leased.deadline,
        )
    )
    return leased


def complete(
    conn: Connection, worker_id: str, result: TaskResult, *, now: datetime, node: str = ""
) -> ResultRefused | None:
    """Take a worker's result; None when taken, else why not (nothing changed). With `node`
    (PostgreSQL), the replica whose run waits for it is told at COMMIT."""
    query = _TASK
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    row = conn.execute(query, {"b_id": result.execution_id}).first()
    if row is None:
        return ResultRefused.UNKNOWN
    task = task_from_row(row)
    if task.attempt != result.attempt:
        return ResultRefused.STALE
    if task.state == TaskState.DONE:
        return ResultRefused.TWICE
    lapsed = task.lease_until is None or task.lease_until < now
    if task.state != TaskState.LEASED or task.worker_id != worker_id or lapsed:
        return ResultRefused.NOT_YOURS
    conn.execute(
        sa.update(tt.worker_tasks)
        .where(_k.execution_id == task.execution_id)
        .values(
            state=int(TaskState.DONE),
            output=result.output,
            is_error=result.is_error,
            retryable=result.retryable,
        )
    )
    if node and conn.dialect.name == "postgresql":
        payload = channel.signal_payload(node, channel.TASK_DONE, task.execution_id)
        channel.notify(conn, channel.SIGNALS, payload)
    return None


def give_up(conn: Connection, execution_id: str, state: TaskState, why: str) -> bool:
    """End a task still in `state` without a worker's result: no worker took it in time
    (QUEUED: `expired`) or its worker did not answer in time (LEASED); False if its state
    changed meanwhile. A result sent after is refused (the task has one)."""
    done = conn.execute(
        sa.update(tt.worker_tasks)
        .where(_k.execution_id == execution_id, _k.state == int(state))
        .values(
            state=int(TaskState.DONE),
            expired=state == TaskState.QUEUED,
            is_error=True,
            output=why,
        )
    )
    return bool(done.rowcount)


def release(conn: Connection, execution_id: str, *, worker_id: str) -> None:
    """A leased task its worker never got: queued again."""
    conn.execute(
        sa.update(tt.worker_tasks)
        .where(
            _k.execution_id == execution_id,
            _k.worker_id == worker_id,
            _k.state == int(TaskState.LEASED),
        )
        .values(state=int(TaskState.QUEUED), worker_id=None, lease_until=None, deadline=None)
    )


def rejoin(conn: Connection, execution_id: str, *, lease_until: datetime) -> Task | None:
    """A run taken up again waits for its task anew: a leased task's lease is given one more
    term, for its worker to reconnect (behest was down: nobody renewed it)."""
    conn.execute(
        sa.update(tt.worker_tasks)
        .where(_k.execution_id == execution_id, _k.state == int(TaskState.LEASED))
        .values(lease_until=lease_until)
    )
    row = conn.execute(_TASK, {"b_id": execution_id}).first()
    return None if row is None else task_from_row(row)


class WorkersInSql:
    """The Store's worker methods, for SqlStore (which has `engines`)."""

    @property
    def engines(self) -> Engines:
        raise NotImplementedError

    @property
    def node(self) -> str:
        raise NotImplementedError

    async def register_worker(self, worker: WorkerRecord, *, stale_before: datetime) -> int:
        return await self.engines.writer.write_small(register, worker, stale_before=stale_before)

    async def worker_heartbeat(
        self, worker_id: str, *, now: datetime, lease_until: datetime
    ) -> None:
        await self.engines.writer.write_small(
            heartbeat, worker_id, now=now, lease_until=lease_until
        )

    async def unregister_worker(self, worker_id: str) -> None:
        await self.engines.writer.write_small(unregister, worker_id)

    async def live_workers(self, *, tenant: str, since: datetime) -> list[WorkerRecord]:
        query = sa.select(tt.workers).where(_w.tenant == tenant, _w.seen_at >= since)
        async with self.engines.reader.connect() as conn:
            return [_record(row) for row in await conn.execute(query)]

    async def claim_task(
        self, worker: WorkerRecord, tools: Sequence[str], *, now: datetime, lease_s: float
    ) -> Task | None:
        return await self.engines.writer.write_small(claim, worker, tools, now=now, lease_s=lease_s)

    async def complete_task(
        self, worker_id: str, result: TaskResult, *, now: datetime
    ) -> ResultRefused | None:
        writer, node = self.engines.writer, self.node
        return await writer.write_small(complete, worker_id, result, now=now, node=node)

    async def give_up_task(self, execution_id: str, state: TaskState, why: str) -> bool:
        return await self.engines.writer.write_small(give_up, execution_id, state, why)

    async def release_task(self, execution_id: str, *, worker_id: str) -> None:
        await self.engines.writer.write_small(release, execution_id, worker_id=worker_id)

    async def rejoin_task(self, execution_id: str, *, lease_until: datetime) -> Task | None:
        return await self.engines.writer.write_small(rejoin, execution_id, lease_until=lease_until)

    async def queued_tasks(self, tenant: str) -> int:
        query = sa.select(sa.func.count()).where(
            _k.tenant == tenant, _k.state == int(TaskState.QUEUED)
        )
        async with self.engines.reader.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def worker_task(self, execution_id: str) -> Task | None:
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(_TASK, {"b_id": execution_id})).first()
            return None if row is None else task_from_row(row)
