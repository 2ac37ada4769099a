"""How the client reads a wire message into its own frozen type: each field by its name and
wire type (enums into the client's, an enum value newer than this client as UNSPECIFIED;
nested messages by their own type). Reads a message through its descriptor only, so it needs
none of the generated code that `_wire.py` alone imports."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message as ProtoMessage

from behest.client import _agents, _enums, _records, _types

_Enum = TypeVar("_Enum", bound=enum.IntEnum)
_T = TypeVar("_T")


def enum_of(cls: type[_Enum], value: int) -> _Enum:
    """The client's enum member of a wire value."""
    try:
        return cls(value)
    except ValueError:
        return cls(0)  # a value newer than this client


def time_of(ts: Any) -> datetime | None:
    """A Timestamp as an aware datetime in UTC; None when unset."""
    return ts.ToDatetime(tzinfo=UTC) if ts.seconds or ts.nanos else None


def tokens_of(usage: Any) -> _types.TokenUsage:
    return read(_types.TokenUsage, usage)


def cost_of(message: Any, name: str) -> _types.Cost | None:
    """The Cost in field `name` of `message`, None when unset."""
    return _value(message, message.DESCRIPTOR.fields_by_name[name])


def _part(part: Any) -> _types.ContentPart:
    kind = part.WhichOneof("content")
    cls = _PARTS.get(kind or "")
    if cls is None:
        return _types.TextPart("")  # a kind of part newer than this client
    return read(cls, getattr(part, kind))


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
    "agent.v1.ElicitationAction": _enums.ElicitAction,
}
# Messages read by their own type; those in _OPTIONAL read as None when not set.
_MESSAGES: dict[str, Any] = {
    "google.protobuf.Timestamp": time_of,
    "agent.v1.ContentPart": _part,
    "agent.v1.TokenUsage": tokens_of,
    "agent.v1.ToolCall": lambda m: read(_types.ToolCall, m),
    "agent.v1.ToolSpec": lambda m: read(_types.ToolSpec, m),
    "agent.v1.Cost": lambda m: read(_types.Cost, m),
    "agent.v1.RunBudget": lambda m: read(_types.Budget, m),
    "agent.v1.ResponseFormat": lambda m: read(_types.ResponseFormat, m),
    "agent.v1.Reasoning": lambda m: read(_types.Reasoning, m),
    "agent.v1.Message": lambda m: read(_types.Message, m),
    "agent.v1.Elicitation": lambda m: read(_records.Elicitation, m),
    "agent.v1.ToolExecutionTransition": lambda m: read(_records.ExecutionTransition, m),
    "agent.v1.AgentDefinition": lambda m: read(_agents.AgentDefinition, m),
}
_OPTIONAL = {
    "agent.v1.Cost",
    "agent.v1.RunBudget",
    "agent.v1.ResponseFormat",
    "agent.v1.Reasoning",
    "agent.v1.Elicitation",
}


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


def read(cls: type[_T], message: Any, **given: Any) -> _T:
    """`cls` of `message`: each field not `given` read from the wire field of its name."""
    fields = message.DESCRIPTOR.fields_by_name
    for name in cls.__dataclass_fields__:  # type: ignore[attr-defined]
        if name == "raw":
            given["raw"] = message
        elif name not in given:
            given[name] = _value(message, fields[name])
    return cls(**given)
