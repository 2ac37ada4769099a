"""A run's tools' progress, as tool_progress events in its log: throttled per call.

A running tool says how far it got as often as it likes (an MCP server's progress
notifications: tools/mcp_progress.py; a plugin tool's ToolContext.progress). The run's log
gets at most one ToolProgress event per call every INTERVAL_S: a report is told at once when
the interval since the call's last one has passed; one that comes sooner waits, replaced by
any newer one, and is told when the interval ends. When the call has its result
(`settled`), the report still waiting is handed to the tool runner, which commits it with
the result, so the last report always comes before the result; a call cut short (`ended`)
leaves nothing behind. A report after either is dropped (tools/context.py: the call's run is
out of reach once it ends).

Progress events carry no state of the run: a step of its own each, not waited for.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass

from behest.domain import events as ev
from behest.events.run_log import RunLog
from behest.tools.context import ToolContext

log = logging.getLogger(__name__)

# At most one tool_progress event per call in this many seconds (the last one aside).
INTERVAL_S = 0.5


@dataclass(slots=True)
class _Call:
    """One running call's progress: when it was last told, and the report that waits."""

    told_at: float = -math.inf
    waiting: ev.ToolProgress | None = None
    timer: asyncio.TimerHandle | None = None
    telling: asyncio.Task[None] | None = None  # a waiting report being told (`_due`)


class ProgressLog:
    """One run's tool progress reports, by execution, told to its log throttled."""

    def __init__(self, run_log: RunLog, *, interval_s: float = INTERVAL_S) -> None:
        self._log = run_log
        self._interval_s = interval_s
        self._calls: dict[str, _Call] = {}  # by execution id, while they run
        self._over: set[str] = set()  # executions whose reports are no longer told

    async def report(
        self, context: ToolContext, done: float, total: float | None, message: str
    ) -> None:
        """A report of the call of `context`: told now, or when its interval ends."""
        if context.execution_id in self._over:
            return
        call = self._calls.setdefault(context.execution_id, _Call())
        event = ev.ToolProgress(context.call_id, context.tool_name, done, total or 0.0, message)
        loop = asyncio.get_running_loop()
        wait = call.told_at + self._interval_s - loop.time()
        if wait > 0 or call.timer is not None:
            call.waiting = event  # a newer report replaces one not told yet
            if call.timer is None:
                call.timer = loop.call_later(wait, self._due, context.execution_id)
            return
        call.told_at = loop.time()
        await self._tell(event)

    async def settled(self, execution_id: str) -> ev.ToolProgress | None:
        """The call has its result: the report it left untold, to commit with the result
        (once a report told at its interval's end is in the log)."""
        call = self._calls.get(execution_id)
        if call is not None and call.telling is not None:
            await asyncio.wait({call.telling})
        self._over.add(execution_id)
        call = self._calls.pop(execution_id, None)
        if call is None:
            return None
        if call.timer is not None:
            call.timer.cancel()
        return call.waiting

    def ended(self, execution_id: str) -> None:
        """The call is over (or was cut short): nothing more of it is told."""
        self._over.add(execution_id)
        call = self._calls.pop(execution_id, None)
        if call is None:
            return
        if call.timer is not None:
            call.timer.cancel()
        if call.telling is not None:
            call.telling.cancel()  # before it is numbered, nothing is logged (RunLog.emit)

    def _due(self, execution_id: str) -> None:
        """A call's interval ended: tell the report that waited for it."""
        call = self._calls.get(execution_id)
        if call is None or call.waiting is None:
            return
        event, call.waiting, call.timer = call.waiting, None, None
        call.told_at = asyncio.get_running_loop().time()
        call.telling = asyncio.create_task(self._tell(event), name="behest tool progress")

    async def _tell(self, event: ev.ToolProgress) -> None:
        """One progress event as a step of its own; a log that fails is the run's next
        step's to notice, not the tool's."""
        try:
            await self._log.emit(event)
        except Exception as exc:
            log.debug(f"a tool's progress was not logged: {exc}", extra={"call_id": event.call_id})
