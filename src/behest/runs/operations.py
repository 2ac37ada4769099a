"""Operations: what the agent.v1 services ask of behest, in domain terms.

One method per RPC of RunService, CompactionService, SnapshotService, UsageService,
SessionService, ToolService and ProviderService, over the executor (runs), the store (reads),
the event log (streams), the compaction settings, and the registries of providers and tools
(what a request may name, what ListTools and ListProviders show: runs/catalog.py).
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal

from behest.domain.callers import Caller
from behest.domain.catalog import ProviderInfo
from behest.domain.compaction import CircuitBreakerState, CompactionConfig
from behest.domain.content import ContentPart
from behest.domain.events import Event
from behest.domain.messages import Message, Role
from behest.domain.runs import (
    BusyPolicy,
    Cancel,
    CreatedRun,
    Run,
    RunFilter,
    RunOutput,
    RunRequest,
    RunStatus,
)
from behest.domain.snapshots import Snapshot
from behest.domain.spend import Money, TokenUsage, UsageReport
from behest.domain.tickets import MintedTicket
from behest.domain.waits import Answer, PendingCall, Submitted, WaitKind
from behest.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied, quote
from behest.events.log import EventLog
from behest.providers.registry import ProviderRegistry
from behest.runs import catalog
from behest.runs.agents import AgentCatalog
from behest.runs.asking import check_answers
from behest.runs.compaction_settings import CompactionSettings
from behest.runs.double_texting import make_room, steer
from behest.runs.executor import Executor
from behest.runs.session_operations import SessionOperations
from behest.runs.stream import follow
from behest.runs.sub_runs import SPAWN_TOOL
from behest.runs.tickets import StreamTickets
from behest.runs.tool_operations import ToolOperations
from behest.runs.worker_hub import WorkerHub
from behest.store.base import Store
from behest.tools.server_tools import ServerTools, ToolNames

# How many runs' tenants are remembered (a few MB at most).
REMEMBERED_RUNS = 100_000


class Operations(ToolOperations, SessionOperations):
    """Runs, snapshots and compaction settings, over the executor, the store and the log.

    Every method acts for a caller, on its tenant's things only: another tenant's run,
    session or snapshot is answered exactly as one that does not exist.
    """

    def __init__(
        self,
        *,
        store: Store,
        event_log: EventLog,
        executor: Executor,
        providers: ProviderRegistry,
        tools: ServerTools,
        compaction_settings: CompactionSettings,
        cooldown_s: float,
        approver_role: str = "",
        reconciler_role: str = "",
        workers: WorkerHub | None = None,
        worker_role: str = "",
        stream_ticket_ttl_s: float = 300.0,
    ) -> None:
        self._store = store
        self._tickets = StreamTickets(store, ttl_s=stream_ticket_ttl_s)
        # The tenants' agents (AgentService, runs of an agent, the inspector).
        self.agents = AgentCatalog(store, tool_names=self.tool_names)
        self._approver_role = approver_role
        self._reconciler_role = reconciler_role
        self._workers = workers
        self._worker_role = worker_role
        self._providers = providers
        self._tools = tools
        self._compaction_settings = compaction_settings
        self._cooldown_s = cooldown_s
        self._log = event_log
        self._executor = executor
        # Tenants of runs seen lately: a crowd watching a run costs no read to check it.
        self._tenants: collections.OrderedDict[str, str] = collections.OrderedDict()

    # --- what a request may name ---------------------------------------------------------

    def check_model(self, provider: str, model: str) -> None:
        """Raise InvalidArgument unless the provider is configured and offers the model."""
        self._providers.check(provider, model)

    def tool_names(self, tenant: str = "") -> ToolNames:
        """The tools a run of `tenant` may name (its workers' as last looked up)."""
        served = self._workers.known_tools(tenant) if self._workers is not None else []
        return self._tools.names().with_names(served)

    def server_tool_names(self) -> set[str]:
        """The server's own tools, spawn_agent included: no worker's may be named so."""
        return {*self._tools.names(), SPAWN_TOOL}

    def has_prices(self, provider: str, model: str) -> bool:
        return self._providers.model_info(provider, model).prices is not None

    def max_output_tokens(self, provider: str, model: str) -> int | None:
        return self._providers.model_info(provider, model).max_output_tokens

    def check_content(self, provider: str, model: str, parts: Sequence[ContentPart]) -> None:
        """Raise InvalidArgument naming the first part the model's settings do not take."""
        info = self._providers.model_info(provider, model)
        for index, part in enumerate(parts):
            if not info.takes(part):
                taken = ", ".join(info.input_media or ()) or "text only"
                raise InvalidArgument(
                    f"content[{index}]: model {quote(model)} of provider {quote(provider)} "
                    f"does not take {part.kind.value} {quote(part.media_type or 'by URL')} "
                    f"(it takes: {taken}; its settings' input_media)"
                )

    # --- runs ---------------------------------------------------------------------------

    async def create(
        self, caller: Caller, request: RunRequest, *, traceparent: str = ""
    ) -> CreatedRun:
        """Create a run; on a busy session, after what its on_busy says (double_texting.py)."""
        if request.on_busy == BusyPolicy.STEER:
            steered = await steer(self._store, caller, request)
            if isinstance(steered, CreatedRun):
                return steered
            request = steered
        request = await make_room(self._store, self._executor, caller, request)
        created = await self._executor.create(
            request, tenant=caller.tenant, traceparent=traceparent
        )
        self._remember(created.run)
        return created

    async def follow_created(self, run_id: str) -> AsyncIterator[Event]:
        """The events of a run `create` just gave, from its first."""
        async for event in follow(self._store, self._log, run_id, after=0, known=True):
            yield event

    async def watch(self, caller: Caller, run_id: str, *, after: int) -> AsyncIterator[Event]:
        if self._tenants.get(run_id) != caller.tenant:
            await self.get(caller, run_id)
        async for event in follow(self._store, self._log, run_id, after=after):
            yield event

    async def stream_ticket(self, caller: Caller, run_id: str) -> MintedTicket:
        """A ticket to watch the caller's run over server-sent events (runs/tickets.py)."""
        await self.get(caller, run_id)
        return await self._tickets.mint(caller, run_id)

    async def ticket_caller(self, ticket: str, run_id: str) -> Caller:
        """Whom a stream ticket presented for `run_id` stands for; Unauthenticated if none."""
        return await self._tickets.caller(ticket, run_id)

    async def get(self, caller: Caller, run_id: str) -> Run:
        run = await self._store.get_run(run_id)
        if run is None or run.tenant != caller.tenant:
            raise NotFound(f"run {run_id} not found")
        self._remember(run)
        return run

    async def list_runs(self, caller: Caller, wanted: RunFilter) -> list[Run]:
        return await self._store.list_runs(tenant=caller.tenant, wanted=wanted)

    async def events(
        self, caller: Caller, run_id: str, *, after: int, limit: int
    ) -> tuple[list[Event], bool]:
        """A page of the run's stored events after `after`, and whether more are stored."""
        if self._tenants.get(run_id) != caller.tenant:
            await self.get(caller, run_id)
        events = await self._store.read_events(run_id, after=after, limit=limit + 1)
        return events[:limit], len(events) > limit

    async def output(self, caller: Caller, run_id: str) -> RunOutput:
        run = await self.get(caller, run_id)
        if not run.status.is_terminal:
            raise FailedPrecondition(
                f"run {run_id} is still {run.status.name}; its output is ready once it ends"
            )
        messages = [m for m in await self._store.run_messages(run_id) if m.role == Role.ASSISTANT]
        return RunOutput(run=run, messages=messages)

    async def cancel(self, caller: Caller, run_id: str, *, reason: str = "") -> RunStatus:
        await self.get(caller, run_id)
        return await self._executor.cancel(run_id, Cancel(caller.principal, reason))

    # --- runs that wait ---------------------------------------------------------------------

    async def answer(
        self, caller: Caller, run_id: str, answers: list[Answer], kind: WaitKind
    ) -> Submitted:
        """Store answers to a run's waiting calls (decisions need the approver role, when one
        is configured); once none waits, the run goes on here (unless a node took it up)."""
        await self.get(caller, run_id)
        role = self._approver_role
        if kind == WaitKind.APPROVAL and role and role not in caller.roles:
            raise PermissionDenied(
                f"deciding approvals needs the role {role!r}, which {caller.principal!r} lacks"
            )
        if kind == WaitKind.ELICITATION:  # the content fits what was asked
            check_answers(await self._store.pending_calls(run_id), answers)
        submitted = await self._store.submit_answers(
            run_id, answers, kind=kind, by=caller.principal, now=datetime.now(UTC)
        )
        if not submitted.waiting_call_ids or kind == WaitKind.ELICITATION:
            await self._executor.wake(run_id)  # a tool that asked waits for its answer
        return submitted

    async def pending_calls(self, caller: Caller, run_id: str) -> list[PendingCall]:
        """The run's calls that wait for an answer now."""
        run = await self.get(caller, run_id)
        if run.status.is_terminal:
            return []
        now = datetime.now(UTC)
        calls = await self._store.pending_calls(run_id)
        return [c for c in calls if c.answer is None and not c.expired(now)]

    def _remember(self, run: Run) -> None:
        self._tenants[run.id] = run.tenant
        self._tenants.move_to_end(run.id)
        if len(self._tenants) > REMEMBERED_RUNS:
            self._tenants.popitem(last=False)

    # --- what this server offers ---------------------------------------------------------

    def providers(self, caller: Caller) -> list[ProviderInfo]:
        return catalog.providers(self._providers)

    # --- spend --------------------------------------------------------------------------

    async def usage(
        self, caller: Caller, *, session_id: str | None, from_day: str, to_day: str
    ) -> UsageReport:
        """The tenant's tokens and cost per UTC day (of runs created that day), and the sum."""
        days = await self._store.daily_usage(
            tenant=caller.tenant, session_id=session_id, from_day=from_day, to_day=to_day
        )
        total = sum((d.usage for d in days), TokenUsage())
        priced = [d.cost for d in days if d.cost is not None]
        cost = None
        if priced and len({c.currency for c in priced}) == 1:
            cost = Money(sum((c.amount for c in priced), Decimal(0)), priced[0].currency)
        return UsageReport(days=days, total=total, cost=cost)

    # --- snapshots ----------------------------------------------------------------------

    async def snapshots(self, caller: Caller) -> list[Snapshot]:
        return await self._store.list_snapshots(tenant=caller.tenant)

    async def snapshot(self, caller: Caller, run_id: str) -> Snapshot:
        found = await self._store.get_snapshot(run_id)
        if found is not None:
            run = await self._store.get_run(run_id)
            found = found if run is not None and run.tenant == caller.tenant else None
        if found is None:
            raise NotFound(f"no snapshot for run {run_id} (it has ended, or never existed)")
        return found

    async def delete_snapshot(self, caller: Caller, run_id: str) -> None:
        await self.snapshot(caller, run_id)
        await self._executor.abandon(run_id)

    # --- compaction settings --------------------------------------------------------------

    async def compaction_config(self, caller: Caller) -> CompactionConfig:
        return await self._store.get_compaction_config(tenant=caller.tenant)

    async def update_compaction_config(self, caller: Caller, config: CompactionConfig) -> None:
        problems = config.problems()
        if problems:
            raise InvalidArgument("; ".join(problems))
        if config.provider:
            self.check_model(config.provider, config.model)
        await self._compaction_settings.put(caller.tenant, config)

    async def circuit_breaker(self, caller: Caller) -> tuple[CircuitBreakerState, bool]:
        """The tenant's breaker, and whether it is open now (its cool-down counted)."""
        state = await self._store.get_circuit_breaker(tenant=caller.tenant)
        return state, state.is_open(now=datetime.now(UTC), cooldown_s=self._cooldown_s)

    # --- the run inspector (web/) ---------------------------------------------------------

    async def run_messages(self, caller: Caller, run_id: str) -> list[Message]:
        """The transcript messages the run wrote (its input, answers, tool results)."""
        await self.get(caller, run_id)
        return await self._store.run_messages(run_id)

    async def child_runs(self, caller: Caller, run_id: str) -> list[Run]:
        """The sub-agent runs the run started, oldest first."""
        await self.get(caller, run_id)
        return [r for r in await self._store.child_runs(run_id) if r.tenant == caller.tenant]

    async def last_sequence(self, caller: Caller, run_id: str) -> int:
        """The sequence of the run's last stored event."""
        await self.get(caller, run_id)
        return await self._store.last_sequence(run_id)
