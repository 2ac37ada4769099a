"""Runs that wait: tool calls held for an approval or run by the client, and their answers.

When the model calls a tool that needs an approval, or one of the run's client tools, the run
stops at a durable point (status WAITING_FOR_INPUT) with one PendingCall per such call. An
answer is stored once per call; when every call has one (or has expired), the run goes on
from its snapshot on whichever node claims it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from behest.domain.executions import Verdict


class WaitKind(enum.IntEnum):
    """What a pending call waits for; values match agent.v1.PendingCallKind."""

    APPROVAL = 1
    CLIENT_TOOL = 2
    # Its execution's outcome is unknown: a reconciliation (domain/executions.py Verdict).
    OUTCOME_UNKNOWN = 3
    # A running tool asked the user a question (an elicitation): runs/asking.py.
    ELICITATION = 4


class Decision(enum.IntEnum):
    """How an approval was decided; values match agent.v1.ApprovalDecision."""

    ALLOW = 1
    DENY = 2
    ALLOW_ALWAYS = 3
    TIMED_OUT = 4

    @property
    def allows(self) -> bool:
        return self in (Decision.ALLOW, Decision.ALLOW_ALWAYS)


class ElicitAction(enum.IntEnum):
    """How a question was answered (MCP's elicitation actions); values match
    agent.v1.ElicitationAction."""

    ACCEPT = 1
    DECLINE = 2
    CANCEL = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """What a running tool asked the user (an elicitation): a message, and the JSON Schema
    an accepted answer's content must fit (MCP: a flat object of primitive properties)."""

    call_id: str
    message: str
    schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reply:
    """What a tool gets back for its question: the action, and with ACCEPT the content."""

    action: ElicitAction
    content: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientTool:
    """A tool the caller runs itself, declared in CreateRunRequest."""

    name: str
    description: str
    parameters_schema: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitOptions:
    """A run's options for waiting, as given at creation (0 timeouts: the server's)."""

    client_tools: tuple[ClientTool, ...] = ()
    approval_required_tools: tuple[str, ...] = ()
    approve_side_effects: bool = False
    approval_timeout_s: int = 0
    client_tool_timeout_s: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """An answer to one pending call from outside: a decision (approvals), a result (client
    tools: `text` is the output, `is_error` marks a failure), a verdict (an outcome unknown:
    with RAN, `text` and `is_error` are the result; otherwise `text` says why) or an action
    (a question: with ACCEPT, `text` is the content, a JSON object)."""

    call_id: str
    decision: Decision | None = None
    text: str = ""
    is_error: bool = False
    verdict: Verdict | None = None
    action: ElicitAction | None = None

    def same_as(self, other: Answer) -> bool:
        return (self.decision, self.text, self.is_error, self.verdict, self.action) == (
            other.decision,
            other.text,
            other.is_error,
            other.verdict,
            other.action,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingCall:
    """A tool call a run waits for, and its answer once there is one."""

    run_id: str
    call_id: str
    session_id: str
    tenant: str
    kind: WaitKind
    tool_name: str
    arguments: str
    # The order of the call in the model's turn.
    ordinal: int
    requested_at: datetime
    expires_at: datetime
    answer: Answer | None = None
    answered_by: str = ""
    answered_at: datetime | None = None
    # No answer came in time and the run went on without one (answer None, answered_at set).
    timed_out: bool = False
    # With OUTCOME_UNKNOWN: the execution to reconcile.
    execution_id: str = ""
    # With ELICITATION: the question (`call_id` is then the question's id, Question.call_id
    # the tool call that asked).
    question: Question | None = None

    def expired(self, now: datetime) -> bool:
        return self.timed_out or (self.answer is None and self.expires_at <= now)


@dataclass(frozen=True, slots=True)
class Submitted:
    """The outcome of storing answers: the run's calls that still wait for one."""

    waiting_call_ids: tuple[str, ...]
