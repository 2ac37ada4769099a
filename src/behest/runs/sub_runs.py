"""Sub-agent runs: the `spawn_agent` tool starts a child run and returns its final text.

Offered only to runs created with `allow_sub_agents`, above the depth limit. A call creates a
child run — its own session and event log, watchable by its id, `parent_run_id` recorded —
with the call's instructions, input, tools and model (default: the parent's) and what the
parent's token, tool-call and cost budgets have left; the parent's log shows SubRunStarted,
then SubRunFinished once the child ended, and the child's final text is the call's result
(its failure an error result). The child's spend counts against the parent's budgets.

The child's idempotency key is the parent's run id and the call's id, so a call repeated
after a crash finds the child it started (resumed on its own, like any run) instead of
starting another: the tool is idempotent. Cancelling the parent cancels its children
(runs/executor.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from behest.domain import events as ev
from behest.domain.agents import AgentVersion
from behest.domain.messages import Role, ToolCall, ToolDefinition
from behest.domain.runs import CreatedRun, Run, RunAgent, RunRequest, RunStatus
from behest.domain.spend import RunBudget
from behest.errors import BehestError, InvalidArgument
from behest.events.log import EventLog
from behest.events.run_log import RunLog
from behest.runs.stream import follow
from behest.store.base import Store
from behest.tools.base import ToolResult
from behest.tools.output import truncate
from behest.tools.registry import ToolRegistry

SPAWN_TOOL = "spawn_agent"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "minLength": 1, "maxLength": 65536},
        "instructions": {"type": "string", "maxLength": 65536},
        "tools": {"type": "array", "items": {"type": "string"}, "maxItems": 128},
        "model": {"type": "string", "maxLength": 200},
    },
    "required": ["input"],
    "additionalProperties": False,
}
DESCRIPTION = (
    "Start a sub-agent: a separate run with its own instructions and input (and optionally "
    "its own tool names and model) that works on a sub-task and returns its final answer."
)


class Spawner(Protocol):
    """What starts a child run: the executor's creation."""

    async def create(
        self, request: RunRequest, *, tenant: str, traceparent: str = ""
    ) -> CreatedRun: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SubRunLimits:
    """How deep sub-agent runs may nest, and how many children one run may start."""

    max_depth: int = 2
    max_children: int = 8


class SubRuns:
    """The sub-agent runs of this process: one per server, bound to each run by `for_run`."""

    def __init__(
        self,
        *,
        store: Store,
        event_log: EventLog,
        limits: SubRunLimits,
        check_model: Callable[[str, str], None],
        tool_names: Callable[[], list[str]],
    ) -> None:
        self._store = store
        self._event_log = event_log
        self.limits = limits
        self._check_model = check_model
        self._tool_names = tool_names
        self.spawner: Spawner | None = None  # the executor, once it exists (app.py)

    def _unknown(self, tools: Sequence[str]) -> list[str]:
        """The named tools that runs may not name, sorted (`in`: tools/server_tools.py)."""
        known = self._tool_names()
        return sorted({name for name in tools if name not in known})

    def offered_to(self, run: Run) -> bool:
        return run.allow_sub_agents and self.may_start(run)

    def may_start(self, run: Run) -> bool:
        """Whether the run may start children (spawn_agent's or its agent's sub-agents')."""
        return run.depth < self.limits.max_depth

    @staticmethod
    def definition() -> ToolDefinition:
        return ToolDefinition(SPAWN_TOOL, DESCRIPTION, SCHEMA)

    async def spent_by_children(self, run: Run) -> tuple[int, Decimal]:
        """Tokens and cost the run's children used (counted against its budgets, as the
        parent's loop counts each child when it ends)."""
        children = await self._store.child_runs(run.id)
        tokens = sum(child.usage.total_tokens for child in children)
        cost = sum((c.cost.amount for c in children if c.cost is not None), Decimal(0))
        return tokens, cost

    async def run_child(
        self,
        parent: Run,
        call: ToolCall,
        log: RunLog,
        *,
        started: int,
        left: RunBudget,
        agent: AgentVersion | None = None,
    ) -> tuple[ToolResult, Run | None]:
        """Start (or find) the call's child run and wait for its end; the call's result, and
        the child as it ended. `started`: the parent's child calls so far, this one included;
        `agent`: the stored agent's version the child is of (a sub-agent's call), else the
        call is spawn_agent's."""
        arguments, problem = ToolRegistry.check_against(call, SCHEMA)
        if problem and agent is None:
            return ToolResult(problem, is_error=True), None
        if started > self.limits.max_children:
            return _error(f"this run may start at most {self.limits.max_children} sub-agents"), None
        try:
            if agent is None:
                request = self._request(parent, call, arguments, left)
            else:
                request = self._agent_request(parent, call, agent, left)
            assert self.spawner is not None, "SubRuns.spawner is set at start-up"
            created = await self.spawner.create(
                request, tenant=parent.tenant, traceparent=parent.traceparent
            )
        except BehestError as exc:
            return _error(f"the sub-agent could not start: {exc}"), None
        child = created.run
        if created.created:
            await log.emit(ev.SubRunStarted(call.id, child.id, child.session_id))
        async for event in follow(self._store, self._event_log, child.id, after=0, known=True):
            if event.is_terminal:
                break
        ended = await self._store.get_run(child.id) or child
        await log.emit(ev.SubRunFinished(call.id, child.id, ended.status, ended.usage, ended.cost))
        return await self._result(ended), ended

    def _request(
        self, parent: Run, call: ToolCall, arguments: dict[str, Any], left: RunBudget
    ) -> RunRequest:
        model = arguments.get("model") or parent.model
        self._check_model(parent.provider, model)
        tools = tuple(arguments.get("tools", parent.tools))
        unknown = self._unknown(tools)
        if unknown:
            raise InvalidArgument(f"unknown tool {unknown[0]!r}")
        return RunRequest(
            session_id=None,
            provider=parent.provider,
            model=model,
            input=arguments["input"],
            instructions=arguments.get("instructions", ""),
            tools=tools,
            client_request_id=f"sub-run:{parent.id}:{call.id}",
            budget=left,
            allow_sub_agents=parent.allow_sub_agents,
            parent_run_id=parent.id,
            depth=parent.depth + 1,
        )

    def _agent_request(
        self, parent: Run, call: ToolCall, agent: AgentVersion, left: RunBudget
    ) -> RunRequest:
        """A child of a sub-agent's pinned version: its definition, the call's input, the
        parent's pins, the tighter of the parent's budget left and the definition's."""
        definition = agent.definition
        self._check_model(definition.provider, definition.model)
        unknown = self._unknown(definition.tools)
        if unknown:
            raise InvalidArgument(f"unknown tool {unknown[0]!r}")
        pins = parent.agent.pins if parent.agent is not None else ()
        base = RunRequest(
            session_id=None,
            provider="",
            model="",
            input="",
            client_request_id=f"sub-run:{parent.id}:{call.id}",
            budget=left.within(definition.budget),
            parent_run_id=parent.id,
            depth=parent.depth + 1,
            agent=RunAgent(agent.name, agent.version, pins),
        )
        return definition.request(input=json.loads(call.arguments)["input"], base=base)

    async def _result(self, child: Run) -> ToolResult:
        if child.status == RunStatus.COMPLETED:
            messages = await self._store.run_messages(child.id)
            answers = [m.text for m in messages if m.role == Role.ASSISTANT and m.text]
            return ToolResult(truncate(answers[-1] if answers else ""))
        why = f": {child.error}" if child.error else ""
        return _error(f"the sub-agent run {child.id} ended {child.status.name}{why}")


def _error(text: str) -> ToolResult:
    return ToolResult(text, is_error=True)
