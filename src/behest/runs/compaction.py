"""Compaction policy, pure: token estimates, the context a model sees, prune, head/tail split.

The context is the latest summary (if any) followed by every message after what it stands
for. Compaction summarises everything older than the last `tail_turns` turns — a turn starts
at a user message — moving more of the tail into the summary while the tail exceeds
`keep_tokens`. Prune clears old tool results instead, with no model call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from behest.domain.content import PartKind
from behest.domain.messages import Message, Role

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
# An image costs about this much whatever its bytes (both providers scale images down to
# about a megapixel: Anthropic counts ~1,600 tokens, OpenAI up to ~1,100 at high detail).
IMAGE_TOKENS = 1600
PRUNED_TEXT = "[tool result cleared to save context]"
SUMMARY_INSTRUCTIONS = (
    "Summarise the conversation below for the assistant that continues it. Keep every fact, "
    "decision, open question, tool result and user preference that later turns may need. "
    "Answer with the summary only."
)


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A provider-neutral estimate: about four characters per token, plus a little per message;
    an image IMAGE_TOKENS, a file (PDF, text) a token per four of its bytes."""
    total = 0
    for message in messages:
        chars = len(message.text) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)
        total += chars // CHARS_PER_TOKEN + MESSAGE_OVERHEAD_TOKENS
        for part in message.parts:
            if part.kind == PartKind.IMAGE:
                total += IMAGE_TOKENS
            elif part.kind == PartKind.FILE:
                total += part.size // CHARS_PER_TOKEN
    return total


def context(transcript: Sequence[Message]) -> list[Message]:
    """What the model sees: the latest summary, then the messages it does not stand for."""
    summaries = [m for m in transcript if m.summary_through is not None]
    if not summaries:
        return list(transcript)
    latest = summaries[-1]
    through = latest.summary_through if latest.summary_through is not None else -1
    rest = [m for m in transcript if m.position > through and m.summary_through is None]
    return [latest, *rest]


def tail_start(messages: Sequence[Message], *, tail_turns: int, keep_tokens: int) -> int:
    """Index where the kept tail begins: the last `tail_turns` turns, trimmed to keep_tokens.

    Never splits an assistant's tool calls from their results: the tail starts at a user
    message, or at the summary, so everything before it can be summarised on its own.
    """
    starts = [i for i, m in enumerate(messages) if m.role == Role.USER]
    if not starts:
        return 0
    candidates = starts[-tail_turns:] if tail_turns > 0 else starts[-1:]
    for start in candidates:
        if estimate_tokens(messages[start:]) <= keep_tokens:
            return start
    return candidates[-1]


def prune(messages: Sequence[Message], *, before: int) -> list[Message]:
    """The messages with the text of tool results before index `before` cleared."""
    return [
        replace(m, text=PRUNED_TEXT) if i < before and m.role == Role.TOOL else m
        for i, m in enumerate(messages)
    ]


def render(messages: Sequence[Message]) -> str:
    """Messages as plain text for the summary call (tool calls and results spelled out)."""
    lines = []
    for message in messages:
        if message.role == Role.TOOL:
            lines.append(f"tool {message.tool_name} result: {message.text}")
            continue
        if message.text:
            lines.append(f"{message.role.value}: {message.text}")
        for call in message.tool_calls:
            lines.append(f"{message.role.value} called {call.name}({call.arguments})")
    return "\n".join(lines)
