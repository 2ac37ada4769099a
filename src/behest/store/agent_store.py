"""The part of the Store protocol that keeps agents (domain/agents.py), by tenant."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

from behest.domain.agents import Agent, AgentDefinition, AgentVersion

# How put_agent_version treats the agent: a new one only ("create": AlreadyExists if it
# exists), an existing one only ("update": NotFound if not), either ("upsert").
PutMode = Literal["create", "update", "upsert"]


class AgentStore(Protocol):
    async def put_agent_version(
        self,
        tenant: str,
        name: str,
        definition: AgentDefinition,
        *,
        by: str,
        now: datetime,
        mode: PutMode,
    ) -> tuple[Agent, AgentVersion, bool]:
        """The agent's next version holding `definition`, in one transaction; when the latest
        holds the same definition, that one and `changed` False. FailedPrecondition for an
        archived agent."""
        ...

    async def agent(self, tenant: str, name: str) -> Agent | None: ...

    async def agent_version(self, tenant: str, name: str, version: int) -> AgentVersion | None: ...

    async def list_agents(
        self, tenant: str, *, limit: int, offset: int, include_archived: bool
    ) -> list[Agent]:
        """By name."""
        ...

    async def agent_versions(
        self, tenant: str, name: str, *, limit: int, offset: int
    ) -> list[AgentVersion]:
        """Newest first."""
        ...

    async def set_agent_alias(
        self, tenant: str, name: str, alias: str, version: int, *, now: datetime
    ) -> Agent | None:
        """Point the alias at `version` (0: remove it); None if there is no such agent."""
        ...

    async def archive_agent(self, tenant: str, name: str, *, now: datetime) -> Agent | None: ...
