"""The tasks a worker holds, across its streams: those running (at most max_tasks at once, a
slot each), the questions they ask (_questions.py), and the results the server has not
acknowledged yet. A stream that breaks leaves them as they are: the tasks run on, and the next
stream sends every question not yet answered and every result not yet acknowledged (the
server takes one result per attempt, and its ack says)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from behest.worker._calls import Outcome, run_task
from behest.worker._context import TaskContext, asking
from behest.worker._questions import Questions
from behest.worker._tools import WorkerTool
from behest.worker._wire import Ack, Task

log = logging.getLogger("behest.worker")
Key = tuple[str, int]  # (execution id, attempt)


@dataclass(slots=True)
class _Unacked:
    outcome: Outcome
    sent_on: int = 0  # the stream it was last sent on (0: none yet)


class Tasks:
    """Running tasks and unacknowledged results; the streams take from and report to it."""

    def __init__(self, tools: Mapping[str, WorkerTool], max_tasks: int) -> None:
        self._tools = tools
        self._slots = asyncio.Semaphore(max_tasks)
        self._running: dict[Key, asyncio.Task[None]] = {}
        self._unacked: dict[Key, _Unacked] = {}
        self._changed = asyncio.Condition()
        self.questions = Questions()
        self.taking = True  # False once the worker stops: tasks that come are not run

    @property
    def running(self) -> int:
        return len(self._running)

    def idle(self) -> bool:
        """Nothing runs and every result is acknowledged (or refused)."""
        return not self._running and not self._unacked

    def take(self, task: Task, worker_id: str) -> None:
        """Start a task the server sent (it waits for a slot if all are taken)."""
        context = dataclasses.replace(task.context, worker_id=worker_id)
        key = (context.execution_id, context.attempt)
        if not self.taking:
            log.warning("task %s of %s (attempt %d) came while stopping: not run",
                        key[0], context.tool_name, key[1])  # fmt: skip
            return
        if key in self._running or key in self._unacked:
            log.debug("task %s (attempt %d) is in hand already", *key)
            return
        log.debug("task %s: %s (attempt %d)", key[0], context.tool_name, key[1])
        self._running[key] = asyncio.create_task(
            self._run(key, task.arguments, context), name=f"behest.worker task {key[0]}"
        )

    async def _run(self, key: Key, arguments: str, context: TaskContext) -> None:
        tool = self._tools.get(context.tool_name)
        try:
            async with self._slots:
                if tool is None:
                    missing = f"this worker does not serve a tool {context.tool_name!r}"
                    outcome = Outcome(missing, is_error=True)
                else:
                    with asking(context, self.questions.ask):
                        outcome = await run_task(tool, arguments, context)
        except BaseException:
            self._running.pop(key, None)
            raise
        finally:
            self.questions.ended(context.execution_id)
        async with self._changed:
            # One step: never idle in between (a drain would end before the result is sent).
            del self._running[key]
            self._unacked[key] = _Unacked(outcome)
            self._changed.notify_all()

    async def results_for(self, stream: int) -> list[tuple[Key, Outcome]]:
        """Wait for results not yet sent on `stream`, and take them (marked sent on it)."""
        async with self._changed:
            await self._changed.wait_for(
                lambda: any(u.sent_on != stream for u in self._unacked.values())
            )
            found = []
            for key, unacked in self._unacked.items():
                if unacked.sent_on != stream:
                    unacked.sent_on = stream
                    found.append((key, unacked.outcome))
            return found

    async def acknowledged(self, ack: Ack) -> None:
        """The server's word on a result: accepted, or refused (final: not sent again)."""
        key = (ack.execution_id, ack.attempt)
        async with self._changed:
            if self._unacked.pop(key, None) is None:
                log.debug("an ack of no result in hand: %s (attempt %d)", *key)
                return
            self._changed.notify_all()
        if ack.accepted:
            log.debug("result of %s (attempt %d) accepted", *key)
        else:
            log.warning("result of %s (attempt %d) refused: %s", *key, ack.reason or "no reason")

    async def finished(self) -> None:
        """Wait until no task runs (their results made)."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._running)

    async def settled(self) -> None:
        """Wait until no task runs and every result is acknowledged."""
        async with self._changed:
            await self._changed.wait_for(self.idle)

    def unacknowledged(self) -> list[Key]:
        return list(self._unacked)

    async def cancel(self) -> None:
        """Stop every running task (a sync tool's thread runs on; no result comes of it)."""
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
