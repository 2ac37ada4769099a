"""Agents at the edge: a definition checked as a CreateRunRequest would be (one validator,
api/requests.py), domain agents as the wire's, and a CreateRunRequest that names an agent
turned into the request of a run of its resolved version.

A run's own fields override the definition's where the request sets them (non-empty, non-zero,
true; a repeated field replaces the definition's list; budget, response_format and reasoning
field by field).
"""

from __future__ import annotations

import re
from collections.abc import MutableSequence
from dataclasses import replace

from behest._proto.agent.v1 import agent_pb2 as pb_agent
from behest._proto.agent.v1 import common_pb2 as pb_common
from behest._proto.agent.v1 import run_pb2 as pb
from behest.api import convert
from behest.api.fields import bounded
from behest.api.requests import Offer, RequestLimits, run_request
from behest.domain.agents import (
    Agent,
    AgentDefinition,
    AgentRef,
    AgentVersion,
    check_alias,
    check_name,
    parse_ref,
)
from behest.domain.callers import Caller
from behest.domain.runs import RunRequest
from behest.errors import InvalidArgument
from behest.runs.agents import AgentCatalog

MAX_DESCRIPTION_BYTES = 4 * 1024
MAX_NAMED_AGENTS = 32
# The run-shaped fields of a definition: CreateRunRequest's fields of the same names.
_RUN_FIELDS = (
    "instructions",
    "tools",
    "client_tools",
    "tool_choice",
    "approval_required_tools",
    "approve_side_effects",
    "approval_timeout_s",
    "client_tool_timeout_s",
    "budget",
    "response_format",
    "reasoning",
    "max_iterations",
    "metadata",
    "allow_sub_agents",
)
# What a CreateRunRequest needs that a definition has not: a placeholder input.
_PLACEHOLDER_INPUT = "(the input of each run)"


def name_field(value: str, field: str = "name") -> str:
    try:
        return check_name(value, field)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def alias_field(value: str) -> str:
    try:
        return check_alias(value)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def ref_field(value: str, field: str = "agent") -> AgentRef:
    try:
        return parse_ref(value, field)
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None


def as_create_request(definition: pb_agent.AgentDefinition) -> pb.CreateRunRequest:
    """The CreateRunRequest a definition stands for (its input a placeholder)."""
    request = pb.CreateRunRequest(
        provider=pb_common.ProviderId(value=definition.provider),
        model=pb_common.ModelName(value=definition.model),
        input=_PLACEHOLDER_INPUT,
    )
    for field in _RUN_FIELDS:
        value = getattr(definition, field)
        if field in ("tools", "client_tools", "approval_required_tools"):
            getattr(request, field).extend(value)
        elif field in ("budget", "response_format", "reasoning"):
            if definition.HasField(field):  # type: ignore[arg-type]
                getattr(request, field).CopyFrom(value)
        else:
            setattr(request, field, value)
    return request


def agent_definition(
    definition: pb_agent.AgentDefinition, limits: RequestLimits, offer: Offer, *, tenant: str
) -> AgentDefinition:
    """Check a definition as its CreateRunRequest (messages name `definition.FIELD`)."""
    bounded(definition.description, "definition.description", MAX_DESCRIPTION_BYTES)
    try:
        checked = run_request(as_create_request(definition), limits, offer, tenant=tenant)
    except InvalidArgument as exc:
        raise InvalidArgument(_in_definition(str(exc))) from None
    named: dict[str, tuple[str, ...]] = {}
    for field in ("sub_agents", "handoffs"):
        names = tuple(getattr(definition, field))
        if len(names) > MAX_NAMED_AGENTS:
            raise InvalidArgument(f"definition.{field}: at most {MAX_NAMED_AGENTS} agents")
        if len(set(names)) != len(names):
            raise InvalidArgument(f"definition.{field} names an agent twice")
        for i, value in enumerate(names):
            name_field(value, f"definition.{field}[{i}]")
        named[field] = names
    return AgentDefinition(
        description=definition.description,
        instructions=checked.instructions,
        provider=checked.provider,
        model=checked.model,
        tools=checked.tools,
        tool_choice=checked.tool_choice,
        waits=checked.waits,
        budget=checked.budget,
        response_format=checked.response_format,
        reasoning=checked.reasoning,
        max_iterations=checked.max_iterations,
        metadata=checked.metadata,
        allow_sub_agents=checked.allow_sub_agents,
        sub_agents=named["sub_agents"],
        handoffs=named["handoffs"],
    )


def definition_message(value: AgentDefinition) -> pb_agent.AgentDefinition:
    out = pb_agent.AgentDefinition(
        description=value.description,
        instructions=value.instructions,
        provider=value.provider,
        model=value.model,
        tools=list(value.tools),
        client_tools=convert.tool_specs(value.waits),
        tool_choice=value.tool_choice,
        approval_required_tools=list(value.waits.approval_required_tools),
        approve_side_effects=value.waits.approve_side_effects,
        approval_timeout_s=value.waits.approval_timeout_s,
        client_tool_timeout_s=value.waits.client_tool_timeout_s,
        response_format=convert.response_format(value.response_format),
        reasoning=convert.reasoning(value.reasoning),
        max_iterations=value.max_iterations,
        metadata=value.metadata,
        allow_sub_agents=value.allow_sub_agents,
        sub_agents=list(value.sub_agents),
        handoffs=list(value.handoffs),
    )
    budget = convert.budget(value.budget)
    if budget.ListFields():
        out.budget.CopyFrom(budget)
    return out


def agent_message(value: Agent) -> pb_agent.Agent:
    return pb_agent.Agent(
        name=value.name,
        latest_version=value.latest_version,
        aliases=value.aliases,
        archived=value.archived,
        created_at=convert.timestamp(value.created_at),
        updated_at=convert.timestamp(value.updated_at),
        description=value.description,
    )


def version_message(value: AgentVersion) -> pb_agent.AgentVersion:
    return pb_agent.AgentVersion(
        name=value.name,
        version=value.version,
        definition=definition_message(value.definition),
        created_at=convert.timestamp(value.created_at),
        created_by=value.created_by,
    )


def with_definition(
    request: pb.CreateRunRequest, definition: pb_agent.AgentDefinition
) -> pb.CreateRunRequest:
    """The request with every field it leaves unset taken from the definition."""
    merged = as_create_request(definition)
    merged.ClearField("input")
    for field, value in request.ListFields():
        if isinstance(value, MutableSequence):
            merged.ClearField(field.name)  # type: ignore[arg-type]  # the run's list wins
    merged.MergeFrom(request)
    merged.ClearField("agent")
    return merged


async def agent_run_request(
    request: pb.CreateRunRequest,
    limits: RequestLimits,
    offer: Offer,
    agents: AgentCatalog,
    caller: Caller,
) -> RunRequest:
    """A CreateRunRequest's run: of the agent it names (its version resolved now), or as is."""
    if not request.agent:
        return run_request(request, limits, offer, tenant=caller.tenant)
    version, pins = await agents.resolve(caller, ref_field(request.agent))
    merged = with_definition(request, definition_message(version.definition))
    return replace(run_request(merged, limits, offer, tenant=caller.tenant), agent=pins)


def _in_definition(message: str) -> str:
    """A CreateRunRequest's problem as the definition's: "definition.FIELD …" when the
    message starts with the field's name, else "definition: …"."""
    first = re.split(r"[ .\[:]", message, maxsplit=1)[0]
    known = first in pb_agent.AgentDefinition.DESCRIPTOR.fields_by_name
    return f"definition.{message}" if known else f"definition: {message}"
