"""A run's tool executions (domain/executions.py): the record each execution of a call gets,
its attempt, and the writes that commit each change with the run's step.

A call's first execution is attempt 1; each later one (an idempotent call run again after
behest stopped under it, or one reconciled as "it did not run") is the next. A run taken up
again reads the records it has (`load`), so attempts go on counting across restarts and nodes.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from behest.domain.executions import ExecutionStatus, ToolExecution, Transition, Verdict
from behest.domain.messages import ToolCall
from behest.domain.runs import Run
from behest.domain.waits import Answer, PendingCall
from behest.runs.sub_runs import SPAWN_TOOL
from behest.store.base import Store
from behest.store.writes import RecordExecution
from behest.tools.base import ToolResult
from behest.tools.output import truncate
from behest.tools.registry import WORKER, ToolRegistry

# Why an execution cut by a stop is unknown, and what became of it.
STOPPED = "behest stopped while it ran"


def checker(tool_name: str) -> str:
    """Who reconciled an execution by its tool's own check, as records and events say."""
    return f"the check of {tool_name}"


class RunExecutions:
    """The execution records of one run's tool calls, as this process executes them."""

    def __init__(self, *, run: Run, store: Store, tools: ToolRegistry, node: str) -> None:
        self._run = run
        self._store = store
        self._tools = tools
        self._actor = f"node {node}" if node else "node"
        self._latest: dict[str, ToolExecution] = {}  # by call id: its last execution

    async def load(self) -> None:
        """Read the run's records (a run taken up again)."""
        for execution in await self._store.tool_executions(self._run.id):
            latest = self._latest.get(execution.call_id)
            if latest is None or execution.attempt > latest.attempt:
                self._latest[execution.call_id] = execution

    def latest(self, call_id: str) -> ToolExecution | None:
        return self._latest.get(call_id)

    def begin(self, call: ToolCall) -> tuple[ToolExecution, list[RecordExecution]]:
        """A new execution of `call`, STARTED now: its record's writes (with, if the last one
        never ended, that one recorded as cut by a stop and run again)."""
        now = datetime.now(UTC)
        writes = []
        earlier = self._latest.get(call.id)
        if earlier is not None and not earlier.status.is_final:
            if earlier.status != ExecutionStatus.OUTCOME_UNKNOWN:
                why = f"{STOPPED}; it is idempotent: run again as attempt {earlier.attempt + 1}"
                writes.append(self._moved(earlier, ExecutionStatus.OUTCOME_UNKNOWN, now, why)[1])
        execution = ToolExecution(
            id=str(uuid.uuid4()),
            run_id=self._run.id,
            tenant=self._run.tenant,
            call_id=call.id,
            tool_name=call.name,
            source=self._source(call.name),
            attempt=(earlier.attempt if earlier is not None else 0) + 1,
            status=ExecutionStatus.STARTED,
            executor=self._actor,
            idempotent=self.idempotent(call.name),
            started_at=now,
        )
        self._latest[call.id] = execution
        start = Transition(status=ExecutionStatus.STARTED, at=now, actor=self._actor)
        writes.append(RecordExecution(execution, start))
        return execution, writes

    def end(self, call_id: str, result: ToolResult, *, executor: str = "") -> list[RecordExecution]:
        """The write that ends the call's execution with `result` (`executor`: the worker
        that ran it, when one did)."""
        execution = self._latest.get(call_id)
        if execution is None:
            return []
        now = datetime.now(UTC)
        ended = execution.ended(result.text, result.is_error, now)
        if executor:
            ended = replace(ended, executor=executor)
        self._latest[call_id] = ended
        change = Transition(status=ended.status, at=now, actor=executor or self._actor)
        return [RecordExecution(ended, change)]

    def unknown(
        self, call: ToolCall, why: str = "", executor: str = ""
    ) -> tuple[ToolExecution, RecordExecution]:
        """The call's execution made OUTCOME_UNKNOWN, `why` (default: cut by a stop); a record
        is made for it when the run began before execution records were kept."""
        now = datetime.now(UTC)
        execution = self._latest.get(call.id)
        if execution is None:
            execution, _ = self.begin(call)
        if executor:
            execution = replace(execution, executor=executor)
        why = why or f"{STOPPED}, and it is not idempotent"
        why += ": it is not run again until reconciled"
        return self._moved(execution, ExecutionStatus.OUTCOME_UNKNOWN, now, why)

    def cancelled(self, call_id: str) -> RecordExecution:
        """The call's execution cut by a cancel of its run: OUTCOME_UNKNOWN, said why."""
        execution = self._latest[call_id]
        why = "the run was cancelled while it ran: whether it acted is unknown"
        return self._moved(execution, ExecutionStatus.OUTCOME_UNKNOWN, datetime.now(UTC), why)[1]

    def reconciled(self, call: ToolCall, answer: Answer, by: str) -> RecordExecution:
        """The call's execution (outcome unknown) reconciled by `by` with `answer`'s verdict."""
        execution = self._latest[call.id]
        assert answer.verdict is not None
        now = datetime.now(UTC)
        done = execution.reconciled(answer.verdict, answer.text, answer.is_error, now)
        self._latest[call.id] = done
        change = Transition(status=ExecutionStatus.RECONCILED, at=now, actor=by)
        return RecordExecution(done, change)

    def retried(
        self, call_id: str, why: str, *, unknown: bool, executor: str = ""
    ) -> list[RecordExecution]:
        """The call's execution ended, `why` (FAILED, or OUTCOME_UNKNOWN when nobody can tell
        whether it ran): the call runs again."""
        execution = self._latest.get(call_id)
        if execution is None:
            return []
        if executor:
            execution = replace(execution, executor=executor)
        status = ExecutionStatus.OUTCOME_UNKNOWN if unknown else ExecutionStatus.FAILED
        return [self._moved(execution, status, datetime.now(UTC), why)[1]]

    def cut(
        self, calls: Sequence[ToolCall], cut: Collection[str]
    ) -> tuple[dict[str, ToolExecution], list[ToolCall]]:
        """Of `calls`, those a stop cut (ids in `cut`): the worker tasks to wait for again (by
        call id; a worker may still hand the result in) and the calls whose outcome is now
        unknown (not idempotent); the others simply run again."""
        rejoin: dict[str, ToolExecution] = {}
        unknown: list[ToolCall] = []
        for call in calls:
            if call.id not in cut:
                continue
            latest = self._latest.get(call.id)
            if latest is not None and latest.source == WORKER and not latest.status.is_final:
                if latest.status == ExecutionStatus.STARTED:
                    rejoin[call.id] = latest
                    continue
            if not self.idempotent(call.name):
                unknown.append(call)
        return rejoin, unknown

    def _moved(
        self, execution: ToolExecution, status: ExecutionStatus, now: datetime, why: str
    ) -> tuple[ToolExecution, RecordExecution]:
        moved = replace(execution, status=status)
        self._latest[execution.call_id] = moved
        change = Transition(status=status, at=now, actor=self._actor, reason=why)
        return moved, RecordExecution(moved, change)

    def _source(self, name: str) -> str:
        if name == SPAWN_TOOL:
            return "sub_agent"
        return self._tools.source(name) if self._tools.get(name) is not None else "unknown"

    def idempotent(self, name: str) -> bool:
        """Whether a call of the tool may run again after a stop cut it."""
        tool = self._tools.get(name)
        return name == SPAWN_TOOL or (tool is not None and tool.idempotent)


def reconciled_result(call: PendingCall) -> ToolResult | None:
    """What the model gets for a reconciled execution (None: it did not run, it runs again)."""
    answer = call.answer
    if answer is None or answer.verdict == Verdict.DID_NOT_RUN:
        return None
    if answer.verdict == Verdict.RAN:
        return ToolResult(truncate(answer.text), answer.is_error)
    why = f": {answer.text}" if answer.text else ""
    return ToolResult(
        f"the outcome of {call.tool_name!r} is unknown: behest stopped while it ran, and "
        f"{call.answered_by or 'an operator'} could not tell whether it took effect{why}",
        is_error=True,
    )
