"""The executor's background work: wake-ups of waiting runs (a timer per run, when its first
call expires), cancels signalled by other nodes, creations a cancelled CreateRun left to
finish. Nothing new starts once the server stops accepting; stop waits for what runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

# Split out of the executor: its log lines keep the executor's logger, which operators filter by.
log = logging.getLogger("behest.runs.executor")


class Chores:
    """Background tasks and per-run timers, stopped together."""

    def __init__(self, accepting: Callable[[], bool]) -> None:
        self._accepting = accepting
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def spawn(self, chore: Coroutine[Any, Any, Any], name: str, *, failed: str = "") -> None:
        """Run `chore` in the background; `failed`: what to log if it raises (else its name
        and "failed"). Refused (closed unrun) once the server stops accepting."""
        if not self._accepting():
            chore.close()
            return
        task = asyncio.create_task(chore, name=name)
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._done(done, failed))

    def keep(self, task: asyncio.Task[Any], *, failed: str) -> None:
        """Wait for `task` at stop, logging `failed` if it raises (it runs even while the
        server stops: a creation that may have committed must be started)."""
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._done(done, failed))

    def at(self, run_id: str, delay_s: float, callback: Callable[[str], None]) -> None:
        """Call `callback(run_id)` in `delay_s` (the run's one timer: an earlier one goes)."""
        if old := self._timers.pop(run_id, None):
            old.cancel()
        self._timers[run_id] = asyncio.get_running_loop().call_later(
            max(0.0, delay_s), self._fire, run_id, callback
        )

    async def stop(self, timeout_s: float) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=timeout_s)

    def _fire(self, run_id: str, callback: Callable[[str], None]) -> None:
        self._timers.pop(run_id, None)
        callback(run_id)

    def _done(self, task: asyncio.Task[Any], failed: str) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning(failed or f"{task.get_name()} failed", exc_info=task.exception())
