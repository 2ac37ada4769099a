"""Session reads: a tenant's sessions with their run and message counts, a transcript's pages.

The counts are correlated subqueries of the one SELECT (not a query per session): each counts
through an index that leads with the session (ix_runs_session_created, and the messages'
uq_messages_session_position).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.messages import Message
from behest.domain.sessions import Session
from behest.store.sql import forks, reads, rows
from behest.store.sql import tables as t
from behest.store.sql.engine import Engines

_RUN_COUNT = (
    sa.select(sa.func.count())
    .select_from(t.runs)
    .where(t.runs.c.session_id == t.sessions.c.id)
    .correlate(t.sessions)
    .scalar_subquery()
)
_MESSAGE_COUNT = (
    sa.select(sa.func.count())
    .select_from(t.messages)
    .where(t.messages.c.session_id == t.sessions.c.id, ~t.messages.c.rolled_back)
    .correlate(t.sessions)
    .scalar_subquery()
)
_SESSIONS = sa.select(
    t.sessions, _RUN_COUNT.label("run_count"), _MESSAGE_COUNT.label("message_count")
)
GET_SESSION = _SESSIONS.where(
    t.sessions.c.id == sa.bindparam("b_session"), t.sessions.c.erased_at.is_(None)
)
# The runs of a session in the order they started: by the position of their first message
# (a run's input is its first; a session has one active run at a time), through the index
# that leads with the session. Clocks of replicas play no part.
_SESSION_RUNS = (
    sa.select(t.messages.c.run_id)
    .where(t.messages.c.session_id == sa.bindparam("b_session"))
    .group_by(t.messages.c.run_id)
    .order_by(sa.func.min(t.messages.c.position))
)
# Positions are INTEGER: a from_position beyond it finds nothing.
MAX_POSITION = 2**31 - 1


def list_sessions(
    conn: Connection, *, tenant: str, limit: int, offset: int, forks_of: str = ""
) -> list[Session]:
    """The tenant's sessions (or the forks of one), newest first, with their counts."""
    query = _SESSIONS.where(t.sessions.c.tenant == tenant, t.sessions.c.erased_at.is_(None))
    if forks_of:
        query = query.where(t.sessions.c.parent_session_id == forks_of)
    query = (
        query.order_by(t.sessions.c.created_at.desc(), t.sessions.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    return [_counted(conn, row) for row in conn.execute(query)]


def session_runs(conn: Connection, session_id: str) -> list[str]:
    """The ids of the session's runs that have started, in the order they started."""
    return [row.run_id for row in conn.execute(_SESSION_RUNS, {"b_session": session_id})]


def get_session(conn: Connection, session_id: str) -> Session | None:
    """The session, whichever tenant's."""
    row = conn.execute(GET_SESSION, {"b_session": session_id}).first()
    return None if row is None else _counted(conn, row)


def _counted(conn: Connection, row: Any) -> Session:
    """The session; a fork's count of messages includes those it shares."""
    if row.parent_session_id is None:
        return session_from_row(row)
    query = sa.select(sa.func.count()).where(forks.history(forks.lineage(conn, row.id)))
    return session_from_row(row, message_count=int(conn.execute(query).scalar() or 0))


def messages_page(
    conn: Connection, session_id: str, *, from_position: int, limit: int
) -> list[Message]:
    """At most `limit` of the session's messages at `from_position` and after, in order."""
    if from_position > MAX_POSITION:
        return []
    in_history = forks.history(forks.lineage(conn, session_id))
    query = (
        sa.select(t.messages)
        .where(in_history, t.messages.c.position >= from_position)
        .order_by(t.messages.c.position)
        .limit(limit)
    )
    return [rows.message_from_row(row) for row in conn.execute(query)]


def roll_back(conn: Connection, run_id: str) -> int:
    """Take the run's messages out of its session's history."""
    result = conn.execute(
        sa.update(t.messages)
        .where(t.messages.c.run_id == run_id, ~t.messages.c.rolled_back)
        .values(rolled_back=True)
    )
    return int(result.rowcount)


class SessionsInSql:
    """The Store's SessionStore methods, for SqlStore (which has `engines`)."""

    @property
    def engines(self) -> Engines:
        raise NotImplementedError

    async def session_messages(self, session_id: str) -> list[Message]:
        """The session's history, with its content parts' bytes: what a model is sent."""
        async with self.engines.reader.connect() as conn:
            segments = await conn.run_sync(forks.lineage, session_id)
        return await reads.read_messages(self.engines.reader, forks.history(segments))

    async def list_sessions(
        self, *, tenant: str, limit: int, offset: int, forks_of: str = ""
    ) -> list[Session]:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(
                list_sessions, tenant=tenant, limit=limit, offset=offset, forks_of=forks_of
            )

    async def get_session(self, session_id: str) -> Session | None:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(get_session, session_id)

    async def session_messages_page(
        self, session_id: str, *, from_position: int, limit: int
    ) -> list[Message]:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(
                messages_page, session_id, from_position=from_position, limit=limit
            )

    async def session_runs(self, session_id: str) -> list[str]:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(session_runs, session_id)

    async def run_of_key(self, tenant: str, key: str) -> str | None:
        keys = t.idempotency_keys
        query = sa.select(keys.c.run_id).where(keys.c.identity == tenant, keys.c.key == key)
        async with self.engines.reader.connect() as conn:
            return (await conn.execute(query)).scalar()

    async def fork_session(
        self,
        *,
        tenant: str,
        session_id: str,
        new_id: str,
        through: int | None,
        after_run_id: str,
        now: datetime,
    ) -> None:
        await self.engines.writer.write(
            forks.fork,
            tenant=tenant,
            session_id=session_id,
            new_id=new_id,
            through=through,
            after_run_id=after_run_id,
            now=now,
        )

    async def roll_back_run(self, run_id: str) -> int:
        return await self.engines.writer.write_small(roll_back, run_id)


def session_from_row(row: Any, *, message_count: int | None = None) -> Session:
    return Session(
        id=row.id,
        tenant=row.tenant,
        created_at=rows.utc(row.created_at),
        updated_at=rows.utc(row.updated_at),
        active_run_id=row.active_run_id or "",
        run_count=int(row.run_count),
        message_count=int(row.message_count) if message_count is None else message_count,
        parent_session_id=row.parent_session_id or "",
        forked_through=row.forked_through,
    )
