"""Messages steered into an active run (on_busy STEER): taken before each model call, each as
a user message of the session with a UserMessageAdded event, in one step with their being
taken (TakeSteers), so a restart neither loses nor repeats one.

Before the run ends it closes its steering (CloseSteering, a step of the event log like any
other), then looks once more: a steer that came first is taken and the run goes on with
another model call; one that comes after is refused by the store and starts a run queued
after this one instead (runs/double_texting.py): no message sent to a session is lost.
"""

from __future__ import annotations

from behest.domain import events as ev
from behest.domain.messages import Role
from behest.domain.runs import Run
from behest.events.run_log import RunLog
from behest.runs.progress import RunProgress
from behest.store.base import Store
from behest.store.writes import AppendMessage, CloseSteering, TakeSteers


class Steering:
    def __init__(self, *, run: Run, log: RunLog, store: Store, progress: RunProgress) -> None:
        self._run = run
        self._log = log
        self._store = store
        self._progress = progress

    async def take(self) -> bool:
        """Take the steers that came (whether any did)."""
        steers = await self._store.pending_steers(self._run.id)
        if not steers:
            return False
        messages = [self._progress.message(Role.USER, steer.text) for steer in steers]
        # Durable before the store is asked again (a last look), so none is taken twice.
        stored = await self._log.emit(
            *(ev.UserMessageAdded(m.id, m.text) for m in messages),
            state=[*(AppendMessage(m) for m in messages), TakeSteers(tuple(s.id for s in steers))],
        )
        await stored
        for message in messages:
            self._progress.remember(message)
        return True

    async def last_look(self) -> bool:
        """Before the run ends: close its steering, then take the steers that came first
        (True: the run goes on, for the model to answer them)."""
        closed = await self._log.emit(state=[CloseSteering(self._run.id)])
        await closed  # durable: from now on a steer is refused, so none is left behind
        return await self.take()
