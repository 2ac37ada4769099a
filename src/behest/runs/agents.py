"""A tenant's agents (domain/agents.py): created, changed into new versions, aliased,
archived, listed; resolved for a run's start, with the versions of every agent it may reach.

A definition's run-shaped fields are checked at the edge like a CreateRunRequest's
(api/agent_requests.py); what needs the store is checked here: the agents it names exist in
the tenant, a sub-agent's name is no server tool's, no agent hands off to itself.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import UTC, datetime

from behest.domain.agents import MAX_REACHABLE, Agent, AgentDefinition, AgentRef, AgentVersion
from behest.domain.callers import Caller
from behest.domain.runs import RunAgent
from behest.errors import FailedPrecondition, InvalidArgument, NotFound, quote
from behest.store.agent_store import PutMode
from behest.store.base import Store


class AgentCatalog:
    """The agents of every tenant, scoped by the caller's."""

    def __init__(self, store: Store, *, tool_names: Callable[[str], list[str]]) -> None:
        """`tool_names(tenant)`: the tools a run of the tenant may name (a sub-agent may not
        be named like one)."""
        self._store = store
        self._tool_names = tool_names

    async def create(
        self, caller: Caller, name: str, definition: AgentDefinition
    ) -> tuple[Agent, AgentVersion]:
        """Version 1 of a new agent; AlreadyExists when the tenant has one of that name."""
        await self._check_named(caller.tenant, name, definition)
        agent, version, _ = await self._store.put_agent_version(
            caller.tenant, name, definition, by=caller.principal, now=_now(), mode="create"
        )
        return agent, version

    async def update(
        self, caller: Caller, name: str, definition: AgentDefinition, *, allow_missing: bool
    ) -> tuple[Agent, AgentVersion, bool]:
        """A new version unless the latest holds this definition (then `changed` is False);
        NotFound for an unknown agent unless `allow_missing`, FailedPrecondition if archived."""
        await self._check_named(caller.tenant, name, definition)
        mode: PutMode = "upsert" if allow_missing else "update"
        return await self._store.put_agent_version(
            caller.tenant, name, definition, by=caller.principal, now=_now(), mode=mode
        )

    async def exists(self, caller: Caller, name: str) -> bool:
        return await self._store.agent(caller.tenant, name) is not None

    async def get(self, caller: Caller, ref: AgentRef) -> tuple[Agent, AgentVersion]:
        """The agent and the version `ref` names; NotFound naming what was not found."""
        agent = await self._agent(caller.tenant, ref.name)
        number = ref.version or agent.latest_version
        if ref.alias:
            number = agent.aliases.get(ref.alias, 0)
            if not number:
                raise NotFound(f"agent {quote(ref.name)} has no alias {quote(ref.alias)}")
        version = await self._store.agent_version(caller.tenant, ref.name, number)
        if version is None:
            raise NotFound(f"agent {quote(ref.name)} has no version {number}")
        return agent, version

    async def list(
        self, caller: Caller, *, limit: int, offset: int, include_archived: bool = False
    ) -> builtins.list[Agent]:
        return await self._store.list_agents(
            caller.tenant, limit=limit, offset=offset, include_archived=include_archived
        )

    async def versions(
        self, caller: Caller, name: str, *, limit: int, offset: int
    ) -> builtins.list[AgentVersion]:
        """The agent's versions, newest first."""
        await self._agent(caller.tenant, name)
        return await self._store.agent_versions(caller.tenant, name, limit=limit, offset=offset)

    async def set_alias(self, caller: Caller, name: str, alias: str, version: int) -> Agent:
        """Point `alias` at `version` (0: remove it) in one step."""
        agent = await self._agent(caller.tenant, name)
        if version > agent.latest_version:
            raise NotFound(f"agent {quote(name)} has no version {version}")
        if not version and alias not in agent.aliases:
            raise NotFound(f"agent {quote(name)} has no alias {quote(alias)}")
        moved = await self._store.set_agent_alias(caller.tenant, name, alias, version, now=_now())
        if moved is None:
            raise NotFound(f"no agent {quote(name)}")
        return moved

    async def archive(self, caller: Caller, name: str) -> Agent:
        """Archive the agent: no new run of it starts; its versions stay (runs go on)."""
        archived = await self._store.archive_agent(caller.tenant, name, now=_now())
        if archived is None:
            raise NotFound(f"no agent {quote(name)}")
        return archived

    async def resolve(self, caller: Caller, ref: AgentRef) -> tuple[AgentVersion, RunAgent]:
        """The version a new run of `ref` uses, and its pins: the version of every agent it
        may reach through sub-agents and handoffs (their latest, now)."""
        agent, version = await self.get(caller, ref)
        if agent.archived:
            raise FailedPrecondition(f"agent {quote(agent.name)} is archived")
        pins = {version.name: version.version}
        queue = list(version.definition.named())
        while queue:
            name = queue.pop(0)
            if name in pins:
                continue
            if len(pins) >= MAX_REACHABLE:
                raise FailedPrecondition(
                    f"agent {quote(agent.name)} reaches more than {MAX_REACHABLE} agents"
                )
            reached = await self._store.agent(caller.tenant, name)
            if reached is None:
                raise FailedPrecondition(
                    f"agent {quote(agent.name)} names agent {quote(name)}, which does not exist"
                )
            latest = await self._store.agent_version(caller.tenant, name, reached.latest_version)
            assert latest is not None
            pins[name] = latest.version
            queue.extend(latest.definition.named())
        return version, RunAgent(version.name, version.version, tuple(sorted(pins.items())))

    async def pinned(self, tenant: str, run_agent: RunAgent, name: str) -> AgentVersion:
        """The version of `name` a run of `run_agent` uses; NotFound if it may not reach it."""
        number = run_agent.pinned(name)
        version = await self._store.agent_version(tenant, name, number) if number else None
        if version is None:
            raise NotFound(f"agent {quote(name)} is not one this run may reach")
        return version

    async def _agent(self, tenant: str, name: str) -> Agent:
        agent = await self._store.agent(tenant, name)
        if agent is None:
            raise NotFound(f"no agent {quote(name)}")
        return agent

    async def _check_named(self, tenant: str, name: str, definition: AgentDefinition) -> None:
        """The agents a definition names exist; sub-agents are named like no tool."""
        tools = set(self._tool_names(tenant))
        for field, names in (
            ("sub_agents", definition.sub_agents),
            ("handoffs", definition.handoffs),
        ):
            for i, named in enumerate(names):
                where = f"definition.{field}[{i}]"
                if named == name and field == "handoffs":
                    raise InvalidArgument(f"{where}: an agent cannot hand off to itself")
                if field == "sub_agents" and named in tools:
                    raise InvalidArgument(f"{where}: {quote(named)} is the name of a tool")
                if named != name and await self._store.agent(tenant, named) is None:
                    raise InvalidArgument(f"{where}: no agent {quote(named)} in this tenant")


def _now() -> datetime:
    return datetime.now(UTC)
