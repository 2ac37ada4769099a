"""The Anthropic adapter's stream: the Messages API's server-sent events as deltas.

Stream mapping (raw server-sent events → deltas): `content_block_start` of a `tool_use` block →
ToolCallBegin; `text_delta` → TextChunk; `input_json_delta` → ToolCallArguments (empty
fragments skipped); `message_start`/`message_delta` carry usage and the stop reason;
`message_stop` → the one Finished; a `thinking` block's `thinking_delta`s → ReasoningChunks,
and the whole block (with its `signature_delta`) → a ReasoningBlock at its content_block_stop;
a `redacted_thinking` block → a ReasoningBlock as it is. Usage keeps the API's split:
`input_tokens` (neither read from nor written to the prompt cache), `cache_read_input_tokens`
→ cached input tokens, `cache_creation_input_tokens` → cache-write tokens; message_delta's
counts are cumulative and replace message_start's, field by field, when present. `ping` and
citation deltas are ignored. A stream that is cut or ends without `message_stop` is a
transient error; an `error` event is classed by its type, like the HTTP status it stands
for (overloaded_error as 529, api_error as 500, invalid_request_error as 400, …).
"""

from __future__ import annotations

import json
from typing import Any

from behest import bounded_json
from behest.domain.output import ResponseFormat
from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.providers.anthropic_request import wraps_answer
from behest.providers.base import (
    Delta,
    Finished,
    ReasoningBlock,
    ReasoningChunk,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)

_FINISH = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_CALLS,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
}
# The API's usage fields → TokenUsage's; the three input counts are disjoint.
_USAGE_FIELDS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cached_input_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}


class StreamDecoder:
    """Turns the raw stream events of one message into deltas; `finished` after message_stop.

    With a response format, a call of its answer tool is the answer: its input becomes the
    answer's text (one TextChunk once the block ends), and is never a tool call. Text the model
    writes meanwhile is held back: sent before a call of another tool or at the end, and
    dropped when the answer tool was called (the answer is the tool's input alone).
    """

    def __init__(self, response_format: ResponseFormat | None = None) -> None:
        self.finished = False
        # TokenUsage's fields by the API's names; message_delta's counts replace these.
        self._usage = dict.fromkeys(_USAGE_FIELDS.values(), 0)
        self._stop_reason: str | None = None
        self._tool_ids: dict[int, str] = {}
        self._format = response_format
        self._held: list[Delta] = []
        # The answer tool's block: its index, the input's fragments; whether it was called.
        self._answer_index: int | None = None
        self._answer: list[str] = []
        self._answered = False
        # Thinking blocks being streamed, by index: the block as the API will want it back.
        self._thinking: dict[int, dict[str, Any]] = {}

    def feed(self, event: Any) -> list[Delta]:
        if self.finished:
            return []
        match getattr(event, "type", None):
            case "message_start":
                self._take_usage(getattr(event.message, "usage", None))
            case "content_block_start":
                return self._hold(self._block_start(event.index, event.content_block))
            case "content_block_delta":
                return self._hold(self._block_delta(event.index, event.delta))
            case "content_block_stop" if event.index == self._answer_index:
                return self._answer_text()
            case "content_block_stop" if event.index in self._thinking:
                return [ReasoningBlock(self._thinking.pop(event.index))]
            case "message_delta":
                reason = getattr(event.delta, "stop_reason", None)
                if reason is not None:
                    self._stop_reason = reason
                self._take_usage(getattr(event, "usage", None))
            case "message_stop":
                self.finished = True
                if self._answered and self._stop_reason == "tool_use" and not self._tool_ids:
                    self._stop_reason = "end_turn"  # the answer tool was the only call
                reason = _FINISH.get(self._stop_reason or "", FinishReason.UNKNOWN)
                deltas = self._answer_text() if self._answer_index is not None else []
                if not self._answered:
                    deltas = [*self._held, *deltas]
                return [*deltas, Finished(reason, TokenUsage(**self._usage))]
        return []

    def _hold(self, deltas: list[Delta]) -> list[Delta]:
        """With a response format, text waits until it is known whether it is the answer."""
        if self._format is None:
            return deltas
        out: list[Delta] = []
        for delta in deltas:
            if isinstance(delta, TextChunk):
                if not self._answered:
                    self._held.append(delta)
                continue
            if isinstance(delta, ToolCallBegin) and not self._answered:
                out += self._held  # text before another tool's call is no answer
                self._held.clear()
            out.append(delta)
        return out

    def _answer_text(self) -> list[Delta]:
        """The answer tool's input, as the answer (unwrapped from {"answer": …} when its
        schema is not an object's)."""
        text = "".join(self._answer) or "{}"
        self._answer_index, self._answer = None, []
        assert self._format is not None
        if not wraps_answer(self._format):
            return [TextChunk(text)]
        try:
            value = bounded_json.parse(text)
        except bounded_json.JsonRefused:
            return [TextChunk(text)]  # not JSON: the loop says so and asks for a repair
        if not isinstance(value, dict) or "answer" not in value:
            return [TextChunk(text)]
        return [TextChunk(json.dumps(value["answer"]))]

    def _take_usage(self, usage: Any) -> None:
        """The counts `usage` has (a missing or null one keeps the earlier count)."""
        if usage is None:
            return
        for wire, name in _USAGE_FIELDS.items():
            value = getattr(usage, wire, None)
            if value is not None:
                self._usage[name] = value

    def _block_start(self, index: int, block: Any) -> list[Delta]:
        match getattr(block, "type", None):
            case "thinking":
                thought = getattr(block, "thinking", "") or ""
                signature = getattr(block, "signature", "") or ""
                self._thinking[index] = {
                    "type": "thinking",
                    "thinking": thought,
                    "signature": signature,
                }
                return [ReasoningChunk(thought)] if thought else []
            case "redacted_thinking":
                data = getattr(block, "data", "") or ""
                return [ReasoningBlock({"type": "redacted_thinking", "data": data})]
            case "text":
                text = getattr(block, "text", "") or ""
                return [TextChunk(text)] if text else []
            case "tool_use" if self._format is not None and block.name == self._format.name:
                self._answered = True
                self._held.clear()
                self._answer_index = index
                initial = getattr(block, "input", None)
                self._answer = [json.dumps(initial)] if initial else []
                return []
            case "tool_use":
                call_id = str(block.id)
                self._tool_ids[index] = call_id
                deltas: list[Delta] = [ToolCallBegin(call_id, str(block.name))]
                # The API starts a tool_use block with input {} and streams the input after it.
                initial = getattr(block, "input", None)
                if initial:
                    deltas.append(ToolCallArguments(call_id, json.dumps(initial)))
                return deltas
        return []

    def _block_delta(self, index: int, delta: Any) -> list[Delta]:
        match getattr(delta, "type", None):
            case "thinking_delta" if index in self._thinking:
                thought = getattr(delta, "thinking", "") or ""
                self._thinking[index]["thinking"] += thought
                return [ReasoningChunk(thought)] if thought else []
            case "signature_delta" if index in self._thinking:
                self._thinking[index]["signature"] += getattr(delta, "signature", "") or ""
                return []
            case "text_delta":
                return [TextChunk(delta.text)] if delta.text else []
            case "input_json_delta" if index == self._answer_index:
                self._answer.append(delta.partial_json or "")
                return []
            case "input_json_delta":
                call_id = self._tool_ids.get(index)
                if call_id is None or not delta.partial_json:
                    return []
                return [ToolCallArguments(call_id, delta.partial_json)]
        return []
