"""A run's calls of worker tools: each execution's task, queued with the step that starts it,
and what its outcome means for the call.

- A result: the model's, unless it is an error the worker marked retryable and the tool's
  max_attempts allows another attempt (after a backoff).
- No worker took it before the tool's schedule-to-start timeout: an error result saying that
  no worker serves the tool.
- Its worker vanished (the lease lapsed): an idempotent tool runs again (the next attempt, the
  same idempotency key, any worker); another's outcome is unknown (the run waits for it to be
  reconciled: runs/waiting.py).

While it waits, the questions the task asks are put to the run's user (runs/worker_questions.py).
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from behest.backoff import backoff_s
from behest.domain.executions import ToolExecution
from behest.domain.messages import ToolCall
from behest.domain.runs import Run
from behest.domain.workers import Task, TaskState, WorkerRecord
from behest.runs.asking import Asking
from behest.runs.task_outcomes import Ending, TaskOutcome
from behest.runs.worker_hub import Idle, WorkerHub
from behest.runs.worker_questions import TaskQuestions
from behest.runs.worker_tools import WorkerTool
from behest.tools.base import ToolResult
from behest.tools.output import truncate
from behest.tools.registry import ToolRegistry
from behest.wording import shorten

# How often a call of an idempotent tool is run again after its worker vanished.
MAX_LOST_ATTEMPTS = 5
# The backoff between attempts of a retryable error.
RETRY_BACKOFF_S, RETRY_BACKOFF_MAX_S = 0.5, 10.0


class Next(enum.Enum):
    RESULT = "result"  # the call's result
    RETRY = "retry"  # run the call again: a new execution
    UNKNOWN = "unknown"  # its outcome is unknown: the run waits for a reconciliation


@dataclass(frozen=True, slots=True)
class CallOutcome:
    next: Next
    result: ToolResult | None = None
    why: str = ""  # what ended the execution, for its record
    lost: bool = False  # its worker vanished: nobody can tell whether it ran
    executor: str = ""  # the worker that ran it ("" : none did)
    delay_s: float = 0.0  # with RETRY: the wait before the next attempt


@dataclass(frozen=True, slots=True)
class Queued:
    """What the start of a worker tool's execution queues: its task (None: none, `refused`
    says why), handed straight to a worker waiting here when one is (`handed`)."""

    task: Task | None
    refused: str = ""
    handed: Idle | None = None


class WorkerCalls:
    """The worker side of one run's tool calls."""

    def __init__(self, *, run: Run, hub: WorkerHub, asking: Asking | None = None) -> None:
        """`asking`: puts the questions of the run's tasks to its user (runs/asking.py)."""
        self._run = run
        self.hub = hub
        self._asking = asking

    async def queue(
        self, execution: ToolExecution, tool: WorkerTool, call: ToolCall, tools: ToolRegistry
    ) -> Queued:
        """The task to queue with the step that starts `execution` (none for arguments that
        do not fit, or when the tenant's queue is full), leased to a worker waiting here if
        one is (no claim to write)."""
        _, problem = tools.arguments_of(call)
        full = "" if problem else await self.hub.full(self._run.tenant)
        if problem or full:
            return Queued(None, problem or full)
        handed = self.hub.offer(self._run.tenant, call.name)
        task = self.task(execution, tool, call.arguments, handed.worker if handed else None)
        self.hub.expect(task.execution_id)
        return Queued(task, handed=handed)

    async def queued(self, queued: Queued, *, durable: bool) -> None:
        """The step that queues the task is durable (or failed): hand it to its worker, or
        wake the tenant's workers."""
        if queued.handed is not None:
            self.hub.deliver(queued.handed, queued.task if durable else None)
        elif durable and queued.task is not None:
            await self.hub.enqueued(self._run.tenant)

    def task(
        self,
        execution: ToolExecution,
        tool: WorkerTool,
        arguments: str,
        leased_to: WorkerRecord | None = None,
    ) -> Task:
        """The task of `execution`, to queue with the step that starts it (`leased_to`: a
        worker waiting here, which it is handed to once the step is durable)."""
        now = datetime.now(UTC)
        task = Task(
            execution_id=execution.id,
            attempt=execution.attempt,
            run_id=self._run.id,
            session_id=self._run.session_id,
            tenant=self._run.tenant,
            call_id=execution.call_id,
            tool_name=execution.tool_name,
            arguments=arguments,
            idempotency_key=execution.idempotency_key,
            created_at=now,
            schedule_deadline=now + timedelta(seconds=tool.spec.schedule_timeout_s),
            timeout_s=tool.spec.timeout_s,
        )
        if leased_to is None:
            return task
        return replace(
            task,
            state=TaskState.LEASED,
            worker_id=leased_to.id,
            worker_name=leased_to.name,
            lease_until=now + timedelta(seconds=self.hub.settings.lease_s),
            deadline=now + timedelta(seconds=task.timeout_s),
        )

    async def outcome(
        self,
        execution: ToolExecution,
        tool: WorkerTool | None,
        *,
        rejoined: bool = False,
        queued: Task | None = None,
    ) -> CallOutcome:
        """Wait for the execution's task, and say what comes next. `tool` None: its workers
        are gone since (a run taken up again), the task's own bounds still hold."""
        outcome = await self._waited(execution, rejoined=rejoined, queued=queued)
        task = outcome.task
        by = f"worker {task.worker_id} ({task.worker_name})" if task.worker_id else ""
        idempotent = execution.idempotent
        if outcome.ending == Ending.LOST:
            why = f"its worker vanished (no heartbeat for {self.hub.settings.lease_s:g} s)"
            if idempotent and execution.attempt < MAX_LOST_ATTEMPTS:
                retry = f"{why}; it is idempotent: run again"
                return CallOutcome(Next.RETRY, why=retry, lost=True, executor=by)
            if idempotent:
                text = f"tool {execution.tool_name!r} was run {execution.attempt} times; {why}"
                return CallOutcome(Next.RESULT, ToolResult(text, is_error=True), why, True, by)
            unknown = f"{why}, and it is not idempotent"
            return CallOutcome(Next.UNKNOWN, why=unknown, lost=True, executor=by)
        if task.expired:
            text = (
                f"no worker serves tool {execution.tool_name!r}: none took the call within "
                f"{(task.schedule_deadline - task.created_at).total_seconds():g} s"
            )
            return CallOutcome(Next.RESULT, ToolResult(text, is_error=True), "no worker took it")
        attempts = tool.spec.max_attempts if tool is not None else 1
        if task.is_error and task.retryable and execution.attempt < attempts:
            wait = backoff_s(
                execution.attempt, initial_s=RETRY_BACKOFF_S, max_s=RETRY_BACKOFF_MAX_S
            )
            why = f"a retryable error: {shorten(task.output, 200)}"
            return CallOutcome(Next.RETRY, why=why, executor=by, delay_s=wait)
        result = ToolResult(truncate(task.output), task.is_error)
        return CallOutcome(Next.RESULT, result, executor=by)

    async def _waited(
        self, execution: ToolExecution, *, rejoined: bool, queued: Task | None
    ) -> TaskOutcome:
        """The task's outcome, its questions put to the user meanwhile; what stopped one
        (a step not stored, a lost claim) stops the wait."""
        if self._asking is None:
            return await self.hub.outcome(execution.id, rejoined=rejoined, queued=queued)
        questions = TaskQuestions(
            run=self._run, execution=execution, asking=self._asking, asks=self.hub.asks
        )
        waiting = asyncio.ensure_future(
            self.hub.outcome(execution.id, rejoined=rejoined, queued=queued, asked=questions.seen)
        )
        either: list[asyncio.Future[Any]] = [waiting, questions.failed]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                questions.failed.result()
            return waiting.result()
        finally:
            waiting.cancel()
            await asyncio.wait([waiting])
            await questions.close()
