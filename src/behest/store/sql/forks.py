"""Forked sessions in SQL (ForkSession): a fork's history is its parent's history through a
position, shared — never copied — then its own messages, whose positions follow.

A session's **lineage** is itself (every position), then its parent through the fork's
position, then that one's parent through the smaller of the two positions, and so on: its
history is the union of those segments' messages (`history`), one query. A session erased
while forks still share its messages is kept as a tombstone (`erased_at`) holding only
those; it is dropped with the last fork that needs it (`drop_unneeded`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.runs import RunStatus
from behest.errors import FailedPrecondition, InvalidArgument, NotFound, quote
from behest.store.sql import tables as t

_s, _m = t.sessions.c, t.messages.c
# How many forks of forks a lineage may have (a fork of a session that deep is refused).
MAX_DEPTH = 32


@dataclass(frozen=True, slots=True)
class Segment:
    """The messages of `session_id` a history holds: every one (`through` None), or those at
    positions up to `through`."""

    session_id: str
    through: int | None = None


def lineage(conn: Connection, session_id: str) -> list[Segment]:
    """The session's history as segments, itself first."""
    segments = [Segment(session_id)]
    current, limit = session_id, None
    for _ in range(MAX_DEPTH):
        row = conn.execute(
            sa.select(_s.parent_session_id, _s.forked_through).where(_s.id == current)
        ).first()
        if row is None or row.parent_session_id is None:
            break
        limit = row.forked_through if limit is None else min(limit, row.forked_through)
        current = row.parent_session_id
        segments.append(Segment(current, limit))
    return segments


def history(segments: list[Segment]) -> sa.ColumnElement[bool]:
    """The messages of a history (those rolled back left out)."""
    parts = [
        _m.session_id == s.session_id
        if s.through is None
        else sa.and_(_m.session_id == s.session_id, _m.position <= s.through)
        for s in segments
    ]
    return sa.and_(sa.or_(*parts), ~_m.rolled_back)


def fork(
    conn: Connection,
    *,
    tenant: str,
    session_id: str,
    new_id: str,
    through: int | None,
    after_run_id: str,
    now: datetime,
) -> None:
    """A new session of the tenant forked from `session_id` through a position (or the end
    of one of its runs); refusals as ForkSession documents them."""
    source = conn.execute(
        sa.select(t.sessions).where(_s.id == session_id, _s.tenant == tenant).with_for_update()
    ).first()
    if source is None or source.erased_at is not None:
        raise NotFound(f"session {session_id} not found")
    segments = lineage(conn, session_id)
    if len(segments) > MAX_DEPTH:
        raise FailedPrecondition(f"session {session_id} is a fork {MAX_DEPTH} levels deep")
    if after_run_id:
        through = _end_of_run(conn, session_id, after_run_id)
    last = conn.execute(sa.select(sa.func.max(_m.position)).where(history(segments))).scalar()
    if last is None or through is None or through > last:
        end = "no messages" if last is None else f"its last position is {last}"
        raise InvalidArgument(f"through_position {through} is past the end of the session ({end})")
    if source.active_run_id:
        _before_active(conn, session_id, source.active_run_id, through)
    conn.execute(
        sa.insert(t.sessions).values(
            id=new_id,
            tenant=tenant,
            created_at=now,
            updated_at=now,
            active_run_id=None,
            parent_session_id=session_id,
            forked_through=through,
        )
    )


def _end_of_run(conn: Connection, session_id: str, run_id: str) -> int:
    run = conn.execute(
        sa.select(t.runs.c.session_id, t.runs.c.status).where(t.runs.c.id == run_id)
    ).first()
    if run is None or run.session_id != session_id:
        raise InvalidArgument(f"after_run_id {run_id} is not a run of session {session_id}")
    if not RunStatus(run.status).is_terminal:
        raise FailedPrecondition(f"run {run_id} has not ended; fork after it once it has")
    end = conn.execute(sa.select(sa.func.max(_m.position)).where(_m.run_id == run_id)).scalar()
    if end is None:
        raise InvalidArgument(f"run {run_id} has no messages to fork after")
    return int(end)


def _before_active(conn: Connection, session_id: str, active: str, through: int) -> None:
    """A fork may not take messages the session's active run may still add to."""
    first = conn.execute(sa.select(sa.func.min(_m.position)).where(_m.run_id == active)).scalar()
    if first is None or through >= first:
        raise FailedPrecondition(
            f"session {quote(session_id)} has an active run {active}; fork before its first "
            "message, or once it has ended"
        )


def needed_through(conn: Connection, session_id: str) -> int | None:
    """The last position of the session a fork (or a tombstone's fork) still shares."""
    value = conn.execute(
        sa.select(sa.func.max(_s.forked_through)).where(_s.parent_session_id == session_id)
    ).scalar()
    return None if value is None else int(value)


def drop_unneeded(conn: Connection, session_id: str | None) -> None:
    """Drop the tombstones no fork needs any more, from `session_id` up its lineage."""
    for _ in range(MAX_DEPTH):
        if session_id is None:
            return
        row = conn.execute(
            sa.select(_s.erased_at, _s.parent_session_id).where(_s.id == session_id)
        ).first()
        if row is None or row.erased_at is None or needed_through(conn, session_id) is not None:
            return
        delete_messages(conn, _m.session_id == session_id)
        conn.execute(sa.delete(t.sessions).where(_s.id == session_id))
        session_id = row.parent_session_id


def delete_messages(conn: Connection, where: sa.ColumnElement[bool]) -> None:
    """Delete messages and the bytes of their content parts."""
    blobs = t.content_blobs
    conn.execute(sa.delete(blobs).where(blobs.c.message_id.in_(sa.select(_m.id).where(where))))
    conn.execute(sa.delete(t.messages).where(where))
