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
from datetime import UTC, datetime
from typing import Any

from behest.domain.events import Event, Payload
from behest.domain.runs import CreatedRun
from behest.errors import Fenced, Unavailable
from behest.events.notify import Notifier
from behest.events.tail import RecentEvents
from behest.metrics import Metrics
from behest.store.base import AppendEvent, Fence, NewRun, Store, Write
from behest.telemetry import current, current_trace_ids

log = logging.getLogger(__name__)

# Readers ask the store after this long without a wake-up: commits by another process (a
# replica, or this one before a restart) are seen so while no channel tells of them…
POLL_S = 1.0
# …and this seldom while the replicas' channel is up (a safety net only).
QUIET_POLL_S = 30.0
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
        # Runs whose step failed to commit: their later steps fail too, so no gap is ever
        # committed, until the owner re-reads where the log ends (RunLog.resync).
        self._broken: set[str] = set()
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
        try:
            results = await self._store.apply_batch([step.new_run or step.writes for step in batch])
        except asyncio.CancelledError:
            raise
        except Exception:
            if await self._landed(batch):
                # The transaction committed although its caller saw an error (a connection
                # lost after COMMIT): its events are in the log, so they are published.
                log.warning("a commit reported an error but had landed; its steps stand")
                self._stood(batch)
                return
            if len(batch) == 1:
                log.exception("event log commit failed")
                self._broken.update(e.run_id for e in batch[0].events)
                _fail(batch[0], Unavailable("the event log could not store a step of this run"))
                return
            # Commit step by step so that one bad step fails alone. This is slow: say so.
            log.warning("group commit of %d steps failed; retrying one by one", len(batch))
            for step in batch:
                await self._commit([step])
            return
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
        if not self._broken.intersection(e.run_id for e in step.events):
            return False
        _fail(step, Unavailable("an earlier step of this run could not be stored"))
        return True

    def mend(self, run_id: str) -> None:
        """The run's owner has re-read where its log ends; accept its steps again."""
        self._broken.discard(run_id)

    # --- other replicas' commits (PostgreSQL notifications) ----------------------------

    def remote_commits(self, last: dict[str, int]) -> None:
        """Runs whose logs another replica extended, to their last sequence: wake readers."""
        for run_id, sequence in last.items():
            self.recent.behind(run_id, sequence)
            self.notifier.notify(run_id)

    def remote_state(self, up: bool) -> None:
        """The replicas' channel is up (readers need not poll) or down (they poll); every
        reader looks again, for notifications missed meanwhile."""
        self.poll_s = QUIET_POLL_S if up else POLL_S
        self.notifier.notify_all()

    def _publish(self, events: list[Event]) -> None:
        self._published += len(events)
        for event in events:
            self.recent.add(event)
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


class RunLog:
    """Numbers one run's events and queues them with the state writes of their step."""

    def __init__(self, log: EventLog, run_id: str, last_sequence: int, generation: int) -> None:
        self._log = log
        self.run_id = run_id
        self.last_sequence = last_sequence
        self.generation = generation
        self._fence = Fence(run_id, generation)
        self.failed = False
        self._lock = asyncio.Lock()

    async def emit(self, *payloads: Payload, state: Sequence[Write] = ()) -> asyncio.Future[None]:
        """Append events (and state writes) as one atomic step; durability is not awaited."""
        trace_id, span_id = current_trace_ids()
        now = datetime.now(UTC)
        async with self._lock:
            # Numbers are taken only once the step is queued: a cancel while waiting for room
            # in the queue leaves no gap.
            events = [
                Event(
                    run_id=self.run_id,
                    sequence=self.last_sequence + offset,
                    payload=payload,
                    timestamp=now,
                    trace_id=trace_id,
                    span_id=span_id,
                )
                for offset, payload in enumerate(payloads, start=1)
            ]
            writes: list[Write] = [self._fence, *(AppendEvent(e) for e in events)]
            writes.extend(state)
            done = await self._log.submit(writes, events)
            self.last_sequence += len(events)
        done.add_done_callback(self._check)
        return done

    def _check(self, done: asyncio.Future[None]) -> None:
        if not done.cancelled() and done.exception() is not None:
            self.failed = True

    async def resync(self, store: Store) -> None:
        """After a failed or interrupted write, continue from where the stored log ends."""
        await self._log.flush()
        self.last_sequence = await store.last_sequence(self.run_id)
        self.failed = False
        self._log.mend(self.run_id)
