"""The newest committed events of each run, in memory, so live readers need not read the store.

A run's tail is always contiguous: an event that does not follow the tail's last one (its
predecessors were committed but never published here, e.g. by a commit whose outcome was
reported as an error) starts the tail afresh, and readers behind it read the store instead.
"""

from __future__ import annotations

import asyncio
import collections

from behest.domain.events import Event

RECENT_PER_RUN = 4096
RECENT_KEEP_AFTER_END_S = 30.0


class RecentEvents:
    """Per-run deques of the latest committed events; a finished run's is dropped later."""

    def __init__(self) -> None:
        self._runs: dict[str, collections.deque[Event]] = {}

    def add(self, event: Event) -> None:
        """Append a committed event (in sequence order per run)."""
        recent = self._runs.get(event.run_id)
        if recent is None:
            recent = self._runs[event.run_id] = collections.deque(maxlen=RECENT_PER_RUN)
        elif recent and recent[-1].sequence + 1 != event.sequence:
            recent.clear()  # a gap in what was published here: never serve across it
        recent.append(event)
        if event.is_terminal:
            asyncio.get_running_loop().call_later(
                RECENT_KEEP_AFTER_END_S, self._runs.pop, event.run_id, None
            )

    def after(self, run_id: str, after: int) -> list[Event] | None:
        """Committed events after `after` from memory, or None if memory cannot tell."""
        recent = self._runs.get(run_id)
        if recent is None or not recent or recent[0].sequence > after + 1:
            return None
        # From the newest end: a reader that keeps up costs what it reads, not the whole tail.
        newer = []
        for event in reversed(recent):
            if event.sequence <= after:
                break
            newer.append(event)
        newer.reverse()
        return newer

    def behind(self, run_id: str, sequence: int) -> None:
        """Another replica committed the run up to `sequence`: a tail here that ends before it
        is stale (the run moved), so readers go to the store."""
        recent = self._runs.get(run_id)
        if recent and recent[-1].sequence < sequence:
            del self._runs[run_id]

    def end_seen(self, run_id: str) -> int | None:
        """The last sequence of a run whose terminal event was published here lately."""
        recent = self._runs.get(run_id)
        return recent[-1].sequence if recent and recent[-1].is_terminal else None
