"""The Store protocol, and what its lease methods answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from behest.domain.compaction import CircuitBreakerState, CompactionConfig
from behest.domain.events import Event
from behest.domain.executions import ToolExecution
from behest.domain.messages import Message
from behest.domain.runs import Cancel, Run, RunFilter
from behest.domain.sessions import Session
from behest.domain.snapshots import Snapshot
from behest.domain.spend import DailyUsage, Money
from behest.domain.tickets import StreamTicket
from behest.domain.waits import Answer, PendingCall, Submitted, WaitKind
from behest.errors import StorageFault
from behest.store.agent_store import AgentStore
from behest.store.session_store import SessionStore
from behest.store.worker_store import WorkerStore
from behest.store.writes import BatchResult, NewRun, Write


@dataclass(frozen=True, slots=True)
class Renewal:
    """A node's renewed claims: the runs it still holds, and those a cancel was asked of
    (through another node: `request_cancel`)."""

    held: frozenset[str]
    cancel_asked: frozenset[str]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A process serving the database: its node name, and what tells it from another process
    that would take the same name."""

    name: str
    instance: str
    host: str
    pid: int


class Store(AgentStore, SessionStore, WorkerStore, Protocol):
    """Sessions, messages, runs, events, snapshots, idempotency keys and compaction state.

    Text handed to the store never contains NUL (PostgreSQL cannot store it): the API rejects
    it in requests and the loop replaces it in messages.
    """

    @property
    def creations_apart(self) -> bool:
        """Whether run creations are best committed on their own, beside the event log's
        batches (PostgreSQL: concurrent transactions, and a creation is one statement)."""
        ...

    async def start(self) -> None:
        """Connect and bring the schema up to date."""
        ...

    async def close(self) -> None: ...

    def fault(self, exc: BaseException) -> StorageFault:
        """What a write that raised `exc` means: the disk is full, the database is locked,
        or it failed otherwise, in plain words."""
        ...

    async def probe_write(self) -> None:
        """One tiny write transaction; raises while writes cannot land (health)."""
        ...

    async def claim_run(
        self,
        run_id: str,
        *,
        owner: str,
        now: datetime,
        lease_until: datetime,
        force: bool = False,
    ) -> int:
        """Take an unfinished run that is unowned, `owner`'s already, or whose lease lapsed
        (any unfinished run with `force`: the caller knows no other process writes). Returns
        the claim's lease generation (higher than any before it), 0 if not taken."""
        ...

    async def renew_leases(self, *, owner: str, lease_until: datetime) -> Renewal:
        """Extend the claims of every unfinished run `owner` holds, and its node's
        registration; which runs it holds, and which of them a cancel was asked of."""
        ...

    async def release_runs(self, *, owner: str) -> int:
        """Let go of every unfinished run `owner` holds (no owner, no lease), so any node may
        take them up at once; how many."""
        ...

    async def request_cancel(self, run_id: str, cancel: Cancel, *, now: datetime) -> bool:
        """Keep a cancel for whichever node executes the run (the first one asked stands) and
        signal it (PostgreSQL: NOTIFY); whether the run is unfinished."""
        ...

    async def register_node(self, node: NodeRecord, *, now: datetime, until: datetime) -> None:
        """Register this process as node `node.name` until `until` (renew_leases renews it).
        FailedPrecondition while another live process holds that name."""
        ...

    async def unregister_node(self, node: NodeRecord) -> None: ...

    async def end_stalled_writers(self, *, now: datetime, before: datetime) -> int:
        """End the database sessions of nodes whose registration lapsed that are stuck
        inside a write begun before `before` (PostgreSQL; store/sql/stalled.py); how many."""
        ...

    async def live_nodes(self, *, now: datetime) -> int:
        """How many nodes serve the database now (registrations not lapsed)."""
        ...

    async def apply(self, writes: list[Write]) -> None:
        """Commit all writes in one transaction, in order."""
        ...

    async def apply_batch(self, items: Sequence[list[Write] | NewRun]) -> list[BatchResult]:
        """Commit a group of steps and run creations in one transaction; the only way runs
        are created. A step with a Fence whose run's lease generation moved on writes
        nothing and fails alone (Fenced); its events are stored with their Fence's generation.
        A creation that is refused (NotFound: the session; Aborted: the session
        has an active run, which it names; AlreadyExists: the key was used for another
        request, whose run it names) fails alone; other failures fail all. Two creations
        racing with one key, in one batch or in any two transactions, make one run, and both
        outcomes name it."""
        ...

    async def get_run(self, run_id: str) -> Run | None:
        """The run, whichever tenant's (callers check `Run.tenant` against theirs)."""
        ...

    async def list_runs(self, *, tenant: str, wanted: RunFilter) -> list[Run]:
        """The tenant's runs that `wanted` asks for, newest first."""
        ...

    async def unfinished_runs(self) -> list[Run]:
        """Runs not in a terminal status, oldest first."""
        ...

    async def child_runs(self, parent_run_id: str) -> list[Run]:
        """Every sub-agent run `parent_run_id` started (ended or not), oldest first."""
        ...

    async def resumable_runs(self, *, now: datetime) -> list[Run]:
        """Unfinished runs a node may take up, oldest first: all but the WAITING_FOR_INPUT
        ones that still wait (a call unanswered and not expired at `now`)."""
        ...

    # --- runs that wait (domain/waits.py) ----------------------------------------------

    async def pending_calls(self, run_id: str) -> list[PendingCall]:
        """Every call the run waited or waits for, answered or not, by `ordinal`."""
        ...

    async def submit_answers(
        self,
        run_id: str,
        answers: Sequence[Answer],
        *,
        kind: WaitKind,
        by: str,
        now: datetime,
    ) -> Submitted:
        """Store answers to the run's pending calls of `kind`, all or none, in one
        transaction. NotFound: a call id the run never waited for with that kind;
        FailedPrecondition: the run ended, or a call was answered otherwise, timed out or
        expired by `now`. The same answer again is accepted and changes nothing. Returns the
        run's calls that still wait (unanswered, not expired)."""
        ...

    # --- tool executions (domain/executions.py) ------------------------------------------

    async def tool_executions(self, run_id: str) -> list[ToolExecution]:
        """The run's executions in the order they started, without their transitions."""
        ...

    async def tool_execution(self, execution_id: str) -> ToolExecution | None:
        """One execution with its transitions, oldest first."""
        ...

    async def reconcile_execution(
        self, execution_id: str, answer: Answer, *, by: str, now: datetime
    ) -> tuple[ToolExecution, Submitted]:
        """Store the verdict on an OUTCOME_UNKNOWN execution (`answer.verdict`, with its
        result or reason), as the answer to the pending call its run waits on, and the
        execution RECONCILED by `by`, in one transaction. NotFound: no such execution;
        FailedPrecondition: it is not outcome-unknown (the same verdict again is accepted
        and changes nothing), or its run ended or stopped waiting for it."""
        ...

    # --- spend (domain/spend.py) --------------------------------------------------------

    async def daily_usage(
        self, *, tenant: str, session_id: str | None, from_day: str, to_day: str
    ) -> list[DailyUsage]:
        """The tenant's runs created on each UTC day from `from_day` to `to_day` (YYYY-MM-DD,
        both included; days without runs left out), summed: tokens of every kind and cost
        (None when no run of the day had one; costs of one currency only)."""
        ...

    async def spent_since(self, *, tenant: str, since: datetime) -> tuple[int, Money | None]:
        """Tokens and cost of the tenant's runs created at or after `since`."""
        ...

    # --- retention and erasure -----------------------------------------------------------

    async def delete_session(self, *, tenant: str, session_id: str) -> int:
        """Erase the session and everything of it in one transaction: its messages, its runs
        with their events, snapshots, pending calls and idempotency keys. Returns how many
        runs were erased. NotFound: no such session of `tenant` (another tenant's is answered
        alike); FailedPrecondition: a run is active on it (one not finished, waiting too)."""
        ...

    async def prune_runs(self, *, older_than: datetime, limit: int) -> int:
        """Delete at most `limit` finished runs (COMPLETED, FAILED, CANCELLED) last updated
        before `older_than`, with everything of them, in one transaction; then their
        sessions left with no runs and no messages. Runs of a session a run is active on
        stay. Returns how many runs were deleted (fewer than `limit`: none are left)."""
        ...

    async def count_prunable(self, *, older_than: datetime) -> int:
        """How many runs `prune_runs` with this cut would delete now (in all its batches)."""
        ...

    async def always_allowed(self, session_id: str) -> frozenset[str]:
        """Tools an ALLOW_ALWAYS decision freed from approvals in the session."""
        ...

    async def read_events(self, run_id: str, *, after: int, limit: int) -> list[Event]:
        """Events with sequence > after, in order, at most `limit`."""
        ...

    async def last_sequence(self, run_id: str) -> int: ...

    async def session_messages(self, session_id: str) -> list[Message]: ...

    async def run_messages(self, run_id: str) -> list[Message]: ...

    # --- sessions --------------------------------------------------------------------------

    async def list_sessions(
        self, *, tenant: str, limit: int, offset: int, forks_of: str = ""
    ) -> list[Session]:
        """The tenant's sessions (or the forks of one), newest first, with their counts."""
        ...

    async def get_session(self, session_id: str) -> Session | None:
        """The session, whichever tenant's (callers check `Session.tenant` against theirs)."""
        ...

    async def session_messages_page(
        self, session_id: str, *, from_position: int, limit: int
    ) -> list[Message]:
        """At most `limit` of the session's messages at `from_position` and after, in order."""
        ...

    async def list_snapshots(self, *, tenant: str) -> list[Snapshot]:
        """The snapshots of the tenant's runs in flight or interrupted."""
        ...

    async def get_snapshot(self, run_id: str) -> Snapshot | None: ...

    async def get_compaction_config(self, *, tenant: str) -> CompactionConfig:
        """The tenant's compaction settings; the defaults if it never set its own."""
        ...

    async def put_compaction_config(self, config: CompactionConfig, *, tenant: str) -> None:
        """Set the tenant's compaction settings; this closes its circuit breaker."""
        ...

    async def get_circuit_breaker(self, *, tenant: str) -> CircuitBreakerState: ...

    async def record_compaction(
        self, *, tenant: str, succeeded: bool, threshold: int, now: datetime
    ) -> CircuitBreakerState:
        """Count a compaction's outcome across the tenant's runs; its breaker opens at
        `threshold` consecutive failures and closes on a success. Returns the new state."""
        ...

    async def add_stream_ticket(self, ticket: StreamTicket, *, now: datetime) -> None:
        """Store a stream ticket (by its digest); tickets expired by `now` are deleted."""
        ...

    async def stream_ticket(self, digest: str) -> StreamTicket | None:
        """The stored ticket of this digest, expired or not; None if there is none."""
        ...
