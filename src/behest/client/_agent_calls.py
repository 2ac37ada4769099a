"""BehestClient's calls of AgentService: agents as stored, versioned resources of the caller's
tenant (create, update, get, list, versions, aliases, archive).

Retries on UNAVAILABLE: every call but create_agent, whose repeat after a lost reply would
answer AlreadyExists for the agent it made; update_agent(…, allow_missing=True) is the
create-or-update that may be sent again (the repeat finds the definition unchanged)."""

from __future__ import annotations

from typing import Any

from behest.client import _wire
from behest.client._agents import Agent, AgentDefinition, AgentVersion, VersionedAgent


class AgentCalls:
    """Mixed into BehestClient, whose `_unary` and `_s` (the stubs) these use."""

    @property
    def _s(self) -> _wire.Stubs:
        raise NotImplementedError

    async def _unary(self, method: Any, request: Any, *, retry: bool = True) -> Any:
        raise NotImplementedError

    async def create_agent(self, name: str, definition: AgentDefinition) -> VersionedAgent:
        """Create an agent with its version 1; AlreadyExists when the name is taken,
        InvalidArgument naming the field of a bad definition. Not retried (see above)."""
        request = _wire.agents.CreateAgentRequest(
            name=name, definition=_wire.definition_message(definition)
        )
        response = await self._unary(self._s.agents.CreateAgent, request, retry=False)
        return _wire.versioned_of(response)

    async def update_agent(
        self, name: str, definition: AgentDefinition, *, allow_missing: bool = False
    ) -> VersionedAgent:
        """Make a new version when `definition` differs from the latest one (`changed`);
        with `allow_missing` an agent that does not exist is created (else NotFound)."""
        request = _wire.agents.UpdateAgentRequest(
            name=name,
            definition=_wire.definition_message(definition),
            allow_missing=allow_missing,
        )
        return _wire.versioned_of(await self._unary(self._s.agents.UpdateAgent, request))

    async def get_agent(self, ref: str) -> VersionedAgent:
        """An agent and the version `ref` resolves to: "NAME" (the latest), "NAME@3" or
        "NAME@ALIAS"; NotFound for an unknown agent, version or alias."""
        request = _wire.agents.GetAgentRequest(agent=ref)
        return _wire.versioned_of(await self._unary(self._s.agents.GetAgent, request))

    async def list_agents(
        self, *, limit: int = 0, offset: int = 0, include_archived: bool = False
    ) -> list[Agent]:
        """The tenant's agents by name (the archived ones too with `include_archived`)."""
        request = _wire.agents.ListAgentsRequest(
            pagination=_wire.Pagination(limit=limit, offset=offset),
            include_archived=include_archived,
        )
        response = await self._unary(self._s.agents.ListAgents, request)
        return [_wire.agent_of(a) for a in response.agents]

    async def agent_versions(
        self, name: str, *, limit: int = 0, offset: int = 0
    ) -> list[AgentVersion]:
        """An agent's versions, newest first."""
        request = _wire.agents.ListAgentVersionsRequest(
            name=name, pagination=_wire.Pagination(limit=limit, offset=offset)
        )
        response = await self._unary(self._s.agents.ListAgentVersions, request)
        return [_wire.version_of(v) for v in response.versions]

    async def set_agent_alias(self, name: str, alias: str, version: int) -> Agent:
        """Point `alias` at `version` (0 removes it), in one step; the agent after."""
        request = _wire.agents.SetAgentAliasRequest(name=name, alias=alias, version=version)
        return _wire.agent_of((await self._unary(self._s.agents.SetAgentAlias, request)).agent)

    async def archive_agent(self, name: str) -> Agent:
        """Archive an agent: its versions stay (runs of them go on), no new run starts."""
        request = _wire.agents.ArchiveAgentRequest(name=name)
        return _wire.agent_of((await self._unary(self._s.agents.ArchiveAgent, request)).agent)
