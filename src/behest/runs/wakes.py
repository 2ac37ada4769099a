"""Waiting runs taken up again: when their answers came (on this node or another), when their
first call expires, or at once if answers came while they paused. After a restart, lease
rounds find the ready ones (runs/executor.py `_adopt`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from behest.domain.runs import Run, RunStatus
from behest.events.notify import Notifier, answers_key
from behest.runs.chores import Chores
from behest.runs.owned import Held, OwnedRun
from behest.runs.waiting import Waiting
from behest.store.base import Store

TakeUp = Callable[[Run, bool], Awaitable[None]]


class Wakes:
    """Takes up this node's or an orphan's waiting runs, through the executor's `take_up`."""

    def __init__(
        self,
        *,
        store: Store,
        runs: Held,
        chores: Chores,
        notifier: Notifier,
        take_up: TakeUp,
        sole_writer: bool,
        accepting: Callable[[], bool],
    ) -> None:
        self._store = store
        self._runs = runs
        self._chores = chores
        self._notifier = notifier
        self._take_up = take_up
        self._sole_writer = sole_writer
        self._accepting = accepting

    async def wake(self, run_id: str) -> None:
        """Take up a waiting run whose answers came (or whose calls expired), if no node has.

        The run goes on in a task of this process; the loop finds it still waiting if it is
        not ready after all (and lets it go again).
        """
        if not self._accepting():
            return
        held = self._runs.get(run_id)
        if held is not None:
            held.rewake = True  # still pausing here: taken up again once it has left
            self._notifier.notify(answers_key(run_id))  # or one of its tools asked
            return
        run = await self._store.get_run(run_id)
        if run is None or run.status != RunStatus.WAITING_FOR_INPUT or run_id in self._runs:
            return
        # The sole writer takes it from a dead process at once (a question of a tool cut by a
        # crash keeps its lease until it lapses); other nodes wait for the lapse.
        await self._take_up(run, self._sole_writer)

    def paused(self, run_id: str, waiting: Waiting, handle: OwnedRun) -> None:
        """A run now waits: take it up when its first call expires (or at once, if answers
        came while it paused)."""
        if handle.rewake:
            self._soon(run_id)
        delay = (waiting.expires_at - datetime.now(UTC)).total_seconds()
        self._chores.at(run_id, max(0.0, delay) + 0.05, self._soon)

    def _soon(self, run_id: str) -> None:
        self._chores.spawn(self.wake(run_id), f"wake-{run_id}")
