"""The event log's writes, applied in one transaction: multi-row inserts and executemany."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from behest.domain.runs import RunStatus
from behest.domain.snapshots import Snapshot
from behest.store.base import (
    AppendEvent,
    AppendMessage,
    ClearToolResults,
    DeleteSnapshot,
    PutSnapshot,
    UpdateRun,
    Write,
)
from behest.store.sql import rows
from behest.store.sql import tables as t

TERMINAL = [int(s) for s in RunStatus if s.is_terminal]


async def apply_writes(conn: AsyncConnection, writes: list[Write]) -> None:
    events: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    run_updates: dict[str, UpdateRun] = {}
    snapshots: dict[str, Snapshot | None] = {}
    clears: list[ClearToolResults] = []
    for write in writes:
        match write:
            case AppendEvent(event):
                events.append(rows.event_to_row(event))
            case AppendMessage(message):
                messages.append(rows.message_to_row(message))
            case UpdateRun():
                # One UPDATE per run; as if applied in order, the first terminal one sticks.
                earlier = run_updates.get(write.run_id)
                if earlier is None or not earlier.status.is_terminal:
                    run_updates[write.run_id] = write
            case PutSnapshot(saved):
                snapshots[saved.run_id] = saved
            case DeleteSnapshot(run_id):
                snapshots[run_id] = None
            case ClearToolResults():
                clears.append(write)
    if messages:
        await conn.execute(sa.insert(t.messages), messages)
    if events:
        await conn.execute(sa.insert(t.events), events)
    for clear in clears:
        await conn.execute(
            sa.update(t.messages)
            .where(
                t.messages.c.session_id == clear.session_id,
                t.messages.c.role == "tool",
                t.messages.c.position <= clear.through_position,
            )
            .values(text=clear.text)
        )
    await update_runs(conn, list(run_updates.values()))
    await put_snapshots(conn, snapshots)


async def update_runs(conn: AsyncConnection, updates: list[UpdateRun]) -> None:
    """One executemany for every run's progress; an ended run is never changed again."""
    if not updates:
        return
    now = rows.now()
    runs = t.runs.c
    statement = (
        sa.update(t.runs)
        # No NOT IN: an expanding parameter cannot be used with executemany.
        .where(runs.id == sa.bindparam("b_id"), *(runs.status != s for s in TERMINAL))
        .values(
            status=sa.bindparam("b_status"),
            iterations=sa.bindparam("b_iterations"),
            input_tokens=sa.bindparam("b_input"),
            output_tokens=sa.bindparam("b_output"),
            finish_reason=sa.bindparam("b_finish"),
            error=sa.bindparam("b_error"),
            updated_at=now,
        )
    )
    params = [
        {
            "b_id": u.run_id,
            "b_status": int(u.status),
            "b_iterations": u.iterations,
            "b_input": u.usage.input_tokens,
            "b_output": u.usage.output_tokens,
            "b_finish": int(u.finish_reason),
            "b_error": u.error,
        }
        for u in updates
    ]
    await conn.execute(statement, params)
    ended = [u.run_id for u in updates if u.status.is_terminal]
    if ended:
        await conn.execute(
            sa.update(t.sessions)
            .where(t.sessions.c.active_run_id.in_(ended))
            .values(active_run_id=None, updated_at=now)
        )


async def put_snapshots(conn: AsyncConnection, snapshots: dict[str, Snapshot | None]) -> None:
    """Upsert the saved snapshots and delete the removed ones, each in one statement."""
    gone = [run_id for run_id, snapshot in snapshots.items() if snapshot is None]
    saved = [rows.snapshot_to_row(s) for s in snapshots.values() if s is not None]
    if gone:
        await conn.execute(sa.delete(t.snapshots).where(t.snapshots.c.run_id.in_(gone)))
    if saved:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        insert = dialect.insert(t.snapshots)
        changed = {c: insert.excluded[c] for c in saved[0] if c != "run_id"}
        await conn.execute(
            insert.on_conflict_do_update(index_elements=["run_id"], set_=changed), saved
        )


def upsert(dialect_name: str, table: sa.Table, row: dict[str, Any], *, key: str) -> Any:
    """INSERT … ON CONFLICT (key) DO UPDATE, for either backend."""
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    insert = dialect.insert(table).values(**row)
    changed = {name: value for name, value in row.items() if name != key}
    return insert.on_conflict_do_update(index_elements=[key], set_=changed)
