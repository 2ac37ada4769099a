"""A run's row ⇄ Run: its columns, with the options nearly every run leaves empty
(waits, budget, response format, reasoning) written and read back as shared constants."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType, SimpleNamespace
from typing import Any

from behest.domain.output import ResponseFormat
from behest.domain.runs import Cancel, FinishReason, Reasoning, Run, RunAgent, RunStatus
from behest.domain.spend import CancelSource, FailureCode, RunBudget
from behest.domain.waits import ClientTool, WaitOptions
from behest.store.sql.rows import money_from_row, usage_from_row, utc

NO_WAITS = WaitOptions()
# The columns of NO_WAITS, which nearly every run has: built once, not per creation.
NO_WAITS_COLUMNS: Mapping[str, Any] = MappingProxyType(
    {
        "client_tools": "[]",
        "approval_required_tools": "[]",
        "approve_side_effects": False,
        "approval_timeout_s": 0,
        "client_tool_timeout_s": 0,
    }
)
# The columns of a run without a response format (nearly every run), likewise.
NO_FORMAT_COLUMNS: Mapping[str, Any] = MappingProxyType(
    {"response_format_name": "", "response_format_schema": "", "output": None}
)
NO_REASONING_COLUMNS: Mapping[str, Any] = MappingProxyType(
    {"reasoning_effort": "", "reasoning_budget_tokens": 0}
)
NO_BUDGET = RunBudget()
# The columns of NO_BUDGET, likewise.
NO_BUDGET_COLUMNS: Mapping[str, Any] = MappingProxyType(
    {"max_tokens": 0, "max_tool_calls": 0, "max_wall_seconds": 0, "max_cost": None}
)


def run_from_values(values: dict[str, Any]) -> Run:
    """The Run a freshly inserted row of `values` reads back as."""
    return run_from_row(SimpleNamespace(**values))


def run_from_row(row: Any) -> Run:
    return Run(
        id=row.id,
        session_id=row.session_id,
        status=RunStatus(row.status),
        provider=row.provider,
        model=row.model,
        input=row.input,
        metadata=row.metadata,
        tool_choice=row.tool_choice,
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
        iterations=row.iterations,
        finish_reason=FinishReason(row.finish_reason),
        usage=usage_from_row(row),
        error=row.error,
        traceparent=row.traceparent,
        instructions=row.instructions,
        tools=tuple(json.loads(row.tools)),
        max_iterations=row.max_iterations,
        owner=row.owner or "",
        lease_expires_at=row.lease_expires_at and utc(row.lease_expires_at),
        lease_generation=row.lease_generation,
        tenant=row.tenant,
        waits=waits_from_row(row),
        budget=budget_from_row(row),
        cost=money_from_row(row),
        failure_code=FailureCode(row.failure_code),
        allow_sub_agents=bool(row.allow_sub_agents),
        parent_run_id=row.parent_run_id or "",
        depth=row.depth,
        cancel_request=cancel_from_row(row),
        response_format=response_format_from_row(row),
        output=row.output,
        reasoning=reasoning_from_row(row),
        agent=agent_from_row(row),
        current_agent=row.current_agent,
        queued_after=row.queued_after,
        queued=row.queued_at is not None,
    )


NO_AGENT_COLUMNS: Mapping[str, Any] = MappingProxyType(
    {"agent_name": "", "agent_version": 0, "agent_pins": "{}", "current_agent": ""}
)


def agent_to_columns(agent: RunAgent | None) -> Mapping[str, Any]:
    """The runs columns of the agent a new run is of ('' and 0: none)."""
    if agent is None:
        return NO_AGENT_COLUMNS
    return {
        "agent_name": agent.name,
        "agent_version": agent.version,
        "agent_pins": json.dumps(dict(agent.pins), separators=(",", ":"), sort_keys=True),
        "current_agent": "",
    }


def agent_from_row(row: Any) -> RunAgent | None:
    if not row.agent_name:
        return None
    pins = json.loads(row.agent_pins)
    return RunAgent(row.agent_name, row.agent_version, tuple(sorted(pins.items())))


def response_format_to_columns(value: ResponseFormat | None) -> Mapping[str, Any]:
    """The runs columns of a new run's response format (no output yet)."""
    if value is None:
        return NO_FORMAT_COLUMNS
    return {
        "response_format_name": value.name,
        "response_format_schema": value.schema_text,
        "output": None,
    }


def reasoning_to_columns(value: Reasoning | None) -> Mapping[str, Any]:
    """The runs columns of a run's reasoning setting ('' and 0: none)."""
    if value is None:
        return NO_REASONING_COLUMNS
    return {"reasoning_effort": value.effort, "reasoning_budget_tokens": value.budget_tokens}


def reasoning_from_row(row: Any) -> Reasoning | None:
    if not row.reasoning_effort and not row.reasoning_budget_tokens:
        return None
    return Reasoning(row.reasoning_effort, row.reasoning_budget_tokens)


def response_format_from_row(row: Any) -> ResponseFormat | None:
    if not row.response_format_name:
        return None
    return ResponseFormat(row.response_format_name, json.loads(row.response_format_schema))


def cancel_from_row(row: Any) -> Cancel | None:
    """The cancel asked of a run another node executed (None: none was)."""
    if row.cancel_requested_at is None:
        return None
    return Cancel(row.cancel_by, row.cancel_reason, CancelSource(row.cancel_source))


def decimal_text(amount: Decimal | None) -> str | None:
    """How an exact amount is stored: str(Decimal), which Decimal(text) reads back as is."""
    return None if amount is None else str(amount)


def budget_to_columns(budget: RunBudget) -> Mapping[str, Any]:
    """The runs columns of a run's budget."""
    if budget == NO_BUDGET:
        return NO_BUDGET_COLUMNS
    return {
        "max_tokens": budget.max_tokens,
        "max_tool_calls": budget.max_tool_calls,
        "max_wall_seconds": budget.max_wall_seconds,
        "max_cost": decimal_text(budget.max_cost),
    }


def budget_from_row(row: Any) -> RunBudget:
    if (
        not row.max_tokens
        and not row.max_tool_calls
        and not row.max_wall_seconds
        and row.max_cost is None
    ):
        return NO_BUDGET  # frozen, so one instance serves every run without a budget
    return RunBudget(
        max_tokens=row.max_tokens,
        max_tool_calls=row.max_tool_calls,
        max_wall_seconds=row.max_wall_seconds,
        max_cost=None if row.max_cost is None else Decimal(row.max_cost),
    )


def waits_to_columns(waits: WaitOptions) -> Mapping[str, Any]:
    """The runs columns of a run's options for waiting."""
    if waits == NO_WAITS:
        return NO_WAITS_COLUMNS
    tools = [
        {"name": c.name, "description": c.description, "parameters_schema": c.parameters_schema}
        for c in waits.client_tools
    ]
    return {
        "client_tools": json.dumps(tools, separators=(",", ":")),
        "approval_required_tools": json.dumps(list(waits.approval_required_tools)),
        "approve_side_effects": waits.approve_side_effects,
        "approval_timeout_s": waits.approval_timeout_s,
        "client_tool_timeout_s": waits.client_tool_timeout_s,
    }


def waits_from_row(row: Any) -> WaitOptions:
    if (
        row.client_tools == "[]"
        and row.approval_required_tools == "[]"
        and not row.approve_side_effects
        and not row.approval_timeout_s
        and not row.client_tool_timeout_s
    ):
        return NO_WAITS  # frozen, so one instance serves every run that waits for nothing
    return WaitOptions(
        client_tools=tuple(ClientTool(**tool) for tool in json.loads(row.client_tools)),
        approval_required_tools=tuple(json.loads(row.approval_required_tools)),
        approve_side_effects=bool(row.approve_side_effects),
        approval_timeout_s=row.approval_timeout_s,
        client_tool_timeout_s=row.client_tool_timeout_s,
    )
