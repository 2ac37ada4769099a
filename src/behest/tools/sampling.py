"""A running tool's request for a model's answer (MCP sampling, or a plugin tool's
`ToolContext.sample`), answered by the run's own provider and model (runs/sampling.py).

Plain text in and out: a conversation of user and assistant turns, an optional system
prompt and a bound on the answer's tokens. behest samples without tools.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Bounds of one request from a tool (an MCP server is outside behest).
MAX_MESSAGES = 100
MAX_TEXT_BYTES = 256 * 1024


class SamplingRefused(Exception):
    """behest did not answer a tool's sampling request; the message says why (the tool, or
    its MCP server, is told)."""


@dataclass(frozen=True, slots=True)
class SampledTurn:
    """One turn of the conversation to answer."""

    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingRequest:
    """What the tool asks the model: answer `turns` (the last is the user's), following
    `system_prompt`, in at most `max_tokens` tokens."""

    turns: tuple[SampledTurn, ...]
    system_prompt: str = ""
    max_tokens: int = 1024

    def checked(self) -> SamplingRequest:
        """The request, once it is one behest answers (SamplingRefused: why not)."""
        if not self.turns:
            raise SamplingRefused("a sampling request needs at least one message")
        if len(self.turns) > MAX_MESSAGES:
            raise SamplingRefused(f"a sampling request has more than {MAX_MESSAGES} messages")
        if self.turns[-1].role != "user":
            raise SamplingRefused("a sampling request's last message must be the user's")
        texts = [t.text for t in self.turns] + [self.system_prompt]
        size = sum(len(text.encode(errors="replace")) for text in texts)
        if size > MAX_TEXT_BYTES:
            raise SamplingRefused(f"a sampling request's text is over {MAX_TEXT_BYTES} bytes")
        if self.max_tokens < 1:
            raise SamplingRefused("a sampling request's max_tokens must be at least 1")
        return self


@dataclass(frozen=True, slots=True)
class SamplingReply:
    """The model's answer: its text, the model that gave it, and why it stopped (MCP's
    words: "endTurn", "maxTokens", …)."""

    text: str
    model: str
    stop_reason: str = "endTurn"
