"""Runs that wait, on the client's side: client tools, approvals, questions, and answering
waiting calls.

A run waits (status WAITING_FOR_INPUT) when the model calls a tool that needs an approval
(an ApprovalRequested event) or one of the caller's client tools (ClientToolRequested), or
when a running tool asks the user a question (ElicitationRequested); it goes on once every
waiting call is answered (submit_approvals, submit_tool_results, submit_elicitation_answers)
or has expired. `BehestClient.stream_run` and `watch` answer them unattended when given
`approve`, client tool functions and `answer_question`; `Attendant` is how.

An `Attendant` answers each call id (or question) once. Before answering it asks for the
run's pending calls, so a replayed request (after a reconnect, or a run followed again from
its start) is never answered, nor its callback called, twice. An answer refused with
FailedPrecondition (decided otherwise meanwhile, or expired) is let go: the run's events tell
how the call was resolved. A request without a callback is left for someone else to answer; a
client tool function that raises is answered as an error result that carries only its
message. An approver or question handler that raises, or a reply that does not fit the
question's schema (InvalidArgument), ends the stream with that error; the run still waits.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from behest.client._enums import Decision, ElicitAction
from behest.client._errors import FailedPrecondition
from behest.client._events import Event
from behest.client._tool_events import ApprovalRequested, ClientToolRequested, ElicitationRequested
from behest.client._types import PendingCall


@dataclass(frozen=True, slots=True)
class Approval:
    """An answer to an approval request: the decision and why (the model sees a denial's)."""

    decision: Decision
    reason: str = ""


@dataclass(frozen=True, slots=True)
class WaitingCall:
    """A tool call a run waits for, as an approver or a client tool function gets it."""

    run_id: str
    call_id: str
    tool: str
    # The call's arguments as the model gave them (a JSON object), and as JSON text.
    arguments: dict[str, Any]
    arguments_json: str
    # When an unanswered call is denied (approvals) or gets an error result (client tools).
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Question:
    """A question a running tool asks the user, as a question handler gets it."""

    run_id: str
    elicitation_id: str  # what the answer names
    call_id: str  # the tool call that asks
    tool: str
    message: str
    # The JSON Schema an accepted answer's content must fit, and as JSON text.
    schema: dict[str, Any]
    schema_json: str
    # When an unanswered question is answered CANCEL (timed out).
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer to a question: ACCEPT with its content (a JSON object that fits the
    question's schema; None sends {}), or DECLINE or CANCEL without content."""

    action: ElicitAction
    content: Mapping[str, Any] | None = None


# A client tool's implementation: the call's arguments in, the output the model sees out.
ToolFunction = Callable[[dict[str, Any]], Awaitable[Any]]
# Decides an approval request (a plain function will do too); a bare Decision has no reason.
Approver = Callable[[WaitingCall], Awaitable[Approval | Decision] | Approval | Decision]
# How a question may be answered: a Reply, a bare ElicitAction (DECLINE, CANCEL), or the
# content of an accepted answer (a JSON object).
QuestionReply = Reply | ElicitAction | Mapping[str, Any]
# Answers a question (a plain function will do too).
QuestionHandler = Callable[[Question], Awaitable[QuestionReply] | QuestionReply]

# The longest client tool output the server takes (SubmitToolResults); longer is cut.
MAX_OUTPUT_BYTES = 1024 * 1024
_CUT = "\n[output cut to 1 MiB]"


def _empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ClientTool:
    """A tool the caller runs itself: what the model is told of it (a description and the
    JSON Schema of its arguments), and optionally the function a stream runs it with."""

    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=_empty_object)
    run: ToolFunction | None = None


class Answerer(Protocol):
    """What an Attendant needs of the client."""

    async def pending_calls(self, run_id: str) -> list[PendingCall]: ...

    async def submit_approvals(
        self, run_id: str, approvals: Mapping[str, Approval | Decision]
    ) -> list[str]: ...

    async def submit_tool_results(
        self, run_id: str, results: Mapping[str, str | tuple[str, bool]]
    ) -> list[str]: ...

    async def submit_elicitation_answers(
        self, run_id: str, answers: Mapping[str, QuestionReply]
    ) -> list[str]: ...


def tool_functions(client_tools: Mapping[str, Any]) -> dict[str, ToolFunction]:
    """The functions among client tools given as ClientTool(run=…) or as bare functions."""
    functions: dict[str, ToolFunction] = {}
    for name, tool in client_tools.items():
        if isinstance(tool, ClientTool):
            if tool.run is not None:
                functions[name] = tool.run
        elif callable(tool):
            functions[name] = tool
    return functions


class Attendant:
    """Answers the waiting calls of one followed run as their request events go by."""

    def __init__(
        self,
        client: Answerer,
        approve: Approver | None,
        tools: Mapping[str, ToolFunction],
        answer_question: QuestionHandler | None = None,
    ) -> None:
        self._client = client
        self._approve = approve
        self._tools = dict(tools)
        self._answer_question = answer_question
        self._seen: set[str] = set()  # ids answered or found already decided

    async def on_event(self, event: Event) -> None:
        """Answer the call `event` requests, if it is ours to answer and still waits."""
        request = event.data
        waiting_id = self._ours(request)
        if waiting_id is None or waiting_id in self._seen:
            return
        self._seen.add(waiting_id)
        if not await self._still_waits(event.run_id, waiting_id):
            return  # decided already: a replay of an answered request
        try:
            if isinstance(request, ElicitationRequested):
                await self._answer(_question(event.run_id, request))
            elif isinstance(request, ApprovalRequested):
                await self._answer_approval(_waiting_call(event.run_id, request))
            elif isinstance(request, ClientToolRequested):
                await self._answer_tool(_waiting_call(event.run_id, request))
        except FailedPrecondition:
            pass  # answered otherwise meanwhile, or expired: the run's events say how

    def _ours(self, request: object) -> str | None:
        """The id of the call or question `request` asks this attendant to answer."""
        if isinstance(request, ElicitationRequested) and self._answer_question is not None:
            return request.elicitation_id
        if isinstance(request, ApprovalRequested) and self._approve is not None:
            return request.call.id
        if isinstance(request, ClientToolRequested) and request.call.name in self._tools:
            return request.call.id
        return None

    async def _still_waits(self, run_id: str, waiting_id: str) -> bool:
        pending = await self._client.pending_calls(run_id)
        return any(p.call.id == waiting_id for p in pending)

    async def _answer_approval(self, call: WaitingCall) -> None:
        assert self._approve is not None
        answer = await _maybe_await(self._approve(call))
        if not isinstance(answer, Approval):
            answer = Approval(Decision(answer))
        await self._client.submit_approvals(call.run_id, {call.call_id: answer})

    async def _answer_tool(self, call: WaitingCall) -> None:
        output, is_error = await run_tool(self._tools[call.tool], call)
        await self._client.submit_tool_results(call.run_id, {call.call_id: (output, is_error)})

    async def _answer(self, question: Question) -> None:
        assert self._answer_question is not None
        reply = await _maybe_await(self._answer_question(question))
        await self._client.submit_elicitation_answers(
            question.run_id, {question.elicitation_id: reply}
        )


def reply_of(given: QuestionReply) -> Reply:
    """A Reply of what a question may be answered with (TypeError for anything else)."""
    if isinstance(given, Reply):
        return given
    if isinstance(given, Mapping):
        return Reply(ElicitAction.ACCEPT, given)
    if isinstance(given, int):
        return Reply(ElicitAction(given))
    raise TypeError(f"not a reply to a question: {type(given).__name__}")


async def run_tool(function: ToolFunction, call: WaitingCall) -> tuple[str, bool]:
    """(output, is_error) of a client tool function: a failure is an error result with what
    it said, never a traceback; a result that is not text is sent as JSON."""
    try:
        value = await _maybe_await(function(call.arguments))
    except Exception as exc:  # any failure of the caller's tool is its result
        said = str(exc).strip()
        return _bounded(f"{call.tool} failed: {said}" if said else f"{call.tool} failed"), True
    output = value if isinstance(value, str) else json.dumps(value, default=str)
    return _bounded(output), False


def _bounded(output: str) -> str:
    encoded = output.encode()
    if len(encoded) <= MAX_OUTPUT_BYTES:
        return output
    keep = MAX_OUTPUT_BYTES - len(_CUT.encode())
    return encoded[:keep].decode(errors="ignore") + _CUT


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _waiting_call(run_id: str, request: ApprovalRequested | ClientToolRequested) -> WaitingCall:
    call = request.call
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = {}
    return WaitingCall(
        run_id=run_id,
        call_id=call.id,
        tool=call.name,
        arguments=arguments if isinstance(arguments, dict) else {},
        arguments_json=call.arguments,
        expires_at=request.expires_at,
    )


def _question(run_id: str, request: ElicitationRequested) -> Question:
    return Question(
        run_id=run_id,
        elicitation_id=request.elicitation_id,
        call_id=request.call_id,
        tool=request.tool_name,
        message=request.message,
        schema=request.schema,
        schema_json=request.requested_schema,
        expires_at=request.expires_at,
    )
