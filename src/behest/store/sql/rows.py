"""Rows ⇄ domain objects for the SQL store: events, messages, snapshots, pending calls, and
the columns they share with runs (times, tokens, money). A run's own are in run_rows.py."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from behest.domain.events import Event
from behest.domain.executions import Verdict
from behest.domain.messages import Message, Role, ToolCall
from behest.domain.runs import FinishReason, RunStatus
from behest.domain.snapshots import Snapshot
from behest.domain.spend import Money, TokenUsage
from behest.domain.waits import Answer, Decision, ElicitAction, PendingCall, Question, WaitKind
from behest.store.sql import codec


def utc(value: datetime) -> datetime:
    """SQLite returns naive datetimes; everything behest stores is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def usage_from_row(row: Any) -> TokenUsage:
    """The tokens of a runs or snapshots row."""
    return TokenUsage(
        row.input_tokens,
        row.output_tokens,
        row.cached_input_tokens,
        row.cache_write_tokens,
        row.reasoning_tokens,
    )


def money_to_columns(money: Money | None) -> tuple[str | None, str]:
    """The cost and currency columns of a cost; NULL and '' for none."""
    return (None, "") if money is None else (str(money.amount), money.currency)


def money_from_row(row: Any) -> Money | None:
    return None if row.cost is None else Money(Decimal(row.cost), row.currency)


def pending_call_to_row(call: PendingCall) -> dict[str, Any]:
    answer = call.answer
    return {
        "run_id": call.run_id,
        "call_id": call.call_id,
        "session_id": call.session_id,
        "tenant": call.tenant,
        "kind": int(call.kind),
        "tool_name": call.tool_name,
        "arguments": call.arguments,
        "ordinal": call.ordinal,
        "requested_at": call.requested_at,
        "expires_at": call.expires_at,
        "decision": None if answer is None or answer.decision is None else int(answer.decision),
        "text": "" if answer is None else answer.text,
        "is_error": False if answer is None else answer.is_error,
        "answered_by": call.answered_by,
        "answered_at": call.answered_at,
        "timed_out": call.timed_out,
        "execution_id": call.execution_id or None,
        "verdict": None if answer is None or answer.verdict is None else int(answer.verdict),
        "question": None if call.question is None else question_json(call.question),
        "action": None if answer is None or answer.action is None else int(answer.action),
    }


def question_json(question: Question) -> str:
    return json.dumps(
        {"call_id": question.call_id, "message": question.message, "schema": question.schema},
        separators=(",", ":"),
    )


def _question(text: str | None) -> Question | None:
    if text is None:
        return None
    data = json.loads(text)
    return Question(call_id=data["call_id"], message=data["message"], schema=data["schema"])


def pending_call_from_row(row: Any) -> PendingCall:
    # Answered means answered_at is set (a client tool's answer has no decision); a call
    # that timed out has it set too, but no answer.
    answered = row.answered_at is not None and not row.timed_out
    answer = (
        Answer(
            call_id=row.call_id,
            decision=None if row.decision is None else Decision(row.decision),
            text=row.text,
            is_error=bool(row.is_error),
            verdict=None if row.verdict is None else Verdict(row.verdict),
            action=None if row.action is None else ElicitAction(row.action),
        )
        if answered
        else None
    )
    return PendingCall(
        run_id=row.run_id,
        call_id=row.call_id,
        session_id=row.session_id,
        tenant=row.tenant,
        kind=WaitKind(row.kind),
        tool_name=row.tool_name,
        arguments=row.arguments,
        ordinal=row.ordinal,
        requested_at=utc(row.requested_at),
        expires_at=utc(row.expires_at),
        answer=answer,
        answered_by=row.answered_by,
        answered_at=row.answered_at and utc(row.answered_at),
        timed_out=bool(row.timed_out),
        execution_id=row.execution_id or "",
        question=_question(row.question),
    )


def event_to_row(event: Event, generation: int = 0) -> dict[str, Any]:
    """The row of an event written under the claim `generation` (0: by no claim)."""
    kind, payload = codec.encode(event.payload)
    return {
        "run_id": event.run_id,
        "sequence": event.sequence,
        "kind": kind,
        "payload": payload,
        "created_at": event.timestamp,
        "trace_id": event.trace_id,
        "span_id": event.span_id,
        "generation": generation,
    }


def event_from_values(
    run_id: str,
    sequence: int,
    kind: str,
    payload: str,
    created_at: datetime,
    trace_id: str,
    span_id: str,
) -> Event:
    """An event from its columns (a replay reads thousands: plain values, no row lookups)."""
    return Event(
        run_id=run_id,
        sequence=sequence,
        payload=codec.decode(kind, payload),
        timestamp=created_at if created_at.tzinfo else created_at.replace(tzinfo=UTC),
        trace_id=trace_id,
        span_id=span_id,
    )


def message_to_row(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "session_id": message.session_id,
        "run_id": message.run_id,
        "position": message.position,
        "role": message.role.value,
        "text": message.text,
        "tool_calls": json.dumps([[c.id, c.name, c.arguments] for c in message.tool_calls]),
        "tool_call_id": message.tool_call_id,
        "tool_name": message.tool_name,
        "is_error": message.is_error,
        "summary_through": message.summary_through,
        "reasoning_blocks": message.reasoning_blocks or None,
        # References; the bytes go to content_blobs (blob_rows).
        "parts": codec.parts_json(message.parts) if message.parts else None,
        "created_at": message.created_at,
    }


def blob_rows(message: Message) -> list[dict[str, Any]]:
    """The content_blobs rows of a message's inline parts."""
    return [
        {"message_id": message.id, "part": index, "data": part.data}
        for index, part in enumerate(message.parts)
        if part.data
    ]


def with_blobs(message: Message, blobs: dict[int, bytes]) -> Message:
    """The message with its inline parts' bytes (by part index) put back."""
    parts = tuple(
        replace(part, data=blobs[index]) if index in blobs else part
        for index, part in enumerate(message.parts)
    )
    return replace(message, parts=parts)


def message_from_row(row: Any) -> Message:
    return Message(
        id=row.id,
        session_id=row.session_id,
        run_id=row.run_id,
        position=row.position,
        role=Role(row.role),
        text=row.text,
        tool_calls=tuple(ToolCall(*call) for call in json.loads(row.tool_calls)),
        tool_call_id=row.tool_call_id,
        tool_name=row.tool_name,
        is_error=bool(row.is_error),
        summary_through=row.summary_through,
        reasoning_blocks=row.reasoning_blocks or "",
        parts=tuple(codec.content_part(p) for p in json.loads(row.parts)) if row.parts else (),
        created_at=utc(row.created_at),
    )


def snapshot_to_row(snapshot: Snapshot) -> dict[str, Any]:
    cost, currency = money_to_columns(snapshot.cost)
    return {
        "run_id": snapshot.run_id,
        "session_id": snapshot.session_id,
        "status": int(snapshot.status),
        "iteration": snapshot.iteration,
        "input_tokens": snapshot.usage.input_tokens,
        "output_tokens": snapshot.usage.output_tokens,
        "model_calls": snapshot.model_calls,
        "pending_tool_calls": json.dumps(list(snapshot.pending_tool_calls)),
        "updated_at": snapshot.updated_at,
        "finish_reason": int(snapshot.finish_reason),
        "cached_input_tokens": snapshot.usage.cached_input_tokens,
        "cache_write_tokens": snapshot.usage.cache_write_tokens,
        "reasoning_tokens": snapshot.usage.reasoning_tokens,
        "cost": cost,
        "currency": currency,
        "tool_calls": snapshot.tool_calls,
    }


def snapshot_from_row(row: Any) -> Snapshot:
    return Snapshot(
        run_id=row.run_id,
        session_id=row.session_id,
        status=RunStatus(row.status),
        iteration=row.iteration,
        usage=usage_from_row(row),
        model_calls=row.model_calls,
        pending_tool_calls=tuple(json.loads(row.pending_tool_calls)),
        updated_at=utc(row.updated_at),
        finish_reason=FinishReason(row.finish_reason),
        tool_calls=row.tool_calls,
        cost=money_from_row(row),
    )


def now() -> datetime:
    return datetime.now(UTC)
