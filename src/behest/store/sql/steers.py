"""Steers in SQL (domain/runs.py Steer; on_busy STEER): a message added to an active run
unless the run has closed steering (CloseSteering, a write of its ending step) — both take
the run's row lock, so a steer lands either before the close (the run's last look, after it,
takes it) or is refused (and becomes a queued run)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from behest.domain.runs import RunStatus, Steer
from behest.store.sql import tables as t
from behest.store.sql.engine import Engines
from behest.store.sql.rows import utc
from behest.store.sql.session_tables import steers

_s = steers.c
# A steer's idempotency key: (tenant, client_request_id, the request's fingerprint).
Key = tuple[str, str, str]
_TERMINAL = [int(s) for s in RunStatus if s.is_terminal]
_PENDING = (
    sa.select(steers)
    .where(_s.run_id == sa.bindparam("b_run"), _s.taken == sa.false())
    .order_by(_s.created_at, _s.id)
)
# A write of the run's ending step (CloseSteering), under the run row's lock as `add` takes it.
CLOSE_STEERING = (
    sa.update(t.runs).where(t.runs.c.id == sa.bindparam("b_id")).values(steers_closed=True)
)
TAKE_STEERS = (
    sa.update(steers).where(_s.id.in_(sa.bindparam("b_ids", expanding=True))).values(taken=True)
)


def _lock_run(conn: Connection, run_id: str) -> Any:
    query = sa.select(t.runs.c.steers_closed, t.runs.c.status).where(t.runs.c.id == run_id)
    return conn.execute(query.with_for_update()).first()


def add(conn: Connection, run_id: str, text: str, now: datetime, key: Key | None) -> Steer | None:
    """The steer, stored (with its idempotency key: the run it joined); None when the run has
    ended or is ending (steering closed)."""
    run = _lock_run(conn, run_id)
    if run is None or run.steers_closed or run.status in _TERMINAL:
        return None
    steer = Steer(id=str(uuid.uuid4()), run_id=run_id, text=text, created_at=now)
    conn.execute(
        sa.insert(steers).values(id=steer.id, run_id=run_id, text=text, created_at=now, taken=False)
    )
    if key is not None:
        tenant, name, fingerprint = key
        conn.execute(
            sa.insert(t.idempotency_keys).values(
                identity=tenant, key=name, fingerprint=fingerprint, run_id=run_id, created_at=now
            )
        )
    return steer


class SteersInSql:
    """The Store's steer methods, for SqlStore (which has `engines`)."""

    @property
    def engines(self) -> Engines:
        raise NotImplementedError

    async def add_steer(
        self, run_id: str, text: str, *, now: datetime, key: Key | None = None
    ) -> Steer | None:
        return await self.engines.writer.write_small(add, run_id, text, now, key)

    async def pending_steers(self, run_id: str) -> list[Steer]:
        async with self.engines.reader.connect() as conn:
            result = await conn.execute(_PENDING, {"b_run": run_id})
            return [
                Steer(id=row.id, run_id=row.run_id, text=row.text, created_at=utc(row.created_at))
                for row in result
            ]
