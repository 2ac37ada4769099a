"""The event log: runs number their events in memory, one writer commits them in batches.

A run's owner calls `RunLog.emit`, which numbers the event and queues it with any state
writes of the same step (snapshot, run status, messages). The single writer task commits
queued steps in one transaction per batch (group commit) and only then publishes the events:
readers never see an event that is not durable. A step is never split across transactions.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from behest.domain.events import Event, RunStarted
from behest.domain.runs import CreatedRun
from behest.errors import Fenced, StorageFault, StorageLocked
from behest.events.health import WriteHealth
from behest.events.notify import NEW_RUNS, Notifier, session_key
from behest.events.run_log import RunLog
from behest.events.tail import RecentEvents
from behest.observability.metrics import Metrics
from behest.observability.telemetry import current
from behest.store.base import Store
from behest.store.writes import AppendEvent, BatchResult, NewRun, Write

log = logging.getLogger(__name__)

# Readers ask the store after this long without a wake-up: commits by another process (a
# replica, or this one before a restart) are seen so while no channel tells of them…
POLL_S = 1.0

# …and this seldom while the replicas' channel is up (a safety net only).
QUIET_POLL_S = 30.0
# A batch refused because another writer holds the database is tried again this long (each
# try waits out the database's own busy timeout first), pausing this long between tries.
LOCKED_GIVE_UP_S = 30.0
LOCKED_PAUSE_S = 0.1
# Creations committed beside the writer at once, at most (Store.creations_apart).
CREATIONS_APART_MAX = 4


@dataclass(slots=True)
class _Step:
    writes: list[Write]
    events: list[Event]
    # A run creation instead of plain writes; `done` then resolves to its CreatedRun.
    new_run: NewRun | None = None
    done: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class EventLog:
    """Group-committing writer and the committed-events feed readers follow."""

    def __init__(
        self,
        store: Store,
        *,
        batch_max: int,
        window_s: float,
        max_pending: int = 20_000,
        metrics: Metrics | None = None,
    ):
        self._store = store
        self._batch_max = batch_max
        self._window_s = window_s
        self._max_pending = max_pending
        self._queue: collections.deque[_Step] = collections.deque()
        self._pending_writes = 0
        self._has_work = asyncio.Event()
        self._has_room = asyncio.Event()
        self._has_room.set()
        self._task: asyncio.Task[None] | None = None
        self.recent = RecentEvents()
        # Runs whose step failed to commit, and why: their later steps fail too, so no gap
        # is ever committed, until the owner re-reads where the log ends (RunLog.resync).
        self._broken: dict[str, StorageFault] = {}
        # Whether writes land now (the gRPC health service listens).
        self.health = WriteHealth(store)
        self.notifier = Notifier()
        self._metrics = metrics if metrics is not None else current().metrics
        self._published = 0  # events published since the last commit was measured
        self._apart = 0  # creations committing beside the writer (see create)
        # How long a reader waits before it asks the store: commits of other processes are
        # seen then, unless the replicas' channel tells of them (see remote_state).
        self.poll_s = POLL_S
        # Told (run id, generation) when a step is refused because the run changed hands.
        self.on_fenced: Callable[[str, int], None] = lambda run_id, generation: None

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="event-log-writer")

    async def stop(self) -> None:
        """Commit everything queued, then stop the writer."""
        if self._task is None:
            return
        await self.flush()
        task, self._task = self._task, None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await self.health.stop()

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or failed)."""
        if self._queue:
            await asyncio.gather(self._queue[-1].done, return_exceptions=True)

    def open_run(self, run_id: str, *, last_sequence: int, generation: int) -> RunLog:
        """The sequencer of one run, for the owner of its claim `generation` (its steps are
        stored only while that claim is the run's current one)."""
        return RunLog(self, run_id, last_sequence, generation)

    async def submit(self, writes: list[Write], events: list[Event]) -> asyncio.Future[None]:
        """Queue one step; the returned future resolves once it is committed."""
        step = _Step(writes, events)
        await self._enqueue(step)
        return step.done

    async def _enqueue(self, step: _Step, *, first: bool = False) -> None:
        while self._pending_writes >= self._max_pending:
            self._has_room.clear()
            await self._has_room.wait()
        if first:
            self._queue.appendleft(step)
        else:
            self._queue.append(step)
        self._pending_writes += max(1, len(step.writes))
        self._has_work.set()

    # --- the writer -------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._has_work.wait()
            if self._window_s and self._pending_writes < self._batch_max:
                await asyncio.sleep(self._window_s)
            batch = self._take_batch()
            if not self._queue:
                self._has_work.clear()
            began = time.perf_counter()
            await self._commit(batch)
            self._measure(time.perf_counter() - began)

    def _measure(self, seconds: float) -> None:
        """One commit's latency and the events it published (one measurement per batch)."""
        self._metrics.commit_duration.record(seconds)
        if self._published:
            self._metrics.events_written.add(self._published)
            self._published = 0

    def _take_batch(self) -> list[_Step]:
        batch: list[_Step] = []
        count = 0
        while self._queue and (
            not batch or count + max(1, len(self._queue[0].writes)) <= self._batch_max
        ):
            step = self._queue.popleft()
            batch.append(step)
            count += max(1, len(step.writes))
        self._pending_writes -= count
        if count:
            self._metrics.commit_batch_size.record(count)
        if self._pending_writes < self._max_pending:
            self._has_room.set()
        return batch

    async def _commit(self, batch: Sequence[_Step]) -> None:
        batch = [step for step in batch if not self._refuse_if_broken(step)]
        if not batch:
            return
        results = await self._apply(batch)
        if results is None:
            return
        self.health.landed()
        for step, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                _fail(step, result)
                if isinstance(result, Fenced):
                    self.on_fenced(result.run_id, result.generation)
                continue
            if result is not None:  # a creation: (the run, its first step's writes)
                step.events = [w.event for w in result[1] if isinstance(w, AppendEvent)]
            self._publish(step.events)
            if not step.done.done():
                step.done.set_result(result)

    async def _apply(self, batch: Sequence[_Step]) -> list[BatchResult] | None:
        """The batch's results, once committed; None when it did not land (its steps are
        settled here). A database locked by another writer wrote nothing: the batch is tried
        again (the runs wait, health says why) for up to LOCKED_GIVE_UP_S."""
        give_up = time.monotonic() + LOCKED_GIVE_UP_S
        while True:
            try:
                return await self._store.apply_batch([s.new_run or s.writes for s in batch])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if await self._landed(batch):
                    # The transaction committed although its caller saw an error (a
                    # connection lost after COMMIT): its events are in the log, so they are
                    # published.
                    log.warning("a commit reported an error but had landed; its steps stand")
                    self._stood(batch)
                    return None
                fault = self._store.fault(exc)
                if isinstance(fault, StorageLocked) and time.monotonic() < give_up:
                    self.health.failed(fault)
                    await asyncio.sleep(LOCKED_PAUSE_S)  # the writer waited busy_timeout
                    continue
            if len(batch) == 1:
                self._not_stored(batch[0], fault)
                return None
            # Commit step by step so that one bad step fails alone. This is slow: say so.
            log.warning("group commit of %d steps failed; retrying one by one", len(batch))
            for step in batch:
                await self._commit([step])
            return None

    async def _landed(self, batch: Sequence[_Step]) -> bool:
        """Whether a batch whose commit raised is in the store after all (one transaction:
        all of it or none). Told by the last event of its first step that has events, or
        by the runs its creations would have made."""
        probe = next((step.events[-1] for step in batch if step.events), None)
        creations = [step.new_run.run_id for step in batch if step.new_run is not None]
        try:
            if probe is not None:
                return await self._store.last_sequence(probe.run_id) >= probe.sequence
            # Creations alone: one that created its run landed if the run exists (one that
            # found an existing run wrote nothing, and asking again is harmless).
            for run_id in creations:
                if await self._store.get_run(run_id) is not None:
                    return True
            return False
        except Exception:
            log.exception("could not tell whether a failed commit landed")
            return False

    def _not_stored(self, step: _Step, fault: StorageFault) -> None:
        """A step did not land: it fails with the fault, its run's later steps are refused,
        its readers are woken to tell their clients (runs/stream.py), health hears of it."""
        log.error("event log commit failed: %s", fault, exc_info=fault.__cause__ is not None)
        self.health.failed(fault)
        runs = {e.run_id for e in step.events}
        for run_id in runs:
            self._broken[run_id] = fault
            self.notifier.notify(run_id)
        _fail(step, fault)

    def stalled(self, run_id: str) -> StorageFault | None:
        """Why the run's last step could not be stored, while its log cannot go on (until its
        owner writes again, e.g. its end); None when nothing stands in its way."""
        return self._broken.get(run_id)

    def _stood(self, batch: Sequence[_Step]) -> None:
        """Settle a batch that landed without its results: events are published; creations
        fail with CommitUncertain, and their callers read back what was created."""
        for step in batch:
            if step.new_run is not None:
                _fail(step, CommitUncertain(step.new_run.run_id))
                continue
            self._publish(step.events)
            if not step.done.done():
                step.done.set_result(None)

    async def create(self, new_run: NewRun) -> tuple[CreatedRun, list[Write]]:
        """Create a run (and commit its first step) in the next group commit; returns the
        outcome and the first step's writes (none if the run already existed).

        Creations go to the front of the queue: a new run has no earlier steps to stay
        behind, and its caller waits for it, while queued deltas wait for no one. Where the
        store commits them apart (`Store.creations_apart`), they do not queue at all.
        """
        step = _Step([], [], new_run=new_run)
        if self._store.creations_apart and self._apart < CREATIONS_APART_MAX:
            # A store that takes concurrent transactions and creates in one statement
            # (PostgreSQL): the creation need not wait for the batch in flight. A burst of
            # them beyond a few is grouped by the writer as before (one statement each batch).
            self._apart += 1
            try:
                await self._commit([step])
            finally:
                self._apart -= 1
        else:
            await self._enqueue(step, first=True)
        created: tuple[CreatedRun, list[Write]] = await asyncio.shield(step.done)
        return created

    def _refuse_if_broken(self, step: _Step) -> bool:
        broken = self._broken
        fault = next((broken[e.run_id] for e in step.events if e.run_id in broken), None)
        if fault is None:
            return False
        _fail(step, fault.refused("an earlier step of this run could not be stored"))
        return True

    def mend(self, run_id: str) -> None:
        """The run's owner has re-read where its log ends; accept its steps again."""
        self._broken.pop(run_id, None)

    # --- other replicas' commits (PostgreSQL notifications) ----------------------------

    def remote_commits(self, last: dict[str, int]) -> None:
        """Runs whose logs another replica extended, to their last sequence: wake readers
        (and the readers of sessions, when a log begins: a run started there)."""
        for run_id, sequence in last.items():
            self.recent.behind(run_id, sequence)
            self.notifier.notify(run_id)
            if sequence == 1:  # a log begins: its session is not told
                self.notifier.notify(NEW_RUNS)

    def remote_state(self, up: bool) -> None:
        """The replicas' channel is up (readers need not poll) or down (they poll); every
        reader looks again, for notifications missed meanwhile."""
        self.poll_s = QUIET_POLL_S if up else POLL_S
        self.notifier.notify_all()

    def _publish(self, events: list[Event]) -> None:
        self._published += len(events)
        for event in events:
            self.recent.add(event)
            if event.sequence == 1 and isinstance(event.payload, RunStarted):
                self.notifier.notify(session_key(event.payload.session_id))
        for run_id in {e.run_id for e in events}:
            self.notifier.notify(run_id)


class CommitUncertain(Exception):
    """A creation's transaction committed, but its outcome was lost: read the run back."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"the creation of run {run_id} committed, but its outcome was lost")
        self.run_id = run_id


def _fail(step: _Step, error: BaseException) -> None:
    if not step.done.done():
        step.done.set_exception(error)
