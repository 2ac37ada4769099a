"""One model call's streamed deltas, assembled into a turn while each is emitted as an event.

Text goes out through a TextCoalescer, and the model's reasoning through another (as
ReasoningDelta events, never in the turn's text); a tool call is announced (ToolCallStarted), its
argument fragments streamed (ToolCallDelta), and it is completed (ToolCallCompleted) where the
next call begins or the stream ends. Any other event first flushes pending text, so the order
of the log is the order of the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from behest.domain import events as ev
from behest.domain.messages import ToolCall
from behest.domain.runs import FinishReason
from behest.domain.spend import TokenUsage
from behest.events.run_log import RunLog
from behest.providers.base import (
    Delta,
    Finished,
    ReasoningBlock,
    ReasoningChunk,
    TextChunk,
    ToolCallArguments,
    ToolCallBegin,
)
from behest.runs.text_coalescer import TextCoalescer


@dataclass(slots=True)
class Turn:
    """What a model call answered."""

    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    finish_reason: FinishReason = FinishReason.UNKNOWN
    usage: TokenUsage = field(default_factory=TokenUsage)
    # Reasoning blocks the provider needs back exactly (kept with the assistant message).
    reasoning_blocks: list[dict[str, Any]] = field(default_factory=list)


class TurnAssembler:
    """Feed it a model call's deltas with `take`; `finish` returns the turn."""

    def __init__(self, log: RunLog, *, coalesce_text: bool) -> None:
        self._log = log
        self._text = TextCoalescer(log, enabled=coalesce_text)
        self._reasoning = TextCoalescer(log, enabled=coalesce_text, event=ev.ReasoningDelta)
        self.turn = Turn()
        # The tool call whose arguments are streaming: (id, name, fragments so far).
        self._open_call: tuple[str, str, list[str]] | None = None

    async def take(self, delta: Delta) -> None:
        """One streamed delta: emit its event and add it to the turn."""
        if not isinstance(delta, TextChunk):
            await self._text.flush()
        if not isinstance(delta, ReasoningChunk):
            await self._reasoning.flush()
        match delta:
            case TextChunk(chunk):
                self.turn.text += chunk
                await self._text.add(chunk)
            case ReasoningChunk(chunk):
                await self._reasoning.add(chunk)
            case ReasoningBlock(block):
                self.turn.reasoning_blocks.append(block)
            case ToolCallBegin(call_id, name):
                await self._complete_call()
                self._open_call = (call_id, name, [])
                await self._log.emit(ev.ToolCallStarted(call_id, name))
            case ToolCallArguments(call_id, fragment):
                if self._open_call is not None and self._open_call[0] == call_id:
                    self._open_call[2].append(fragment)
                await self._log.emit(ev.ToolCallDelta(call_id, fragment))
            case Finished(reason, usage):
                self.turn.finish_reason, self.turn.usage = reason, usage

    async def finish(self) -> Turn:
        """The stream ended well: emit what is pending and return the turn."""
        await self._reasoning.flush()
        await self._text.flush()
        await self._complete_call()
        return self.turn

    async def flush(self) -> None:
        """The stream failed: still show the text it sent (a retry's ModelStarted voids it)."""
        await self._reasoning.flush()
        await self._text.flush()

    def discard(self) -> None:
        """The call was cancelled: drop text not yet emitted."""
        self._reasoning.discard()
        self._text.discard()

    async def _complete_call(self) -> None:
        if self._open_call is None:
            return
        call_id, name, fragments = self._open_call
        self._open_call = None
        call = ToolCall(call_id, name, "".join(fragments) or "{}")
        self.turn.calls.append(call)
        await self._log.emit(ev.ToolCallCompleted(call))
