"""behest's AgentEvents as AG-UI 1.0 events: a pure translator of one run's events, in order
(the mapping table is docs/AG-UI.md's).

A model call is a step ("model call N") whose reasoning, text and tool calls stream as
AG-UI's; a server tool's stored result is TOOL_CALL_RESULT; run_completed, run_failed and
run_cancelled end the AG-UI run (RUN_FINISHED success, RUN_ERROR with behest's FailureCode
name, RUN_FINISHED cancelled); usage_recorded sums into their usage; kinds AG-UI has no event
for are CUSTOM "behest.<kind>". A pause ends the AG-UI run too (the protocol has no way to
wait inside one): `pause(waiting)` closes it with the interrupt outcome when approvals wait,
else with the success outcome naming the client tool calls that wait; `start(run_id)` opens
the AG-UI run that continues it.

Ids are the run's own and stable over replays: a model call's assistant message is
"<run id>:<sequence of its model_started>", its reasoning "…:r<n>"; tool calls keep the
model's ids; a tool result carries the stored tool message's id. `stale` says the client may
hold streamed material the session does not (a model call repeated after it streamed, a
repair prompt, an answer the run's end cut): a MESSAGES_SNAPSHOT is due before the run ends.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepStartedEvent,
    TokenUsage,
    ToolCallResultEvent,
)
from google.protobuf import json_format

from behest.doors.agui_model_call import ModelCall
from behest.doors.agui_wire import PROTOCOL_VERSION, Usage, approval_interrupt, enum_name, text_of

# Kinds with no AG-UI event of their own that are bookkeeping, not news.
SILENT = frozenset({"context_built", "assistant_message_committed", "usage_recorded"})
REQUESTS = frozenset({"approval_requested", "client_tool_requested"})


@dataclass(slots=True)
class _Request:
    """A call the run waits for: an approval or a client tool's result."""

    approval: bool
    call: Any  # agent.v1.ToolCall
    expires_at: str


class Translator:
    """One behest run's events → AG-UI events, for the AG-UI thread and run it serves."""

    def __init__(self, *, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id  # the AG-UI run being produced (the input's runId)
        self.open = False  # an AG-UI run is open
        self.stale = False
        self._behest_run = ""
        self._session = ""
        self._model = ModelCall()
        self._iterations: set[int] = set()
        self._client_calls: set[str] = set()
        self._requests: dict[str, _Request] = {}  # asked, until their resolution events
        self._usage: dict[tuple[str, str], Usage] = {}
        self._provider = ("", "")

    # --- the door's boundaries -------------------------------------------------------------

    def start(self, run_id: str) -> list[BaseEvent]:
        """Open the AG-UI run `run_id`, which continues this behest run after a pause."""
        self.run_id = run_id
        self.open, self.stale = True, False
        self._usage = {}
        return [self._run_started()]

    def pause(self, waiting: Collection[str]) -> list[BaseEvent]:
        """End the AG-UI run at a pause: the calls `waiting` wait for answers."""
        closing = self._model.close()
        requests = [r for call_id, r in self._requests.items() if call_id in waiting]
        approvals = [r for r in requests if r.approval]
        outcome: Any
        if approvals:
            outcome = RunFinishedInterruptOutcome(
                interrupts=[approval_interrupt(r.call, r.expires_at) for r in approvals]
            )
        else:
            pending = [r.call.id for r in requests]
            outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=pending or None)
        return [*closing, self._finished(outcome)]

    def wants_message(self, event: Any) -> str:
        """The id of the stored message `feed` needs with `event` ("" for none)."""
        if event.WhichOneof("event") != "tool_message_committed":
            return ""
        return str(event.tool_message_committed.message_id)

    # --- events ----------------------------------------------------------------------------

    def feed(self, event: Any, message: Any = None) -> list[BaseEvent]:
        """The AG-UI events of one behest event (`message`: the stored tool message a
        tool_message_committed names, when `wants_message` asked for it), stamped with its
        time."""
        out = self._translate(event, message)
        if event.HasField("timestamp"):
            stamp = event.timestamp.ToMilliseconds()
            for item in out:
                item.timestamp = stamp
        return out

    def _translate(self, event: Any, message: Any) -> list[BaseEvent]:
        kind = event.WhichOneof("event")
        payload = getattr(event, kind)
        match kind:
            case "run_started":
                return self._begin(event, payload)
            case "model_started":
                return self._model_started(event, payload)
            case "reasoning_delta":
                return self._model.reasoning(payload.delta)
            case "text_delta":
                return self._model.text(payload.delta)
            case "tool_call_started":
                return self._model.tool_started(payload.call_id, payload.tool_name)
            case "tool_call_delta":
                return self._model.tool_args(payload.call_id, payload.delta)
            case "tool_call_completed":
                return self._model.tool_completed(payload.call)
            case "assistant_message_committed":
                self._model.streamed = False
                return self._model.close()
            case "usage_recorded":
                self._add_usage(payload.usage)
                return []
            case "tool_message_committed":
                return self._tool_result(payload.message_id, message)
            case "approval_requested" | "client_tool_requested":
                self._request(kind == "approval_requested", payload)
                return []
            case "output_rejected" if payload.repairing:
                self.stale = True  # a repair prompt joins the session, not the client's view
                return [self._custom(kind, payload)]
            case "user_message_added":
                self.stale = True  # a steered message too (on_busy STEER)
                return [self._custom(kind, payload)]
            case "run_completed":
                return [*self._model.close(), self._finished(RunFinishedSuccessOutcome())]
            case "run_failed":
                return [*self._model.close(), self._failed(payload)]
            case "run_cancelled":
                outcome = RunFinishedCancelledOutcome()
                return [*self._model.close(), self._finished(outcome)]
            case _ if kind in SILENT:
                return []
            case _:
                if kind in ("approval_resolved", "client_tool_answered"):
                    self._requests.pop(payload.call_id, None)
                return [self._custom(kind, payload)]

    def _begin(self, event: Any, payload: Any) -> list[BaseEvent]:
        self._behest_run, self._session = event.run_id, payload.session_id
        self._model = ModelCall(f"{event.run_id}:0")
        self._provider = (payload.provider, payload.model)
        self.open, self.stale = True, False
        return [self._run_started()]

    def _model_started(self, event: Any, payload: Any) -> list[BaseEvent]:
        closing = self._model.close()
        if payload.iteration in self._iterations and self._model.streamed:
            self.stale = True  # a repeated call: what the last attempt streamed is void
        self._iterations.add(payload.iteration)
        self._provider = (payload.provider, payload.model)
        step = f"model call {payload.iteration}"
        self._model = ModelCall(f"{event.run_id}:{event.sequence}", step)
        return [*closing, StepStartedEvent(step_name=step)]

    def _tool_result(self, message_id: str, message: Any) -> list[BaseEvent]:
        call_id = message.tool_call_id if message is not None else ""
        if not call_id or call_id in self._client_calls:
            return []  # a client tool's result is the client's own tool message
        return [
            ToolCallResultEvent(
                message_id=message_id, tool_call_id=call_id, content=text_of(message), role="tool"
            )
        ]

    def _request(self, approval: bool, payload: Any) -> None:
        call = payload.call
        if not approval:
            self._client_calls.add(call.id)
        expires = payload.expires_at.ToJsonString() if payload.HasField("expires_at") else ""
        self._requests[call.id] = _Request(approval, call, expires)

    # --- closing and ending ----------------------------------------------------------------

    def _run_started(self) -> RunStartedEvent:
        behest = {"runId": self._behest_run, "sessionId": self._session}
        return RunStartedEvent(
            thread_id=self.thread_id,
            run_id=self.run_id,
            protocol_version=PROTOCOL_VERSION,
            metadata={"behest": behest},
        )

    def _finished(self, outcome: Any) -> RunFinishedEvent:
        self.open = False
        return RunFinishedEvent(
            thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, usage=self._usages()
        )

    def _failed(self, payload: Any) -> RunErrorEvent:
        self.open = False
        if self._model.streamed:
            self.stale = True  # text or calls the run streamed and never committed
        return RunErrorEvent(
            message=payload.error or "the run failed",
            code=enum_name(payload, "code"),
            usage=self._usages(),
        )

    def _custom(self, kind: str, payload: Any) -> CustomEvent:
        return CustomEvent(name=f"behest.{kind}", value=json_format.MessageToDict(payload))

    # --- usage -----------------------------------------------------------------------------

    def _add_usage(self, usage: Any) -> None:
        sums = self._usage.setdefault(self._provider, Usage())
        sums.add(usage)

    def _usages(self) -> list[TokenUsage] | None:
        return [sums.of(*key) for key, sums in self._usage.items()] or None
