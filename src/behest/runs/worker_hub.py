"""Workers in this process: the connections of workers (to this replica) and the runs' side of
their tasks (executing here), over the store that every replica shares.

A connection registers (taking over the leased tasks of the same worker's earlier connection
that is gone), takes queued tasks of its tenant that it serves while it has room, renews its
leases with heartbeats, and hands in results (store: fenced by attempt and lease). A run waits
for its task's outcome: done (a result, or given up), its worker lost (the lease lapsed), no
worker in time (schedule to start), or out of time (start to close): runs/task_outcomes.py.
Enqueued tasks and taken results wake the waiters of this process at once; those of other
replicas see them at their next look (every `poll_s`), or at once on PostgreSQL, where a
queued task and a taken result are NOTIFYed (store/sql/writes.py, workers.py) and signalled
here (`signalled`). Questions that running tasks ask go the same ways (`asks`:
runs/worker_asks.py).
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from behest.domain.workers import (
    ResultRefused,
    Task,
    TaskResult,
    VerifyRequest,
    WorkerRecord,
    WorkerToolSpec,
    WorkerVerdict,
)
from behest.errors import ResourceExhausted
from behest.runs.task_outcomes import Ending, TaskOutcome, done, look_at
from behest.runs.worker_asks import TASK_ANSWERED, WorkerAsks
from behest.store.base import Store

# The kinds of the replicas' signals about tasks (store/sql/channel_payloads.py).
TASK_QUEUED, TASK_DONE, TASK_ASKED = "task", "result", "asked"

# A lease lasts this many heartbeat intervals.
LEASE_INTERVALS = 3
# A worker row not seen for this long is dropped (a replica killed left it behind).
FORGOTTEN_AFTER = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class HubSettings:
    heartbeat_s: float = 5.0
    poll_s: float = 0.25
    max_workers_per_tenant: int = 100
    max_queued_tasks_per_tenant: int = 10_000

    @property
    def lease_s(self) -> float:
        return self.heartbeat_s * LEASE_INTERVALS


@dataclass(eq=False)
class Idle:
    """A worker connected here, waiting for a task: given one (or None: look again)."""

    worker: WorkerRecord
    names: frozenset[str]
    given: asyncio.Future[Task | None]
    chosen: bool = False  # a run is queuing a task for it


class Verifier(Protocol):
    """A worker's connection served here (runs/worker_session.py WorkerSession)."""

    @property
    def worker(self) -> WorkerRecord: ...

    def verifies(self, tool_name: str) -> bool: ...

    async def verify(self, request: VerifyRequest, timeout_s: float) -> WorkerVerdict | None: ...


class WorkerHub:
    """The workers connected here, and the runs here that wait for workers' results."""

    def __init__(self, *, store: Store, node: str, settings: HubSettings) -> None:
        self._store = store
        self._node = node
        self.settings = settings
        self._idle: dict[str, list[Idle]] = collections.defaultdict(list)  # by tenant
        self._results: dict[str, asyncio.Event] = {}
        # Results taken here for runs waiting here, by execution id.
        self._taken: dict[str, tuple[WorkerRecord, TaskResult]] = {}
        self._directory: dict[str, tuple[float, list[WorkerRecord]]] = {}
        self.stopping = asyncio.Event()  # set: this replica stops; its workers go elsewhere
        self._wakeups: set[asyncio.Task[None]] = set()
        self._sessions: set[Verifier] = set()  # the connections served here
        self.asks = WorkerAsks(store=store, poll_s=settings.poll_s, asked=self._look_now)

    def serving(self, session: Verifier) -> None:
        self._sessions.add(session)

    def served(self, session: Verifier) -> None:
        self._sessions.discard(session)

    async def verify(
        self, tenant: str, request: VerifyRequest, timeout_s: float
    ) -> WorkerVerdict | None:
        """Ask a worker of `tenant` connected here that verifies the tool whether the
        execution ran; None when none is connected here or none can tell in time."""
        for session in list(self._sessions):
            if session.worker.tenant == tenant and session.verifies(request.tool_name):
                said = await session.verify(request, timeout_s)
                if said is not None and said.known:
                    return said
        return None

    async def stop(self) -> None:
        """End the streams of the workers connected here (they reconnect elsewhere)."""
        self.stopping.set()

    # --- connections ----------------------------------------------------------------------

    async def connect(
        self, *, tenant: str, name: str, tools: Sequence[WorkerToolSpec], max_tasks: int
    ) -> WorkerRecord:
        """Register a worker's connection (ResourceExhausted past the tenant's limit)."""
        now = _now()
        live = await self.workers(tenant, fresh=True)
        if len(live) >= self.settings.max_workers_per_tenant:
            raise ResourceExhausted(
                f"max_workers_per_tenant: tenant {tenant!r} has {len(live)} workers "
                "connected, the most it may have"
            )
        worker = WorkerRecord(
            id=str(uuid.uuid4()),
            tenant=tenant,
            name=name,
            node=self._node,
            tools=tuple(tools),
            max_tasks=max_tasks,
            connected_at=now,
            seen_at=now,
        )
        await self._store.register_worker(worker, stale_before=now - FORGOTTEN_AFTER)
        self._directory.pop(tenant, None)
        return worker

    async def disconnect(self, worker: WorkerRecord) -> None:
        await self._store.unregister_worker(worker.id)
        self._directory.pop(worker.tenant, None)

    async def heartbeat(self, worker: WorkerRecord) -> None:
        now = _now()
        until = now + timedelta(seconds=self.settings.lease_s)
        await self._store.worker_heartbeat(worker.id, now=now, lease_until=until)

    async def next_task(self, worker: WorkerRecord) -> Task:
        """The next task the worker takes (waits until there is one): one queued (claimed
        from the store), or one a run here hands it as it queues it (`offer`)."""
        names = frozenset(spec.name for spec in worker.tools)
        while True:
            task = await self._store.claim_task(
                worker, sorted(names), now=_now(), lease_s=self.settings.lease_s
            )
            if task is not None:
                return task
            idle = Idle(worker, names, asyncio.get_running_loop().create_future())
            waiting = self._idle[worker.tenant]
            waiting.append(idle)
            try:
                given = await asyncio.wait_for(asyncio.shield(idle.given), self.settings.poll_s)
            except TimeoutError:
                given = await idle.given if idle.chosen else None  # handed one: it comes
            finally:
                if idle in waiting:
                    waiting.remove(idle)
                if not idle.given.done():
                    idle.given.cancel()
            if given is not None:
                return given

    def offer(self, tenant: str, tool_name: str) -> Idle | None:
        """A worker connected here waiting for a task of this tool, if any: the run queues
        its task leased to it (no claim to write), then `deliver`s it."""
        for idle in self._idle[tenant]:
            if tool_name in idle.names and not idle.given.done():
                self._idle[tenant].remove(idle)
                idle.chosen = True
                return idle
        return None

    def deliver(self, idle: Idle, task: Task | None) -> None:
        """Hand the worker the task queued for it (None: the step that queues it failed:
        the worker looks again). A worker gone meanwhile: the task is queued again."""
        if not idle.given.done():
            idle.given.set_result(task)
        elif task is not None:
            release = self.release(idle.worker, task.execution_id)
            job = asyncio.get_running_loop().create_task(release)
            self._wakeups.add(job)
            job.add_done_callback(self._wakeups.discard)

    async def release(self, worker: WorkerRecord, execution_id: str) -> None:
        """A task the worker took but was never sent (its stream ended): queued again."""
        await self._store.release_task(execution_id, worker_id=worker.id)

    async def hand_in(self, worker: WorkerRecord, result: TaskResult) -> ResultRefused | None:
        """A worker's result of a task it holds: taken (None), or why not. A run here that
        waits for it gets it at once, without reading it back."""
        refused = await self._store.complete_task(worker.id, result, now=_now())
        if refused is None:
            waiting = self._results.get(result.execution_id)
            if waiting is not None:
                self._taken[result.execution_id] = (worker, result)
                waiting.set()
        return refused

    def known_tools(self, tenant: str) -> list[str]:
        """The tools the tenant's workers served when last looked up (`workers`)."""
        cached = self._directory.get(tenant)
        return sorted({s.name for w in cached[1] for s in w.tools}) if cached else []

    async def workers(self, tenant: str, *, fresh: bool = False) -> list[WorkerRecord]:
        """The tenant's live workers on every replica (looked up at most once a poll)."""
        cached = self._directory.get(tenant)
        if cached is not None and not fresh and cached[0] > time.monotonic():
            return cached[1]
        since = _now() - timedelta(seconds=self.settings.lease_s)
        found = await self._store.live_workers(tenant=tenant, since=since)
        self._directory[tenant] = (time.monotonic() + self.settings.poll_s, found)
        return found

    # --- the runs' side -------------------------------------------------------------------

    async def full(self, tenant: str) -> str:
        """Why the tenant may queue no more tasks now ("" when it may)."""
        queued = await self._store.queued_tasks(tenant)
        limit = self.settings.max_queued_tasks_per_tenant
        if queued < limit:
            return ""
        return (
            f"max_queued_tasks_per_tenant: tenant {tenant!r} has {queued} calls waiting for "
            "workers, the most it may have"
        )

    def signalled(self, kind: str, name: str) -> None:
        """Another replica queued a task of tenant `name` ("task"), took the result of
        execution `name` ("result") or a question of its task ("asked"), or stored the answer
        to one ("answered"): its waiters here look now, not at their next poll."""
        if kind == TASK_QUEUED:
            task = asyncio.get_running_loop().create_task(self.enqueued(name))
            self._wakeups.add(task)
            task.add_done_callback(self._wakeups.discard)
        elif kind in (TASK_DONE, TASK_ASKED):
            self._look_now(name)
        elif kind == TASK_ANSWERED:
            self.asks.answered(name)

    def _look_now(self, execution_id: str) -> None:
        if (waiting := self._results.get(execution_id)) is not None:
            waiting.set()

    async def enqueued(self, tenant: str) -> None:
        """A task of the tenant was queued (its step is durable): its workers waiting here
        look for it now."""
        for idle in list(self._idle[tenant]):
            if not idle.given.done() and not idle.chosen:
                idle.given.set_result(None)

    def expect(self, execution_id: str) -> None:
        """A run here is about to queue this task: a result taken here before it waits
        (`outcome`) is kept for it."""
        self._results.setdefault(execution_id, asyncio.Event())

    async def outcome(
        self,
        execution_id: str,
        *,
        rejoined: bool = False,
        queued: Task | None = None,
        asked: Callable[[Task], None] | None = None,
    ) -> TaskOutcome:
        """Wait for the task's outcome. `rejoined`: a run taken up again, whose worker gets
        one more lease to reconnect and hand its result in; `queued`: the task, just queued
        here (nothing to look for before a first wake-up); `asked`: given the task at each
        look while it runs (its count of questions: runs/worker_questions.py)."""
        event = self._results.setdefault(execution_id, asyncio.Event())
        try:
            if rejoined:
                until = _now() + timedelta(seconds=self.settings.lease_s)
                await self._store.rejoin_task(execution_id, lease_until=until)
            look = queued is None
            while True:
                taken = self._taken.pop(execution_id, None)
                if taken is not None and queued is not None:
                    return TaskOutcome(Ending.DONE, done(queued, *taken))
                found = await look_at(self._store, execution_id, asked) if look else None
                if found is not None:
                    return found
                look = True
                try:
                    await asyncio.wait_for(event.wait(), self.settings.poll_s)
                except TimeoutError:
                    pass
                event.clear()
        finally:
            self._results.pop(execution_id, None)
            self._taken.pop(execution_id, None)


def _now() -> datetime:
    return datetime.now(UTC)
