"""Follow a run's event log from a cursor: backfill from the store, then tail live commits.

A reader takes a wake-up ticket before each read, so a commit between its read and its wait
is never missed; it skips anything at or below the last sequence it sent. Readers only read:
a reader going away never touches the run. A reader of a run whose step could not be stored
ends with that storage fault (disk full, locked) instead of waiting in silence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from behest.domain.events import Event
from behest.errors import NotFound, OutOfRange
from behest.events.log import EventLog
from behest.store.base import Store

PAGE = 500
# How long a reader of a run whose step was not stored waits for the writer's next try.
STALLED_WAIT_S = 2.0


async def follow(
    store: Store, event_log: EventLog, run_id: str, *, after: int, known: bool = False
) -> AsyncIterator[Event]:
    """Every event of `run_id` with sequence > `after`, live, ending after the terminal one.

    `known`: the caller has just created the run, so it need not be looked up first.
    """
    if not known and await _ended_at(store, event_log, run_id, after):
        return
    last = after
    from_store = False
    stalled = False
    while True:
        ticket = event_log.notifier.ticket(run_id)
        # After a quiet spell the store is asked: the run may go on in another process (a
        # replica; told by a notification, which leaves no tail here), which this one's tail
        # knows nothing of.
        events = None if from_store else event_log.recent.after(run_id, last)
        if events is None:
            events = await store.read_events(run_id, after=last, limit=PAGE)
        for event in events:
            if event.sequence <= last:
                continue
            yield event
            last = event.sequence
            if event.is_terminal:
                return
        from_store = False
        if len(events) >= PAGE:
            continue
        fault = event_log.stalled(run_id) if not events else None
        if fault is not None:
            # Its log cannot go on for now. The writer tries again: the client waits for that
            # once (a passing fault ends the run, whose end it then sees), else it hears why
            # rather than wait out its deadline, and resumes from `last` later.
            if stalled:
                raise fault.refused(
                    f"run {run_id} stopped after event {last}, a step was not stored"
                )
            stalled = True
            await event_log.notifier.wait(ticket, STALLED_WAIT_S)
            continue
        stalled = False
        if not events and not await event_log.notifier.wait(ticket, event_log.poll_s):
            # Quiet for a while: the run may have ended in another process.
            if await _ended_at(store, event_log, run_id, last):
                return
            from_store = True


async def _ended_at(store: Store, event_log: EventLog, run_id: str, cursor: int) -> bool:
    """True if the run has ended and nothing is left after `cursor`; raises for a bad cursor.

    A run this process saw end lately is answered from memory (a reconnecting crowd of
    watchers costs no reads); a live one is asked of the store, since another replica may
    have taken it over and ended it.
    """
    end = event_log.recent.end_seen(run_id)
    if end is None:
        run = await store.get_run(run_id)
        if run is None:
            raise NotFound(f"run {run_id} not found")
        if not run.status.is_terminal:
            return False
        end = await store.last_sequence(run_id)
    if cursor > end:
        raise OutOfRange(
            f"last_event_id {cursor} is beyond the last event ({end}) of run {run_id}, "
            "which has ended"
        )
    return cursor == end
