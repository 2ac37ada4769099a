"""What a run of a stored agent has from its definition (domain/agents.py): a tool per
sub-agent, named after it, and a `transfer_to_<agent>` tool per handoff target; and the
handoff itself.

Both are tools of the run's registry (source "agent"), so they are offered, approved,
recorded and run like any tool. A sub-agent call starts a child run of the sub-agent's pinned
version (runs/sub_runs.py, as spawn_agent's). A transfer call's result says the run was
handed over; once the turn's calls are all answered the loop asks `handoff`: its step (a
Handoff event, the run's current agent) is durable before the run goes on under the target
from its next model call. Which agent a run is under is read back from that step after a
restart, and a handoff its tool message committed but whose step was lost is made then.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from behest.domain import events as ev
from behest.domain.agents import HANDOFF_PREFIX, AgentVersion, handoff_tool
from behest.domain.messages import Role, ToolCall
from behest.domain.runs import Run, RunStatus
from behest.domain.snapshots import Snapshot
from behest.events.run_log import RunLog
from behest.runs.progress import RunProgress
from behest.store.base import Store
from behest.store.writes import PutSnapshot, SetRunAgent
from behest.tools.base import FunctionTool, ToolResult
from behest.tools.context import ToolContext
from behest.tools.registry import ToolRegistry

AGENT = "agent"  # the tools' source, as ListToolExecutions shows it
# A sub-agent call waits for its child run: bounded by the run's own budgets, not a timeout.
SUB_AGENT_TIMEOUT_S = 30 * 86_400.0
SUB_AGENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "minLength": 1, "maxLength": 65536}},
    "required": ["input"],
    "additionalProperties": False,
}
HANDOFF_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string", "maxLength": 4096}},
    "additionalProperties": False,
}

# Starts a child run of a sub-agent's version for a call, and returns the call's result.
StartChild = Callable[[ToolCall, AgentVersion], Awaitable[ToolResult]]


@dataclass(frozen=True, slots=True)
class HandedOff:
    """The run goes on under another agent: `run` as stored with its new current agent,
    from `snapshot` (all the turn's calls answered)."""

    run: Run
    snapshot: Snapshot


class AgentTools:
    """The tools and handoffs of a run under one agent's version (`current`); `stored`: the
    run as stored (its own fields, not the current agent's), `reach`: the pinned versions of
    the sub-agents and handoff targets `current` names."""

    def __init__(
        self, *, stored: Run, current: AgentVersion, reach: dict[str, AgentVersion]
    ) -> None:
        self.stored = stored
        self.current = current
        definition = current.definition
        self._subs = {name: reach[name] for name in definition.sub_agents if name in reach}
        self._targets = {name: reach[name] for name in definition.handoffs if name in reach}
        self.offered: tuple[str, ...] = ()  # the tools `registry` added

    def sub_agents(self) -> set[str]:
        return set(self._subs)

    def registry(self, tools: ToolRegistry, start_child: StartChild | None) -> ToolRegistry:
        """The run's tools with these added (sub-agents only when children may start)."""
        added: list[FunctionTool] = []
        if start_child is not None:
            added += [self._sub_agent(v, start_child) for v in self._subs.values()]
        added += [self._transfer(v) for v in self._targets.values()]
        self.offered = tuple(tool.name for tool in added)
        return tools.with_tools(added, source=AGENT) if added else tools

    def _sub_agent(self, version: AgentVersion, start_child: StartChild) -> FunctionTool:
        async def call(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
            made = ToolCall(context.call_id, version.name, json.dumps(arguments))
            return await start_child(made, version)

        return FunctionTool(
            name=version.name,
            description=version.definition.description or f"Ask the agent {version.name}.",
            parameters_schema=SUB_AGENT_SCHEMA,
            function=call,
            timeout_s=SUB_AGENT_TIMEOUT_S,
            concurrency_safe=True,
            idempotent=True,  # a repeated call finds the child it started
        )

    def _transfer(self, target: AgentVersion) -> FunctionTool:
        async def call(arguments: dict[str, Any]) -> str:
            return f"Transferred to {target.name}; it answers from here on."

        about = target.definition.description
        return FunctionTool(
            name=handoff_tool(target.name),
            description=f"Hand the conversation to the agent {target.name}"
            + (f": {about}" if about else "."),
            parameters_schema=HANDOFF_SCHEMA,
            function=call,
            read_only=True,
            idempotent=True,
        )

    async def handoff(
        self, calls: list[ToolCall], progress: RunProgress, log: RunLog
    ) -> HandedOff | None:
        """The turn's first transfer that succeeded, made durable (None: none to make)."""
        results = {m.tool_call_id: m for m in progress.mine() if m.role == Role.TOOL}
        for call in calls:
            target = self._targets.get(call.name.removeprefix(HANDOFF_PREFIX))
            answered = results.get(call.id)
            if not call.name.startswith(HANDOFF_PREFIX) or target is None:
                continue
            if answered is None or answered.is_error:
                continue
            return await self._hand_to(target, call, progress, log)
        return None

    async def _hand_to(
        self, target: AgentVersion, call: ToolCall, progress: RunProgress, log: RunLog
    ) -> HandedOff:
        try:
            reason = str(json.loads(call.arguments or "{}").get("reason", ""))[:4096]
        except (ValueError, AttributeError):
            reason = ""
        state = progress.state(RunStatus.WAITING_FOR_TOOLS)
        current = self.current
        # Durable before the run goes on: the next loop reads the transcript from the store.
        stored = await log.emit(
            ev.Handoff(call.id, current.name, current.version, target.name, target.version, reason),
            state=[SetRunAgent(self.stored.id, target.name), *state],
        )
        await stored
        snapshot = next(w.snapshot for w in state if isinstance(w, PutSnapshot))
        return HandedOff(replace(self.stored, current_agent=target.name), snapshot)


async def agent_tools(store: Store, run: Run) -> tuple[Run, AgentTools | None]:
    """The run as its current agent has it (that agent's instructions, tools, model…; the
    run's own budgets and limits), and that agent's tools; for a run of no agent, as is."""
    if run.agent is None:
        return run, None
    current = run.agent.current(run.current_agent)
    version = await store.agent_version(run.tenant, current.name, current.version)
    if version is None:  # pinned versions are never deleted; a run cut off from it goes on
        return run, None
    reach: dict[str, AgentVersion] = {}
    for name in version.definition.named():
        pinned = run.agent.pinned(name)
        found = await store.agent_version(run.tenant, name, pinned) if pinned else None
        if found is not None:
            reach[name] = found
    under = run if current.name == run.agent.name else version.definition.governs(run)
    return under, AgentTools(stored=run, current=version, reach=reach)
