"""The AG-UI door's small pieces of either side's wire: AG-UI's version, an approval
interrupt and the answer it asks for, token usage in AG-UI's accounting, an event's JSON; and
agent.v1 messages read without importing the generated stubs (text, enum names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ag_ui.core import BaseEvent, Interrupt, TokenUsage

PROTOCOL_VERSION = "1.0"
# What an approval interrupt's answer looks like (a resume entry's payload).
DECISIONS = ("allow", "deny", "allow_always")
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "decision": {"enum": list(DECISIONS)},
        "reason": {"type": "string"},
    },
    "required": ["decision"],
}


def approval_interrupt(call: Any, expires_at: str) -> Interrupt:
    """The interrupt of a call (agent.v1.ToolCall) that waits for an approval: its id is the
    call's, a resume entry's payload decides it (APPROVAL_SCHEMA)."""
    return Interrupt(
        id=call.id,
        reason="tool_approval",
        message=f"Allow the call of tool {call.name!r} with {call.arguments or '{}'}?",
        tool_call_id=call.id,
        response_schema=APPROVAL_SCHEMA,
        expires_at=expires_at or None,
        metadata={"behest": {"tool": call.name, "arguments": call.arguments}},
    )


@dataclass(slots=True)
class Usage:
    """One provider and model's tokens over an AG-UI run, in AG-UI's accounting: cached and
    cache-write tokens inside inputTokens (behest's input_tokens leaves them out), reasoning
    inside outputTokens (as in behest's)."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cached: int = 0
    cache_write: int = 0

    def add(self, usage: Any) -> None:
        """One model call's agent.v1.TokenUsage."""
        self.input += usage.input_tokens + usage.cached_input_tokens + usage.cache_write_tokens
        self.output += usage.output_tokens
        self.reasoning += usage.reasoning_tokens
        self.cached += usage.cached_input_tokens
        self.cache_write += usage.cache_write_tokens

    def of(self, provider: str, model: str) -> TokenUsage:
        """The entry; a part behest counted none of is left out (absent: not reported)."""
        return TokenUsage(
            provider=provider or None,
            model=model or None,
            input_tokens=self.input,
            output_tokens=self.output,
            total_tokens=self.input + self.output,
            reasoning_tokens=self.reasoning or None,
            cached_input_tokens=self.cached or None,
            cache_write_input_tokens=self.cache_write or None,
        )


def text_of(message: Any) -> str:
    """A stored agent.v1.Message's text: its text parts (and JSON parts' text), in order."""
    texts = []
    for part in message.content:
        match part.WhichOneof("content"):
            case "text":
                texts.append(part.text.text)
            case "json":
                texts.append(part.json.json)
    return "\n".join(texts)


def enum_name(message: Any, field_name: str) -> str:
    """The name of an enum field's value, as the proto JSON spells it."""
    number = getattr(message, field_name)
    enum = message.DESCRIPTOR.fields_by_name[field_name].enum_type
    value = enum.values_by_number.get(number)
    return value.name if value is not None else str(number)


def encode(event: BaseEvent) -> str:
    """An AG-UI event as the JSON of one SSE data field (camelCase, absent fields left out),
    as ag_ui.encoder.EventEncoder writes it."""
    return event.model_dump_json(by_alias=True)
