"""One run's sequencer: numbers its events and queues them, with the state writes of their
step, to the event log (events/log.py); once a step has failed, the run stops at its next
emit instead of going on with nothing recorded."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from behest.domain.events import Event, Payload
from behest.domain.spend import FailureCode
from behest.errors import Fenced, RunStopped, StorageFault
from behest.events.notify import Notifier
from behest.observability.trace_context import current_trace_ids
from behest.store.base import Store
from behest.store.writes import AppendEvent, Fence, Write


def numbered(
    run_id: str,
    after: int,
    payloads: Sequence[Payload],
    now: datetime,
    *,
    trace_id: str,
    span_id: str,
) -> list[Event]:
    """The run's next events, numbered after sequence `after`: the one place events get
    their numbers (RunLog.emit, and a run's first step, RunStarted as 1, in runs/start.py)."""
    return [
        Event(
            run_id=run_id,
            sequence=after + offset,
            payload=payload,
            timestamp=now,
            trace_id=trace_id,
            span_id=span_id,
        )
        for offset, payload in enumerate(payloads, start=1)
    ]


class Steps(Protocol):
    """Where a run's steps go: the event log (events/log.py EventLog)."""

    async def submit(self, writes: list[Write], events: list[Event]) -> asyncio.Future[None]: ...

    async def flush(self) -> None: ...

    def mend(self, run_id: str) -> None: ...

    @property
    def notifier(self) -> Notifier: ...


class RunLog:
    """Numbers one run's events and queues them with the state writes of their step."""

    def __init__(self, log: Steps, run_id: str, last_sequence: int, generation: int) -> None:
        self._log = log
        # Wakes whoever waits on the run (runs/asking.py: answers to its tools' questions).
        self.notifier = log.notifier
        self.run_id = run_id
        self.last_sequence = last_sequence
        self.generation = generation
        self._fence = Fence(run_id, generation)
        # A step failed since the last resync: later ones would be refused (EventLog._broken).
        self.failed = False
        self._error: BaseException | None = None
        # The first storage fault of a step before the run's end: its answer may be lost, so
        # it cannot end COMPLETED (runs/ending.py).
        self.lost: StorageFault | None = None
        self._lock = asyncio.Lock()

    async def emit(
        self, *payloads: Payload, state: Sequence[Write] = (), final: bool = False
    ) -> asyncio.Future[None]:
        """Append events (and state writes) as one atomic step; durability is not awaited.

        Once a step has failed, the next emit raises instead (RunStopped with
        FailureCode.STORAGE, or Fenced): the run stops at once rather than go on with
        nothing recorded. `final`: the run's terminal step (runs/ending.py), after a resync.
        """
        if self.failed and not final:
            raise self._stopped()
        trace_id, span_id = current_trace_ids()
        now = datetime.now(UTC)
        async with self._lock:
            # Numbers are taken only once the step is queued: a cancel while waiting for room
            # in the queue leaves no gap.
            events = numbered(
                self.run_id, self.last_sequence, payloads, now, trace_id=trace_id, span_id=span_id
            )
            writes: list[Write] = [self._fence, *(AppendEvent(e) for e in events)]
            writes.extend(state)
            done = await self._log.submit(writes, events)
            self.last_sequence += len(events)
        done.add_done_callback(functools.partial(self._check, final=final))
        return done

    def _check(self, done: asyncio.Future[None], *, final: bool) -> None:
        error = None if done.cancelled() else done.exception()
        if error is None:
            return
        self.failed = True
        self._error = self._error or error
        if not final and isinstance(error, StorageFault) and self.lost is None:
            self.lost = error

    def _stopped(self) -> BaseException:
        """What stops the run after a failed step: the lost claim, or the store's fault."""
        if isinstance(self._error, Fenced):
            return self._error
        return step_not_stored(self._error)

    async def resync(self, store: Store) -> None:
        """After a failed or interrupted write, continue from where the stored log ends."""
        await self._log.flush()
        self.last_sequence = await store.last_sequence(self.run_id)
        self.failed = False
        self._error = None
        self._log.mend(self.run_id)


def step_not_stored(error: BaseException | None) -> RunStopped:
    """What stops a run when one of its steps was not stored: the store's fault, in words."""
    return RunStopped(f"a step of the run could not be stored: {error}", FailureCode.STORAGE)
