"""Runs, their status, usage and the request that creates one."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from behest.domain.callers import DEFAULT_TENANT
from behest.domain.content import ContentPart
from behest.domain.messages import Message
from behest.domain.output import ResponseFormat
from behest.domain.spend import CancelSource, FailureCode, Money, RunBudget, TokenUsage
from behest.domain.waits import WaitOptions


class RunStatus(enum.IntEnum):
    """Where a run is in the agent loop; values match agent.v1.RunStatus."""

    PENDING = 1
    SESSION_LOADED = 2
    BUILDING_CONTEXT = 3
    CALLING_MODEL = 4
    WAITING_FOR_TOOLS = 5
    PERSISTING = 6
    COMPLETED = 7
    FAILED = 8
    CANCELLED = 9
    # Waits for answers from outside (domain/waits.py); holds no task, lease or slot.
    WAITING_FOR_INPUT = 10

    @property
    def is_terminal(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class FinishReason(enum.IntEnum):
    """Why a model stopped; values match agent.v1.FinishReason."""

    UNSPECIFIED = 0
    STOP = 1
    TOOL_CALLS = 2
    LENGTH = 3
    CONTENT_FILTER = 4
    ERROR = 5
    UNKNOWN = 6


class ToolChoice(enum.StrEnum):
    """Which tools the model may (or must) call."""

    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"


class BusyPolicy(enum.IntEnum):
    """What a new run does to its session's active run (double-texting); values match
    agent.v1.BusyPolicy."""

    UNSPECIFIED = 0
    REJECT = 1
    ENQUEUE = 2
    INTERRUPT = 3
    ROLLBACK = 4
    STEER = 5

    @property
    def cancels(self) -> bool:
        return self in (BusyPolicy.INTERRUPT, BusyPolicy.ROLLBACK)


EFFORTS = ("low", "medium", "high")
MIN_THINKING_BUDGET = 1024  # Anthropic's least thinking budget


@dataclass(frozen=True, slots=True)
class Reasoning:
    """How much a reasoning model should think, per run: `effort` ("low", "medium", "high";
    "" not sent) is OpenAI's reasoning_effort, `budget_tokens` (0: none) Anthropic's thinking
    budget."""

    effort: str = ""
    budget_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RunAgent:
    """The agent a run is of: its name and version, and the versions of every agent it may
    reach through sub-agents and handoffs (itself included), fixed at its start."""

    name: str
    version: int
    pins: tuple[tuple[str, int], ...] = ()

    def pinned(self, name: str) -> int:
        """The version of `name` this run uses (0: not one it may reach)."""
        return dict(self.pins).get(name, 0)

    def current(self, current_agent: str) -> RunAgent:
        """The agent the run is under (`current_agent`: after handoffs; "": its own)."""
        if not current_agent or current_agent == self.name:
            return self
        return RunAgent(current_agent, self.pinned(current_agent), self.pins)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    """A validated request to start a run (what CreateRun carries)."""

    session_id: str | None
    provider: str
    model: str
    input: str
    metadata: str = ""
    tool_choice: str = ToolChoice.AUTO
    client_request_id: str = ""
    instructions: str = ""
    tools: tuple[str, ...] = ()
    max_iterations: int = 0
    waits: WaitOptions = field(default_factory=WaitOptions)
    budget: RunBudget = field(default_factory=RunBudget)
    allow_sub_agents: bool = False
    # Structured output: the final answer must validate against its schema.
    response_format: ResponseFormat | None = None
    # How much the model should reason (None: the provider's default).
    reasoning: Reasoning | None = None
    # The user's message as content parts beside (after) input: text, images, files.
    content: tuple[ContentPart, ...] = ()
    # With session_id: start that session (with that id) if no session has it yet.
    start_session: bool = False
    # Set by behest for a sub-agent run (never by a client): its parent, how deep it is.
    parent_run_id: str = ""
    depth: int = 0
    # The stored agent the run is of (domain/agents.py), resolved by behest; None: none.
    agent: RunAgent | None = None
    # With session_id: what to do when its run is active; the run this one cancelled to
    # start (set by behest), told in RunStarted.
    on_busy: BusyPolicy = BusyPolicy.UNSPECIFIED
    interrupted_run_id: str = ""

    def fingerprint(self) -> str:
        """What must match for a repeated client_request_id to mean the same request."""
        # Options count only when set, so keys stored before they existed still match.
        waits = [] if self.waits == WaitOptions() else [repr(self.waits)]
        if self.budget != RunBudget():
            waits.append(repr(self.budget))
        if self.allow_sub_agents:
            waits.append("sub_agents")
        if self.response_format is not None:
            waits.append(repr([self.response_format.name, self.response_format.schema_text]))
        if self.reasoning is not None:
            waits.append(repr(self.reasoning))
        if self.content:
            parts = [
                (p.kind, p.text, p.media_type, p.url, p.filename, p.digest) for p in self.content
            ]
            waits.append(repr(parts))
        if self.start_session:
            waits.append("start_session")
        if self.agent is not None:
            waits.append(repr([self.agent.name, self.agent.version]))
        if self.on_busy:
            waits.append(f"on_busy:{int(self.on_busy)}")
        body = json.dumps(
            [
                self.session_id or "",
                self.provider,
                self.model,
                self.input,
                self.metadata,
                self.tool_choice,
                self.instructions,
                list(self.tools),
                self.max_iterations,
                *waits,
            ],
            separators=(",", ":"),
        )
        return hashlib.sha256(body.encode()).hexdigest()


@dataclass(slots=True, kw_only=True)
class Run:
    """A run as stored."""

    id: str
    session_id: str
    status: RunStatus
    provider: str
    model: str
    input: str
    metadata: str
    tool_choice: str
    created_at: datetime
    updated_at: datetime
    iterations: int = 0
    finish_reason: FinishReason = FinishReason.UNSPECIFIED
    usage: TokenUsage = field(default_factory=TokenUsage)
    error: str = ""
    traceparent: str = ""
    instructions: str = ""
    tools: tuple[str, ...] = ()
    max_iterations: int = 0
    # The node executing the run, until when its claim holds, and the claim's generation
    # (it increases at every claim; a write of the run checks it).
    owner: str = ""
    lease_expires_at: datetime | None = None
    lease_generation: int = 0
    # The tenant the run belongs to (domain/callers.py).
    tenant: str = DEFAULT_TENANT
    waits: WaitOptions = field(default_factory=WaitOptions)
    # Its budget as asked for (the tenant's defaults are applied when it runs), what it cost
    # so far (None: no prices), and why it failed.
    budget: RunBudget = field(default_factory=RunBudget)
    cost: Money | None = None
    failure_code: FailureCode = FailureCode.UNSPECIFIED
    # Sub-agent runs: may it start some; the run that started it (if any) and its depth.
    allow_sub_agents: bool = False
    parent_run_id: str = ""
    depth: int = 0
    # A cancel asked while another node executed it: whoever holds the run ends it so.
    cancel_request: Cancel | None = None
    # Structured output: the format its final answer must fit, and that answer once it did
    # (compact JSON text; None: none yet, or no format).
    response_format: ResponseFormat | None = None
    output: str | None = None
    # How much the model should reason (None: the provider's default).
    reasoning: Reasoning | None = None
    # The stored agent the run is of, with its pins (None: none), and the agent it is under
    # now after handoffs ("": its own).
    agent: RunAgent | None = None
    current_agent: str = ""
    # Enqueued on its busy session (BusyPolicy.ENQUEUE): the run it waited for ("": it was
    # not), and whether it was (in its turn it becomes its session's active run).
    queued_after: str = ""
    queued: bool = False


@dataclass(frozen=True, slots=True)
class Cancel:
    """Who asked for a run to be cancelled, and why."""

    by: str = ""
    reason: str = ""
    source: CancelSource = CancelSource.CALLER


@dataclass(frozen=True, slots=True, kw_only=True)
class Steer:
    """A message sent to a session while its run was active (BusyPolicy.STEER), waiting to
    join that run's transcript before its next model call."""

    id: str
    run_id: str
    text: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CreatedRun:
    """The outcome of a create: the run, and whether this request created it (`steered`:
    none was; the message joined `run`, the session's active run)."""

    run: Run
    created: bool
    steered: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutput:
    """What a finished run produced."""

    run: Run
    messages: list[Message]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    """Which of a tenant's runs to list (ListRuns, the inspector), newest first, one page:
    of a session, in a status, of a model, created in [created_from, created_to] — each only
    when given."""

    limit: int
    offset: int = 0
    session_id: str | None = None
    status: RunStatus | None = None
    model: str = ""
    created_from: datetime | None = None
    created_to: datetime | None = None
    # Runs of this agent (its name), of this version of it (0: any).
    agent: str = ""
    agent_version: int = 0
