"""Running one turn's tool calls: parallel where safe, each started durably, results recorded.

Consecutive calls of concurrency-safe tools run together (at most `concurrency` at once);
any other call runs alone, in order. A call answered from outside (a client tool's result, a
denied approval: runs/waiting.py) does not run; its result is recorded in its turn. Results
take the session's positions in the order of the calls, however they finish. A call's
ToolExecutionStarted is durable before the tool runs, with the execution's record (a tool may
have side effects: after a crash, the log says it may have run). Its result becomes a tool
message, committed with ToolExecutionFinished, ToolMessageCommitted and the record's end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

from opentelemetry.trace import Span

from behest.domain import events as ev
from behest.domain.executions import ToolExecution
from behest.domain.messages import Role, ToolCall
from behest.domain.runs import Run, RunStatus
from behest.events.run_log import RunLog
from behest.observability.metrics import UNKNOWN_TOOL
from behest.observability.span_content import content
from behest.observability.telemetry import current, mark_error, span
from behest.runs.executions import RunExecutions
from behest.runs.progress import RunProgress
from behest.runs.sub_runs import SPAWN_TOOL
from behest.store.writes import AppendMessage, RecordExecution
from behest.tools.base import ToolResult
from behest.tools.context import ToolContext
from behest.tools.registry import ToolRegistry


class ToolRunner:
    """Runs a run's tool calls through the registry, recording each in the run's log."""

    def __init__(
        self,
        *,
        log: RunLog,
        tools: ToolRegistry,
        offered: Collection[str],
        progress: RunProgress,
        concurrency: int,
        executions: RunExecutions,
        spawn: Callable[[ToolCall], Awaitable[ToolResult]] | None = None,
    ) -> None:
        """`spawn`: runs a `spawn_agent` call (runs/sub_runs.py), when the run may."""
        self._log = log
        self._executions = executions
        self._tools = tools
        self._offered = offered
        self._progress = progress
        self._concurrency = concurrency
        self._positions: dict[str, int] = {}
        self._spawn = spawn
        self._telemetry = current()

    async def run(self, calls: list[ToolCall], answered: Mapping[str, ToolResult]) -> None:
        """Run a turn's calls: consecutive concurrency-safe ones together, others in order;
        those `answered` (by call id) are recorded with that result instead of running."""
        first = self._progress.reserve(len(calls))
        self._positions = {call.id: first + i for i, call in enumerate(calls)}
        parallel: list[ToolCall] = []
        for call in calls:
            if call.id in answered:
                await self._run_together(parallel)
                parallel = []
                await self._record(call, answered[call.id])
                continue
            if self._parallel(call):
                parallel.append(call)
                continue
            await self._run_together(parallel)
            parallel = []
            await self._execute(call)
        await self._run_together(parallel)

    def _parallel(self, call: ToolCall) -> bool:
        """Whether the call may run alongside others (sub-agent runs may)."""
        if call.name not in self._offered:
            return False
        if call.name == SPAWN_TOOL and self._spawn is not None:
            return True
        tool = self._tools.get(call.name)
        return tool is not None and tool.concurrency_safe

    async def _run_together(self, calls: list[ToolCall]) -> None:
        if len(calls) <= 1:
            for call in calls:
                await self._execute(call)
            return
        slots = asyncio.Semaphore(self._concurrency)

        async def one(call: ToolCall) -> None:
            async with slots:
                await self._execute(call)

        try:
            async with asyncio.TaskGroup() as group:
                for call in calls:
                    group.create_task(one(call))
        except BaseExceptionGroup as group:
            # What stopped the first call stops the run as it would alone (a step not
            # stored, a lost claim), not as a group the executor cannot name.
            raise _first(group) from None

    async def _execute(self, call: ToolCall) -> None:
        progress = self._progress
        progress.executing.add(call.id)
        execution, record = self._executions.begin(call)
        started = await self._log.emit(
            ev.ToolExecutionStarted(call.id, call.name, execution.id, execution.attempt),
            state=[*record, *progress.state(RunStatus.WAITING_FOR_TOOLS)],
        )
        # A tool may have side effects: it runs only once its start is durable.
        await asyncio.shield(started)
        began = time.monotonic()
        with span("behest.tool", self._attributes(call)) as tool_span:
            if call.name == SPAWN_TOOL and self._spawn is not None:
                result = await self._spawn(call)
            elif call.name in self._offered or self._tools.get(call.name) is None:
                result = await self._tools.execute(call, tool_context(progress.run, execution))
            else:
                result = ToolResult(f"tool {call.name!r} is not available in this run", True)
            seconds = time.monotonic() - began
            duration_ms = int(seconds * 1000)
            self._traced(call, result, seconds, tool_span)
            progress.executing.discard(call.id)
            finished = ev.ToolExecutionFinished(call.id, call.name, duration_ms, result.is_error)
            await self._record(call, result, finished, ended=self._executions.end(call.id, result))

    def _attributes(self, call: ToolCall) -> dict[str, str]:
        """A tool span's attributes (GenAI semantic conventions); arguments only with
        trace_content."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "behest.tool": call.name,
            "behest.call_id": call.id,
        }
        if self._telemetry.trace_content:
            attributes["gen_ai.tool.call.arguments"] = content(call.arguments)
        return attributes

    def _traced(self, call: ToolCall, result: ToolResult, seconds: float, on: Span) -> None:
        """A tool's outcome on its span and in behest_tool_duration."""
        known = call.name == SPAWN_TOOL or self._tools.get(call.name) is not None
        self._telemetry.metrics.tool(
            call.name if known else UNKNOWN_TOOL, seconds, error=result.is_error
        )
        if result.is_error:
            mark_error(on, "the tool returned an error", "tool_error")
        if self._telemetry.trace_content:
            on.set_attribute("gen_ai.tool.call.result", content(result.text))

    async def _record(
        self,
        call: ToolCall,
        result: ToolResult,
        *events: ev.Payload,
        ended: Sequence[RecordExecution] = (),
    ) -> None:
        """The call's result becomes a tool message of the session, committed with `events`
        (and the end of its execution's record)."""
        progress = self._progress
        message = progress.message(
            Role.TOOL,
            result.text,
            position=self._positions[call.id],
            tool_call_id=call.id,
            tool_name=call.name,
            is_error=result.is_error,
        )
        await self._log.emit(
            *events,
            ev.ToolMessageCommitted(message.id),
            state=[
                AppendMessage(message),
                *ended,
                *progress.state(RunStatus.WAITING_FOR_TOOLS),
            ],
        )
        progress.remember(message)


def tool_context(run: Run, execution: ToolExecution) -> ToolContext:
    """What the tool of `execution` is told of it (its deadline is set as the tool starts);
    the principal is "" (a run does not record who created it)."""
    return ToolContext(
        execution_id=execution.id,
        attempt=execution.attempt,
        idempotency_key=execution.idempotency_key,
        run_id=run.id,
        session_id=run.session_id,
        tenant=run.tenant,
        principal="",
        call_id=execution.call_id,
        tool_name=execution.tool_name,
    )


def _first(group: BaseExceptionGroup) -> BaseException:
    """The first exception of a (nested) group."""
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first
