"""SqlStore: the Store protocol over SQLAlchemy Core, for SQLite and PostgreSQL alike."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection
from sqlalchemy.engine import make_url

from behest.domain.compaction import CircuitBreakerState, CompactionConfig
from behest.domain.events import Event
from behest.domain.messages import Message
from behest.domain.runs import Cancel, Run, RunStatus
from behest.domain.sessions import Session
from behest.domain.snapshots import Snapshot
from behest.domain.spend import DailyUsage, Money
from behest.domain.waits import Answer, Decision, PendingCall, Submitted, WaitKind
from behest.errors import Fenced, StorageFault
from behest.store.base import NodeRecord, Renewal
from behest.store.sql import (
    channel_payloads,
    erasure,
    leases,
    rows,
    run_rows,
    sessions,
    spend,
    waits,
)
from behest.store.sql import tables as t
from behest.store.sql.creation import (
    INSERT_RUNS,
    INSERT_SESSIONS,
    create_checked,
    fresh_rows,
    fresh_statement,
    get_run,
    is_fresh,
)
from behest.store.sql.engine import Engines, create_engines
from behest.store.sql.faults import fault_of
from behest.store.sql.postgres_writer import AsyncWriter, ConnectionLost
from behest.store.sql.single_statement import OneStatement
from behest.store.sql.writes import TERMINAL, apply_writes, notifications, upsert
from behest.store.writes import BatchResult, Fence, NewRun, Write

MIGRATIONS = Path(__file__).parent / "migrations"
# Batches of at most this many rows are written as small transactions (Writer.write_small);
# a run's creation writes about CREATION_ROWS.
SMALL_BATCH_ROWS = 16
CREATION_ROWS = 5
# child_runs, by ix_runs_parent.
CHILD_RUNS = (
    sa.select(t.runs)
    .where(t.runs.c.parent_run_id == sa.bindparam("b_parent"))
    .order_by(t.runs.c.created_at, t.runs.c.id)
)
# Serialises concurrent migrations of several replicas on PostgreSQL.
MIGRATION_LOCK_KEY = 0x6265_6865_7374


# A run's events as read back: the columns event_from_values takes, in its order.
_EVENT_COLUMNS = (
    t.events.c.sequence,
    t.events.c.kind,
    t.events.c.payload,
    t.events.c.created_at,
    t.events.c.trace_id,
    t.events.c.span_id,
)


class SqlStore:
    """Sessions, runs, events, messages, snapshots and compaction state in one database."""

    def __init__(
        self, url: str, *, node: str = "", lease_s: float = 0.0, busy_timeout_s: float = 10.0
    ) -> None:
        """`node`: this process's node name, which its notifications carry (PostgreSQL; none
        are sent without one). `lease_s`: how long run leases last; a transaction of this
        process that stalls for a third of it is ended by PostgreSQL, so that its locks do
        not hold up other replicas (engine.create_engines). `busy_timeout_s` (SQLite): how
        long a write waits for another process's lock on the file."""
        self._url = url
        self._node = node
        self._idle_in_transaction_s = max(0.5, lease_s / 3) if lease_s else 0.0
        self._postgres = make_url(url).get_backend_name() == "postgresql"
        self._busy_timeout_s = busy_timeout_s
        self._engines: Engines | None = None

    @property
    def creations_apart(self) -> bool:
        return self._postgres

    @property
    def engines(self) -> Engines:
        assert self._engines is not None, "SqlStore.start() was not called"
        return self._engines

    async def start(self) -> None:
        if self._engines is None:
            self._engines = create_engines(
                self._url,
                idle_in_transaction_s=self._idle_in_transaction_s,
                busy_timeout_s=self._busy_timeout_s,
            )
            await self.engines.writer.write(_upgrade)

    async def close(self) -> None:
        if self._engines is not None:
            engines, self._engines = self._engines, None
            await engines.dispose()

    def fault(self, exc: BaseException) -> StorageFault:
        return fault_of(exc)

    async def probe_write(self) -> None:
        await self.engines.writer.write_small(_probe, self._node)

    # --- runs -------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(get_run, run_id)

    async def list_runs(
        self,
        *,
        tenant: str,
        session_id: str | None,
        status: RunStatus | None,
        limit: int,
        offset: int,
        model: str = "",
        created_from: datetime | None = None,
        created_to: datetime | None = None,
    ) -> list[Run]:
        query = sa.select(t.runs).where(t.runs.c.tenant == tenant)
        if session_id:
            query = query.where(t.runs.c.session_id == session_id)
        if status is not None:
            query = query.where(t.runs.c.status == int(status))
        if model:
            query = query.where(t.runs.c.model == model)
        if created_from is not None:
            query = query.where(t.runs.c.created_at >= created_from)
        if created_to is not None:
            query = query.where(t.runs.c.created_at <= created_to)
        query = query.order_by(t.runs.c.created_at.desc(), t.runs.c.id.desc())
        async with self.engines.reader.connect() as conn:
            result = await conn.execute(query.limit(limit).offset(offset))
            return [run_rows.run_from_row(row) for row in result]

    async def unfinished_runs(self) -> list[Run]:
        query = (
            sa.select(t.runs)
            .where(t.runs.c.status.not_in(TERMINAL))
            .order_by(t.runs.c.created_at, t.runs.c.id)
        )
        async with self.engines.reader.connect() as conn:
            return [run_rows.run_from_row(row) for row in await conn.execute(query)]

    async def child_runs(self, parent_run_id: str) -> list[Run]:
        """Every sub-agent run `parent_run_id` started (ended or not), oldest first."""
        async with self.engines.reader.connect() as conn:
            result = await conn.execute(CHILD_RUNS, {"b_parent": parent_run_id})
            return [run_rows.run_from_row(row) for row in result]

    async def resumable_runs(self, *, now: datetime) -> list[Run]:
        """Unfinished runs but the WAITING_FOR_INPUT ones still waiting, oldest first."""
        async with self.engines.reader.connect() as conn:
            result = await conn.execute(waits.RESUMABLE_RUNS, {"b_now": now})
            return [run_rows.run_from_row(row) for row in result]

    # --- runs that wait -----------------------------------------------------------------

    async def pending_calls(self, run_id: str) -> list[PendingCall]:
        async with self.engines.reader.connect() as conn:
            result = await conn.execute(waits.PENDING_CALLS, {"b_run": run_id})
            return [rows.pending_call_from_row(row) for row in result]

    async def submit_answers(
        self,
        run_id: str,
        answers: Sequence[Answer],
        *,
        kind: WaitKind,
        by: str,
        now: datetime,
    ) -> Submitted:
        """Store answers to the run's calls of `kind`, all or none (store/sql/waits.py)."""
        distinct = waits.distinct_answers(answers)
        return await self.engines.writer.write(
            waits.submit_answers, run_id, distinct, kind=kind, by=by, now=now
        )

    async def always_allowed(self, session_id: str) -> frozenset[str]:
        params = {"b_session": session_id, "b_decision": int(Decision.ALLOW_ALWAYS)}
        async with self.engines.reader.connect() as conn:
            return frozenset((await conn.execute(waits.ALWAYS_ALLOWED, params)).scalars())

    # --- spend (store/sql/spend.py) -------------------------------------------------------

    async def daily_usage(
        self, *, tenant: str, session_id: str | None, from_day: str, to_day: str
    ) -> list[DailyUsage]:
        """Usage per UTC day; a day whose costs are in several currencies has cost None."""
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(
                spend.daily_usage,
                tenant=tenant,
                session_id=session_id,
                from_day=from_day,
                to_day=to_day,
            )

    async def spent_since(self, *, tenant: str, since: datetime) -> tuple[int, Money | None]:
        """Tokens and cost since `since`; cost None if none, or in several currencies."""
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(spend.spent_since, tenant=tenant, since=since)

    # --- retention and erasure (store/sql/erasure.py) ------------------------------------

    async def delete_session(self, *, tenant: str, session_id: str) -> int:
        """Erase the tenant's idle session and everything of it; the number of runs erased."""
        return await self.engines.writer.write(
            erasure.delete_session, tenant=tenant, session_id=session_id
        )

    async def prune_runs(self, *, older_than: datetime, limit: int) -> int:
        """Delete up to `limit` finished runs older than the cut; how many were deleted."""
        return await self.engines.writer.write(
            erasure.prune_runs, older_than=older_than, limit=limit
        )

    async def count_prunable(self, *, older_than: datetime) -> int:
        """How many runs pruning with this cut would delete now."""
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(erasure.count_prunable, older_than=older_than)

    # --- ownership of unfinished runs (store/sql/leases.py) -----------------------------

    async def claim_run(
        self,
        run_id: str,
        *,
        owner: str,
        now: datetime,
        lease_until: datetime,
        force: bool = False,
    ) -> int:
        """Take an unfinished run that is unowned, ours, or whose lease lapsed (any, with
        `force`); the claim's generation, 0 if not taken."""
        return await self.engines.writer.write(
            leases.claim, run_id, owner=owner, now=now, lease_until=lease_until, force=force
        )

    async def renew_leases(self, *, owner: str, lease_until: datetime) -> Renewal:
        """Extend `owner`'s claims and registration; the runs it holds, those asked to cancel."""
        return await self.engines.writer.write(leases.renew, owner=owner, lease_until=lease_until)

    async def release_runs(self, *, owner: str) -> int:
        """Let go of every unfinished run `owner` holds; how many."""
        return await self.engines.writer.write(leases.release, owner=owner)

    async def request_cancel(self, run_id: str, cancel: Cancel, *, now: datetime) -> bool:
        """Store a cancel for the node executing the run (the first asked stands), and signal
        it; whether the run is unfinished."""
        return await self.engines.writer.write(
            _request_cancel, run_id, cancel, now=now, node=self._node
        )

    async def register_node(self, node: NodeRecord, *, now: datetime, until: datetime) -> None:
        """Register this process under its node name (FailedPrecondition: a live one has it)."""
        await self.engines.writer.write(
            leases.register_node,
            name=node.name,
            instance=node.instance,
            host=node.host,
            pid=node.pid,
            now=now,
            until=until,
        )

    async def unregister_node(self, node: NodeRecord) -> None:
        await self.engines.writer.write(
            leases.unregister_node, name=node.name, instance=node.instance
        )

    async def live_nodes(self, *, now: datetime) -> int:
        """How many nodes serve the database now."""
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(leases.live_nodes, now=now)

    # --- the event log's writes ----------------------------------------------------------

    async def apply(self, writes: list[Write]) -> None:
        await self.engines.writer.write(apply_writes, writes)

    async def apply_batch(self, items: Sequence[list[Write] | NewRun]) -> list[BatchResult]:
        if self._postgres and items and all(is_fresh(item) for item in items):
            prepared = fresh_statement(items, self._node)
            if prepared is not None:  # creations only: one round trip
                return await self._create_fresh(*prepared)
        rows = sum(CREATION_ROWS if isinstance(item, NewRun) else len(item) for item in items)
        if rows <= SMALL_BATCH_ROWS:
            return await self.engines.writer.write_small(_apply_batch, items, self._node)
        return await self.engines.writer.write(_apply_batch, items, self._node)

    async def _create_fresh(
        self, one: OneStatement, results: list[BatchResult]
    ) -> list[BatchResult]:
        """Run fresh creations' one statement on the driver. Its connection found dead (the
        server ended it just before: the pool cannot tell) leaves it committed whole or not
        at all: its first run says which, and one that did not commit is run once more on a
        new connection."""
        writer = self.engines.writer
        assert isinstance(writer, AsyncWriter)
        for attempt in (1, 2):
            try:
                await writer.execute_on_driver(one.statement, one.params)
                return results
            except ConnectionLost:
                if attempt == 2:
                    raise
                first = results[0]
                assert isinstance(first, tuple)
                if await self.get_run(first[0].run.id) is not None:
                    return results
        raise AssertionError("unreachable")

    # --- reads --------------------------------------------------------------------------

    async def read_events(self, run_id: str, *, after: int, limit: int) -> list[Event]:
        query = (
            sa.select(*_EVENT_COLUMNS)
            .where(t.events.c.run_id == run_id, t.events.c.sequence > after)
            .order_by(t.events.c.sequence)
            .limit(limit)
        )
        async with self.engines.reader.connect() as conn:
            result = await conn.execute(query)
            return [rows.event_from_values(run_id, *values) for values in result]

    async def last_sequence(self, run_id: str) -> int:
        query = sa.select(sa.func.max(t.events.c.sequence)).where(t.events.c.run_id == run_id)
        async with self.engines.reader.connect() as conn:
            return int((await conn.execute(query)).scalar() or 0)

    async def session_messages(self, session_id: str) -> list[Message]:
        return await self._messages(t.messages.c.session_id == session_id)

    async def run_messages(self, run_id: str) -> list[Message]:
        return await self._messages(t.messages.c.run_id == run_id)

    async def _messages(self, where: sa.ColumnElement[bool]) -> list[Message]:
        """Messages with their content parts' bytes: what a model is sent."""
        query = sa.select(t.messages).where(where).order_by(t.messages.c.position)
        async with self.engines.reader.connect() as conn:
            messages = [rows.message_from_row(row) for row in await conn.execute(query)]
            with_parts = [m.id for m in messages if m.parts]
            if not with_parts:
                return messages
            blobs = t.content_blobs
            found: dict[str, dict[int, bytes]] = {}
            for row in await conn.execute(
                sa.select(blobs).where(blobs.c.message_id.in_(with_parts))
            ):
                found.setdefault(row.message_id, {})[row.part] = row.data
        return [rows.with_blobs(m, found[m.id]) if m.id in found else m for m in messages]

    # --- sessions (store/sql/sessions.py) ---------------------------------------------

    async def list_sessions(self, *, tenant: str, limit: int, offset: int) -> list[Session]:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(
                sessions.list_sessions, tenant=tenant, limit=limit, offset=offset
            )

    async def get_session(self, session_id: str) -> Session | None:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(sessions.get_session, session_id)

    async def session_messages_page(
        self, session_id: str, *, from_position: int, limit: int
    ) -> list[Message]:
        async with self.engines.reader.connect() as conn:
            return await conn.run_sync(
                sessions.messages_page, session_id, from_position=from_position, limit=limit
            )

    async def list_snapshots(self, *, tenant: str) -> list[Snapshot]:
        query = (
            sa.select(t.snapshots)
            .join(t.runs, t.runs.c.id == t.snapshots.c.run_id)
            .where(t.runs.c.tenant == tenant)
            .order_by(t.snapshots.c.updated_at, t.snapshots.c.run_id)
        )
        async with self.engines.reader.connect() as conn:
            return [rows.snapshot_from_row(row) for row in await conn.execute(query)]

    async def get_snapshot(self, run_id: str) -> Snapshot | None:
        query = sa.select(t.snapshots).where(t.snapshots.c.run_id == run_id)
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(query)).first()
            return None if row is None else rows.snapshot_from_row(row)

    # --- compaction state ---------------------------------------------------------------

    async def get_compaction_config(self, *, tenant: str) -> CompactionConfig:
        """The tenant's compaction settings, or the defaults if it set none."""
        query = sa.select(t.compaction_config).where(t.compaction_config.c.tenant == tenant)
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return CompactionConfig()
        values = row._asdict()
        values.pop("tenant")
        return CompactionConfig(**values)

    async def put_compaction_config(self, config: CompactionConfig, *, tenant: str) -> None:
        row = {"tenant": tenant, **{name: getattr(config, name) for name in _config_fields()}}
        await self.engines.writer.write(_put_compaction_config, row)

    async def get_circuit_breaker(self, *, tenant: str) -> CircuitBreakerState:
        query = sa.select(t.circuit_breaker).where(t.circuit_breaker.c.tenant == tenant)
        async with self.engines.reader.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return CircuitBreakerState()
        opened = rows.utc(row.opened_at) if row.opened_at else None
        return CircuitBreakerState(consecutive_failures=row.consecutive_failures, opened_at=opened)

    async def record_compaction(
        self, *, tenant: str, succeeded: bool, threshold: int, now: datetime
    ) -> CircuitBreakerState:
        return await self.engines.writer.write(
            _record_compaction, tenant=tenant, succeeded=succeeded, threshold=threshold, now=now
        )


def _config_fields() -> list[str]:
    return [c.name for c in t.compaction_config.columns if c.name != "tenant"]


# --- write transactions (run by the engines' writer) ----------------------------------------


def _rowcount(conn: Connection, statement: sa.Executable) -> int:
    return int(conn.execute(statement).rowcount)


def _apply_batch(
    conn: Connection, items: Sequence[list[Write] | NewRun], node: str
) -> list[BatchResult]:
    results: list[BatchResult] = []
    plain: list[Write] = []
    sessions: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    current = leases.fence_generations(conn, {f.run_id for f in _fences(items)})
    for item in items:
        if not isinstance(item, NewRun):
            stale = next((f for f in item if _is_stale(f, current)), None)
            if isinstance(stale, Fence):  # the run changed hands: this step writes nothing
                results.append(Fenced(stale.run_id, stale.generation))
                continue
            results.append(None)
            plain.extend(item)
        elif not is_fresh(item):
            results.append(create_checked(conn, item))
        else:
            # A new session and no key: nothing to check, so insert with the others.
            session, run, created, writes = fresh_rows(item)
            sessions.append(session)
            runs.append(run)
            results.append((created, writes))
            plain.extend(writes)
    if sessions:
        conn.execute(INSERT_SESSIONS, sessions)
        conn.execute(INSERT_RUNS, runs)
    apply_writes(conn, plain)
    if conn.dialect.name == "postgresql":
        # Fresh creations' first steps are in `plain`; checked ones' are in their results.
        firsts = (write for r in results if isinstance(r, tuple) for write in r[1])
        for name, payload in notifications(node, itertools.chain(plain, firsts)):
            channel_payloads.notify(conn, name, payload)
    return results


def _fences(items: Sequence[list[Write] | NewRun]) -> list[Fence]:
    return [w for item in items if isinstance(item, list) for w in item if isinstance(w, Fence)]


def _is_stale(write: Write, current: dict[str, int]) -> bool:
    return isinstance(write, Fence) and current.get(write.run_id) != write.generation


def _request_cancel(
    conn: Connection, run_id: str, cancel: Cancel, *, now: datetime, node: str
) -> bool:
    unfinished = leases.request_cancel(conn, run_id, cancel, now=now)
    if unfinished and node and conn.dialect.name == "postgresql":
        channel_payloads.notify(
            conn, channel_payloads.SIGNALS, channel_payloads.signal_payload(node, "cancel", run_id)
        )
    return unfinished


def _put_compaction_config(conn: Connection, row: dict[str, Any]) -> None:
    conn.execute(upsert(conn.dialect.name, t.compaction_config, "tenant"), row)
    # A new configuration deserves a fresh chance: it closes the tenant's breaker.
    breaker = {"tenant": row["tenant"], "consecutive_failures": 0, "opened_at": None}
    conn.execute(upsert(conn.dialect.name, t.circuit_breaker, "tenant"), breaker)


def _record_compaction(
    conn: Connection, *, tenant: str, succeeded: bool, threshold: int, now: datetime
) -> CircuitBreakerState:
    breaker = t.circuit_breaker
    query = sa.select(breaker).where(breaker.c.tenant == tenant)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update()
    row = conn.execute(query).first()
    failures = 0 if succeeded else (row.consecutive_failures if row else 0) + 1
    # Each failure at or past the threshold (re)opens it: also one after a cool-down.
    opened_at = now if failures >= threshold else None
    values = {"tenant": tenant, "consecutive_failures": failures, "opened_at": opened_at}
    conn.execute(upsert(conn.dialect.name, breaker, "tenant"), values)
    return CircuitBreakerState(consecutive_failures=failures, opened_at=opened_at)


def _upgrade(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": MIGRATION_LOCK_KEY})
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _probe(conn: Connection, node: str) -> None:
    """A write of one row that changes nothing: it needs the write lock and a page of log."""
    nodes = t.nodes
    conn.execute(sa.update(nodes).where(nodes.c.name == node).values(expires_at=nodes.c.expires_at))
