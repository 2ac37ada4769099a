"""SqlStore: the Store protocol over SQLAlchemy Core, for SQLite and PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.engine import make_url

from behest.domain.compaction import CircuitBreakerState, CompactionConfig
from behest.domain.events import Event
from behest.domain.executions import ToolExecution
from behest.domain.messages import Message
from behest.domain.runs import Cancel, Run, RunFilter
from behest.domain.snapshots import Snapshot
from behest.domain.spend import DailyUsage, Money
from behest.domain.waits import Answer, Decision, PendingCall, Submitted, WaitKind
from behest.errors import StorageFault
from behest.store.base import NodeRecord, Renewal
from behest.store.sql import (
    batch,
    compaction,
    erasure,
    leases,
    migrate,
    reads,
    rows,
    run_rows,
    spend,
    stalled,
    waits,
)
from behest.store.sql import tables as t
from behest.store.sql.agents import AgentsInSql
from behest.store.sql.creation import fresh_statement, get_run, is_fresh
from behest.store.sql.engine import Engines, create_engines
from behest.store.sql.executions import ToolExecutionsInSql
from behest.store.sql.faults import fault_of
from behest.store.sql.sessions import SessionsInSql
from behest.store.sql.steers import SteersInSql
from behest.store.sql.tickets import StreamTicketsInSql
from behest.store.sql.worker_questions import WorkerQuestionsInSql
from behest.store.sql.workers import WorkersInSql
from behest.store.sql.writes import apply_writes
from behest.store.writes import BatchResult, NewRun, Write

# Batches of at most this many rows are written as small transactions (Writer.write_small);
# a run's creation writes about CREATION_ROWS.
SMALL_BATCH_ROWS = 16
CREATION_ROWS = 5


class SqlStore(
    ToolExecutionsInSql,
    WorkersInSql,
    WorkerQuestionsInSql,
    StreamTicketsInSql,
    AgentsInSql,
    SessionsInSql,
    SteersInSql,
):
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
    def node(self) -> str:
        """This process's node name, which its notifications carry."""
        return self._node

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
                application_name=stalled.application_name(self._node) if self._node else "",
            )
            await self.engines.writer.write(migrate.upgrade)

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

    async def list_runs(self, *, tenant: str, wanted: RunFilter) -> list[Run]:
        return await reads.list_runs(self.engines.reader, tenant=tenant, wanted=wanted)

    async def unfinished_runs(self) -> list[Run]:
        return await reads.unfinished_runs(self.engines.reader)

    async def child_runs(self, parent_run_id: str) -> list[Run]:
        """Every sub-agent run `parent_run_id` started (ended or not), oldest first."""
        return await reads.child_runs(self.engines.reader, parent_run_id)

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

    async def reconcile_execution(
        self, execution_id: str, answer: Answer, *, by: str, now: datetime
    ) -> tuple[ToolExecution, Submitted]:
        return await self.engines.writer.write(
            waits.reconcile, execution_id, answer, by=by, now=now
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
            leases.request_cancel_and_signal, run_id, cancel, now=now, node=self._node
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

    async def end_stalled_writers(self, *, now: datetime, before: datetime) -> int:
        if not self._postgres:
            return 0  # one process writes a SQLite file
        return await self.engines.writer.write(stalled.end_stalled, now=now, before=before)

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
                return await batch.create_fresh(
                    self.engines.writer, *prepared, get_run=self.get_run
                )
        rows = sum(CREATION_ROWS if isinstance(item, NewRun) else len(item) for item in items)
        if rows <= SMALL_BATCH_ROWS:
            return await self.engines.writer.write_small(batch.apply_batch, items, self._node)
        return await self.engines.writer.write(batch.apply_batch, items, self._node)

    # --- reads --------------------------------------------------------------------------

    async def read_events(self, run_id: str, *, after: int, limit: int) -> list[Event]:
        return await reads.read_events(self.engines.reader, run_id, after=after, limit=limit)

    async def last_sequence(self, run_id: str) -> int:
        return await reads.last_sequence(self.engines.reader, run_id)

    async def run_messages(self, run_id: str) -> list[Message]:
        return await reads.read_messages(self.engines.reader, t.messages.c.run_id == run_id)

    async def list_snapshots(self, *, tenant: str) -> list[Snapshot]:
        return await reads.list_snapshots(self.engines.reader, tenant=tenant)

    async def get_snapshot(self, run_id: str) -> Snapshot | None:
        return await reads.get_snapshot(self.engines.reader, run_id)

    # --- compaction state ---------------------------------------------------------------

    async def get_compaction_config(self, *, tenant: str) -> CompactionConfig:
        """The tenant's compaction settings, or the defaults if it set none."""
        return await compaction.get_config(self.engines.reader, tenant=tenant)

    async def put_compaction_config(self, config: CompactionConfig, *, tenant: str) -> None:
        row = {
            "tenant": tenant,
            **{name: getattr(config, name) for name in compaction.config_fields()},
        }
        await self.engines.writer.write(compaction.put_config, row)

    async def get_circuit_breaker(self, *, tenant: str) -> CircuitBreakerState:
        return await compaction.get_breaker(self.engines.reader, tenant=tenant)

    async def record_compaction(
        self, *, tenant: str, succeeded: bool, threshold: int, now: datetime
    ) -> CircuitBreakerState:
        return await self.engines.writer.write(
            compaction.record, tenant=tenant, succeeded=succeeded, threshold=threshold, now=now
        )


# --- write transactions (run by the engines' writer) ----------------------------------------


def _probe(conn: Connection, node: str) -> None:
    """A write of one row that changes nothing: it needs the write lock and a page of log."""
    nodes = t.nodes
    conn.execute(sa.update(nodes).where(nodes.c.name == node).values(expires_at=nodes.c.expires_at))
