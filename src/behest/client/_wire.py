"""The client's one meeting point with the wire: the generated stubs, requests built from
behest's types, and replies read into them. The only module of the client that imports
`behest._proto`; an enum value newer than this client reads as UNSPECIFIED."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import grpc.aio
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message as ProtoMessage

from behest._proto.agent.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    catalog_pb2,
    catalog_pb2_grpc,
    common_pb2,
    execution_pb2,
    execution_pb2_grpc,
    run_pb2,
    run_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
)
from behest.client import _agents, _enums, _records, _types
from behest.client._events import EVENT_TYPES, Event
from behest.client._options import RunOptions
from behest.client._waits import Approval, ClientTool

# Request classes, for the client.
run, catalog, session, execution = run_pb2, catalog_pb2, session_pb2, execution_pb2
agents = agent_pb2
Pagination = common_pb2.Pagination
_Enum = TypeVar("_Enum", bound=_enums.enum.IntEnum)
_T = TypeVar("_T")


class Stubs:
    """The services' stubs over one channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.runs = run_pb2_grpc.RunServiceStub(channel)
        self.usage = run_pb2_grpc.UsageServiceStub(channel)
        self.sessions = session_pb2_grpc.SessionServiceStub(channel)
        self.tools = catalog_pb2_grpc.ToolServiceStub(channel)
        self.providers = catalog_pb2_grpc.ProviderServiceStub(channel)
        self.executions = execution_pb2_grpc.ToolExecutionServiceStub(channel)
        self.agents = agent_pb2_grpc.AgentServiceStub(channel)


# --- requests ---------------------------------------------------------------------------------


def create_request(input: str, options: RunOptions, request_id: str) -> Any:
    """A CreateRunRequest of the input text and the run's options (without an agent, an
    empty provider and model are local's echo)."""
    own = not options.agent
    request = run_pb2.CreateRunRequest(
        session_id=options.session_id,
        provider=common_pb2.ProviderId(value=options.provider or ("local" if own else "")),
        model=common_pb2.ModelName(value=options.model or ("echo" if own else "")),
        agent=options.agent,
        on_busy=int(options.on_busy),  # type: ignore[arg-type]
        input=input,
        metadata=options.metadata,
        tool_choice=options.tool_choice,
        client_request_id=request_id,
        instructions=options.instructions,
        tools=list(options.tools),
        max_iterations=options.max_iterations,
        allow_sub_agents=options.allow_sub_agents,
        client_tools=[_tool_spec(name, tool) for name, tool in options.client_tools.items()],
        approval_required_tools=list(options.approval_required_tools),
        approve_side_effects=options.approve_side_effects,
        approval_timeout_s=options.approval_timeout_s,
        client_tool_timeout_s=options.client_tool_timeout_s,
        content=[_content_part(part) for part in options.content],
    )
    if options.budget is not None:
        b = options.budget
        request.budget.CopyFrom(
            run_pb2.RunBudget(
                max_tokens=b.max_tokens,
                max_tool_calls=b.max_tool_calls,
                max_wall_seconds=b.max_wall_seconds,
                max_cost=b.max_cost,
            )
        )
    if options.response_format is not None:
        f = options.response_format
        request.response_format.CopyFrom(
            run_pb2.ResponseFormat(name=f.name, json_schema=f.json_schema)
        )
    if options.reasoning is not None:
        r = options.reasoning
        request.reasoning.CopyFrom(
            run_pb2.Reasoning(effort=r.effort, budget_tokens=r.budget_tokens)
        )
    return request


def _tool_spec(name: str, tool: Any) -> common_pb2.ToolSpec:
    if not isinstance(tool, ClientTool):
        description, schema = tool
        tool = ClientTool(description, schema)
    schema_text = json.dumps(dict(tool.parameters))
    return common_pb2.ToolSpec(
        name=name, description=tool.description, parameters_schema=schema_text
    )


def _content_part(part: _types.ContentPart) -> common_pb2.ContentPart:
    match part:
        case _types.TextPart(text=text):
            return common_pb2.ContentPart(text=common_pb2.TextContent(text=text))
        case _types.JsonPart(json=text):
            return common_pb2.ContentPart(json=common_pb2.JsonContent(json=text))
        case _types.ImagePart():
            image = common_pb2.ImageContent(url=part.url, mime_type=part.mime_type, data=part.data)
            return common_pb2.ContentPart(image=image)
        case _types.FilePart():
            file = common_pb2.FileContent(
                mime_type=part.mime_type, data=part.data, filename=part.filename
            )
            return common_pb2.ContentPart(file=file)
    raise TypeError(f"not a content part: {type(part).__name__}")


def approvals_request(run_id: str, approvals: Mapping[str, Approval | _enums.Decision]) -> Any:
    """SubmitApprovalsRequest of a mapping call id → Approval or Decision."""
    answers = []
    for call_id, approval in approvals.items():
        if not isinstance(approval, Approval):
            approval = Approval(_enums.Decision(approval))
        answers.append(
            run_pb2.ApprovalAnswer(
                call_id=call_id,
                decision=approval.decision.value,  # type: ignore[arg-type]
                reason=approval.reason,
            )
        )
    return run_pb2.SubmitApprovalsRequest(run_id=run_id, approvals=answers)


def results_request(run_id: str, results: Mapping[str, str | tuple[str, bool]]) -> Any:
    """SubmitToolResultsRequest of a mapping call id → output or (output, is_error)."""
    answers = []
    for call_id, result in results.items():
        output, is_error = (result, False) if isinstance(result, str) else result
        answers.append(run_pb2.ClientToolResult(call_id=call_id, output=output, is_error=is_error))
    return run_pb2.SubmitToolResultsRequest(run_id=run_id, results=answers)


# --- replies: each field read by its wire type, by name, into behest's type --------------------


def enum_of(cls: type[_Enum], value: int) -> _Enum:
    """The client's enum member of a wire value."""
    try:
        return cls(value)
    except ValueError:
        return cls(0)  # a value newer than this client


def _time(ts: Any) -> datetime | None:
    return ts.ToDatetime(tzinfo=UTC) if ts.seconds or ts.nanos else None


def _usage(usage: Any) -> _types.TokenUsage:
    return _read(_types.TokenUsage, usage)


def _cost(message: Any, name: str) -> _types.Cost | None:
    return _value(message, message.DESCRIPTOR.fields_by_name[name])


def _part(part: Any) -> _types.ContentPart:
    kind = part.WhichOneof("content")
    cls = _PARTS.get(kind or "")
    if cls is None:
        return _types.TextPart("")  # a kind of part newer than this client
    return _read(cls, getattr(part, kind))


_PARTS: dict[str, type[Any]] = {
    "text": _types.TextPart,
    "json": _types.JsonPart,
    "image": _types.ImagePart,
    "file": _types.FilePart,
}
_ENUMS: dict[str, type[Any]] = {
    "agent.v1.RunStatus": _enums.RunStatus,
    "agent.v1.FinishReason": _enums.FinishReason,
    "agent.v1.FailureCode": _enums.FailureCode,
    "agent.v1.CancelSource": _enums.CancelSource,
    "agent.v1.BusyPolicy": _enums.BusyPolicy,
    "agent.v1.BudgetKind": _enums.BudgetKind,
    "agent.v1.ApprovalDecision": _enums.Decision,
    "agent.v1.PendingCallKind": _enums.PendingCallKind,
    "agent.v1.ToolExecutionStatus": _enums.ExecutionStatus,
    "agent.v1.ReconcileVerdict": _enums.Verdict,
}
# Messages read by their own type; those in _OPTIONAL read as None when not set.
_MESSAGES: dict[str, Any] = {
    "google.protobuf.Timestamp": _time,
    "agent.v1.ContentPart": _part,
    "agent.v1.TokenUsage": _usage,
    "agent.v1.ToolCall": lambda m: _read(_types.ToolCall, m),
    "agent.v1.ToolSpec": lambda m: _read(_types.ToolSpec, m),
    "agent.v1.Cost": lambda m: _read(_types.Cost, m),
    "agent.v1.RunBudget": lambda m: _read(_types.Budget, m),
    "agent.v1.ResponseFormat": lambda m: _read(_types.ResponseFormat, m),
    "agent.v1.Reasoning": lambda m: _read(_types.Reasoning, m),
    "agent.v1.Message": lambda m: _read(_types.Message, m),
    "agent.v1.ToolExecutionTransition": lambda m: _read(_records.ExecutionTransition, m),
    "agent.v1.AgentDefinition": lambda m: _read(_agents.AgentDefinition, m),
}
_OPTIONAL = {"agent.v1.Cost", "agent.v1.RunBudget", "agent.v1.ResponseFormat", "agent.v1.Reasoning"}


def _value(message: ProtoMessage, field: FieldDescriptor) -> Any:
    value = getattr(message, field.name)
    repeated = field.is_repeated
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enum_of(_ENUMS[field.enum_type.full_name], value)  # type: ignore[union-attr]
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return tuple(value) if repeated else value
    name = field.message_type.full_name  # type: ignore[union-attr]
    if repeated:
        return tuple(_MESSAGES[name](v) for v in value)
    if name in _OPTIONAL and not message.HasField(field.name):
        return None
    return _MESSAGES[name](value)


def _read(cls: type[_T], message: Any, **given: Any) -> _T:
    """`cls` of `message`: each field not `given` read from the wire field of its name."""
    fields = message.DESCRIPTOR.fields_by_name
    for name in cls.__dataclass_fields__:  # type: ignore[attr-defined]
        if name == "raw":
            given["raw"] = message
        elif name not in given:
            given[name] = _value(message, fields[name])
    return cls(**given)


def definition_message(definition: _agents.AgentDefinition) -> Any:
    """An AgentDefinition message of the client's type (ValueError for a value the wire
    cannot hold, such as a number out of its range)."""
    try:
        return json_format.ParseDict(definition.to_dict(), agent_pb2.AgentDefinition())
    except json_format.ParseError as exc:
        raise ValueError(f"definition: {exc}") from None


def agent_of(a: Any) -> _agents.Agent:
    return _read(_agents.Agent, a, aliases=dict(a.aliases))


def version_of(v: Any) -> _agents.AgentVersion:
    return _read(_agents.AgentVersion, v)


def versioned_of(response: Any) -> _agents.VersionedAgent:
    """A reply that holds an agent and a version (and, from UpdateAgent, `changed`)."""
    changed = getattr(response, "changed", True)
    agent, version = agent_of(response.agent), version_of(response.version)
    return _agents.VersionedAgent(agent, version, changed, raw=response)


def created(response: Any) -> _types.CreatedRun:
    return _read(_types.CreatedRun, response)


def run_of(r: Any) -> _types.Run:
    """A RunRecord as a Run."""
    return _read(
        _types.Run,
        r,
        provider=r.provider.value,
        model=r.model.value,
        usage=_usage(r.total_usage),
        cost=_cost(r, "total_cost"),
    )


def message_of(m: Any) -> _types.Message:
    return _read(_types.Message, m)


def output_of(o: Any) -> _types.Output:
    """A RunOutput as an Output; its structured answer as a JSON value (None without one)."""
    structured = o.structured_output
    return _read(
        _types.Output,
        o,
        usage=_usage(o.total_usage),
        cost=_cost(o, "total_cost"),
        structured_output=json_format.MessageToDict(structured)
        if o.HasField("structured_output")
        else None,
    )


def pending_of(p: Any) -> _types.PendingCall:
    return _read(_types.PendingCall, p)


def ticket_of(t: Any) -> _records.StreamTicket:
    return _records.StreamTicket(t.ticket, _time(t.expires_at), raw=t)


def execution_of(e: Any) -> _records.ToolExecution:
    return _read(_records.ToolExecution, e)


def reconciled_of(r: Any) -> _records.Reconciled:
    return _records.Reconciled(execution_of(r.execution), tuple(r.waiting_call_ids))


def session_of(s: Any) -> _types.Session:
    return _read(_types.Session, s)


def tool_of(t: Any) -> _types.Tool:
    spec = t.spec
    return _read(
        _types.Tool,
        t,
        name=spec.name,
        description=spec.description,
        parameters_schema=spec.parameters_schema,
    )


def provider_of(p: Any) -> _types.Provider:
    models = tuple(_read(_types.Model, m, name=m.name.value) for m in p.models)
    return _read(_types.Provider, p, id=p.id.value, models=models)


def usage_of(u: Any) -> _types.Usage:
    days = tuple(_read(_types.DailyUsage, d) for d in u.days)
    return _read(
        _types.Usage, u, days=days, usage=_usage(u.total_usage), cost=_cost(u, "total_cost")
    )


def event_of(e: Any) -> Event:
    """An AgentEvent as an Event (`data` None for a kind newer than this client)."""
    kind = e.WhichOneof("event") or ""
    cls = EVENT_TYPES.get(kind)
    data = None if cls is None else _read(cls, getattr(e, kind))
    return Event(e.sequence, e.run_id, kind, data, _time(e.timestamp), e.trace_id, e.span_id, raw=e)
