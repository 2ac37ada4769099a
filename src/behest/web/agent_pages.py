"""The inspector's agents pages (GET): the tenant's agents, and one agent's versions side by
side with its aliases and the runs of each version. They read through `Operations.agents`
(runs/agents.py) and `Operations.list_runs` as the signed-in caller: another tenant's agent
is the same 404 as one that does not exist."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from behest.domain.agents import AgentRef, check_name
from behest.domain.callers import Caller
from behest.domain.runs import Run, RunFilter
from behest.errors import NotFound, quote
from behest.runs.operations import Operations
from behest.web import agent_views
from behest.web.auth import Gate
from behest.web.pages import number
from behest.web.rendering import Renderer

AGENTS_PAGE = 50
# Versions side by side on one page, and the runs listed under each (the newest).
VERSIONS_SHOWN = 4
RUNS_PER_VERSION = 5


class AgentPages:
    def __init__(self, runs: Operations, gate: Gate, renderer: Renderer) -> None:
        self._runs = runs
        self._gate = gate
        self._render = renderer

    async def agents(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        start = number(request, "start", 0)
        archived = request.query_params.get("archived", "") == "1"
        found = await self._runs.agents.list(
            caller, limit=AGENTS_PAGE + 1, offset=start, include_archived=archived
        )
        return self._render.page(
            request,
            "agents.html",
            caller=caller,
            agents=found[:AGENTS_PAGE],
            archived=archived,
            start=start,
            next_start=start + AGENTS_PAGE if len(found) > AGENTS_PAGE else None,
        )

    async def agent(self, request: Request) -> Response:
        caller = self._gate.caller(request)
        name = str(request.path_params["name"])
        try:
            check_name(name)
        except ValueError:
            raise NotFound(f"no agent {quote(name[:80])}") from None
        agent, _ = await self._runs.agents.get(caller, AgentRef(name))
        start = number(request, "start", 0)
        found = await self._runs.agents.versions(
            caller, name, limit=VERSIONS_SHOWN + 1, offset=start
        )
        shown = found[:VERSIONS_SHOWN]
        before = found[VERSIONS_SHOWN] if len(found) > VERSIONS_SHOWN else None
        return self._render.page(
            request,
            "agent.html",
            caller=caller,
            agent=agent,
            table=agent_views.compare(shown, before),
            aliases=agent_views.aliases_of(agent.aliases),
            runs={v.version: await self._runs_of(caller, name, v.version) for v in shown},
            runs_shown=RUNS_PER_VERSION,
            newer=max(start - VERSIONS_SHOWN, 0) if start > 0 else None,
            older=start + VERSIONS_SHOWN if before is not None else None,
        )

    async def _runs_of(self, caller: Caller, name: str, version: int) -> list[Run]:
        """The newest runs of one version (one more than shown: "more" is known)."""
        wanted = RunFilter(agent=name, agent_version=version, limit=RUNS_PER_VERSION + 1)
        return await self._runs.list_runs(caller, wanted)
