"""Running one turn's tool calls: parallel where safe, each started durably, results recorded.

Consecutive calls of concurrency-safe tools run together (at most `concurrency` at once);
any other call runs alone, in order. A call answered from outside (a client tool's result, a
denied approval: runs/waiting.py) does not run; its result is recorded in its turn. Results
take the session's positions in the order of the calls, however they finish. A call's
ToolExecutionStarted is durable before the tool runs, with the execution's record (a tool may
have side effects: after a crash, the log says it may have run). Its result becomes a tool
message, committed with ToolExecutionFinished, ToolMessageCommitted and the record's end (and
the call's last progress report not yet told: runs/tool_progress.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

from opentelemetry.trace import Span

from behest.backoff import backoff_s
from behest.domain import events as ev
from behest.domain.executions import ToolExecution
from behest.domain.messages import Role, ToolCall
from behest.domain.runs import Run, RunStatus, ToolChoice
from behest.events.run_log import RunLog
from behest.observability.metrics import UNKNOWN_TOOL
from behest.observability.span_content import content
from behest.observability.telemetry import current, mark_error, span
from behest.runs.executions import RunExecutions
from behest.runs.progress import Cut, RunProgress
from behest.runs.sub_runs import SPAWN_TOOL
from behest.runs.tool_side import ToolSide
from behest.runs.worker_calls import CallOutcome, Next, Queued, WorkerCalls
from behest.runs.worker_tools import WorkerTool
from behest.store.writes import AppendMessage, EnqueueTask, RecordExecution
from behest.tools.base import ToolResult
from behest.tools.context import ToolContext, run_side
from behest.tools.registry import WORKER, ToolRegistry
from behest.wording import shorten


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
        workers: WorkerCalls | None = None,
        side: ToolSide | None = None,
    ) -> None:
        """`spawn`: runs a `spawn_agent` call (runs/sub_runs.py), when the run may;
        `workers`: worker tools' calls (runs/worker_calls.py), when workers may serve;
        `side`: what the run does for its running tools (runs/tool_side.py: their questions,
        progress and sampling requests)."""
        self._side = side
        # Each call's last progress report, told with its result (runs/tool_progress.py).
        self._last_progress: dict[str, ev.ToolProgress] = {}
        self._workers = workers
        # Calls whose outcome is unknown (why), and executions a run taken up again rejoins.
        self.unknown: dict[str, str] = {}
        self.executors: dict[str, str] = {}  # of those, the worker that had it
        self._rejoin: dict[str, ToolExecution] = {}
        self._log = log
        self._executions = executions
        self._tools = tools
        self._offered = offered
        self._progress = progress
        self._concurrency = concurrency
        self._positions: dict[str, int] = {}
        self._spawn = spawn
        self._telemetry = current()

    async def run(
        self,
        calls: list[ToolCall],
        answered: Mapping[str, ToolResult],
        rejoin: Mapping[str, ToolExecution] | None = None,
    ) -> None:
        """Run a turn's calls: consecutive concurrency-safe ones together, others in order;
        those `answered` (by call id) are recorded with that result instead of running, those
        to `rejoin` wait for their execution's task (a worker's) instead of starting anew."""
        self._rejoin = dict(rejoin or {})
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
        """Run one call to its result; a worker tool's as many attempts as it takes, or
        none more once its outcome is unknown (`unknown`: the run then waits)."""
        progress = self._progress
        progress.executing.add(call.id)
        execution = self._rejoin.pop(call.id, None)
        rejoined, queued = execution is not None, None
        while True:
            if execution is None:
                execution, queued = await self._start(call)
            began = time.monotonic()
            with span("behest.tool", self._attributes(call)) as tool_span:
                try:
                    outcome = await self._outcome(call, execution, queued, rejoined)
                except asyncio.CancelledError:  # told if it is a cancel (runs/ending.py)
                    record = self._executions.cancelled(call.id)
                    progress.cut[call.id] = Cut(call.name, time.monotonic() - began, record)
                    raise
                told = self._last_progress.pop(call.id, None)
                if outcome.next == Next.RETRY:
                    await self._retry(call, execution, outcome)
                    execution, rejoined = None, False
                    continue
                if outcome.next == Next.UNKNOWN or outcome.result is None:
                    self.unknown[call.id] = outcome.why
                    self.executors[call.id] = outcome.executor
                    return
                result = outcome.result
                seconds = time.monotonic() - began
                self._traced(call, result, seconds, tool_span)
                progress.executing.discard(call.id)
                finished = ev.ToolExecutionFinished(
                    call.id, call.name, int(seconds * 1000), result.is_error
                )
                ended = self._executions.end(call.id, result, executor=outcome.executor)
                told_first = (told,) if told is not None else ()
                await self._record(call, result, *told_first, finished, ended=ended)
                return

    async def _retry(self, call: ToolCall, execution: ToolExecution, outcome: CallOutcome) -> None:
        """End the execution (durably, with ToolRetryScheduled), then wait for the next."""
        ended = self._executions.retried(
            call.id, outcome.why, unknown=outcome.lost, executor=outcome.executor
        )
        scheduled = ev.ToolRetryScheduled(
            call.id, call.name, execution.id, execution.attempt + 1, outcome.why
        )
        await self._log.emit(scheduled, state=ended)
        if outcome.delay_s:
            await asyncio.sleep(outcome.delay_s)

    async def _start(self, call: ToolCall) -> tuple[ToolExecution, Queued | None]:
        """A new execution of the call, durable (with its task, for a worker tool) before
        the tool runs: a tool may have side effects."""
        progress = self._progress
        execution, record = self._executions.begin(call)
        tool, workers = self._worker_tool(call), self._workers
        queued = None
        if tool is not None and workers is not None:
            queued = await workers.queue(execution, tool, call, self._tools)
        tasks = [EnqueueTask(queued.task)] if queued and queued.task else []
        try:
            started = await self._log.emit(
                ev.ToolExecutionStarted(call.id, call.name, execution.id, execution.attempt),
                state=[*record, *tasks, *progress.state(RunStatus.WAITING_FOR_TOOLS)],
            )
            await asyncio.shield(started)
        except BaseException:
            if queued is not None and workers is not None:
                await workers.queued(queued, durable=False)
            raise
        if queued is not None and workers is not None:
            await workers.queued(queued, durable=True)
        return execution, queued

    async def _outcome(
        self, call: ToolCall, execution: ToolExecution, queued: Queued | None, rejoined: bool
    ) -> CallOutcome:
        """What the call's execution came to (`queued`: its task, for a worker tool)."""
        tool = self._worker_tool(call)
        if self._workers is not None and (tool is not None or execution.source == WORKER):
            if queued is not None and queued.task is None:  # bad arguments, a full queue
                return CallOutcome(Next.RESULT, ToolResult(queued.refused, is_error=True))
            task = queued.task if queued is not None else None
            return await self._workers.outcome(execution, tool, rejoined=rejoined, queued=task)
        if call.name == SPAWN_TOOL and self._spawn is not None:
            result = await self._spawn(call)
        elif call.name in self._offered or self._tools.get(call.name) is None:
            result = await self._run_tool(call, execution)
            policy = self._tools.policy(call.name)
            if result.retryable and execution.attempt < policy.max_attempts:
                why = f"a retryable error: {shorten(result.text, 200)}"
                initial, cap = policy.backoff_initial_s, policy.backoff_max_s
                wait = backoff_s(execution.attempt, initial_s=initial, max_s=cap)
                return CallOutcome(Next.RETRY, why=why, delay_s=wait)
        else:
            result = ToolResult(f"tool {call.name!r} is not available in this run", True)
        return CallOutcome(Next.RESULT, result)

    async def _run_tool(self, call: ToolCall, execution: ToolExecution) -> ToolResult:
        """Run the call's tool here, its context reaching the run (`side`) while it runs; the
        call's last progress report kept for its result."""
        context, side = tool_context(self._progress.run, execution), self._side
        try:
            with run_side(context, side):
                result = await self._tools.execute(call, context)
            if side is not None:
                told = await side.settled(context)
                if told is not None:
                    self._last_progress[call.id] = told
        finally:
            if side is not None:
                side.ended(context)
        return result

    def _worker_tool(self, call: ToolCall) -> WorkerTool | None:
        tool = self._tools.get(call.name)
        offered = call.name in self._offered
        return tool if isinstance(tool, WorkerTool) and offered else None

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


def offered(
    run: Run, tools: ToolRegistry, *, sub_agents: bool, more: Collection[str] = ()
) -> frozenset[str]:
    """Tools offered to the run's model: tool_choice "none" offers none, a tool's name all
    the run may use (spawn_agent too when it may start sub-agent runs; `more`: its agent's
    sub-agents and handoffs, runs/agent_tools.py), never a tool behest does not support."""
    if run.tool_choice == ToolChoice.NONE:
        return frozenset()
    named = run.tools or tools.names()
    allowed = [*(name for name in named if not tools.unsupported(name)), *more]
    if sub_agents:
        allowed.append(SPAWN_TOOL)
    return frozenset(allowed)


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
