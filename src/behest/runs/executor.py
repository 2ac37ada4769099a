"""The run executor: owns every run task of this process, from creation to terminal event.

Only the executor writes terminal events. It tells a user's cancel (RunCancelled) from a
shutdown (the run is left as it is, resumable from its snapshot) and from a failure (RunFailed).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from opentelemetry import trace

from behest.domain import events as ev
from behest.domain.messages import Message
from behest.domain.runs import (
    CreatedRun,
    FinishReason,
    Run,
    RunRequest,
    RunStatus,
    TokenUsage,
    ToolChoice,
)
from behest.domain.snapshots import Snapshot
from behest.errors import (
    Aborted,
    BehestError,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    quote,
)
from behest.events.log import CommitUncertain, EventLog, RunLog
from behest.providers.registry import ProviderRegistry
from behest.runs.compaction_settings import CompactionSettings
from behest.runs.compactor import Compactor
from behest.runs.loop import AgentLoop, LoopLimits, Outcome
from behest.runs.start import first_step, initial_snapshot
from behest.runs.summariser import Summariser
from behest.runs.transcript import closing_results
from behest.store.base import (
    AppendMessage,
    DeleteSnapshot,
    NewRun,
    Store,
    UpdateRun,
    Write,
)
from behest.telemetry import context_from_traceparent, current_trace_ids, traceparent_of, tracer
from behest.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

DEFAULT_IDENTITY = "default"
# How long CancelRun waits for the run's end to be durable before saying it is not yet.
CANCEL_WAIT_S = 10.0
# The longest wait between tries to store a run's end.
END_RETRY_MAX_S = 5.0
# Times CancelRun starts over when the run changed hands while it waited (a lost claim).
_CANCEL_TRIES = 3


@dataclass(frozen=True, slots=True)
class _Terminal:
    payload: ev.RunCompleted | ev.RunFailed | ev.RunCancelled
    status: RunStatus
    finish_reason: FinishReason = FinishReason.UNSPECIFIED
    error: str = ""


@dataclass(slots=True, eq=False)
class _Owned:
    """A run this process executes, or is about to (its creation or claim is in flight).

    `decided` is set the moment the run's end is chosen, with no await in between, so a
    cancel either comes first (and the end is RunCancelled) or finds the end decided.
    """

    task: asyncio.Task[None] | None = None
    started: bool = False  # the task's body runs, so a task.cancel() reaches its handler
    cancel_requested: bool = False
    decided: RunStatus | None = None
    final: RunStatus | None = None  # the terminal status, once durable
    problem: str = ""  # why the run left this process without a durable end
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def finish(self, final: RunStatus | None, problem: str = "") -> None:
        self.final, self.problem = final, problem
        self.ended.set()


class Executor:
    """Starts, cancels, drains and recovers runs; one asyncio task per run."""

    def __init__(
        self,
        *,
        store: Store,
        event_log: EventLog,
        providers: ProviderRegistry,
        tools: ToolRegistry,
        limits: LoopLimits,
        max_concurrent_runs: int,
        node_id: str = "local",
        lease_s: float = 30.0,
        resume_runs: bool = True,
        compaction_settings: CompactionSettings,
    ) -> None:
        self._store = store
        self._log = event_log
        self._providers = providers
        self._tools = tools
        self._limits = limits
        self._max_runs = max_concurrent_runs
        self._runs: dict[str, _Owned] = {}
        self._accepting = True
        self._node = node_id
        self._lease_s = lease_s
        self._resume_runs = resume_runs
        self._lease_keeper: asyncio.Task[None] | None = None
        self._compaction_settings = compaction_settings

    async def create(self, request: RunRequest, *, traceparent: str = "") -> CreatedRun:
        """Create a run (or find the one its client_request_id names) and start it.

        A caller that goes away meanwhile does not stop it: a run whose creation commits
        is started, whoever waits for it.
        """
        return await asyncio.shield(self._create_and_start(request, traceparent))

    async def _create_and_start(self, request: RunRequest, traceparent: str) -> CreatedRun:
        self._providers.check(request.provider, request.model)
        self._check_tools(request)
        if not self._accepting:
            raise Unavailable("the server is shutting down and takes no new runs")
        if len(self._runs) >= self._max_runs:
            raise ResourceExhausted(
                f"too many active runs ({self._max_runs}); retry when some have finished"
            )
        run_id = str(uuid.uuid4())
        span = tracer().start_span(
            "behest.run",
            context=context_from_traceparent(traceparent),
            attributes={"behest.run_id": run_id},
        )
        # Reserved before the creation commits: a CancelRun that reads the new run before its
        # task starts finds it here, and the task starts by cancelling.
        handle = self._runs[run_id] = _Owned()
        try:
            outcome = await self._commit_creation(self._new_run(request, run_id, span, traceparent))
            if isinstance(outcome, Run):  # created, but the outcome was lost: from the store
                span.end()
                await self._resume(outcome, handle)
                return CreatedRun(run=outcome, created=True)
        except BaseException:
            self._release(run_id, handle)
            span.end()
            raise
        created, first_writes = outcome
        if created.created:
            span.set_attribute("behest.session_id", created.run.session_id)
            snapshot = initial_snapshot(created.run)
            # A new session holds only this run's input: no need to read it back.
            known = None
            if not request.session_id:
                known = [w.message for w in first_writes if isinstance(w, AppendMessage)]
            self._start(
                created.run, handle, span, last_sequence=1, snapshot=snapshot, transcript=known
            )
        else:
            self._release(run_id, handle)
            span.end()
        return created

    def _new_run(
        self, request: RunRequest, run_id: str, span: trace.Span, traceparent: str
    ) -> NewRun:
        ids = span.get_span_context()
        return NewRun(
            request=request,
            run_id=run_id,
            identity=DEFAULT_IDENTITY,
            now=datetime.now(UTC),
            traceparent=traceparent_of(span),
            owner=self._node,
            lease_until=self._lease_until(),
            first_step=functools.partial(
                first_step,
                trace_id=format(ids.trace_id, "032x"),
                span_id=format(ids.span_id, "016x"),
            ),
        )

    async def _commit_creation(self, new_run: NewRun) -> tuple[CreatedRun, list[Write]] | Run:
        """The creation's outcome, or the run read back when it was created but its outcome
        was lost (a commit that landed while reporting an error)."""
        for attempt in (1, 2):
            try:
                created, writes = await self._log.create(new_run)
            except Exception as exc:
                found = await self._read_back(new_run.run_id)
                if found is not None:
                    return found
                if attempt == 2 or not isinstance(exc, CommitUncertain):
                    raise
                continue  # nothing of it was written: ask again for the real answer
            if not created.created and created.run.id == new_run.run_id:
                return created.run  # a retry found this very run: the first try committed
            return created, writes
        raise AssertionError("unreachable")

    async def _read_back(self, run_id: str) -> Run | None:
        try:
            return await self._store.get_run(run_id)
        except Exception:
            log.exception("could not tell whether run %s was created", run_id)
            raise Unavailable(
                f"could not tell whether run {run_id} was created: the store did not answer; "
                "retry with the same client_request_id to be safe"
            ) from None

    def _release(self, run_id: str, handle: _Owned, problem: str = "") -> None:
        """Forget a run this process reserved but does not execute after all."""
        if self._runs.get(run_id) is handle:
            del self._runs[run_id]
        if not handle.ended.is_set():
            handle.finish(handle.final, "" if handle.final is not None else problem)

    def check_model(self, provider: str, model: str) -> None:
        """Raise InvalidArgument unless the provider is configured and offers the model."""
        self._providers.check(provider, model)

    def _check_tools(self, request: RunRequest) -> None:
        known = self._tools.names()
        unknown = [name for name in request.tools if name not in known]
        if unknown:
            raise InvalidArgument(
                f"tools: unknown tool {quote(unknown[0])} (known: {', '.join(known) or 'none'})"
            )
        choice = request.tool_choice
        if choice in set(ToolChoice):
            return
        allowed = request.tools or tuple(known)
        if choice not in allowed:
            raise InvalidArgument(
                f"tool_choice must be auto, none, required or the name of a tool this run may "
                f"use; got {quote(choice)}"
            )

    async def cancel(self, run_id: str) -> RunStatus:
        """Cancel a run; returns CANCELLED once RunCancelled is durable (or was already).

        A run whose end was decided otherwise first (it completed or failed) is
        FailedPrecondition naming that end; an end not durable within CANCEL_WAIT_S is
        DeadlineExceeded. Nothing is answered before the run's end is known.
        """
        for _ in range(_CANCEL_TRIES):
            run = await self._store.get_run(run_id)
            if run is None:
                raise NotFound(f"run {run_id} not found")
            handle = self._runs.get(run_id)
            if handle is None:
                if run.status.is_terminal:
                    return _cancelled(run_id, run.status)
                final = await self._end_unowned(
                    run, _Terminal(ev.RunCancelled(), RunStatus.CANCELLED)
                )
            else:
                if handle.decided is None and not handle.cancel_requested:
                    handle.cancel_requested = True
                    if handle.started and handle.task is not None:
                        handle.task.cancel()
                final = await self._wait_end(run_id, handle)
            if final is not None:
                return _cancelled(run_id, final)
            if not self._accepting:
                raise Unavailable(
                    f"the server is shutting down: run {run_id} was stopped without an end "
                    "and resumes at the next start; cancel it then"
                )
        raise Aborted(f"run {run_id} changed hands while it was being cancelled; try again")

    async def _wait_end(self, run_id: str, handle: _Owned) -> RunStatus | None:
        """The run's terminal status once durable; None if it left this process without one."""
        try:
            async with asyncio.timeout(CANCEL_WAIT_S):
                await handle.ended.wait()
        except TimeoutError:
            raise DeadlineExceeded(
                f"run {run_id} was asked to stop, but its end was not durable within "
                f"{CANCEL_WAIT_S:g} s; GetRun or WatchRunEvents tell how it ends"
            ) from None
        if handle.final is None and handle.problem:
            raise Unavailable(f"run {run_id}: {handle.problem}")
        return handle.final

    async def abandon(self, run_id: str) -> None:
        """Give up an interrupted run (RunFailed "abandoned"); a running one cannot be."""
        run = await self._store.get_run(run_id)
        if run is None:
            raise NotFound(f"run {run_id} not found")
        if run_id in self._runs:
            raise FailedPrecondition(f"run {run_id} is executing; cancel it with CancelRun instead")
        if run.status.is_terminal:
            raise FailedPrecondition(f"run {run_id} already ended ({run.status.name})")
        reason = "abandoned: its snapshot was deleted while the run was interrupted"
        final = await self._end_unowned(
            run, _Terminal(ev.RunFailed(reason), RunStatus.FAILED, error=reason)
        )
        if final != RunStatus.FAILED:
            raise FailedPrecondition(f"run {run_id} ended {final.name if final else 'elsewhere'}")

    def _check_not_owned_elsewhere(self, run: Run) -> None:
        live = run.lease_expires_at is not None and run.lease_expires_at > datetime.now(UTC)
        if run.owner and run.owner != self._node and live:
            raise FailedPrecondition(
                f"run {run.id} is executing on node {run.owner!r}; ask that node"
            )

    async def start(self) -> None:
        """Resume this node's interrupted runs, then keep claims alive and adopt orphans."""
        if self._resume_runs:
            await self._resume_claimable(own=True)
        self._lease_keeper = asyncio.create_task(self._keep_leases(), name="run-leases")

    async def _keep_leases(self) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            try:
                await self._store.renew_leases(owner=self._node, lease_until=self._lease_until())
                if self._resume_runs:
                    await self._resume_claimable()
            except Exception:
                log.exception("renewing run leases failed; retrying")

    async def _resume_claimable(self, *, own: bool = False) -> None:
        """Resume unfinished runs whose owner's lease lapsed (and, with `own`, this node's).

        This node's own runs are resumed only at start-up: later, a run of ours that is not in
        `_runs` may be one whose creation has committed but whose task is not started yet.
        """
        now = datetime.now(UTC)
        for run in await self._store.unfinished_runs():
            if not self._accepting:
                return
            if run.id in self._runs or (run.owner == self._node and not own):
                continue
            live = run.lease_expires_at is not None and run.lease_expires_at > now
            if run.owner and run.owner != self._node and live:
                continue
            handle = self._runs[run.id] = _Owned()
            try:
                claimed = await self._store.claim_run(
                    run.id, owner=self._node, now=now, lease_until=self._lease_until()
                )
                if claimed:
                    await self._resume(run, handle)
            finally:
                if handle.task is None:
                    self._release(run.id, handle)

    async def _resume(self, run: Run, handle: _Owned) -> None:
        snapshot = await self._store.get_snapshot(run.id)
        last_sequence = await self._store.last_sequence(run.id)
        span = tracer().start_span(
            "behest.run.resume",
            context=context_from_traceparent(run.traceparent),
            attributes={"behest.run_id": run.id, "behest.resumed_after": last_sequence},
        )
        log.info(
            "resuming run",
            extra={"run_id": run.id, "after_sequence": last_sequence, "status": run.status.name},
        )
        self._start(run, handle, span, last_sequence=last_sequence, snapshot=snapshot)

    def _lease_until(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self._lease_s)

    async def stop(self, grace_s: float) -> None:
        """Stop taking runs, give running ones `grace_s` to finish, then stop the rest.

        Stopped runs keep their snapshot and stay claimed by this node: they are resumed when
        it starts again (or by another node once the claim lapses).
        """
        self._accepting = False
        if self._lease_keeper is not None:
            self._lease_keeper.cancel()
            await asyncio.gather(self._lease_keeper, return_exceptions=True)
            self._lease_keeper = None
        tasks = [h.task for h in self._runs.values() if h.task is not None]
        if tasks and grace_s > 0:
            await asyncio.wait(tasks, timeout=grace_s)
        tasks = [h.task for h in self._runs.values() if h.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_WAIT_S)

    # --- one run ----------------------------------------------------------------------

    def _start(
        self,
        run: Run,
        handle: _Owned,
        span: trace.Span,
        *,
        last_sequence: int,
        snapshot: Snapshot | None = None,
        transcript: list[Message] | None = None,
    ) -> None:
        run_log = self._log.open_run(run.id, last_sequence=last_sequence)
        handle.task = asyncio.create_task(
            self._drive(run, handle, run_log, span, snapshot, transcript), name=f"run-{run.id}"
        )

    async def _drive(
        self,
        run: Run,
        handle: _Owned,
        run_log: RunLog,
        span: trace.Span,
        snapshot: Snapshot | None,
        transcript: list[Message] | None,
    ) -> None:
        handle.started = True
        problem = "the server is shutting down; the run stays resumable"
        try:
            with trace.use_span(span, end_on_exit=True):
                loop = AgentLoop(
                    run=run,
                    log=run_log,
                    store=self._store,
                    provider=self._providers.get(run.provider),
                    provider_config=self._providers.config(run.provider),
                    tools=self._tools,
                    limits=self._limits,
                    transcript=transcript,
                )
                terminal = await self._outcome(run, handle, run_log, loop, snapshot)
                if terminal is None:
                    return  # shutdown: the run stays resumable
                try:
                    await self._finish(run, run_log, terminal, loop)
                except Exception:
                    log.exception("run %s: its terminal step could not be written", run.id)
                    problem = "its end could not be written; it resumes at the next start"
                    return
                handle.final = terminal.status
        finally:
            self._release(run.id, handle, problem)

    async def _compactor(self, run: Run, run_log: RunLog) -> Compactor:
        """Compaction as configured when the run starts (later updates apply to later runs)."""
        config = await self._compaction_settings.get()
        return Compactor(
            run=run,
            log=run_log,
            store=self._store,
            config=config,
            context_window=self._providers.model_info(run.provider, run.model).context_window,
            summarise=Summariser(self._providers, config, run),
            cooldown_s=self._limits.compaction_cooldown_s,
        )

    async def _outcome(
        self,
        run: Run,
        handle: _Owned,
        run_log: RunLog,
        loop: AgentLoop,
        snapshot: Snapshot | None,
    ) -> _Terminal | None:
        """How the run ends; None when it is stopped by a shutdown (it stays resumable).

        The end is decided (handle.decided) with no await after the loop returns or raises:
        a cancel requested before that moment makes it RunCancelled, whatever the loop did.
        """
        terminal = await self._ending(run, handle, run_log, loop, snapshot)
        if handle.cancel_requested:
            terminal = _Terminal(ev.RunCancelled(), RunStatus.CANCELLED)
        if terminal is not None:
            handle.decided = terminal.status
        return terminal

    async def _ending(
        self,
        run: Run,
        handle: _Owned,
        run_log: RunLog,
        loop: AgentLoop,
        snapshot: Snapshot | None,
    ) -> _Terminal | None:
        try:
            if handle.cancel_requested:
                raise asyncio.CancelledError  # cancelled before its task started
            loop.compactor = await self._compactor(run, run_log)
            outcome: Outcome = await loop.run(snapshot)
        except asyncio.CancelledError:
            if not handle.cancel_requested:
                return None
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return _Terminal(ev.RunCancelled(), RunStatus.CANCELLED)
        except BehestError as exc:
            return _Terminal(ev.RunFailed(str(exc)), RunStatus.FAILED, error=str(exc))
        except Exception:
            trace_id, _ = current_trace_ids()
            log.exception("run %s crashed", run.id)
            message = f"internal error (trace id {trace_id})"
            return _Terminal(ev.RunFailed(message), RunStatus.FAILED, error=message)
        return _Terminal(
            ev.RunCompleted(outcome.finish_reason, outcome.iterations),
            RunStatus.COMPLETED,
            finish_reason=outcome.finish_reason,
        )

    async def _finish(
        self, run: Run, run_log: RunLog, terminal: _Terminal, loop: AgentLoop
    ) -> None:
        """Write the terminal event with the final status, and wait until it is durable.

        A run must not be left without its end while this process holds it: a failed write
        is tried again (after a backoff, from what the store holds) until it is durable or
        the server stops (then the run resumes at the next start).
        """
        messages: list[Message] | None = None if run_log.failed else loop.progress.transcript
        position = loop.progress.next_position
        for attempt in itertools.count(1):
            try:
                if messages is None:
                    await run_log.resync(self._store)
                    messages = await self._store.session_messages(run.session_id)
                    position = messages[-1].position + 1 if messages else 0
                await self._write_end(
                    run,
                    run_log,
                    terminal,
                    messages=messages,
                    position=position,
                    iterations=loop.progress.iteration,
                    usage=loop.progress.usage,
                )
                return
            except Exception:
                messages = None  # what committed is read again before the next try
                delay = min(END_RETRY_MAX_S, 0.05 * 2**attempt)
                log.warning(
                    "run %s: storing its end failed (try %d); trying again in %.2f s",
                    run.id,
                    attempt,
                    delay,
                    exc_info=True,
                )
                await asyncio.sleep(delay)

    async def _end_unowned(self, run: Run, terminal: _Terminal) -> RunStatus | None:
        """End a run no task of this process owns; returns how it ended (None: it was taken
        over meanwhile). The run is held as ours while its end is written, so no start,
        resume or second end of it can interleave; it is read again once held."""
        self._check_not_owned_elsewhere(run)
        handle = self._runs[run.id] = _Owned(started=True, decided=terminal.status)
        try:
            current = await self._store.get_run(run.id)
            if current is None or current.status.is_terminal:
                handle.final = None if current is None else current.status
                return handle.final
            self._check_not_owned_elsewhere(current)
            with tracer().start_as_current_span(
                "behest.run.end", context=context_from_traceparent(run.traceparent)
            ):
                messages = await self._store.session_messages(run.session_id)
                last = await self._store.last_sequence(run.id)
                await self._write_end(
                    current,
                    self._log.open_run(run.id, last_sequence=last),
                    terminal,
                    messages=messages,
                    position=messages[-1].position + 1 if messages else 0,
                    iterations=current.iterations,
                    usage=current.usage,
                )
            handle.final = terminal.status
            return handle.final
        finally:
            self._release(run.id, handle, "its end could not be written")

    async def _write_end(
        self,
        run: Run,
        run_log: RunLog,
        terminal: _Terminal,
        *,
        messages: list[Message],
        position: int,
        iterations: int,
        usage: TokenUsage,
    ) -> None:
        """The terminal step: error results for unanswered calls, the terminal event, the
        final status, the snapshot removed — one step, awaited until durable."""
        closing = closing_results(
            messages,
            run_id=run.id,
            session_id=run.session_id,
            reason=_why(terminal),
            position=position,
        )
        done = await run_log.emit(
            *[ev.ToolMessageCommitted(m.id) for m in closing],
            terminal.payload,
            state=[
                *(AppendMessage(m) for m in closing),
                *_terminal_state(run.id, terminal, iterations, usage),
            ],
        )
        await asyncio.shield(done)


def _cancelled(run_id: str, final: RunStatus) -> RunStatus:
    """CANCELLED, or FailedPrecondition naming the end the run reached instead."""
    if final == RunStatus.CANCELLED:
        return final
    raise FailedPrecondition(f"run {run_id} already ended {final.name}; it was not cancelled")


def _why(terminal: _Terminal) -> str:
    match terminal.payload:
        case ev.RunCancelled():
            return "the run was cancelled"
        case ev.RunFailed(error):
            return f"the run failed ({error})"
    return "the run ended"


def _terminal_state(
    run_id: str, terminal: _Terminal, iterations: int, usage: TokenUsage
) -> list[Write]:
    return [
        UpdateRun(
            run_id=run_id,
            status=terminal.status,
            iterations=iterations,
            usage=usage,
            finish_reason=terminal.finish_reason,
            error=terminal.error,
        ),
        DeleteSnapshot(run_id),
    ]
