"""Follow a whole session (WatchSessionEvents): the events of its runs one after another,
the runs started later included, from a cursor that is the last event a client saw (its run
and sequence).

A session has one active run at a time, so its runs' logs do not interleave: the session's
order is each run's log in sequence, the runs in the order they started (by their first
message's position: store.session_runs; no replica's clock plays a part). Each run is read
with runs/stream.py `follow`, gapless across restarts and replicas; between runs the reader
waits for a new run of the session: told by this process's commits (a RunStarted of the
session) and by other replicas' (a log that begins: events/notify.py NEW_RUNS), else it looks again
after the event log's quiet spell.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from behest.domain.events import Event
from behest.errors import InvalidArgument, NotFound
from behest.events.log import EventLog
from behest.events.notify import NEW_RUNS, Notifier, session_key
from behest.runs.stream import follow
from behest.store.base import Store


async def follow_session(
    store: Store, event_log: EventLog, session_id: str, *, after_run_id: str, after_sequence: int
) -> AsyncIterator[Event]:
    """Every event of the session after (after_run_id, after_sequence); it does not end."""
    current, cursor = after_run_id, after_sequence
    if current:
        run = await store.get_run(current)
        if run is None or run.session_id != session_id:
            raise InvalidArgument(f"after_run_id {current} is not a run of session {session_id}")
    ended: set[str] = set()
    while True:
        notifier = event_log.notifier
        tickets = [notifier.ticket(session_key(session_id)), notifier.ticket(NEW_RUNS)]
        runs = await store.session_runs(session_id)
        if current and current not in runs:  # queued, not started: it has no events yet
            raise InvalidArgument(f"after_run_id {current} has not started; it has no events")
        start = runs.index(current) if current else 0
        for run_id in runs[start:]:
            if run_id in ended:
                continue
            after = cursor if run_id == current else 0
            async for event in follow(store, event_log, run_id, after=after):
                current, cursor = event.run_id, event.sequence
                yield event
            current = run_id
            ended.add(run_id)
        if not await Notifier.wait_any(tickets, event_log.poll_s):
            if await store.get_session(session_id) is None:
                raise NotFound(f"session {session_id} was deleted")
