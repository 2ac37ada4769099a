"""A turn's tool calls run to their results, or the run waits: each call's outcome is known
(its result is recorded) or unknown (the run pauses until it is reconciled).

A call's outcome is unknown when behest stopped while it ran and its tool is not idempotent
(found as the run is taken up again), or when its worker vanished (found as it ran)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from behest.domain.messages import ToolCall
from behest.domain.runs import Run
from behest.runs.executions import RunExecutions
from behest.runs.tool_calls import ToolRunner
from behest.runs.tool_checks import checked
from behest.runs.waiting import Waiting, Waits
from behest.runs.worker_hub import WorkerHub
from behest.tools.base import ToolResult
from behest.tools.registry import ToolRegistry


class TurnCalls:
    """Runs a turn's calls through the ToolRunner, and pauses the run on unknown outcomes."""

    def __init__(
        self,
        *,
        run: Run,
        tools: ToolRegistry,
        runner: ToolRunner,
        waits: Waits,
        executions: RunExecutions,
        hub: WorkerHub | None = None,
    ) -> None:
        self._hub = hub
        self._run = run
        self._tools = tools
        self._runner = runner
        self._waits = waits
        self._executions = executions

    async def run(
        self, calls: list[ToolCall], answered: Mapping[str, ToolResult]
    ) -> Waiting | None:
        """Run a turn's calls (those `answered` recorded with their result)."""
        await self._runner.run(calls, answered)
        return await self._held_unknown(calls)

    async def finish(
        self, calls: list[ToolCall], pending: list[ToolCall], cut: Collection[str]
    ) -> Waiting | None:
        """Run the `pending` calls of a turn taken up again; those in `cut` were executing
        when it stopped: a worker's task is waited for again, an idempotent call runs again,
        any other's outcome is unknown."""
        rejoin, unknown = self._executions.cut(pending, cut)
        if unknown:
            return await self._hold(calls, unknown)
        results = await self._waits.results(pending, resumed=True)
        await self._runner.run(pending, results, rejoin)
        return await self._held_unknown(calls)

    async def _held_unknown(self, calls: list[ToolCall]) -> Waiting | None:
        whys, self._runner.unknown = self._runner.unknown, {}
        by, self._runner.executors = self._runner.executors, {}
        if not whys:
            return None
        return await self._hold(calls, [c for c in calls if c.id in whys], whys, by)

    async def _hold(
        self,
        calls: list[ToolCall],
        unknown: list[ToolCall],
        whys: Mapping[str, str] | None = None,
        executors: Mapping[str, str] | None = None,
    ) -> Waiting:
        """The run waits for `unknown`'s reconciliations, those its tools' checks gave
        answered already (a run all of whose calls were answered so is taken up at once)."""
        verdicts = await checked(self._run, self._tools, self._executions, unknown, self._hub)
        return await self._waits.hold_unknown(
            calls, unknown, self._executions, whys, executors, checked=verdicts
        )
