"""The OpenAI adapter's stream: `chat.completion.chunk`s as deltas (text, reasoning, tool
calls by index, the finish reason) and the usage of the last chunk."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk

from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.errors import TransientProviderError
from behest.providers.base import (
    Delta,
    Finished,
    ReasoningChunk,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)

_FINISH = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}


@dataclass(slots=True)
class _Call:
    id: str = ""
    name: str = ""
    begun: bool = False
    pending: list[str] = field(default_factory=list)


class ChunkReader:
    """Turns `chat.completion.chunk`s into deltas: text, tool calls by index, finish, usage."""

    def __init__(self) -> None:
        self.finish_reason: FinishReason | None = None
        self.usage: TokenUsage | None = None
        self._calls: dict[int, _Call] = {}

    def feed(self, chunk: ChatCompletionChunk) -> list[Delta]:
        """The deltas of one chunk (only the first choice counts)."""
        if chunk.usage is not None:
            self.usage = usage_of(chunk.usage)
        deltas: list[Delta] = []
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                thought = _reasoning_of(delta)
                if thought:
                    deltas.append(ReasoningChunk(thought))
                for text in (delta.content, delta.refusal):
                    if text:
                        deltas.append(TextChunk(text))
                for position, fragment in enumerate(delta.tool_calls or ()):
                    deltas += self._tool_fragment(position, fragment)
            if choice.finish_reason:
                deltas += self._flush()
                self.finish_reason = _FINISH.get(choice.finish_reason, FinishReason.UNKNOWN)
        return deltas

    def finished(self, provider: str) -> Finished:
        """The closing delta; a stream that never said why it stopped was cut short."""
        if self.finish_reason is None:
            raise TransientProviderError(provider, "stream ended early (no finish_reason)")
        return Finished(self.finish_reason, self.usage or TokenUsage())

    def _tool_fragment(self, position: int, fragment: Any) -> list[Delta]:
        index = fragment.index if isinstance(fragment.index, int) else position
        function = fragment.function
        call = self._calls.get(index)
        if call is None or (fragment.id and call.id and fragment.id != call.id):
            call = self._calls[index] = _Call()
        if fragment.id and not call.id:
            call.id = fragment.id
        if function is not None and function.name and not call.name:
            call.name = function.name
        if function is not None and function.arguments:
            call.pending.append(function.arguments)
        deltas: list[Delta] = []
        # Announce a call once its name is known; its id too, unless the server never sends it.
        if not call.begun and call.name and call.id:
            deltas += self._begin(call)
        if call.begun:
            deltas += [ToolCallArguments(call.id, piece) for piece in call.pending]
            call.pending.clear()
        return deltas

    def _begin(self, call: _Call) -> list[Delta]:
        call.id = call.id or f"call_{uuid.uuid4().hex[:24]}"
        call.begun = True
        return [ToolCallBegin(call.id, call.name)]

    def _flush(self) -> list[Delta]:
        """Calls still waiting for an id or a name start now (the loop reports a nameless one)."""
        deltas: list[Delta] = []
        for call in self._calls.values():
            if not call.begun:
                deltas += self._begin(call)
                deltas += [ToolCallArguments(call.id, piece) for piece in call.pending]
                call.pending.clear()
        return deltas


def _reasoning_of(delta: Any) -> str:
    """The reasoning text of a chunk's delta, which compatible servers send beside the
    content (an extra field to the SDK)."""
    extra = delta.model_extra or {}
    for name in ("reasoning_content", "reasoning"):
        value = extra.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def usage_of(usage: CompletionUsage) -> TokenUsage:
    """Chat Completions usage with the cached prompt tokens (a part of prompt_tokens) apart."""
    prompt = usage.prompt_tokens or 0
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    # A compatible server claiming more cached tokens than prompt tokens: trust the prompt.
    cached = min(cached, prompt)
    output = usage.completion_tokens or 0
    completion = usage.completion_tokens_details
    reasoning = (completion.reasoning_tokens or 0) if completion is not None else 0
    return TokenUsage(
        input_tokens=prompt - cached,
        output_tokens=output,
        cached_input_tokens=cached,
        reasoning_tokens=min(reasoning, output),
    )
