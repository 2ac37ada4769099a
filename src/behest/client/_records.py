"""The client's types of tool executions (ToolExecutionService): an execution, its
transitions, and what a reconciliation did; a question a running tool asked (a pending
call's); and a stream ticket (RunService)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from behest.client._enums import ExecutionStatus, Verdict


@dataclass(frozen=True, slots=True)
class ExecutionTransition:
    """One change of a tool execution's status: when, by whom ("node NAME" or a principal)
    and why."""

    status: ExecutionStatus
    at: datetime | None = None
    actor: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ToolExecution:
    """One execution (one attempt) of a tool call, and, from get_tool_execution, its
    transitions oldest first."""

    id: str
    run_id: str
    call_id: str
    tool_name: str
    source: str
    attempt: int
    status: ExecutionStatus
    executor: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    result: str = ""
    is_error: bool = False
    result_digest: str = ""
    idempotency_key: str = ""
    idempotent: bool = False
    verdict: Verdict = Verdict.UNSPECIFIED
    transitions: tuple[ExecutionTransition, ...] = ()
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What reconcile did: the execution as now stored, and the run's calls still waiting
    (none: the run goes on)."""

    execution: ToolExecution
    waiting_call_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamTicket:
    """A short-lived ticket that opens one run's server-sent events without the token in the
    URL (`GET /v1/runs/RUN_ID/events?ticket=…`, for a browser's EventSource; docs/HTTP.md).
    A secret until it expires: hand it to the page that follows the run, and log it nowhere."""

    ticket: str = field(repr=False)
    expires_at: datetime | None = None
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Elicitation:
    """A question a running tool asked the user: answered by its `elicitation_id`, by an
    accepted answer whose content (a JSON object) fits `requested_schema` (JSON text;
    `schema`: parsed)."""

    elicitation_id: str
    call_id: str  # the tool call that asked
    tool_name: str
    message: str
    requested_schema: str = ""
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)

    @property
    def schema(self) -> dict[str, Any]:
        return json_object(self.requested_schema)


def json_object(text: str) -> dict[str, Any]:
    """JSON text of an object as a dict; {} for anything else."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
