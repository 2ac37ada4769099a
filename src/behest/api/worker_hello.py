"""What a worker brings (agent.v1.WorkerService): its hello, checked and bounded, and its
results, verdicts and questions read. Messages name the field and say what to fix."""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from behest import bounded_json
from behest._proto.agent.v1 import worker_pb2 as pb
from behest.api.fields import bounded
from behest.domain.workers import (
    DEFAULT_SCHEDULE_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    TaskQuestion,
    TaskResult,
    WorkerHello,
    WorkerToolSpec,
    WorkerVerdict,
)
from behest.errors import InvalidArgument, quote

MAX_TOOLS = 128
MAX_NAME_BYTES = 200
MAX_DESCRIPTION_BYTES = 8 * 1024
MAX_SCHEMA_BYTES = 64 * 1024
MAX_TASKS = 1000
MAX_ATTEMPTS = 10
MAX_TIMEOUT_S = 86_400.0
MAX_ID_BYTES = 200
# A tool name every model API takes.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def hello(message: pb.WorkerHello, server_tools: Collection[str]) -> WorkerHello:
    """A worker's hello; its tools' names must be new to the server and to each other."""
    bounded(message.name, "hello.name", MAX_NAME_BYTES)
    if not 1 <= len(message.tools) <= MAX_TOOLS:
        raise InvalidArgument(
            f"hello.tools must declare 1 to {MAX_TOOLS} tools, got {len(message.tools)}"
        )
    if message.max_tasks > MAX_TASKS:
        raise InvalidArgument(f"hello.max_tasks is {message.max_tasks}; at most {MAX_TASKS}")
    tools: list[WorkerToolSpec] = []
    for i, tool in enumerate(message.tools):
        spec = _tool(tool, f"hello.tools[{i}]")
        if spec.name in server_tools:
            raise InvalidArgument(
                f"hello.tools[{i}].name {quote(spec.name)} is a tool of the server's own: "
                "give the worker's tool another name"
            )
        if any(t.name == spec.name for t in tools):
            raise InvalidArgument(f"hello.tools[{i}].name {quote(spec.name)} is declared twice")
        tools.append(spec)
    return WorkerHello(name=message.name, tools=tuple(tools), max_tasks=message.max_tasks or 1)


def _tool(tool: pb.WorkerToolSpec, where: str) -> WorkerToolSpec:
    if not TOOL_NAME.fullmatch(tool.name):
        raise InvalidArgument(
            f"{where}.name must be 1 to 64 letters, digits, '_' or '-', got {quote(tool.name)}"
        )
    bounded(tool.description, f"{where}.description", MAX_DESCRIPTION_BYTES)
    parameters = _schema(tool.parameters_schema, f"{where}.parameters_schema")
    if parameters is None or parameters.get("type") != "object":
        raise InvalidArgument(
            f'{where}.parameters_schema must be an object schema ("type": "object")'
        )
    if tool.max_attempts > MAX_ATTEMPTS:
        raise InvalidArgument(
            f"{where}.max_attempts is {tool.max_attempts}; at most {MAX_ATTEMPTS}"
        )
    return WorkerToolSpec(
        name=tool.name,
        description=tool.description,
        parameters_schema=parameters,
        output_schema=_schema(tool.output_schema, f"{where}.output_schema"),
        idempotent=tool.idempotent,
        read_only=tool.read_only,
        concurrency_safe=tool.concurrency_safe,
        requires_approval=tool.requires_approval,
        timeout_s=_seconds(tool.timeout_s, f"{where}.timeout_s", DEFAULT_TIMEOUT_S),
        schedule_timeout_s=_seconds(
            tool.schedule_timeout_s, f"{where}.schedule_timeout_s", DEFAULT_SCHEDULE_TIMEOUT_S
        ),
        max_attempts=tool.max_attempts or 1,
        verifiable=tool.verifiable,
    )


def _schema(text: str, where: str) -> dict[str, Any] | None:
    """A JSON Schema given as JSON text (None when empty)."""
    if not text:
        return None
    bounded(text, where, MAX_SCHEMA_BYTES)
    try:
        schema = bounded_json.parse(text, max_bytes=MAX_SCHEMA_BYTES)
    except bounded_json.JsonRefused as exc:
        raise InvalidArgument(f"{where} is not JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise InvalidArgument(f"{where} must be a JSON Schema object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise InvalidArgument(f"{where} is not a valid JSON Schema: {exc.message}") from None
    return schema


def _seconds(value: float, where: str, default: float) -> float:
    if value == 0:
        return default
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise InvalidArgument(f"{where} must be more than 0 and at most {MAX_TIMEOUT_S:g} s")
    return value


def verdict(message: pb.WorkerVerdict) -> WorkerVerdict:
    """A worker's answer to a verify, its ids bounded."""
    bounded(message.execution_id, "verdict.execution_id", MAX_ID_BYTES)
    if "\x00" in message.output:
        raise InvalidArgument("verdict.output contains a NUL character (\\u0000)")
    return WorkerVerdict(
        message.execution_id,
        message.attempt,
        message.known,
        message.ran,
        message.output,
        message.is_error,
    )


def result(message: pb.WorkerResult) -> TaskResult:
    """A worker's result, its ids bounded (its output's size is the session's to judge)."""
    bounded(message.execution_id, "result.execution_id", MAX_ID_BYTES)
    if not message.execution_id or not message.attempt:
        raise InvalidArgument("result.execution_id and result.attempt are required")
    if "\x00" in message.output:
        raise InvalidArgument("result.output contains a NUL character (\\u0000)")
    return TaskResult(
        message.execution_id, message.attempt, message.output, message.is_error, message.retryable
    )


def ask(message: pb.WorkerAsk) -> TaskQuestion:
    """A task's question, its ids bounded (what it asks is the session's to judge: one behest
    does not ask is answered with an error, runs/worker_asks.py)."""
    bounded(message.execution_id, "ask.execution_id", MAX_ID_BYTES)
    if not message.execution_id or not message.number:
        raise InvalidArgument("ask.execution_id and ask.number are required")
    return TaskQuestion(
        message.execution_id, message.number, message.message, message.requested_schema
    )
