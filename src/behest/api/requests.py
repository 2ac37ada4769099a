"""Validation of incoming requests: field by field, with messages that name the field."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from behest._proto.agent.v1 import run_pb2 as pb
from behest.domain.runs import RunRequest, RunStatus, ToolChoice
from behest.errors import InvalidArgument

LIST_LIMIT_DEFAULT = 100
LIST_LIMIT_MAX = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestLimits:
    """Documented size bounds of request fields, in bytes of UTF-8."""

    max_input_bytes: int
    max_metadata_bytes: int
    max_request_id_bytes: int


def uuid_field(value: str, field: str) -> str:
    """The value if it is a UUID (any case, canonical lowercase form returned)."""
    if not value:
        raise InvalidArgument(f"{field} is required")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument(f"{field} must be a UUID, got {value[:80]!r}") from None


def run_request(request: pb.CreateRunRequest, limits: RequestLimits) -> RunRequest:
    """Validate a CreateRunRequest into the domain's RunRequest."""
    provider = request.provider.value.strip()
    model = request.model.value.strip()
    if not provider:
        raise InvalidArgument("provider is required")
    if not model:
        raise InvalidArgument("model is required")
    if not request.input.strip():
        raise InvalidArgument("input must not be empty")
    _bounded(request.input, "input", limits.max_input_bytes)
    _bounded(request.metadata, "metadata", limits.max_metadata_bytes)
    _bounded(request.client_request_id, "client_request_id", limits.max_request_id_bytes)
    if request.metadata:
        try:
            parsed = json.loads(request.metadata)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(f"metadata must be a JSON object: {exc}") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument("metadata must be a JSON object (or empty)")
    tool_choice = request.tool_choice or ToolChoice.AUTO
    if tool_choice not in set(ToolChoice):
        raise InvalidArgument(
            f"tool_choice must be one of auto, none, required; got {request.tool_choice!r}"
        )
    session_id = uuid_field(request.session_id, "session_id") if request.session_id else None
    return RunRequest(
        session_id=session_id,
        provider=provider,
        model=model,
        input=request.input,
        metadata=request.metadata,
        tool_choice=tool_choice,
        client_request_id=request.client_request_id,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunQuery:
    session_id: str | None
    status: RunStatus | None
    limit: int
    offset: int


def run_query(request: pb.ListRunsRequest) -> RunQuery:
    """Validate ListRuns filters and pagination (limit defaults to 100, at most 100)."""
    limit = request.pagination.limit or LIST_LIMIT_DEFAULT
    if limit > LIST_LIMIT_MAX:
        raise InvalidArgument(f"pagination.limit must be at most {LIST_LIMIT_MAX}, got {limit}")
    status: RunStatus | None = None
    if request.status:
        try:
            status = RunStatus(request.status)
        except ValueError:
            raise InvalidArgument(f"status {request.status} is not a RunStatus value") from None
    session_id = uuid_field(request.session_id, "session_id") if request.session_id else None
    return RunQuery(
        session_id=session_id, status=status, limit=limit, offset=request.pagination.offset
    )


def _bounded(value: str, field: str, limit: int) -> None:
    size = len(value.encode())
    if size > limit:
        raise InvalidArgument(f"{field} is {size} bytes; the limit is {limit} bytes")
