"""Validation of incoming requests: field by field, with messages that name the field."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from behest import bounded_json
from behest._proto.agent.v1 import common_pb2 as pb_common
from behest._proto.agent.v1 import run_pb2 as pb
from behest.api.content import DEFAULT_LIMITS, ContentLimits, content_parts
from behest.api.fields import bounded
from behest.api.session_requests import session_fields
from behest.domain.content import ContentPart
from behest.domain.output import DEFAULT_NAME, ResponseFormat, remote_refs
from behest.domain.runs import (
    EFFORTS,
    MIN_THINKING_BUDGET,
    Reasoning,
    RunRequest,
    ToolChoice,
)
from behest.domain.spend import MAX_AMOUNT, RunBudget, parse_amount
from behest.domain.waits import ClientTool, WaitOptions
from behest.errors import InvalidArgument, quote
from behest.runs.sub_runs import SPAWN_TOOL
from behest.tools.server_tools import ToolNames

MAX_TOOLS = 128
MAX_ITERATIONS = 1000
# Client tools of one run, the size of one's schema and description, its name's form (what
# the providers accept as a function name).
MAX_CLIENT_TOOLS = 64
MAX_SCHEMA_BYTES = 64 * 1024
MAX_DESCRIPTION_BYTES = 4 * 1024
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLimits:
    """Documented size bounds of request fields, in bytes of UTF-8."""

    max_input_bytes: int
    max_metadata_bytes: int
    max_request_id_bytes: int
    # The longest wait a run may ask for (approval_timeout_s, client_tool_timeout_s).
    max_wait_s: int = 30 * 86_400
    content: ContentLimits = DEFAULT_LIMITS


class Offer(Protocol):
    """What this server offers a run: providers with their models, and tools."""

    def check_model(self, provider: str, model: str) -> None:
        """Raise InvalidArgument unless the provider is configured and offers the model."""
        ...

    def tool_names(self, tenant: str = "") -> ToolNames:
        """The tools a run of `tenant` may name."""
        ...

    def has_prices(self, provider: str, model: str) -> bool:
        """Whether the model's prices are configured (a cost budget needs them)."""
        ...

    def max_output_tokens(self, provider: str, model: str) -> int | None:
        """The model's most output tokens per call, when its settings say."""
        ...

    def check_content(self, provider: str, model: str, parts: Sequence[ContentPart]) -> None:
        """Raise InvalidArgument naming the first part the model cannot take."""
        ...


def run_request(
    request: pb.CreateRunRequest, limits: RequestLimits, offer: Offer, *, tenant: str = ""
) -> RunRequest:
    """Validate a CreateRunRequest into the domain's RunRequest, against what is offered."""
    provider = request.provider.value.strip()
    model = request.model.value.strip()
    if not provider:
        raise InvalidArgument("provider is required")
    if not model:
        raise InvalidArgument("model is required")
    if not request.input.strip() and not request.content:
        raise InvalidArgument("input must not be empty (or give content parts)")
    bounded(request.input, "input", limits.max_input_bytes)
    content = content_parts(
        request.content, limits.content, input_bytes=len(request.input.encode())
    )
    _check_fields(request, limits)
    tool_choice = request.tool_choice or ToolChoice.AUTO
    offer.check_model(provider, model)
    offer.check_content(provider, model, content)
    known = offer.tool_names(tenant)
    spawn = [SPAWN_TOOL] if request.allow_sub_agents else []
    waits = wait_options(request, known.with_names(spawn), limits.max_wait_s)
    budget = run_budget(request.budget, limits.max_wait_s)
    if budget.max_cost is not None and not offer.has_prices(provider, model):
        raise InvalidArgument(
            f"budget.max_cost needs prices for model {quote(model)} of provider "
            f"{quote(provider)}; its settings set none (input_price, output_price)"
        )
    client_names = [t.name for t in waits.client_tools]
    _check_tools(request.tools, tool_choice, known, client_names)
    response_format = None
    if request.HasField("response_format"):
        taken = [*(request.tools or known), *client_names, *spawn]
        response_format = run_response_format(request.response_format, taken)
    reasoning = None
    if request.HasField("reasoning"):
        reasoning = run_reasoning(request.reasoning, offer.max_output_tokens(provider, model))
    session_id, on_busy = session_fields(request, content)
    return RunRequest(
        session_id=session_id,
        provider=provider,
        model=model,
        input=request.input,
        metadata=request.metadata,
        tool_choice=tool_choice,
        client_request_id=request.client_request_id,
        instructions=request.instructions,
        tools=tuple(request.tools),
        max_iterations=request.max_iterations,
        waits=waits,
        budget=budget,
        allow_sub_agents=request.allow_sub_agents,
        response_format=response_format,
        reasoning=reasoning,
        content=content,
        start_session=request.start_session,
        on_busy=on_busy,
    )


def _check_fields(request: pb.CreateRunRequest, limits: RequestLimits) -> None:
    """The request's own fields: metadata, ids, instructions, tools, max_iterations."""
    bounded(request.metadata, "metadata", limits.max_metadata_bytes)
    bounded(request.client_request_id, "client_request_id", limits.max_request_id_bytes)
    if request.metadata:
        try:
            parsed = bounded_json.parse(request.metadata, max_bytes=limits.max_metadata_bytes)
        except bounded_json.JsonRefused as exc:
            raise InvalidArgument(f"metadata must be a JSON object; it {exc}") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument("metadata must be a JSON object (or empty)")
    bounded(request.instructions, "instructions", limits.max_input_bytes)
    if len(request.tools) > MAX_TOOLS or any(not name.strip() for name in request.tools):
        raise InvalidArgument(f"tools must be at most {MAX_TOOLS} non-empty tool names")
    if len(set(request.tools)) != len(request.tools):
        raise InvalidArgument("tools names a tool twice")
    if request.max_iterations > MAX_ITERATIONS:
        raise InvalidArgument(f"max_iterations must be at most {MAX_ITERATIONS}")


def run_reasoning(value: pb.Reasoning, max_output: int | None) -> Reasoning:
    """A run's reasoning setting: an effort of EFFORTS and/or a thinking budget of at least
    MIN_THINKING_BUDGET tokens, below the model's max_output_tokens."""
    if value.effort and value.effort not in EFFORTS:
        raise InvalidArgument(
            f"reasoning.effort must be one of {', '.join(EFFORTS)}; got {quote(value.effort)}"
        )
    budget = value.budget_tokens
    if budget and budget < MIN_THINKING_BUDGET:
        raise InvalidArgument(
            f"reasoning.budget_tokens must be at least {MIN_THINKING_BUDGET}; got {budget}"
        )
    if budget and max_output is not None and budget >= max_output:
        raise InvalidArgument(
            f"reasoning.budget_tokens must be below the model's max_output_tokens "
            f"({max_output}); got {budget}"
        )
    if not value.effort and not budget:
        raise InvalidArgument("reasoning needs effort or budget_tokens (or leave it unset)")
    return Reasoning(value.effort, budget)


def _check_tools(
    tools: Sequence[str], choice: str, known: list[str], client_tools: list[str]
) -> None:
    """Every tool named exists, and tool_choice is a mode or one of the run's tools."""
    unknown = [name for name in tools if name not in known]
    if unknown:
        raise InvalidArgument(
            f"tools: unknown tool {quote(unknown[0])} (known: {', '.join(known) or 'none'})"
        )
    if choice in set(ToolChoice) or choice in (tools or known) or choice in client_tools:
        return
    raise InvalidArgument(
        "tool_choice must be auto, none, required or the name of a tool this run may use; "
        f"got {quote(choice)}"
    )


def run_response_format(value: pb.ResponseFormat, taken: Sequence[str]) -> ResponseFormat:
    """A run's response format: a name (default "final_answer") that no tool of the run has,
    and a bounded, valid JSON Schema (a JSON object; the answer it describes may be any JSON
    value) that refers only within itself."""
    name = value.name or DEFAULT_NAME
    if not TOOL_NAME.match(name):
        raise InvalidArgument(
            f"response_format.name must be 1 to 64 letters, digits, '_' or '-'; got {quote(name)}"
        )
    if name in taken:
        raise InvalidArgument(
            f"response_format.name {quote(name)} is the name of a tool this run may use; "
            "name it otherwise"
        )
    if not value.json_schema.strip():
        raise InvalidArgument(
            "response_format.json_schema is required: the JSON Schema of the answer, as JSON text"
        )
    schema = _json_schema(value.json_schema, "response_format.json_schema")
    remote = remote_refs(schema)
    if remote:
        raise InvalidArgument(
            'response_format.json_schema may only refer within itself ($ref "#…"); '
            f"got $ref {quote(remote[0])}"
        )
    return ResponseFormat(name, schema)


# --- runs that wait ---------------------------------------------------------------------


def wait_options(request: pb.CreateRunRequest, known: list[str], max_wait_s: int) -> WaitOptions:
    """The run's client tools, the tools it wants approved, and its timeouts."""
    if len(request.client_tools) > MAX_CLIENT_TOOLS:
        raise InvalidArgument(f"client_tools: at most {MAX_CLIENT_TOOLS} tools")
    client_tools = tuple(_client_tool(spec, i) for i, spec in enumerate(request.client_tools))
    names = [t.name for t in client_tools]
    twice = {n for n in names if names.count(n) > 1}
    if twice:
        raise InvalidArgument(f"client_tools: two tools are named {quote(min(twice))}")
    clash = sorted(set(names) & set(known))
    if clash:
        raise InvalidArgument(
            f"client_tools: {quote(clash[0])} is the name of a server tool; name it otherwise"
        )
    approved = tuple(request.approval_required_tools)
    if len(approved) > MAX_TOOLS or len(set(approved)) != len(approved):
        raise InvalidArgument(
            f"approval_required_tools must be at most {MAX_TOOLS} distinct tool names"
        )
    unknown = [name for name in approved if name not in known]
    if unknown:
        raise InvalidArgument(
            f"approval_required_tools: unknown server tool {quote(unknown[0])} "
            f"(known: {', '.join(known) or 'none'})"
        )
    for field in ("approval_timeout_s", "client_tool_timeout_s"):
        if getattr(request, field) > max_wait_s:
            raise InvalidArgument(f"{field} must be at most {max_wait_s} seconds")
    return WaitOptions(
        client_tools=client_tools,
        approval_required_tools=approved,
        approve_side_effects=request.approve_side_effects,
        approval_timeout_s=request.approval_timeout_s,
        client_tool_timeout_s=request.client_tool_timeout_s,
    )


def _client_tool(spec: pb_common.ToolSpec, index: int) -> ClientTool:
    where = f"client_tools[{index}]"
    if not TOOL_NAME.match(spec.name):
        raise InvalidArgument(
            f"{where}.name must be 1 to 64 letters, digits, '_' or '-'; got {quote(spec.name)}"
        )
    bounded(spec.description, f"{where}.description", MAX_DESCRIPTION_BYTES)
    schema: dict[str, Any] = {"type": "object", "properties": {}}
    if spec.parameters_schema:
        schema = _json_schema(spec.parameters_schema, f"{where}.parameters_schema")
    if schema.get("type", "object") != "object":
        raise InvalidArgument(f"{where}.parameters_schema must be a JSON Schema of an object")
    return ClientTool(name=spec.name, description=spec.description, parameters_schema=schema)


def _json_schema(text: str, where: str) -> dict[str, Any]:
    """A JSON Schema from outside: bounded JSON, an object, a valid Draft 2020-12 schema."""
    try:
        schema = bounded_json.parse(text, max_bytes=MAX_SCHEMA_BYTES)
    except bounded_json.JsonRefused as exc:
        raise InvalidArgument(f"{where}: the JSON text {exc}") from None
    if not isinstance(schema, dict):
        raise InvalidArgument(
            f'{where} must be a JSON Schema object, like {{"type": "object", "properties": {{…}}}}'
        )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise InvalidArgument(f"{where} is not a valid JSON Schema: {exc.message[:200]}") from None
    return schema


# --- spend ------------------------------------------------------------------------------

MAX_BUDGET_TOKENS = 10**12


def run_budget(value: pb.RunBudget, max_wait_s: int) -> RunBudget:
    """A run's budget: numbers in range, max_cost a decimal string."""
    if value.max_tokens > MAX_BUDGET_TOKENS:
        raise InvalidArgument(f"budget.max_tokens must be at most {MAX_BUDGET_TOKENS}")
    if value.max_wall_seconds > max_wall(max_wait_s):
        raise InvalidArgument(f"budget.max_wall_seconds must be at most {max_wall(max_wait_s)}")
    max_cost = None
    if value.max_cost:
        max_cost = amount(value.max_cost, "budget.max_cost")
    return RunBudget(
        max_tokens=value.max_tokens,
        max_tool_calls=value.max_tool_calls,
        max_wall_seconds=value.max_wall_seconds,
        max_cost=max_cost,
    )


def max_wall(max_wait_s: int) -> int:
    """The longest wall-clock budget: a run may wait as long as max_wait_s, and then some."""
    return max_wait_s + 86_400


def amount(text: str, field: str) -> Decimal:
    """A decimal amount of money from a client: plain digits (no exponent, sign or blanks)."""
    if len(text) > 40 or not re.fullmatch(r"\d+(\.\d+)?", text):
        raise InvalidArgument(f'{field} must be a decimal amount like "0.50"; got {quote(text)}')
    try:
        return parse_amount(text, maximum=MAX_AMOUNT)
    except ValueError as exc:
        raise InvalidArgument(f"{field}: {exc}") from None
