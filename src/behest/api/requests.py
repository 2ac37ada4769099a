"""Validation of incoming requests: field by field, with messages that name the field."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from behest import bounded_json
from behest._proto.agent.v1 import run_pb2 as pb
from behest.domain.runs import RunRequest, RunStatus, ToolChoice
from behest.errors import InvalidArgument, quote

LIST_LIMIT_DEFAULT = 100
LIST_LIMIT_MAX = 100
MAX_TOOLS = 128
MAX_ITERATIONS = 1000


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
        raise InvalidArgument(f"{field} must be a UUID, got {quote(value)}") from None


class Offer(Protocol):
    """What this server offers a run: providers with their models, and tools."""

    def check_model(self, provider: str, model: str) -> None:
        """Raise InvalidArgument unless the provider is configured and offers the model."""
        ...

    def tool_names(self) -> list[str]: ...


def run_request(request: pb.CreateRunRequest, limits: RequestLimits, offer: Offer) -> RunRequest:
    """Validate a CreateRunRequest into the domain's RunRequest, against what is offered."""
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
            parsed = bounded_json.parse(request.metadata, max_bytes=limits.max_metadata_bytes)
        except bounded_json.JsonRefused as exc:
            raise InvalidArgument(f"metadata must be a JSON object; it {exc}") from None
        if not isinstance(parsed, dict):
            raise InvalidArgument("metadata must be a JSON object (or empty)")
    _bounded(request.instructions, "instructions", limits.max_input_bytes)
    if len(request.tools) > MAX_TOOLS or any(not name.strip() for name in request.tools):
        raise InvalidArgument(f"tools must be at most {MAX_TOOLS} non-empty tool names")
    if len(set(request.tools)) != len(request.tools):
        raise InvalidArgument("tools names a tool twice")
    if request.max_iterations > MAX_ITERATIONS:
        raise InvalidArgument(f"max_iterations must be at most {MAX_ITERATIONS}")
    tool_choice = request.tool_choice or ToolChoice.AUTO
    offer.check_model(provider, model)
    _check_tools(request.tools, tool_choice, offer.tool_names())
    session_id = uuid_field(request.session_id, "session_id") if request.session_id else None
    return RunRequest(
        session_id=session_id,
        provider=provider,
        model=model,
        input=request.input,
        metadata=request.metadata,
        tool_choice=tool_choice,
        client_request_id=request.client_request_id,
        instructions=request.instructions,
        tools=tuple(request.tools),
        max_iterations=request.max_iterations,
    )


def _check_tools(tools: Sequence[str], choice: str, known: list[str]) -> None:
    """Every tool named exists, and tool_choice is a mode or one of the run's tools."""
    unknown = [name for name in tools if name not in known]
    if unknown:
        raise InvalidArgument(
            f"tools: unknown tool {quote(unknown[0])} (known: {', '.join(known) or 'none'})"
        )
    if choice in set(ToolChoice) or choice in (tools or known):
        return
    raise InvalidArgument(
        "tool_choice must be auto, none, required or the name of a tool this run may use; "
        f"got {quote(choice)}"
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
    if "\x00" in value:
        # Text is stored as text (PostgreSQL cannot hold NUL), and no model wants one.
        raise InvalidArgument(f"{field} contains a NUL character (\\u0000)")
