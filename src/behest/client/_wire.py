"""The client's one meeting point with the wire: the generated stubs, requests built from
behest's types, and replies read into them (field by field: `_reading.py`). The only module
of the client that imports `behest._proto`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import grpc.aio
from google.protobuf import json_format

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
from behest.client._reading import cost_of, read, time_of, tokens_of
from behest.client._waits import Approval, ClientTool, QuestionReply, reply_of

# Request classes, for the client.
run, catalog, session, execution = run_pb2, catalog_pb2, session_pb2, execution_pb2
agents = agent_pb2
Pagination = common_pb2.Pagination


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


def elicitation_answers_request(run_id: str, answers: Mapping[str, QuestionReply]) -> Any:
    """SubmitElicitationAnswersRequest of a mapping elicitation id → a Reply, an ElicitAction,
    or the content of an accepted answer (a JSON object); the server checks the content."""
    items = []
    for elicitation_id, given in answers.items():
        reply = reply_of(given)
        content = "" if reply.content is None else json.dumps(dict(reply.content))
        if reply.action == _enums.ElicitAction.ACCEPT and reply.content is None:
            content = "{}"
        items.append(
            run_pb2.ElicitationAnswer(
                elicitation_id=elicitation_id,
                action=reply.action.value,  # type: ignore[arg-type]
                content=content,
            )
        )
    return run_pb2.SubmitElicitationAnswersRequest(run_id=run_id, answers=items)


# --- replies: read into behest's types (_reading.py) ---------------------------------------


def definition_message(definition: _agents.AgentDefinition) -> Any:
    """An AgentDefinition message of the client's type (ValueError for a value the wire
    cannot hold, such as a number out of its range)."""
    try:
        return json_format.ParseDict(definition.to_dict(), agent_pb2.AgentDefinition())
    except json_format.ParseError as exc:
        raise ValueError(f"definition: {exc}") from None


def agent_of(a: Any) -> _agents.Agent:
    return read(_agents.Agent, a, aliases=dict(a.aliases))


def version_of(v: Any) -> _agents.AgentVersion:
    return read(_agents.AgentVersion, v)


def versioned_of(response: Any) -> _agents.VersionedAgent:
    """A reply that holds an agent and a version (and, from UpdateAgent, `changed`)."""
    changed = getattr(response, "changed", True)
    agent, version = agent_of(response.agent), version_of(response.version)
    return _agents.VersionedAgent(agent, version, changed, raw=response)


def created(response: Any) -> _types.CreatedRun:
    return read(_types.CreatedRun, response)


def run_of(r: Any) -> _types.Run:
    """A RunRecord as a Run."""
    return read(
        _types.Run,
        r,
        provider=r.provider.value,
        model=r.model.value,
        usage=tokens_of(r.total_usage),
        cost=cost_of(r, "total_cost"),
    )


def message_of(m: Any) -> _types.Message:
    return read(_types.Message, m)


def output_of(o: Any) -> _types.Output:
    """A RunOutput as an Output; its structured answer as a JSON value (None without one)."""
    structured = o.structured_output
    return read(
        _types.Output,
        o,
        usage=tokens_of(o.total_usage),
        cost=cost_of(o, "total_cost"),
        structured_output=json_format.MessageToDict(structured)
        if o.HasField("structured_output")
        else None,
    )


def pending_of(p: Any) -> _types.PendingCall:
    return read(_types.PendingCall, p)


def ticket_of(t: Any) -> _records.StreamTicket:
    return _records.StreamTicket(t.ticket, time_of(t.expires_at), raw=t)


def execution_of(e: Any) -> _records.ToolExecution:
    return read(_records.ToolExecution, e)


def reconciled_of(r: Any) -> _records.Reconciled:
    return _records.Reconciled(execution_of(r.execution), tuple(r.waiting_call_ids))


def session_of(s: Any) -> _types.Session:
    return read(_types.Session, s)


def tool_of(t: Any) -> _types.Tool:
    spec = t.spec
    return read(
        _types.Tool,
        t,
        name=spec.name,
        description=spec.description,
        parameters_schema=spec.parameters_schema,
    )


def provider_of(p: Any) -> _types.Provider:
    models = tuple(read(_types.Model, m, name=m.name.value) for m in p.models)
    return read(_types.Provider, p, id=p.id.value, models=models)


def usage_of(u: Any) -> _types.Usage:
    days = tuple(read(_types.DailyUsage, d) for d in u.days)
    return read(
        _types.Usage, u, days=days, usage=tokens_of(u.total_usage), cost=cost_of(u, "total_cost")
    )


def event_of(e: Any) -> Event:
    """An AgentEvent as an Event (`data` None for a kind newer than this client)."""
    kind = e.WhichOneof("event") or ""
    cls = EVENT_TYPES.get(kind)
    data = None if cls is None else read(cls, getattr(e, kind))
    return Event(
        e.sequence, e.run_id, kind, data, time_of(e.timestamp), e.trace_id, e.span_id, raw=e
    )
