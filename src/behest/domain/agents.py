"""Agents as stored, versioned resources of a tenant: a definition per immutable version,
aliases that point at versions, and the reference a run names one by ("NAME", "NAME@3",
"NAME@production").

A definition holds what a CreateRunRequest would (provider, model, instructions, tools,
waits, budget, …), checked the same way, and the agents its runs may call as sub-agents or
hand off to. A run records the version it resolved to, and the versions of every agent it may
reach (its pins), so what happens to the agent later changes nothing for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime

from behest.domain.output import ResponseFormat
from behest.domain.runs import Reasoning, Run, RunRequest, ToolChoice
from behest.domain.spend import RunBudget
from behest.domain.waits import WaitOptions

# An agent's name is also a tool's (a sub-agent) and part of one (transfer_to_NAME): at most
# 64 characters in all, what the providers accept as a function name.
NAME = re.compile(r"^[A-Za-z0-9_-]{1,48}$")
ALIAS = re.compile(r"^(?![0-9]+$)[A-Za-z0-9_-]{1,64}$")
HANDOFF_PREFIX = "transfer_to_"
# How many agents one run may reach through sub-agents and handoffs (its pins).
MAX_REACHABLE = 64
MAX_VERSION = 2**31 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentDefinition:
    """What one version of an agent says; a run of it takes every field it leaves unset."""

    description: str = ""
    instructions: str = ""
    provider: str = ""
    model: str = ""
    tools: tuple[str, ...] = ()
    tool_choice: str = ToolChoice.AUTO
    waits: WaitOptions = field(default_factory=WaitOptions)
    budget: RunBudget = field(default_factory=RunBudget)
    response_format: ResponseFormat | None = None
    reasoning: Reasoning | None = None
    max_iterations: int = 0
    metadata: str = ""
    allow_sub_agents: bool = False
    sub_agents: tuple[str, ...] = ()
    handoffs: tuple[str, ...] = ()

    def named(self) -> tuple[str, ...]:
        """The other agents it names, sub-agents first, each once."""
        return tuple(dict.fromkeys((*self.sub_agents, *self.handoffs)))

    def governs(self, run: Run) -> Run:
        """The run as this agent takes it over (a handoff): its instructions, provider,
        model, tools and their options; the run's own budget, limits and session stay."""
        return replace(
            run,
            provider=self.provider,
            model=self.model,
            instructions=self.instructions,
            tools=self.tools,
            tool_choice=self.tool_choice,
            waits=self.waits,
            response_format=self.response_format,
            reasoning=self.reasoning,
            allow_sub_agents=self.allow_sub_agents,
        )

    def request(self, *, input: str, base: RunRequest) -> RunRequest:
        """A RunRequest for a run of this definition, with `base`'s other fields (the
        session, idempotency key, parent and depth, pins)."""
        return RunRequest(
            session_id=base.session_id,
            provider=self.provider,
            model=self.model,
            input=input,
            metadata=self.metadata,
            tool_choice=self.tool_choice,
            client_request_id=base.client_request_id,
            instructions=self.instructions,
            tools=self.tools,
            max_iterations=self.max_iterations,
            waits=self.waits,
            budget=base.budget,
            allow_sub_agents=self.allow_sub_agents,
            response_format=self.response_format,
            reasoning=self.reasoning,
            parent_run_id=base.parent_run_id,
            depth=base.depth,
            agent=base.agent,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentVersion:
    name: str
    version: int
    definition: AgentDefinition
    created_at: datetime
    created_by: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Agent:
    name: str
    tenant: str
    latest_version: int
    created_at: datetime
    updated_at: datetime
    aliases: dict[str, int] = field(default_factory=dict)
    archived: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class AgentRef:
    """A reference to one version: the latest (`version` 0 and no alias), a number, or an
    alias."""

    name: str
    version: int = 0
    alias: str = ""

    def __str__(self) -> str:
        if self.alias:
            return f"{self.name}@{self.alias}"
        return f"{self.name}@{self.version}" if self.version else self.name


def check_name(name: str, what: str = "name") -> str:
    if not NAME.fullmatch(name):
        raise ValueError(f"{what} must be 1 to 48 letters, digits, '_' or '-' (got {name[:80]!r})")
    return name


def check_alias(alias: str) -> str:
    if not ALIAS.fullmatch(alias):
        raise ValueError(
            f"alias must be 1 to 64 letters, digits, '_' or '-', not all digits "
            f"(got {alias[:80]!r})"
        )
    return alias


def parse_ref(text: str, what: str = "agent") -> AgentRef:
    """ "NAME", "NAME@VERSION" or "NAME@ALIAS"; ValueError naming `what` otherwise."""
    name, at, rest = text.strip().partition("@")
    check_name(name, what)
    if not at:
        return AgentRef(name)
    if rest.isdigit() and rest.isascii():
        version = int(rest)
        if not 1 <= version <= MAX_VERSION:
            raise ValueError(f"{what}: version must be at least 1 (got {rest[:20]!r})")
        return AgentRef(name, version=version)
    check_alias(rest)
    return AgentRef(name, alias=rest)


def handoff_tool(name: str) -> str:
    return HANDOFF_PREFIX + name
