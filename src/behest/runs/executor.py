"""The run executor: owns every run task of this process, from creation to terminal event.

It starts a task per run (created here, resumed after a restart, adopted from a node whose
lease lapsed, or taken up when the answers a waiting run needs came), tells a user's cancel
(RunCancelled) from a shutdown (the run is left as it is, resumable from its snapshot), from
a pause (the run waits, nobody's: runs/waiting.py) and from a failure (RunFailed), and has
every end written by runs/ending.py. Creation is runs/creation.py's, leases runs/leases.py's,
ending a run from outside (CancelRun, abandon) runs/cancelling.py's.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

from opentelemetry import trace

from behest.domain.messages import Message
from behest.domain.runs import Cancel, CreatedRun, Run, RunRequest, RunStatus
from behest.domain.snapshots import Snapshot
from behest.errors import (
    Fenced,
    ResourceExhausted,
    Unavailable,
)
from behest.events.log import EventLog
from behest.events.run_log import RunLog
from behest.observability.telemetry import Telemetry, bind, current
from behest.runs.builder import LoopBuilder
from behest.runs.cancelling import CANCEL_WAIT_S, Cancelling
from behest.runs.chores import Chores
from behest.runs.creation import commit_creation, new_run
from behest.runs.ending import Ending, RunEnder, record_end
from behest.runs.leases import Leases, this_process
from behest.runs.lost_claims import LostClaims
from behest.runs.outcome import outcome
from behest.runs.owned import Held, OwnedRun
from behest.runs.run_spans import resume_span, run_span
from behest.runs.start import initial_snapshot
from behest.runs.turns import QueuedTurns
from behest.runs.waiting import Waiting
from behest.runs.wakes import Wakes
from behest.store.base import NodeRecord, Renewal, Store
from behest.store.writes import AppendMessage, NewRun

log = logging.getLogger(__name__)

STOPPED = "the server is shutting down; the run stays resumable"


class Executor:
    """Starts, cancels, drains and recovers runs; one asyncio task per run."""

    def __init__(
        self,
        *,
        store: Store,
        event_log: EventLog,
        builder: LoopBuilder,
        max_concurrent_runs: int,
        max_runs_of: Callable[[str], int] | None = None,
        node: NodeRecord | None = None,
        lease_s: float = 30.0,
        sole_writer: bool = False,
        resume_runs: bool = True,
        telemetry: Telemetry | None = None,
    ) -> None:
        """`node`: this process (leases.this_process); `sole_writer`: no other process can
        write the store (SQLite, its directory locked). `telemetry`: the App's (spans,
        metrics), bound in every run task."""
        self._store = store
        self._log = event_log
        self._builder = builder
        self._max_runs = max_concurrent_runs
        self._runs = Held()
        self._telemetry = telemetry if telemetry is not None else current()
        self._metrics = self._telemetry.metrics
        self._metrics.watch_active_runs(lambda: len(self._runs))
        # Each tenant's limit of active runs (the server's unless it has its own).
        self._max_runs_of = max_runs_of or (lambda tenant: max_concurrent_runs)
        self._accepting = True
        self.leases = Leases(
            store,
            node=node if node is not None else this_process(""),
            lease_s=lease_s,
            sole_writer=sole_writer,
            metrics=self._metrics,
        )
        self._lost_claims = LostClaims(
            runs=self._runs, store=store, leases=self.leases, metrics=self._metrics
        )
        event_log.on_fenced = self._lost_claims.lost
        self._resume_runs = resume_runs
        self._ender = RunEnder(store, event_log)
        self._chores = Chores(lambda: self._accepting)
        self._turns = QueuedTurns(store, self._take_up)
        self._wakes = Wakes(
            store=store,
            runs=self._runs,
            chores=self._chores,
            notifier=event_log.notifier,
            take_up=lambda run, force: self._take_up(run, force=force),
            sole_writer=sole_writer,
            accepting=lambda: self._accepting,
        )
        self._cancelling = Cancelling(
            store=store,
            runs=self._runs,
            leases=self.leases,
            notifier=event_log.notifier,
            ender=self._ender,
            ended=self._ended,
            accepting=lambda: self._accepting,
        )

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Register this process's node name (FailedPrecondition: a live process has it),
        resume its interrupted runs, then keep claims alive and adopt orphans."""
        await self.leases.register()
        if self._resume_runs:
            await self._adopt(own=True)
        adopt = self._adopt if self._resume_runs else None
        self.leases.start(adopt, self._runs.running, self._renewed)

    async def stop(self, grace_s: float) -> None:
        """Stop taking runs, give running ones `grace_s` to finish, then stop the rest.

        Stopped runs keep their snapshot and are let go: any node (this one when it starts
        again) takes them up at once and resumes them.
        """
        self._accepting = False
        await self.leases.stop()
        await self._chores.stop(CANCEL_WAIT_S)
        await self._runs.drain(grace_s, cancel_wait_s=CANCEL_WAIT_S)
        await self._log.flush()
        await self.leases.leave()

    # --- creating; cancelling and abandoning (runs/cancelling.py) ------------------------

    async def create(
        self, request: RunRequest, *, tenant: str, traceparent: str = ""
    ) -> CreatedRun:
        """Create a run (or find the one its client_request_id names) and start it.

        A caller that goes away meanwhile does not stop it: a run whose creation commits
        is started, whoever waits for it.
        """
        if not self._accepting:
            raise Unavailable("the server is shutting down and takes no new runs")
        no_room = self._runs.no_room(tenant, self._max_runs, self._max_runs_of(tenant))
        if no_room and not request.client_request_id:
            raise ResourceExhausted(no_room)
        run_id = str(uuid.uuid4())
        span = run_span(self._telemetry.tracer, run_id, request, tenant, traceparent)
        # Reserved before the creation commits: a CancelRun that reads the new run before its
        # task starts finds it here, and the task starts by cancelling. Without room, a
        # request with a key is let through only to find the run it named (a client retrying
        # after a lost reply, whose run may be what fills the limit): the creation answers
        # with that run or refuses, and creates nothing, so there is nothing to reserve.
        handle = OwnedRun(tenant=tenant)
        if not no_room:
            self._runs.hold(run_id, handle)
        creation = new_run(
            request,
            run_id,
            span,
            tenant=tenant,
            owner=self.leases.node,
            lease_until=self.leases.until(),
            refused_if_new=no_room,
        )
        try:
            return await self._commit_and_start(creation, handle, span)
        except asyncio.CancelledError:
            # The caller went away (no shield here: a task hop costs CreateRun ~0.8 ms). The
            # creation may commit all the same, and a run that was created must start: ask
            # again in the background, which finds what committed.
            task = asyncio.create_task(self._commit_and_start(creation, handle, span))
            self._chores.keep(task, failed="a creation its caller left did not complete")
            raise

    async def _commit_and_start(
        self, creation: NewRun, handle: OwnedRun, span: trace.Span
    ) -> CreatedRun:
        try:
            outcome = await commit_creation(self._log, self._store, creation)
            if isinstance(outcome, Run):  # created, but the outcome was lost: from the store
                self._metrics.runs_started.add(1)
                span.end()
                await self._resume(outcome, handle, outcome.lease_generation)
                return CreatedRun(run=outcome, created=True)
        except asyncio.CancelledError:
            raise  # the caller's; the creation goes on in the background (see create)
        except BaseException:
            self._runs.release(creation.run_id, handle)
            span.end()
            raise
        created, first_writes = outcome
        if created.run.queued:  # it starts in its turn (runs/turns.py)
            self._turns.queued(created.run)
        if not created.created or created.run.queued:
            self._runs.release(creation.run_id, handle)
            span.end()
            return created
        self._metrics.runs_started.add(1)
        span.set_attribute("behest.session_id", created.run.session_id)
        span.set_attribute("gen_ai.conversation.id", created.run.session_id)
        # A new session holds only this run's input: no need to read it back.
        known = None
        if not creation.request.session_id:
            known = [w.message for w in first_writes if isinstance(w, AppendMessage)]
        snapshot = initial_snapshot(created.run)
        generation = created.run.lease_generation
        self._start(created.run, handle, span, 1, generation, snapshot=snapshot, transcript=known)
        return created

    async def cancel(self, run_id: str, cancel: Cancel) -> RunStatus:
        """Cancel a run, wherever it executes (runs/cancelling.py); CANCELLED once durable."""
        return await self._cancelling.cancel(run_id, cancel)

    async def abandon(self, run_id: str) -> None:
        """Give up an interrupted run (RunFailed "abandoned"); a running one cannot be."""
        await self._cancelling.abandon(run_id)

    async def _renewed(self, before: set[str], renewal: Renewal) -> None:
        """After a renewal: end the runs asked to cancel; stop those another node claimed
        meanwhile (a run that waits on a long tool writes nothing that would tell)."""
        await self._cancelling.cancels_asked(renewal.cancel_asked)
        await self._lost_claims.after_renewal(before, renewal.held)

    def cancel_signalled(self, run_id: str) -> None:
        """A node asked to cancel `run_id` (a signal): end it if this node executes it."""
        if run_id in self._runs:
            self._chores.spawn(self._cancelling.cancels_asked([run_id]), f"cancel-{run_id}")

    # --- runs that wait ---------------------------------------------------------------------

    async def wake(self, run_id: str) -> None:
        """Take up a waiting run whose answers came, if no node has (runs/wakes.py)."""
        await self._wakes.wake(run_id)

    # --- resuming and adopting -----------------------------------------------------------

    async def _adopt(self, *, own: bool = False) -> None:
        """Resume the unfinished runs this node may claim (its own ones only with `own`; at
        start-up the sole writer takes every one)."""
        runs = await self._store.resumable_runs(now=datetime.now(UTC))
        room = self._max_runs - len(self._runs)
        force = own and self.leases.sole_writer
        for run in await self.leases.adoptable(runs, held=self._runs, own=own, room=room):
            if not self._accepting:
                return
            if run.id not in self._runs:
                await self._take_up(run, force=force, adopted=True)

    async def _take_up(self, run: Run, *, force: bool = False, adopted: bool = False) -> None:
        """Claim a run nobody executes here and resume it (an adoption is counted, by whose
        claim the run had)."""
        handle = self._runs.hold(run.id, OwnedRun(run.tenant))
        try:
            if generation := await self.leases.claim(run.id, force=force):
                if adopted:
                    previous = self._metrics.attrs("previous_owner", self.leases.owner_of(run))
                    self._metrics.lease_adoptions.add(1, previous)
                await self._resume(run, handle, generation)
        finally:
            if handle.task is None:
                self._runs.release(run.id, handle)

    async def _resume(self, run: Run, handle: OwnedRun, generation: int) -> None:
        """Start a claimed run from its snapshot; a cancel asked of it meanwhile ends it."""
        if run.cancel_request is not None:
            handle.request_cancel(run.cancel_request)
        snapshot = await self._store.get_snapshot(run.id)
        last_sequence = await self._store.last_sequence(run.id)
        span = resume_span(self._telemetry.tracer, run, last_sequence)
        log.info(
            "resuming run",
            extra={"run_id": run.id, "after_sequence": last_sequence, "status": run.status.name},
        )
        self._start(run, handle, span, last_sequence, generation, snapshot=snapshot)

    # --- one run ----------------------------------------------------------------------

    def _start(
        self,
        run: Run,
        handle: OwnedRun,
        span: trace.Span,
        last_sequence: int,
        generation: int,
        *,
        snapshot: Snapshot | None = None,
        transcript: list[Message] | None = None,
    ) -> None:
        handle.generation = generation
        run_log = self._log.open_run(run.id, last_sequence=last_sequence, generation=generation)
        handle.task = asyncio.create_task(
            self._drive(run, handle, run_log, span, snapshot, transcript), name=f"run-{run.id}"
        )

    async def _drive(
        self,
        run: Run,
        handle: OwnedRun,
        run_log: RunLog,
        span: trace.Span,
        snapshot: Snapshot | None,
        transcript: list[Message] | None,
    ) -> None:
        handle.started = True
        bind(self._telemetry)  # this task's spans and metrics are this App's
        waiting = None
        try:
            # No stack traces in spans: a provider error's causes may quote a key.
            with trace.use_span(
                span, end_on_exit=True, record_exception=False, set_status_on_exception=False
            ):
                ending, progress = await outcome(
                    self._builder, run, handle, run_log, snapshot, transcript
                )
                if ending is None:
                    span.set_attribute("behest.outcome", "stopped")
                    return  # shutdown: the run stays resumable
                if isinstance(ending, Waiting):
                    span.set_attribute("behest.outcome", "waiting")
                    waiting = ending  # durable, and nobody's: any node may take it up
                    return
                ending = await self._ender.finish(run, run_log, ending, progress)
                handle.final = ending.status
                self._ended(ending, span)
                if self._turns.expects(run.session_id):
                    self._chores.spawn(self._turns.after_end(run.session_id), "next-turn")
        except Fenced:
            log.warning("run %s was taken over by another node before its end", run.id)
        finally:
            # A run lost to another node or paused leaves no problem: a CancelRun waiting for
            # it asks again, where it is now.
            problem = "" if waiting or handle.lost else STOPPED
            self._runs.release(run.id, handle, problem)
            if waiting is not None:
                self._wakes.paused(run.id, waiting, handle)

    def _ended(self, ending: Ending, span: trace.Span | None = None) -> None:
        """Count a run's durable end, and tell it on the run's span."""
        record_end(ending, self._telemetry, span)
