"""Transcript messages and tool calls."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from behest.domain.content import ContentPart


class Role(enum.StrEnum):
    """Who a message is from."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a model asked for; arguments are JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message of a session's transcript, ordered by `position` within the session."""

    id: str
    session_id: str
    run_id: str
    position: int
    role: Role
    text: str
    created_at: datetime
    tool_calls: tuple[ToolCall, ...] = field(default_factory=tuple)
    tool_call_id: str = ""
    tool_name: str = ""
    is_error: bool = False
    # Set on a compaction summary: it stands for the session's messages up to this position.
    summary_through: int | None = None
    # An assistant message's reasoning blocks that its provider needs back exactly on later
    # calls (Anthropic thinking blocks with their signatures, redacted_thinking): JSON text
    # of a list, as the provider sent them; "" none. Never part of the answer's text.
    reasoning_blocks: str = ""
    # A user message given as content parts (text, images, files), in order; `text` is then
    # its text parts joined. () for a plain text message.
    parts: tuple[ContentPart, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as offered to a model."""

    name: str
    description: str
    parameters_schema: dict[str, object]
