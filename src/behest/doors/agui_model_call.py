"""One model call of a behest run as AG-UI events: its reasoning, its text and its tool calls
opened, streamed and closed in the order AG-UI wants (agui_events.py's Translator owns the
run; this owns what the current model call has open).

The assistant message's id is "<run id>:<sequence of its model_started>" (before any
model_started, "<run id>:0"); its reasoning messages are "…:r<n>"; tool calls keep the model's
ids. `streamed` says text or tool calls went out since the call began and were not committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ag_ui.core import (
    BaseEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    StepFinishedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)


@dataclass(slots=True)
class _Call:
    """A tool call the model is streaming: its name, the argument text sent so far."""

    name: str
    args: str = ""
    open: bool = True


class ModelCall:
    """What the current model call has open, and the AG-UI events that open and close it."""

    def __init__(self, message: str = ":0", step: str = "") -> None:
        self.message = message
        self.step = step  # the STEP_STARTED name, until its STEP_FINISHED
        self.streamed = False
        self._text = False
        self._reasoning = ""
        self._reasonings = 0
        self._calls: dict[str, _Call] = {}

    def text(self, delta: str) -> list[BaseEvent]:
        if not delta:
            return []
        out = self._close_reasoning()
        if not self._text:
            self._text = True
            out.append(TextMessageStartEvent(message_id=self.message, role="assistant"))
        self.streamed = True
        out.append(TextMessageContentEvent(message_id=self.message, delta=delta))
        return out

    def reasoning(self, delta: str) -> list[BaseEvent]:
        if not delta:
            return []
        out: list[BaseEvent] = []
        if not self._reasoning:
            self._reasonings += 1
            self._reasoning = f"{self.message}:r{self._reasonings}"
            out.append(ReasoningStartEvent(message_id=self._reasoning))
            out.append(ReasoningMessageStartEvent(message_id=self._reasoning, role="reasoning"))
        out.append(ReasoningMessageContentEvent(message_id=self._reasoning, delta=delta))
        return out

    def tool_started(self, call_id: str, name: str) -> list[BaseEvent]:
        out = self._close_reasoning()
        self._calls[call_id] = _Call(name)
        self.streamed = True
        out.append(
            ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name=name, parent_message_id=self.message
            )
        )
        return out

    def tool_args(self, call_id: str, delta: str) -> list[BaseEvent]:
        call = self._calls.get(call_id)
        if call is None or not call.open or not delta:
            return []
        call.args += delta
        return [ToolCallArgsEvent(tool_call_id=call_id, delta=delta)]

    def tool_completed(self, done: Any) -> list[BaseEvent]:
        """A tool call the model finished (started here first if its start was not seen)."""
        call = self._calls.get(done.id)
        out: list[BaseEvent] = []
        if call is None:
            out = self.tool_started(done.id, done.name)
            call = self._calls[done.id]
        if not call.open:
            return out
        if not call.args and done.arguments:
            out.append(ToolCallArgsEvent(tool_call_id=done.id, delta=done.arguments))
        call.open = False
        out.append(ToolCallEndEvent(tool_call_id=done.id))
        return out

    def close(self) -> list[BaseEvent]:
        """End whatever is open: reasoning, text, tool calls, then the step."""
        out = self._close_reasoning()
        if self._text:
            self._text = False
            out.append(TextMessageEndEvent(message_id=self.message))
        for call_id, call in self._calls.items():
            if call.open:
                call.open = False
                out.append(ToolCallEndEvent(tool_call_id=call_id))
        if self.step:
            out.append(StepFinishedEvent(step_name=self.step))
            self.step = ""
        return out

    def _close_reasoning(self) -> list[BaseEvent]:
        if not self._reasoning:
            return []
        ended, self._reasoning = self._reasoning, ""
        return [ReasoningMessageEndEvent(message_id=ended), ReasoningEndEvent(message_id=ended)]
