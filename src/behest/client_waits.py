"""Runs that wait, on the client's side: declaring client tools, and answering waiting calls.

A run waits (status WAITING_FOR_INPUT) when the model calls a tool that needs an approval
(event `approval_requested`) or one of the caller's client tools (`client_tool_requested`);
it goes on once every waiting call is answered (SubmitApprovals, SubmitToolResults) or has
expired. `BehestClient.stream_run` and `watch` answer them unattended when given `approve`
and client tool functions; `Attendant` is how.

An `Attendant` answers each call id once. Before answering it asks ListPendingCalls whether
the call still waits, so a replayed request (after a reconnect, or a run followed again from
its start) is never answered, nor its callback called, twice: decided calls are skipped. An
answer refused with FAILED_PRECONDITION (someone decided otherwise meanwhile, or the call
expired) is let go: the run's events tell how the call was resolved. A request without a
callback is left for someone else to answer; a client tool function that raises is answered
as an error result that carries only its message. For example:

    async def lookup(arguments: dict[str, Any]) -> str: ...

    async def approve(call: WaitingCall) -> Approval:
        if call.tool == "calculator":
            return Approval(Decision.ALLOW)
        return Approval(Decision.DENY, "not this one")

    async for event in client.stream_run(
        "…",
        approval_required_tools=["calculator"],
        approve=approve,
        client_tools={"lookup": ClientTool("look a word up", SCHEMA, run=lookup)},
    ):
        ...
"""

from __future__ import annotations

import enum
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict

import grpc
import grpc.aio

from behest._proto.agent.v1 import common_pb2, run_pb2

if TYPE_CHECKING:
    from behest.client import BehestClient


class Decision(enum.IntEnum):
    """How an approval request is answered; values match agent.v1.ApprovalDecision."""

    ALLOW = run_pb2.APPROVAL_DECISION_ALLOW
    DENY = run_pb2.APPROVAL_DECISION_DENY
    ALLOW_ALWAYS = run_pb2.APPROVAL_DECISION_ALLOW_ALWAYS


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


# A client tool's implementation: the call's arguments in, the output the model sees out.
ToolFunction = Callable[[dict[str, Any]], Awaitable[Any]]
# Decides an approval request (a plain function will do too); a bare Decision has no reason.
Approver = Callable[[WaitingCall], Awaitable[Approval | Decision] | Approval | Decision]

EMPTY_OBJECT_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}}
# The longest client tool output the server takes (SubmitToolResults); longer is cut.
MAX_OUTPUT_BYTES = 1024 * 1024
_CUT = "\n[output cut to 1 MiB]"


@dataclass(frozen=True, slots=True)
class ClientTool:
    """A tool the caller runs itself: what the model is told of it, and (optionally) the
    function that runs it when a stream answers calls unattended."""

    description: str = ""
    # JSON Schema of the arguments: an object.
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(EMPTY_OBJECT_SCHEMA))
    run: ToolFunction | None = None


# How a client tool may be given to create a run: a ClientTool, or (description, schema).
ClientToolSpec = ClientTool | tuple[str, Mapping[str, Any]]


class WaitOptions(TypedDict, total=False):
    """A run's waiting options, keyword arguments of create_run and stream_run."""

    # Tools the caller runs itself: name → ClientTool or (description, JSON Schema).
    client_tools: Mapping[str, ClientToolSpec]
    # Server tools whose every call waits for an approval.
    approval_required_tools: Sequence[str]
    # Every call of a server tool not marked read-only waits for an approval.
    approve_side_effects: bool
    # Seconds an approval request, a client tool call waits (0: the server's default).
    approval_timeout_s: int
    client_tool_timeout_s: int


def tool_specs(client_tools: Mapping[str, ClientToolSpec]) -> list[common_pb2.ToolSpec]:
    """CreateRunRequest.client_tools of a mapping name → ClientTool or (description, schema)."""
    specs = []
    for name, tool in client_tools.items():
        if not isinstance(tool, ClientTool):
            description, schema = tool
            tool = ClientTool(description, schema)
        specs.append(
            common_pb2.ToolSpec(
                name=name,
                description=tool.description,
                parameters_schema=json.dumps(dict(tool.parameters)),
            )
        )
    return specs


def tool_functions(
    client_tools: Mapping[str, ClientToolSpec | ToolFunction],
) -> dict[str, ToolFunction]:
    """The functions among client tools given as ClientTool(run=…) or as bare functions."""
    functions: dict[str, ToolFunction] = {}
    for name, tool in client_tools.items():
        if isinstance(tool, ClientTool):
            if tool.run is not None:
                functions[name] = tool.run
        elif callable(tool):
            functions[name] = tool
    return functions


def approvals_request(
    run_id: str, approvals: Mapping[str, Approval | Decision]
) -> run_pb2.SubmitApprovalsRequest:
    """SubmitApprovalsRequest of a mapping call id → Approval or Decision."""
    answers = []
    for call_id, approval in approvals.items():
        if not isinstance(approval, Approval):
            approval = Approval(Decision(approval))
        answers.append(
            run_pb2.ApprovalAnswer(
                call_id=call_id, decision=approval.decision.value, reason=approval.reason
            )
        )
    return run_pb2.SubmitApprovalsRequest(run_id=run_id, approvals=answers)


def results_request(
    run_id: str, results: Mapping[str, str | tuple[str, bool]]
) -> run_pb2.SubmitToolResultsRequest:
    """SubmitToolResultsRequest of a mapping call id → output or (output, is_error)."""
    answers = []
    for call_id, result in results.items():
        output, is_error = (result, False) if isinstance(result, str) else result
        answers.append(run_pb2.ClientToolResult(call_id=call_id, output=output, is_error=is_error))
    return run_pb2.SubmitToolResultsRequest(run_id=run_id, results=answers)


class Attendant:
    """Answers the waiting calls of one followed run as their request events go by: approval
    requests with `approve`, client tool calls with the function of their tool. A request
    without a callback is left for someone else to answer."""

    def __init__(
        self,
        client: BehestClient,
        approve: Approver | None,
        tools: Mapping[str, ToolFunction],
    ) -> None:
        self._client = client
        self._approve = approve
        self._tools = dict(tools)
        self._seen: set[str] = set()  # call ids answered or found already decided

    async def on_event(self, event: run_pb2.AgentEvent) -> None:
        """Answer the call `event` requests, if it is ours to answer and still waits."""
        kind = event.WhichOneof("event")
        if kind == "approval_requested" and self._approve is not None:
            request: Any = event.approval_requested
        elif kind == "client_tool_requested" and event.client_tool_requested.call.name in (
            self._tools
        ):
            request = event.client_tool_requested
        else:
            return
        call_id = request.call.id
        if call_id in self._seen:
            return
        self._seen.add(call_id)
        if not await self._still_waits(event.run_id, call_id):
            return  # decided already: a replay of an answered request
        waiting = _waiting_call(event.run_id, request)
        try:
            if kind == "approval_requested":
                await self._answer_approval(waiting)
            else:
                await self._answer_tool(waiting)
        except grpc.aio.AioRpcError as exc:
            # Answered otherwise meanwhile, or expired: the run's events say how it went.
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise

    async def _still_waits(self, run_id: str, call_id: str) -> bool:
        pending = await self._client.pending_calls(run_id)
        return any(p.call.id == call_id for p in pending)

    async def _answer_approval(self, call: WaitingCall) -> None:
        assert self._approve is not None
        answer = await _maybe_await(self._approve(call))
        if not isinstance(answer, Approval):
            answer = Approval(Decision(answer))
        await self._client.submit_approvals(call.run_id, {call.call_id: answer})

    async def _answer_tool(self, call: WaitingCall) -> None:
        output, is_error = await run_tool(self._tools[call.tool], call)
        await self._client.submit_tool_results(call.run_id, {call.call_id: (output, is_error)})


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


def _waiting_call(run_id: str, request: Any) -> WaitingCall:
    call = request.call
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = {}
    expires = request.expires_at
    return WaitingCall(
        run_id=run_id,
        call_id=call.id,
        tool=call.name,
        arguments=arguments if isinstance(arguments, dict) else {},
        arguments_json=call.arguments,
        expires_at=expires.ToDatetime(tzinfo=UTC) if expires.seconds or expires.nanos else None,
    )
