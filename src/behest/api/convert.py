"""proto ⇄ domain: the one module that knows both shapes."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime
from decimal import Decimal
from typing import cast

from google.protobuf import json_format
from google.protobuf.struct_pb2 import Value
from google.protobuf.timestamp_pb2 import Timestamp

from behest._proto.agent.v1 import common_pb2 as pb_common
from behest._proto.agent.v1 import run_pb2 as pb
from behest._proto.agent.v1 import session_pb2 as pb_session
from behest.domain import events as ev
from behest.domain.compaction import CircuitBreakerState, CompactionConfig
from behest.domain.content import ContentPart, PartKind
from behest.domain.messages import Message, ToolCall
from behest.domain.output import ResponseFormat
from behest.domain.runs import FinishReason, Reasoning, Run, RunOutput, RunStatus
from behest.domain.sessions import Session
from behest.domain.snapshots import Snapshot
from behest.domain.spend import Money, RunBudget, TokenUsage, UsageReport
from behest.domain.waits import PendingCall, WaitOptions


def _finish_reason(value: FinishReason) -> pb_common.FinishReason.ValueType:
    return cast(pb_common.FinishReason.ValueType, int(value))


def run_status(value: RunStatus) -> pb_common.RunStatus.ValueType:
    return cast(pb_common.RunStatus.ValueType, int(value))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(value: datetime) -> Timestamp:
    """As Timestamp.FromDatetime (naive means UTC), at a fifth of its cost: one per event."""
    since = (value if value.tzinfo else value.replace(tzinfo=UTC)) - _EPOCH
    return Timestamp(seconds=since.days * 86_400 + since.seconds, nanos=since.microseconds * 1000)


def usage(value: TokenUsage) -> pb_common.TokenUsage:
    return pb_common.TokenUsage(
        input_tokens=value.input_tokens,
        output_tokens=value.output_tokens,
        total_tokens=value.total_tokens,
        cached_input_tokens=value.cached_input_tokens,
        cache_write_tokens=value.cache_write_tokens,
        reasoning_tokens=value.reasoning_tokens,
    )


def cost(value: Money | None) -> pb_common.Cost | None:
    """Money as a Cost (its exact decimal string); None stays unset."""
    if value is None:
        return None
    return pb_common.Cost(amount=decimal_text(value.amount), currency=value.currency)


def decimal_text(value: Decimal) -> str:
    """A plain decimal string (no exponent), e.g. "0.000123"."""
    return format(value, "f")


def budget(value: RunBudget) -> pb.RunBudget:
    return pb.RunBudget(
        max_tokens=value.max_tokens,
        max_tool_calls=value.max_tool_calls,
        max_wall_seconds=value.max_wall_seconds,
        max_cost="" if value.max_cost is None else decimal_text(value.max_cost),
    )


def tool_call(call: ToolCall) -> pb_common.ToolCall:
    return pb_common.ToolCall(id=call.id, name=call.name, arguments=call.arguments)


def event(value: ev.Event) -> pb.AgentEvent:
    """A domain event as the AgentEvent clients receive: its payload goes into the oneof
    field of its kind's stable name (domain/events.py KINDS), field by field."""
    out = pb.AgentEvent(
        sequence=value.sequence,
        run_id=value.run_id,
        timestamp=timestamp(value.timestamp),
        trace_id=value.trace_id,
        span_id=value.span_id,
    )
    payload = value.payload
    if type(payload) is ev.TextDelta:  # most events are text: the shortest way
        out.text_delta.delta = payload.delta
        return out
    body = getattr(out, ev.kind_of(payload))
    body.SetInParent()
    for name in _FIELDS[type(payload)]:
        field_value = getattr(payload, name)
        match field_value:
            case ToolCall():
                getattr(body, name).CopyFrom(tool_call(field_value))
            case TokenUsage():
                getattr(body, name).CopyFrom(usage(field_value))
            case datetime():
                getattr(body, name).CopyFrom(timestamp(field_value))
            case Money():
                getattr(body, name).CopyFrom(cost(field_value))
            case None:
                pass
            case tuple() if name == "content":
                getattr(body, name).extend(content_part(part) for part in field_value)
            case _:
                setattr(body, name, field_value)
    return out


# Each payload's fields: the names they have in the AgentEvent message of their kind too.
_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in ev.KINDS}


def run_record(run: Run) -> pb.RunRecord:
    current = run.agent.current(run.current_agent) if run.agent else None
    return pb.RunRecord(
        id=run.id,
        session_id=run.session_id,
        status=run_status(run.status),
        provider=pb_common.ProviderId(value=run.provider),
        model=pb_common.ModelName(value=run.model),
        metadata=run.metadata,
        created_at=timestamp(run.created_at),
        updated_at=timestamp(run.updated_at),
        instructions=run.instructions,
        tools=list(run.tools),
        max_iterations=run.max_iterations,
        tool_choice=run.tool_choice,
        client_tools=tool_specs(run.waits),
        approval_required_tools=list(run.waits.approval_required_tools),
        approve_side_effects=run.waits.approve_side_effects,
        approval_timeout_s=run.waits.approval_timeout_s,
        client_tool_timeout_s=run.waits.client_tool_timeout_s,
        total_usage=usage(run.usage),
        total_cost=cost(run.cost),
        error=run.error,
        failure_code=cast(pb.FailureCode.ValueType, int(run.failure_code)),
        budget=budget(run.budget),
        parent_run_id=run.parent_run_id,
        allow_sub_agents=run.allow_sub_agents,
        response_format=response_format(run.response_format),
        reasoning=reasoning(run.reasoning),
        agent_name=run.agent.name if run.agent else "",
        agent_version=run.agent.version if run.agent else 0,
        current_agent=current.name if current else "",
        current_agent_version=current.version if current else 0,
    )


def tool_specs(waits: WaitOptions) -> list[pb_common.ToolSpec]:
    """Client tools as declared, their schemas as compact JSON text."""
    return [
        pb_common.ToolSpec(
            name=t.name,
            description=t.description,
            parameters_schema=json.dumps(t.parameters_schema, separators=(",", ":")),
        )
        for t in waits.client_tools
    ]


def reasoning(value: Reasoning | None) -> pb.Reasoning | None:
    if value is None:
        return None
    return pb.Reasoning(effort=value.effort, budget_tokens=value.budget_tokens)


def response_format(value: ResponseFormat | None) -> pb.ResponseFormat | None:
    if value is None:
        return None
    return pb.ResponseFormat(name=value.name, json_schema=value.schema_text)


def json_value(text: str) -> Value:
    """Stored JSON text (behest's own, parsed from a model's answer) as a protobuf Value."""
    return json_format.ParseDict(json.loads(text), Value())


def pending_call(value: PendingCall) -> pb.PendingCall:
    return pb.PendingCall(
        call=pb_common.ToolCall(id=value.call_id, name=value.tool_name, arguments=value.arguments),
        kind=cast(pb.PendingCallKind.ValueType, int(value.kind)),
        requested_at=timestamp(value.requested_at),
        expires_at=timestamp(value.expires_at),
        execution_id=value.execution_id,
        elicitation=None if value.question is None else elicitation(value),
    )


def elicitation(value: PendingCall) -> pb.Elicitation:
    """A pending question as clients see it (its schema as JSON text)."""
    assert value.question is not None
    return pb.Elicitation(
        elicitation_id=value.call_id,
        call_id=value.question.call_id,
        tool_name=value.tool_name,
        message=value.question.message,
        requested_schema=json.dumps(value.question.schema, separators=(",", ":")),
    )


def content_part(part: ContentPart) -> pb_common.ContentPart:
    """A content part as clients see it: a reference (digest and size), never its bytes."""
    match part.kind:
        case PartKind.TEXT:
            return pb_common.ContentPart(text=pb_common.TextContent(text=part.text))
        case PartKind.IMAGE:
            image = pb_common.ImageContent(
                url=part.url, mime_type=part.media_type, digest=part.digest, size_bytes=part.size
            )
            return pb_common.ContentPart(image=image)
    file = pb_common.FileContent(
        mime_type=part.media_type, filename=part.filename, digest=part.digest, size_bytes=part.size
    )
    return pb_common.ContentPart(file=file)


def message(value: Message) -> pb_common.Message:
    if value.parts:
        content = [content_part(part) for part in value.parts]
    else:
        text = value.text
        content = [pb_common.ContentPart(text=pb_common.TextContent(text=text))] if text else []
    return pb_common.Message(
        id=value.id,
        session_id=value.session_id,
        role=value.role.value,
        content=content,
        tool_calls=[tool_call(c) for c in value.tool_calls],
        tool_call_id=value.tool_call_id,
        tool_name=value.tool_name,
        created_at=timestamp(value.created_at),
    )


def run_output(output: RunOutput) -> pb.RunOutput:
    run = output.run
    return pb.RunOutput(
        run_id=run.id,
        session_id=run.session_id,
        iterations=run.iterations,
        finish_reason=_finish_reason(run.finish_reason),
        total_usage=usage(run.usage),
        messages=[message(m) for m in output.messages],
        total_cost=cost(run.cost),
        structured_output=(
            json_value(run.output)
            if run.output is not None and run.status == RunStatus.COMPLETED
            else None
        ),
    )


def usage_report(report: UsageReport) -> pb.GetUsageResponse:
    return pb.GetUsageResponse(
        days=[
            pb.DailyUsage(day=d.day, runs=d.runs, usage=usage(d.usage), cost=cost(d.cost))
            for d in report.days
        ],
        total_usage=usage(report.total),
        total_cost=cost(report.cost),
    )


def snapshot(value: Snapshot) -> pb.SnapshotInfo:
    return pb.SnapshotInfo(
        run_id=value.run_id,
        session_id=value.session_id,
        status=run_status(value.status),
        iteration=value.iteration,
        total_usage=usage(value.usage),
        timestamp=timestamp(value.updated_at),
    )


def compaction_config(config: CompactionConfig) -> pb.GetCompactionConfigResponse:
    return pb.GetCompactionConfigResponse(
        auto=config.auto,
        prune=config.prune,
        buffer_tokens=config.buffer_tokens,
        keep_tokens=config.keep_tokens,
        tail_turns=config.tail_turns,
        model=config.model,
        provider=config.provider,
        circuit_breaker_threshold=config.circuit_breaker_threshold,
    )


def compaction_config_from(request: pb.UpdateCompactionConfigRequest) -> CompactionConfig:
    return CompactionConfig(
        auto=request.auto,
        prune=request.prune,
        buffer_tokens=request.buffer_tokens,
        keep_tokens=request.keep_tokens,
        tail_turns=request.tail_turns,
        model=request.model,
        provider=request.provider,
        circuit_breaker_threshold=request.circuit_breaker_threshold,
    )


def circuit_breaker(state: CircuitBreakerState, *, is_open: bool) -> pb.GetCircuitBreakerResponse:
    return pb.GetCircuitBreakerResponse(
        is_open=is_open, consecutive_failures=state.consecutive_failures
    )


def session(value: Session) -> pb_session.SessionRecord:
    return pb_session.SessionRecord(
        id=value.id,
        created_at=timestamp(value.created_at),
        updated_at=timestamp(value.updated_at),
        active_run_id=value.active_run_id,
        run_count=value.run_count,
        message_count=value.message_count,
        parent_session_id=value.parent_session_id,
        forked_through_position=value.forked_through or 0,
    )
