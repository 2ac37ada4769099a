"""The store's plain reads: runs listed, a run's events in pages, messages with their content
parts' bytes, snapshots. (Sessions, spend, waits and leases read in their own modules.)"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from behest.domain.events import Event
from behest.domain.messages import Message
from behest.domain.runs import Run, RunFilter
from behest.domain.snapshots import Snapshot
from behest.store.sql import rows, run_rows
from behest.store.sql import tables as t
from behest.store.sql.writes import TERMINAL

# child_runs, by ix_runs_parent.
CHILD_RUNS = (
    sa.select(t.runs)
    .where(t.runs.c.parent_run_id == sa.bindparam("b_parent"))
    .order_by(t.runs.c.created_at, t.runs.c.id)
)


# A run's events as read back: the columns event_from_values takes, in its order.
_EVENT_COLUMNS = (
    t.events.c.sequence,
    t.events.c.kind,
    t.events.c.payload,
    t.events.c.created_at,
    t.events.c.trace_id,
    t.events.c.span_id,
)


async def list_runs(reader: AsyncEngine, *, tenant: str, wanted: RunFilter) -> list[Run]:
    query = sa.select(t.runs).where(t.runs.c.tenant == tenant)
    if wanted.session_id:
        query = query.where(t.runs.c.session_id == wanted.session_id)
    if wanted.status is not None:
        query = query.where(t.runs.c.status == int(wanted.status))
    if wanted.model:
        query = query.where(t.runs.c.model == wanted.model)
    if wanted.agent:  # both terms: the partial index ix_runs_agent is used
        query = query.where(t.runs.c.agent_name != "", t.runs.c.agent_name == wanted.agent)
        if wanted.agent_version:
            query = query.where(t.runs.c.agent_version == wanted.agent_version)
    if wanted.created_from is not None:
        query = query.where(t.runs.c.created_at >= wanted.created_from)
    if wanted.created_to is not None:
        query = query.where(t.runs.c.created_at <= wanted.created_to)
    query = query.order_by(t.runs.c.created_at.desc(), t.runs.c.id.desc())
    async with reader.connect() as conn:
        result = await conn.execute(query.limit(wanted.limit).offset(wanted.offset))
        return [run_rows.run_from_row(row) for row in result]


async def unfinished_runs(reader: AsyncEngine) -> list[Run]:
    query = (
        sa.select(t.runs)
        .where(t.runs.c.status.not_in(TERMINAL))
        .order_by(t.runs.c.created_at, t.runs.c.id)
    )
    async with reader.connect() as conn:
        return [run_rows.run_from_row(row) for row in await conn.execute(query)]


async def child_runs(reader: AsyncEngine, parent_run_id: str) -> list[Run]:
    """Every sub-agent run `parent_run_id` started (ended or not), oldest first."""
    async with reader.connect() as conn:
        result = await conn.execute(CHILD_RUNS, {"b_parent": parent_run_id})
        return [run_rows.run_from_row(row) for row in result]


async def read_events(reader: AsyncEngine, run_id: str, *, after: int, limit: int) -> list[Event]:
    query = (
        sa.select(*_EVENT_COLUMNS)
        .where(t.events.c.run_id == run_id, t.events.c.sequence > after)
        .order_by(t.events.c.sequence)
        .limit(limit)
    )
    async with reader.connect() as conn:
        result = await conn.execute(query)
        return [rows.event_from_values(run_id, *values) for values in result]


async def last_sequence(reader: AsyncEngine, run_id: str) -> int:
    query = sa.select(sa.func.max(t.events.c.sequence)).where(t.events.c.run_id == run_id)
    async with reader.connect() as conn:
        return int((await conn.execute(query)).scalar() or 0)


async def read_messages(reader: AsyncEngine, where: sa.ColumnElement[bool]) -> list[Message]:
    """Messages with their content parts' bytes: what a model is sent."""
    query = sa.select(t.messages).where(where).order_by(t.messages.c.position)
    async with reader.connect() as conn:
        messages = [rows.message_from_row(row) for row in await conn.execute(query)]
        with_parts = [m.id for m in messages if m.parts]
        if not with_parts:
            return messages
        blobs = t.content_blobs
        found: dict[str, dict[int, bytes]] = {}
        for row in await conn.execute(sa.select(blobs).where(blobs.c.message_id.in_(with_parts))):
            found.setdefault(row.message_id, {})[row.part] = row.data
    return [rows.with_blobs(m, found[m.id]) if m.id in found else m for m in messages]


async def list_snapshots(reader: AsyncEngine, *, tenant: str) -> list[Snapshot]:
    query = (
        sa.select(t.snapshots)
        .join(t.runs, t.runs.c.id == t.snapshots.c.run_id)
        .where(t.runs.c.tenant == tenant)
        .order_by(t.snapshots.c.updated_at, t.snapshots.c.run_id)
    )
    async with reader.connect() as conn:
        return [rows.snapshot_from_row(row) for row in await conn.execute(query)]


async def get_snapshot(reader: AsyncEngine, run_id: str) -> Snapshot | None:
    query = sa.select(t.snapshots).where(t.snapshots.c.run_id == run_id)
    async with reader.connect() as conn:
        row = (await conn.execute(query)).first()
        return None if row is None else rows.snapshot_from_row(row)
