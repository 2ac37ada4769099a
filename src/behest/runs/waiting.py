"""Runs that wait: which of a turn's calls wait for an answer, the pause, and the answers.

A call waits when it is one of the run's client tools (its arguments valid: an invalid one
gets an error result at once and never reaches the client), or when it needs an approval: its
tool's definition or the server's settings say so, or the run asked for it (by name, or for
every tool not marked read-only), unless an ALLOW_ALWAYS decision of the session freed the
tool. The pause is one step: a request event per waiting call, the calls stored unanswered,
status WAITING_FOR_INPUT, and the run's lease let go. When the run goes on, one step records
how each call was resolved, and every call gets its result in the order the model made them
(runs/tool_calls.py): approved ones run, the others are answered with what came back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from behest.domain import events as ev
from behest.domain.executions import Verdict
from behest.domain.messages import ToolCall, ToolDefinition
from behest.domain.runs import Run, RunStatus
from behest.domain.spend import FailureCode
from behest.domain.waits import Answer, Decision, PendingCall, WaitKind
from behest.errors import RunStopped
from behest.events.run_log import RunLog
from behest.runs.executions import RunExecutions, checker, reconciled_result
from behest.runs.progress import RunProgress
from behest.runs.sub_runs import SPAWN_TOOL
from behest.store.base import Store
from behest.store.writes import ExpireCalls, ReleaseRun, RequestInput
from behest.tools.base import ToolResult
from behest.tools.output import truncate
from behest.tools.registry import ToolRegistry


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitPolicy:
    """The server's side of waiting (settings): the default timeouts of a run that sets none
    (which tools always need an approval, the tool registry says)."""

    approval_timeout_s: float = 86_400.0
    client_tool_timeout_s: float = 600.0
    # How long a run waits for an execution whose outcome is unknown to be reconciled.
    outcome_unknown_timeout_s: float = 86_400.0


@dataclass(frozen=True, slots=True)
class Waiting:
    """How a run's loop stops when it waits: the calls it waits for."""

    call_ids: tuple[str, ...]
    # The earliest time one of them expires (the run goes on then, at the latest).
    expires_at: datetime


class Waits:
    """One run's waiting calls: deciding which wait, pausing, and turning answers into results."""

    def __init__(
        self,
        *,
        run: Run,
        log: RunLog,
        store: Store,
        tools: ToolRegistry,
        policy: WaitPolicy,
        progress: RunProgress,
    ) -> None:
        self._run = run
        self._log = log
        self._store = store
        self._tools = tools
        self._policy = policy
        self._progress = progress
        options = run.waits
        self._client = {t.name: t for t in options.client_tools}
        self._approved_by_run = frozenset(options.approval_required_tools)
        self._approval_s = options.approval_timeout_s or policy.approval_timeout_s
        self._client_s = options.client_tool_timeout_s or policy.client_tool_timeout_s

    # --- what the model is offered ---------------------------------------------------

    def client_definitions(self) -> list[ToolDefinition]:
        """The run's client tools, as offered to the model beside the server's."""
        return [
            ToolDefinition(t.name, t.description, t.parameters_schema)
            for t in self._client.values()
        ]

    def is_client_tool(self, name: str) -> bool:
        return name in self._client

    # --- pausing ------------------------------------------------------------------------

    async def hold(self, calls: Sequence[ToolCall], offered: frozenset[str]) -> Waiting | None:
        """Pause the run if any call waits (the step durable before this returns)."""
        kinds = await self._kinds(calls, offered)
        if not kinds:
            return None
        now = datetime.now(UTC)
        pending, requests = [], []
        for ordinal, call in enumerate(calls):
            kind = kinds.get(call.id)
            if kind is None:
                continue
            seconds = self._approval_s if kind == WaitKind.APPROVAL else self._client_s
            expires = now + timedelta(seconds=seconds)
            pending.append(self._pending(call, kind, ordinal, now, expires))
            requests.append(
                ev.ApprovalRequested(call, expires)
                if kind == WaitKind.APPROVAL
                else ev.ClientToolRequested(call, expires)
            )
        done = await self._log.emit(
            *requests,
            state=[
                RequestInput(tuple(pending)),
                *self._progress.state(RunStatus.WAITING_FOR_INPUT),
                ReleaseRun(self._run.id),
            ],
        )
        await done
        return Waiting(tuple(p.call_id for p in pending), min(p.expires_at for p in pending))

    async def hold_unknown(
        self,
        calls: Sequence[ToolCall],
        unknown: Sequence[ToolCall],
        executions: RunExecutions,
        whys: Mapping[str, str] | None = None,
        executors: Mapping[str, str] | None = None,
        checked: Mapping[str, Answer] | None = None,
    ) -> Waiting:
        """Pause the run until each of `unknown` (calls of the turn `calls` that were
        executing when behest stopped, or whose worker vanished, not idempotent: `whys` by
        call id) is reconciled: their executions OUTCOME_UNKNOWN, one step durable first."""
        now = datetime.now(UTC)
        expires = now + timedelta(seconds=self._policy.outcome_unknown_timeout_s)
        ordinals = {call.id: i for i, call in enumerate(calls)}
        pending, notices, records = [], [], []
        for call in unknown:
            why, by = (whys or {}).get(call.id, ""), (executors or {}).get(call.id, "")
            execution, record = executions.unknown(call, why, by)
            records.append(record)
            self._progress.executing.discard(call.id)
            kind, ordinal = WaitKind.OUTCOME_UNKNOWN, ordinals[call.id]
            held = self._pending(call, kind, ordinal, now, expires, execution.id)
            verdict = (checked or {}).get(call.id)
            if verdict is not None:  # its tool's check told: answered already
                answerer = checker(call.name)
                held = replace(held, answer=verdict, answered_by=answerer, answered_at=now)
                records.append(executions.reconciled(call, verdict, answerer))
            else:  # nobody can tell yet: say so
                notices.append(
                    ev.ToolOutcomeUnknown(
                        execution.id, call.id, call.name, execution.attempt, expires
                    )
                )
            pending.append(held)
        await (
            await self._log.emit(
                *notices,
                state=[
                    *records,
                    RequestInput(tuple(pending)),
                    *self._progress.state(RunStatus.WAITING_FOR_INPUT),
                    ReleaseRun(self._run.id),
                ],
            )
        )
        # Answered all by their tools' checks: taken up again at once (executor: _paused).
        told = all(p.answer is not None for p in pending)
        return Waiting(tuple(p.call_id for p in pending), now if told else expires)

    async def _kinds(
        self, calls: Sequence[ToolCall], offered: frozenset[str]
    ) -> dict[str, WaitKind]:
        kinds: dict[str, WaitKind] = {}
        freed: frozenset[str] | None = None
        for call in calls:
            if call.name in self._client:
                if not self._invalid(call):
                    kinds[call.id] = WaitKind.CLIENT_TOOL
            elif call.name in offered and self._needs_approval(call.name):
                if freed is None:
                    freed = await self._store.always_allowed(self._run.session_id)
                if call.name not in freed:
                    kinds[call.id] = WaitKind.APPROVAL
        return kinds

    def _needs_approval(self, name: str) -> bool:
        if name == SPAWN_TOOL:  # not read-only: a child run spends
            return name in self._approved_by_run or self._run.waits.approve_side_effects
        tool = self._tools.get(name)
        if tool is None:
            return False
        return (
            name in self._approved_by_run
            or self._tools.requires_approval(name)
            or (self._run.waits.approve_side_effects and not tool.read_only)
        )

    def _invalid(self, call: ToolCall) -> str:
        """Why a client tool call's arguments do not fit its schema ("" when they do)."""
        schema: dict[str, Any] = self._client[call.name].parameters_schema
        return self._tools.check_against(call, schema)[1]

    def _pending(
        self,
        call: ToolCall,
        kind: WaitKind,
        ordinal: int,
        now: datetime,
        expires: datetime,
        execution_id: str = "",
    ) -> PendingCall:
        return PendingCall(
            execution_id=execution_id,
            run_id=self._run.id,
            call_id=call.id,
            session_id=self._run.session_id,
            tenant=self._run.tenant,
            kind=kind,
            tool_name=call.name,
            arguments=call.arguments,
            ordinal=ordinal,
            requested_at=now,
            expires_at=expires,
        )

    # --- going on -------------------------------------------------------------------------

    async def resolve(self, calls: Sequence[ToolCall]) -> Waiting | None:
        """A waiting run taken up again: still waiting (the lease let go again), or one step
        recording how each of its calls was resolved (status WAITING_FOR_TOOLS)."""
        pending = latest_pause(await self._store.pending_calls(self._run.id), calls)
        now = datetime.now(UTC)
        open_calls = [p for p in pending if p.answer is None and not p.expired(now)]
        if open_calls:
            await self._log.emit(state=[ReleaseRun(self._run.id)])
            return Waiting(
                tuple(p.call_id for p in open_calls), min(p.expires_at for p in open_calls)
            )
        expired = tuple(p.call_id for p in pending if p.answer is None and not p.timed_out)
        for call in pending:
            if call.kind == WaitKind.OUTCOME_UNKNOWN and call.answer is None:
                raise RunStopped(
                    f"the outcome of tool {call.tool_name!r} (execution {call.execution_id}) "
                    "stayed unknown: behest stopped while it ran, it is not idempotent, and "
                    f"nobody reconciled it within {self._policy.outcome_unknown_timeout_s:g} s",
                    FailureCode.TOOL_OUTCOME_UNKNOWN,
                )
        await self._log.emit(
            *(self._resolution(p) for p in pending),
            state=[
                ExpireCalls(run_id=self._run.id, call_ids=expired),
                *self._progress.state(RunStatus.WAITING_FOR_TOOLS),
            ],
        )
        return None

    def _resolution(self, call: PendingCall) -> ev.Payload:
        answer = call.answer
        if call.kind == WaitKind.OUTCOME_UNKNOWN:
            assert answer is not None and answer.verdict is not None  # unanswered: stopped
            why = "" if answer.verdict == Verdict.RAN else answer.text
            return ev.ToolExecutionReconciled(
                call.execution_id,
                call.call_id,
                call.tool_name,
                answer.verdict,
                call.answered_by,
                why,
            )
        if call.kind == WaitKind.APPROVAL:
            if answer is None or answer.decision is None:
                why = f"nobody decided within {self._approval_s:g} s"
                return ev.ApprovalResolved(
                    call.call_id, call.tool_name, Decision.TIMED_OUT, "", why
                )
            return ev.ApprovalResolved(
                call.call_id, call.tool_name, answer.decision, call.answered_by, answer.text
            )
        if answer is None:
            return ev.ClientToolAnswered(call.call_id, call.tool_name, True, "", True)
        return ev.ClientToolAnswered(
            call.call_id, call.tool_name, answer.is_error, call.answered_by, False
        )

    async def results(
        self, calls: Sequence[ToolCall], *, resumed: bool = False
    ) -> dict[str, ToolResult]:
        """The results of calls that do not run here: client tool calls (their answers, or an
        error for invalid arguments or a timeout), denied ones and, in a run taken up again
        (`resumed`), those reconciled as having run or given up. Approved calls, calls that
        never waited and those reconciled as not run are not in it: they run."""
        results: dict[str, ToolResult] = {}
        for call in calls:
            if call.name in self._client and (problem := self._invalid(call)):
                results[call.id] = ToolResult(problem, is_error=True)
        if not resumed and not any(c.id not in results and self._may_wait(c) for c in calls):
            return results
        ids = {c.id for c in calls}
        for pending in await self._store.pending_calls(self._run.id):
            if pending.call_id in ids and pending.call_id not in results:
                result = self._result(pending)
                if result is not None:
                    results[pending.call_id] = result
        return results

    def _may_wait(self, call: ToolCall) -> bool:
        return call.name in self._client or self._needs_approval(call.name)

    def _result(self, call: PendingCall) -> ToolResult | None:
        answer = call.answer
        if call.kind == WaitKind.OUTCOME_UNKNOWN:
            return reconciled_result(call)
        if call.kind == WaitKind.CLIENT_TOOL:
            if answer is None:
                return ToolResult(
                    f"tool {call.tool_name!r} timed out: the client sent no result within "
                    f"{self._client_s:g} s",
                    is_error=True,
                )
            return ToolResult(truncate(answer.text), answer.is_error)
        if answer is not None and answer.decision is not None and answer.decision.allows:
            return None
        if answer is None or answer.decision is None:
            why = f"nobody approved it within {self._approval_s:g} s"
        else:
            reason = answer.text or "no reason given"
            why = f"{call.answered_by or 'the approver'} denied it: {reason}"
        return ToolResult(f"the call of {call.tool_name!r} was not run: {why}", is_error=True)


def latest_pause(pending: Sequence[PendingCall], calls: Sequence[ToolCall]) -> list[PendingCall]:
    """The turn's calls held by its latest pause (one step requests them all at one time):
    those of an earlier pause of the same turn were resolved when it ended."""
    ids = {c.id for c in calls}
    mine = [p for p in pending if p.call_id in ids]
    if not mine:
        return []
    last = max(p.requested_at for p in mine)
    return [p for p in mine if p.requested_at == last]
