"""Message content on spans (only with trace_content): GenAI `gen_ai.input.messages` and
`gen_ai.output.messages` JSON, each cut to MAX_CONTENT_CHARS."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from behest.domain.messages import Message, Role, ToolCall

# Message content in a span attribute (trace_content) is cut to this many characters.
MAX_CONTENT_CHARS = 32_768


def content(text: str) -> str:
    """Message content for a span attribute (trace_content on), cut to MAX_CONTENT_CHARS."""
    return text if len(text) <= MAX_CONTENT_CHARS else text[:MAX_CONTENT_CHARS] + "…"


def messages_content(messages: Sequence[Message]) -> str:
    """Messages as GenAI `gen_ai.input.messages` JSON: role, text, tool calls and results."""
    return content(json.dumps([_message(m) for m in messages], ensure_ascii=False))


def output_content(text: str, calls: Iterable[ToolCall]) -> str:
    """A model's answer as GenAI `gen_ai.output.messages` JSON."""
    parts: list[dict[str, str]] = [{"type": "text", "content": text}] if text else []
    parts += [_call_part(c) for c in calls]
    return content(json.dumps([{"role": "assistant", "parts": parts}], ensure_ascii=False))


def _message(message: Message) -> dict[str, Any]:
    parts: list[dict[str, str]] = []
    if message.role == Role.TOOL:
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.text}
        )
    elif message.text:
        parts.append({"type": "text", "content": message.text})
    parts += [_call_part(c) for c in message.tool_calls]
    return {"role": str(message.role), "parts": parts}


def _call_part(call: ToolCall) -> dict[str, str]:
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
