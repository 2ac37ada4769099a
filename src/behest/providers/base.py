"""The Provider protocol: a normalised model request in, a stream of deltas out."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Protocol

from behest.domain.messages import Message, ToolDefinition
from behest.domain.output import ResponseFormat
from behest.domain.runs import FinishReason, Reasoning
from behest.domain.spend import TokenUsage


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One model call. `call_number` counts the run's model calls from 1, retries included."""

    model: str
    messages: list[Message]
    tools: list[ToolDefinition] = field(default_factory=list)
    tool_choice: str = "auto"
    instructions: str = ""
    max_output_tokens: int | None = None
    call_number: int = 1
    # "answer" for the agent loop's calls, "summary" for a compaction's summary call,
    # "sampling" for a running tool's request (runs/sampling.py: no tools, not the run's
    # transcript).
    purpose: str = "answer"
    # Structured output: the final answer must be JSON that fits this (runs/structured.py
    # checks it); each provider asks for it its own way.
    response_format: ResponseFormat | None = None
    # How much the model should reason (None: the provider's default); each provider sends
    # the part it understands.
    reasoning: Reasoning | None = None


@dataclass(frozen=True, slots=True)
class TextChunk:
    """A piece of the answer's text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningChunk:
    """A piece of the model's reasoning (thinking): streamed apart, never the answer's text."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningBlock:
    """A whole reasoning block the provider needs back, exactly, on the run's later calls
    (Anthropic thinking with its signature, redacted_thinking): kept with the assistant
    message, never shown. `block` is the provider's own JSON object."""

    block: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCallBegin:
    """A tool call starts; its arguments follow as fragments."""

    call_id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArguments:
    """A fragment of a tool call's JSON arguments."""

    call_id: str
    fragment: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The model is done with this call."""

    reason: FinishReason
    usage: TokenUsage


Delta = TextChunk | ReasoningChunk | ReasoningBlock | ToolCallBegin | ToolCallArguments | Finished


class Provider(Protocol):
    """A model provider. `stream` raises errors from `behest.errors` (ProviderError family).

    Tool calls stream one after another: a call's arguments follow its ToolCallBegin and end
    where the next call begins (as OpenAI and Anthropic both stream them).
    """

    @property
    def name(self) -> str: ...

    def stream(self, request: ModelRequest) -> AsyncGenerator[Delta, None]:
        """Stream one model call's deltas; the last one is `Finished`."""
        ...

    async def aclose(self) -> None:
        """Release connections (called once, at shutdown)."""
        ...
