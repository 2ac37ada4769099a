"""The server's own agents: the settings' [agents.NAME] tables, created or updated at every
start through the same checks and the same catalog as AgentService's UpdateAgent
(allow_missing), each by the principal "settings"; a new version only when one changed.

A table holds an AgentDefinition's fields by their proto names (what `behest agents
export` writes) and, optionally, the `tenant` it belongs to. Agents that name each other are
applied in an order that creates the named first; a bad table stops the start, naming it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from google.protobuf import json_format

from behest._proto.agent.v1 import agent_pb2 as pb
from behest.api.admission import Admission
from behest.api.agent_requests import agent_definition, name_field
from behest.domain.agents import AgentDefinition
from behest.domain.callers import DEFAULT_TENANT, Caller
from behest.errors import AlreadyExists, InvalidArgument
from behest.runs.operations import Operations

log = logging.getLogger("behest.agents")
SETTINGS_PRINCIPAL = "settings"


def _checked(
    name: str, table: dict[str, Any], runs: Operations, admission: Admission
) -> tuple[Caller, AgentDefinition]:
    where = f"setting 'agents.{name}'"
    fields = dict(table)
    tenant = fields.pop("tenant", DEFAULT_TENANT)
    try:
        name_field(name, "the agent's name")
        if not isinstance(tenant, str) or not tenant:
            raise InvalidArgument("tenant must be a tenant's name")
        message = json_format.ParseDict(fields, pb.AgentDefinition())
        limits = admission.request_limits(tenant)
        definition = agent_definition(message, limits, runs, tenant=tenant)
    except (json_format.ParseError, InvalidArgument) as exc:
        raise InvalidArgument(f"{where}: {exc}") from None
    return Caller(principal=SETTINGS_PRINCIPAL, tenant=tenant), definition


Checked = dict[str, tuple[Caller, AgentDefinition]]


def checked_settings_agents(
    tables: dict[str, dict[str, Any]], runs: Operations, admission: Admission
) -> Checked:
    """Every agent of the settings checked (before anything is opened); InvalidArgument
    names a bad one."""
    return {name: _checked(name, table, runs, admission) for name, table in tables.items()}


async def apply_settings_agents(checked: Checked, runs: Operations) -> None:
    """Create or update the checked agents, those named by others first; new agents that
    name each other in a circle are first created without those names (one of them is then
    at version 2). InvalidArgument names one that names an agent that does not exist."""
    pending = dict(checked)
    while pending:
        before = len(pending)
        problems: dict[str, InvalidArgument] = {}
        for name, (caller, definition) in list(pending.items()):
            try:
                await _put(runs, caller, name, definition)
            except InvalidArgument as exc:  # it may name an agent applied later in this pass
                problems[name] = exc
                continue
            del pending[name]
        if len(pending) < before:
            continue
        if await _break_circles(pending, runs):
            continue
        first, problem = next(iter(problems.items()))  # no progress: the first problem stands
        raise InvalidArgument(f"setting 'agents.{first}': {problem}")


async def _break_circles(pending: Checked, runs: Operations) -> bool:
    """Create one pending agent that does not exist yet and names only pending agents,
    without those names (the others can then be made); whether there was one."""
    for name, (caller, definition) in pending.items():
        if not set(definition.named()) <= set(pending) | {name}:
            continue
        if await runs.agents.exists(caller, name):
            continue
        await _put(runs, caller, name, replace(definition, sub_agents=(), handoffs=()))
        return True
    return False


async def _put(runs: Operations, caller: Caller, name: str, definition: AgentDefinition) -> None:
    for _ in range(2):  # another replica starting at once may create it first
        try:
            _, version, changed = await runs.agents.update(
                caller, name, definition, allow_missing=True
            )
        except AlreadyExists:
            continue
        if changed:
            log.info("agent %s of tenant %s: version %d", name, caller.tenant, version.version)
        return
