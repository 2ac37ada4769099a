"""What the client's methods return and take: behest's own frozen types, never wire messages.

Results keep the message they were read from as `.raw` (excluded from equality and repr),
for fields these types do not cover yet. Times are aware datetimes in UTC, or None when the
server left them unset; money is the exact decimal text the server wrote (`Cost.value` reads
it as a Decimal).
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from behest.client._enums import (
    FailureCode,
    FinishReason,
    PendingCallKind,
    RunStatus,
)
from behest.client._records import Elicitation


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens counted by the provider."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Cost:
    """An amount of money: exact decimal text and its currency."""

    amount: str
    currency: str

    @property
    def value(self) -> Decimal:
        """The amount as an exact Decimal."""
        return Decimal(self.amount)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model made; `arguments` is its JSON text as the model wrote it."""

    id: str
    name: str
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model is told of it; `parameters_schema` is JSON Schema text."""

    name: str
    description: str = ""
    parameters_schema: str = ""


@dataclass(frozen=True, slots=True)
class TextPart:
    """Text in a message."""

    text: str


@dataclass(frozen=True, slots=True)
class JsonPart:
    """A JSON value in a message, as text."""

    json: str


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image: an https `url`, or `data` with its `mime_type`; read back as a reference."""

    url: str = ""
    mime_type: str = ""
    data: bytes = b""
    digest: str = ""
    size_bytes: int = 0


@dataclass(frozen=True, slots=True)
class FilePart:
    """A file (PDF, text) with its media type; read back as a reference."""

    mime_type: str = ""
    data: bytes = b""
    filename: str = ""
    digest: str = ""
    size_bytes: int = 0


ContentPart = TextPart | JsonPart | ImagePart | FilePart


def attachment(path: str | Path) -> ImagePart | FilePart:
    """A file as a content part: an image by its media type (guessed from its name), or a PDF
    or text file; ValueError for a type that is neither, OSError when it cannot be read."""
    path = Path(path)
    media_type = mimetypes.guess_type(path.name)[0] or ""
    if media_type.startswith("image/"):
        return ImagePart(mime_type=media_type, data=path.read_bytes())
    if media_type in ("application/pdf", "text/plain"):
        return FilePart(mime_type=media_type, data=path.read_bytes(), filename=path.name)
    raise ValueError(
        f"{path.name}: attach images, PDFs or .txt files (its type: {media_type or 'unknown'})"
    )


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """The final answer must be JSON valid against `json_schema` (JSON Schema text)."""

    json_schema: str
    name: str = ""


@dataclass(frozen=True, slots=True)
class Reasoning:
    """How much the model should reason: an effort (low, medium, high) or a token budget."""

    effort: str = ""
    budget_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Budget:
    """A run's limits (0 or "": none); `max_cost` is a decimal amount."""

    max_tokens: int = 0
    max_tool_calls: int = 0
    max_wall_seconds: int = 0
    max_cost: str = ""


@dataclass(frozen=True, slots=True)
class CreatedRun:
    """What create_run made: the run and the session it belongs to (`steered`: none was
    made; the input joined the session's active run `run_id`, RunOptions.on_busy STEER)."""

    run_id: str
    session_id: str
    steered: bool = False
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Run:
    """A run's record."""

    id: str
    session_id: str
    status: RunStatus
    provider: str
    model: str
    metadata: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    instructions: str = ""
    tools: tuple[str, ...] = ()
    max_iterations: int = 0
    tool_choice: str = ""
    client_tools: tuple[ToolSpec, ...] = ()
    approval_required_tools: tuple[str, ...] = ()
    approve_side_effects: bool = False
    approval_timeout_s: int = 0
    client_tool_timeout_s: int = 0
    usage: TokenUsage = TokenUsage()
    cost: Cost | None = None
    error: str = ""
    failure_code: FailureCode = FailureCode.UNSPECIFIED
    budget: Budget | None = None
    parent_run_id: str = ""
    allow_sub_agents: bool = False
    response_format: ResponseFormat | None = None
    reasoning: Reasoning | None = None
    # The agent the run is of and the version it resolved to at its start ("" and 0: none);
    # after a handoff, the agent it is under now.
    agent_name: str = ""
    agent_version: int = 0
    current_agent: str = ""
    current_agent_version: int = 0
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Message:
    """A message of a session's transcript."""

    id: str
    session_id: str
    role: str
    content: tuple[ContentPart, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    tool_name: str = ""
    created_at: datetime | None = None
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)

    @property
    def text(self) -> str:
        """The message's text parts, joined."""
        return "".join(part.text for part in self.content if isinstance(part, TextPart))


@dataclass(frozen=True, slots=True)
class Output:
    """What a finished run produced; `structured_output` is the parsed JSON answer, if any."""

    run_id: str
    session_id: str
    iterations: int
    finish_reason: FinishReason
    usage: TokenUsage
    messages: tuple[Message, ...] = ()
    cost: Cost | None = None
    structured_output: Any = None
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call a run waits for: an approval, a client tool's result, a reconciliation or the
    answer to a question (its `call` then has the elicitation id and the tool's name)."""

    call: ToolCall
    kind: PendingCallKind
    requested_at: datetime | None = None
    expires_at: datetime | None = None
    # With OUTCOME_UNKNOWN: the execution to reconcile.
    execution_id: str = ""
    # With ELICITATION: the question.
    elicitation: Elicitation | None = None
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Session:
    """A session: its runs and transcript, counted."""

    id: str
    created_at: datetime | None = None
    updated_at: datetime | None = None
    active_run_id: str = ""
    run_count: int = 0
    message_count: int = 0
    # A fork (fork_session): the session it shares its history with, through this position.
    parent_session_id: str = ""
    forked_through_position: int = 0
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool runs may use: where it comes from and what the loop may do with it."""

    name: str
    description: str = ""
    parameters_schema: str = ""
    source: str = ""
    read_only: bool = False
    concurrency_safe: bool = False
    idempotent: bool = False
    requires_approval: bool = False
    timeout_s: float = 0.0
    # With source "worker": how many live workers serve it.
    workers: int = 0
    # Why the server does not offer it to models ("" when it does), e.g. an MCP tool that
    # requires task-augmented execution.
    unsupported: str = ""
    # Why it is unavailable now ("" when it is): an MCP server's tool while the server is down.
    unavailable_reason: str = ""
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Model:
    """A provider's model: limits, and prices per million tokens (decimal text)."""

    name: str
    context_window: int = 0
    max_output_tokens: int = 0
    input_price: str = ""
    output_price: str = ""
    cached_input_price: str = ""
    cache_write_price: str = ""
    currency: str = ""
    input_media: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Provider:
    """A configured provider and its models (never its key)."""

    id: str
    type: str
    base_url: str = ""
    default_model: str = ""
    models: tuple[Model, ...] = ()
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class DailyUsage:
    """One UTC day of a tenant's runs: how many, their tokens and cost."""

    day: str
    runs: int
    usage: TokenUsage
    cost: Cost | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and cost per UTC day, and their total."""

    days: tuple[DailyUsage, ...]
    usage: TokenUsage
    cost: Cost | None = None
    raw: Any = field(default=None, repr=False, compare=False, kw_only=True)
