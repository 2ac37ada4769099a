"""Runs queued on a busy session (BusyPolicy.ENQUEUE) taken up in their turn.

The store makes the first queued run of a session its active run in the step that ends the
run before it (store/sql/writes.py _END_SESSIONS_RUNS): nobody's, PENDING, which any node's
adoption takes up within a round (runs/leases.py), also after a restart. This process also
takes it up at once when the run before it ended here and its session had runs queued
through this process (the usual case: one server, or the caller's replica): `after_end`.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable

from behest.domain.runs import Run, RunStatus
from behest.store.base import Store

# Sessions remembered as having had runs queued here (oldest forgotten first).
REMEMBERED = 10_000


class QueuedTurns:
    def __init__(self, store: Store, take_up: Callable[[Run], Awaitable[None]]) -> None:
        self._store = store
        self._take_up = take_up
        self._sessions: collections.OrderedDict[str, None] = collections.OrderedDict()

    def queued(self, run: Run) -> None:
        """A run was queued on its session through this process."""
        self._sessions[run.session_id] = None
        self._sessions.move_to_end(run.session_id)
        while len(self._sessions) > REMEMBERED:
            self._sessions.popitem(last=False)

    def expects(self, session_id: str) -> bool:
        return session_id in self._sessions

    async def after_end(self, session_id: str) -> None:
        """A run of the session ended here: take up the run whose turn it now is, if any."""
        session = await self._store.get_session(session_id)
        if session is None or not session.active_run_id:
            self._sessions.pop(session_id, None)  # none queued any more
            return
        run = await self._store.get_run(session.active_run_id)
        if run is not None and run.status == RunStatus.PENDING and not run.owner:
            await self._take_up(run)
