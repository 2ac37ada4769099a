"""Wakes stream readers when a run's log grows: commits here, and other replicas' commits
told by PostgreSQL notifications (store/sql/channel.py)."""

from __future__ import annotations

import asyncio
import contextlib

# Wake-ups of session readers (runs/session_stream.py), beside those of runs: a run of the
# session started here; a run started on another replica (whose session its notification
# does not say).
NEW_RUNS = "runs:started"


def session_key(session_id: str) -> str:
    return f"session:{session_id}"


def answers_key(run_id: str) -> str:
    """Wakes a run's tool calls waiting for answers to their questions (runs/asking.py)."""
    return f"answers:{run_id}"


class Notifier:
    """One-shot wake-ups per run: take a ticket, then wait on it; `notify` fires all tickets."""

    def __init__(self) -> None:
        self._pending: dict[str, asyncio.Event] = {}

    def ticket(self, run_id: str) -> asyncio.Event:
        """Take before reading the log, so a commit between read and wait is not missed."""
        event = self._pending.get(run_id)
        if event is None:
            event = self._pending[run_id] = asyncio.Event()
        return event

    def notify(self, run_id: str) -> None:
        event = self._pending.pop(run_id, None)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        """Wake every reader (the replicas' channel went down or up: each looks again)."""
        pending, self._pending = self._pending, {}
        for event in pending.values():
            event.set()

    @staticmethod
    async def wait_any(tickets: list[asyncio.Event], seconds: float) -> bool:
        """Wait for one of the tickets to fire (True) or for `seconds` to pass (False)."""
        waiters = [asyncio.ensure_future(ticket.wait()) for ticket in tickets]
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waiters:
                waiter.cancel()
        return bool(done)

    @staticmethod
    async def wait(ticket: asyncio.Event, seconds: float) -> bool:
        """Wait for the ticket to fire (True) or for `seconds` to pass (False)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ticket.wait(), seconds)
        return ticket.is_set()
