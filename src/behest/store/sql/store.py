"""SqlStore: the Store protocol over SQLAlchemy Core, for SQLite and PostgreSQL alike."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from behest.domain.compaction import CircuitBreakerState, CompactionConfig
from behest.domain.events import Event
from behest.domain.messages import Message
from behest.domain.runs import CreatedRun, FinishReason, Run, RunRequest, RunStatus
from behest.domain.snapshots import Snapshot
from behest.errors import Aborted, AlreadyExists, BehestError, NotFound
from behest.store.base import (
    AppendEvent,
    AppendMessage,
    BatchResult,
    ClearToolResults,
    DeleteSnapshot,
    NewRun,
    PutSnapshot,
    UpdateRun,
    Write,
)
from behest.store.sql import rows
from behest.store.sql import tables as t
from behest.store.sql.engine import Engines, create_engines

MIGRATIONS = Path(__file__).parent / "migrations"
TERMINAL = [int(s) for s in RunStatus if s.is_terminal]
# Serialises concurrent migrations of several replicas on PostgreSQL.
MIGRATION_LOCK_KEY = 0x6265_6865_7374


class SqlStore:
    """Sessions, runs, events, messages, snapshots and compaction state in one database."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._engines: Engines | None = None

    @property
    def engines(self) -> Engines:
        assert self._engines is not None, "SqlStore.start() was not called"
        return self._engines

    async def start(self) -> None:
        if self._engines is None:
            self._engines = create_engines(self._url)
            async with self.engines.writer.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(
                        sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY}
                    )
                await conn.run_sync(_upgrade)

    async def close(self) -> None:
        if self._engines is not None:
            engines, self._engines = self._engines, None
            await engines.dispose()

    # --- runs -------------------------------------------------------------------------

    async def create_run(
        self,
        request: RunRequest,
        *,
        run_id: str,
        identity: str,
        now: datetime,
        traceparent: str,
        owner: str = "",
        lease_until: datetime | None = None,
    ) -> CreatedRun:
        for attempt in range(3):
            try:
                async with self.engines.writer.begin() as conn:
                    return await self._create_run(
                        conn,
                        request,
                        run_id=run_id,
                        identity=identity,
                        now=now,
                        traceparent=traceparent,
                        owner=owner,
                        lease_until=lease_until,
                    )
            except IntegrityError:
                # A racing request with the same key committed first: the retry finds its run.
                if attempt == 2 or not request.client_request_id:
                    raise
        raise AssertionError("unreachable")

    async def _create_run(
        self,
        conn: AsyncConnection,
        request: RunRequest,
        *,
        run_id: str,
        identity: str,
        now: datetime,
        traceparent: str,
        owner: str,
        lease_until: datetime | None,
        status: RunStatus = RunStatus.PENDING,
    ) -> CreatedRun:
        key = request.client_request_id
        fingerprint = request.fingerprint()
        if key:
            found = (
                await conn.execute(
                    sa.select(t.idempotency_keys).where(
                        t.idempotency_keys.c.identity == identity, t.idempotency_keys.c.key == key
                    )
                )
            ).first()
            if found is not None:
                if found.fingerprint != fingerprint:
                    raise AlreadyExists(
                        f"client_request_id {key!r} was already used for run {found.run_id} "
                        "with a different request"
                    )
                existing = await self._get_run(conn, found.run_id)
                assert existing is not None
                return CreatedRun(existing, created=False)
            # Inserted first so that a racing twin blocks here and then finds this run.
            await conn.execute(
                sa.insert(t.idempotency_keys).values(
                    identity=identity,
                    key=key,
                    fingerprint=fingerprint,
                    run_id=run_id,
                    created_at=now,
                )
            )
        session_id = request.session_id
        if session_id:
            # FOR UPDATE (PostgreSQL; SQLite's writers are serialised anyway): a racing twin
            # waits here and then reads the winner's active_run_id, which the Aborted names.
            session = (
                await conn.execute(
                    sa.select(t.sessions).where(t.sessions.c.id == session_id).with_for_update()
                )
            ).first()
            if session is None:
                raise NotFound(f"session {session_id} not found")
            claimed = await conn.execute(
                sa.update(t.sessions)
                .where(t.sessions.c.id == session_id, t.sessions.c.active_run_id.is_(None))
                .values(active_run_id=run_id, updated_at=now)
            )
            if claimed.rowcount != 1:
                raise Aborted(
                    f"session {session_id} already has an active run {session.active_run_id}; "
                    "wait for it to end or cancel it"
                )
        else:
            session_id = str(uuid.uuid4())
            await conn.execute(
                sa.insert(t.sessions).values(
                    id=session_id, created_at=now, updated_at=now, active_run_id=run_id
                )
            )
        values = _run_row(
            request,
            run_id=run_id,
            session_id=session_id,
            now=now,
            traceparent=traceparent,
            owner=owner,
            lease_until=lease_until,
            status=status,
        )
        await conn.execute(sa.insert(t.runs).values(**values))
        return CreatedRun(rows.run_from_values(values), created=True)

    async def get_run(self, run_id: str) -> Run | None:
        async with self.engines.reader.connect() as conn:
            return await self._get_run(conn, run_id)

    async def _get_run(self, conn: AsyncConnection, run_id: str) -> Run | None:
        row = (await conn.execute(sa.select(t.runs).where(t.runs.c.id == run_id))).first()
        return None if row is None else rows.run_from_row(row)

    async def list_runs(
        self, *, session_id: str | None, status: RunStatus | None, limit: int, offset: int
    ) -> list[Run]:
        query = sa.select(t.runs)
        if session_id:
            query = query.where(t.runs.c.session_id == session_id)
        if status is not None:
            query = query.where(t.runs.c.status == int(status))
        query = query.order_by(t.runs.c.created_at.desc(), t.runs.c.id.desc())
        async with self.engines.reader.connect() as conn:
            result = await conn.execute(query.limit(limit).offset(offset))
            return [rows.run_from_row(row) for row in result]

    async def unfinished_runs(self) -> list[Run]:
        query = (
            sa.select(t.runs)
            .where(t.runs.c.status.not_in(TERMINAL))
            .order_by(t.runs.c.created_at, t.runs.c.id)
        )
        async with self.engines.reader.connect() as conn:
            return [rows.run_from_row(row) for row in await conn.execute(query)]

    # --- ownership of unfinished runs (leases) ------------------------------------------

    async def claim_run(
        self, run_id: str, *, owner: str, now: datetime, lease_until: datetime
    ) -> bool:
        """Take an unfinished run that is unowned, ours already, or whose owner's lease lapsed."""
        runs = t.runs.c
        async with self.engines.writer.begin() as conn:
            claimed = await conn.execute(
                sa.update(t.runs)
                .where(
                    runs.id == run_id,
                    runs.status.not_in(TERMINAL),
                    sa.or_(
                        runs.owner.is_(None),
                        runs.owner == owner,
                        runs.lease_expires_at.is_(None),
                        runs.lease_expires_at < now,
                    ),
                )
                .values(owner=owner, lease_expires_at=lease_until)
            )
            return bool(claimed.rowcount == 1)

    async def renew_leases(self, *, owner: str, lease_until: datetime) -> None:
        """Extend the claims of every unfinished run `owner` holds."""
        runs = t.runs.c
        async with self.engines.writer.begin() as conn:
            await conn.execute(
                sa.update(t.runs)
                .where(runs.owner == owner, runs.status.not_in(TERMINAL))
                .values(lease_expires_at=lease_until)
            )

    # --- the event log's writes ----------------------------------------------------------

    async def apply(self, writes: list[Write]) -> None:
        async with self.engines.writer.begin() as conn:
            await self._apply(conn, writes)

    async def apply_batch(self, items: Sequence[list[Write] | NewRun]) -> list[BatchResult]:
        async with self.engines.writer.begin() as conn:
            results: list[BatchResult] = []
            plain: list[Write] = []
            sessions: list[dict[str, Any]] = []
            runs: list[dict[str, Any]] = []
            for item in items:
                if not isinstance(item, NewRun):
                    results.append(None)
                    plain.extend(item)
                elif item.request.session_id or item.request.client_request_id:
                    results.append(await self._create_in_batch(conn, item))
                else:
                    # A new session and no key: nothing to check, so insert with the others.
                    session, run, created, writes = _fresh_run(item)
                    sessions.append(session)
                    runs.append(run)
                    results.append((created, writes))
                    plain.extend(writes)
            if sessions:
                await conn.execute(sa.insert(t.sessions), sessions)
                await conn.execute(sa.insert(t.runs), runs)
            await self._apply(conn, plain)
            return results

    async def _create_in_batch(self, conn: AsyncConnection, new: NewRun) -> BatchResult:
        """One run creation with its first step, in a savepoint: a refusal fails it alone."""
        for attempt in range(2):
            try:
                async with conn.begin_nested():
                    created = await self._create_run(
                        conn,
                        new.request,
                        run_id=new.run_id,
                        identity=new.identity,
                        now=new.now,
                        traceparent=new.traceparent,
                        owner=new.owner,
                        lease_until=new.lease_until,
                        status=RunStatus.SESSION_LOADED,
                    )
                    writes: list[Write] = []
                    if created.created:
                        writes = new.first_step(
                            created.run, await self._next_position(conn, created.run.session_id)
                        )
                        await self._apply(conn, writes)
                    return created, writes
            except BehestError as exc:
                return exc
            except IntegrityError as exc:
                # A twin with the same key committed meanwhile: the next attempt finds its run.
                if attempt == 1 or not new.request.client_request_id:
                    return exc
        raise AssertionError("unreachable")

    async def _next_position(self, conn: AsyncConnection, session_id: str) -> int:
        query = sa.select(sa.func.max(t.messages.c.position)).where(
            t.messages.c.session_id == session_id
        )
        last = (await conn.execute(query)).scalar()
        return 0 if last is None else int(last) + 1

    async def _apply(self, conn: AsyncConnection, writes: list[Write]) -> None:
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
        await self._update_runs(conn, list(run_updates.values()))
        await self._put_snapshots(conn, snapshots)

    async def _update_runs(self, conn: AsyncConnection, updates: list[UpdateRun]) -> None:
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

    async def _put_snapshots(
        self, conn: AsyncConnection, snapshots: dict[str, Snapshot | None]
    ) -> None:
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

    def _upsert(self, table: sa.Table, row: dict[str, Any], *, key: str) -> Any:
        dialect = postgresql if self.engines.writer.dialect.name == "postgresql" else sqlite
        insert = dialect.insert(table).values(**row)
        changed = {name: value for name, value in row.items() if name != key}
        return insert.on_conflict_do_update(index_elements=[key], set_=changed)

    # --- reads --------------------------------------------------------------------------

    async def read_events(self, run_id: str, *, after: int, limit: int) -> list[Event]:
        query = (
            sa.select(t.events)
            .where(t.events.c.run_id == run_id, t.events.c.sequence > after)
            .order_by(t.events.c.sequence)
            .limit(limit)
        )
        async with self.engines.reader.connect() as conn:
            return [rows.event_from_row(row) for row in await conn.execute(query)]

    async def last_sequence(self, run_id: str) -> int:
        query = sa.select(sa.func.max(t.events.c.sequence)).where(t.events.c.run_id == run_id)
        async with self.engines.reader.connect() as conn:
            return int((await conn.execute(query)).scalar() or 0)

    async def session_messages(self, session_id: str) -> list[Message]:
        query = (
            sa.select(t.messages)
            .where(t.messages.c.session_id == session_id)
            .order_by(t.messages.c.position)
        )
        async with self.engines.reader.connect() as conn:
            return [rows.message_from_row(row) for row in await conn.execute(query)]

    async def run_messages(self, run_id: str) -> list[Message]:
        query = (
            sa.select(t.messages)
            .where(t.messages.c.run_id == run_id)
            .order_by(t.messages.c.position)
        )
        async with self.engines.reader.connect() as conn:
            return [rows.message_from_row(row) for row in await conn.execute(query)]

    async def list_snapshots(self) -> list[Snapshot]:
        query = sa.select(t.snapshots).order_by(t.snapshots.c.updated_at, t.snapshots.c.run_id)
        async with self.engines.reader.connect() as conn:
            return [rows.snapshot_from_row(row) for row in await conn.execute(query)]

    async def get_snapshot(self, run_id: str) -> Snapshot | None:
        query = sa.select(t.snapshots).where(t.snapshots.c.run_id == run_id)
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(query)).first()
            return None if row is None else rows.snapshot_from_row(row)

    # --- compaction state ---------------------------------------------------------------

    async def get_compaction_config(self) -> CompactionConfig:
        query = sa.select(t.compaction_config).where(t.compaction_config.c.id == 1)
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return CompactionConfig()
        values = row._asdict()
        values.pop("id")
        return CompactionConfig(**values)

    async def put_compaction_config(self, config: CompactionConfig) -> None:
        row = {"id": 1, **{name: getattr(config, name) for name in _config_fields()}}
        async with self.engines.writer.begin() as conn:
            await conn.execute(self._upsert(t.compaction_config, row, key="id"))
            # A new configuration deserves a fresh chance: it closes the breaker.
            breaker = {"id": 1, "consecutive_failures": 0, "opened_at": None}
            await conn.execute(self._upsert(t.circuit_breaker, breaker, key="id"))

    async def get_circuit_breaker(self) -> CircuitBreakerState:
        query = sa.select(t.circuit_breaker).where(t.circuit_breaker.c.id == 1)
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return CircuitBreakerState()
        opened = rows.utc(row.opened_at) if row.opened_at else None
        return CircuitBreakerState(consecutive_failures=row.consecutive_failures, opened_at=opened)

    async def record_compaction(
        self, *, succeeded: bool, threshold: int, now: datetime
    ) -> CircuitBreakerState:
        breaker = t.circuit_breaker
        async with self.engines.writer.begin() as conn:
            query = sa.select(breaker).where(breaker.c.id == 1)
            if conn.dialect.name == "postgresql":
                query = query.with_for_update()
            row = (await conn.execute(query)).first()
            failures = 0 if succeeded else (row.consecutive_failures if row else 0) + 1
            # Each failure at or past the threshold (re)opens it: also one after a cool-down.
            opened_at = now if failures >= threshold else None
            values = {"id": 1, "consecutive_failures": failures, "opened_at": opened_at}
            await conn.execute(self._upsert(breaker, values, key="id"))
        return CircuitBreakerState(consecutive_failures=failures, opened_at=opened_at)


def _fresh_run(
    new: NewRun,
) -> tuple[dict[str, Any], dict[str, Any], CreatedRun, list[Write]]:
    """Rows and result of a creation that cannot be refused (new session, no key)."""
    session_id = str(uuid.uuid4())
    session = {
        "id": session_id,
        "created_at": new.now,
        "updated_at": new.now,
        "active_run_id": new.run_id,
    }
    run = _run_row(
        new.request,
        run_id=new.run_id,
        session_id=session_id,
        now=new.now,
        traceparent=new.traceparent,
        owner=new.owner,
        lease_until=new.lease_until,
        status=RunStatus.SESSION_LOADED,
    )
    created = CreatedRun(rows.run_from_values(run), created=True)
    return session, run, created, new.first_step(created.run, 0)


def _run_row(
    request: RunRequest,
    *,
    run_id: str,
    session_id: str,
    now: datetime,
    traceparent: str,
    owner: str,
    lease_until: datetime | None,
    status: RunStatus,
) -> dict[str, Any]:
    return {
        "id": run_id,
        "session_id": session_id,
        "status": int(status),
        "provider": request.provider,
        "model": request.model,
        "input": request.input,
        "metadata": request.metadata,
        "tool_choice": request.tool_choice,
        "created_at": now,
        "updated_at": now,
        "iterations": 0,
        "finish_reason": int(FinishReason.UNSPECIFIED),
        "input_tokens": 0,
        "output_tokens": 0,
        "error": "",
        "traceparent": traceparent,
        "instructions": request.instructions,
        "tools": json.dumps(list(request.tools)),
        "max_iterations": request.max_iterations,
        "owner": owner or None,
        "lease_expires_at": lease_until,
    }


def _config_fields() -> list[str]:
    return [c.name for c in t.compaction_config.columns if c.name != "id"]


def _upgrade(connection: Any) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
