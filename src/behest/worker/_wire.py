"""The worker's one meeting point with the wire: the WorkerService stub, the messages it
sends (hello, heartbeat, result, verdict, ask) and the instructions it reads (welcome, task,
ack, verify, answer). The only module of behest.worker that imports `behest._proto`."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import grpc.aio

from behest._proto.agent.v1 import run_pb2, worker_pb2, worker_pb2_grpc
from behest.worker._calls import Outcome
from behest.worker._checks import Verdict
from behest.worker._context import TaskContext
from behest.worker._tools import WorkerTool


@dataclass(frozen=True, slots=True)
class Welcome:
    worker_id: str
    heartbeat_interval_s: float


@dataclass(frozen=True, slots=True)
class Task:
    """A task as it came: its context (without the worker id) and its arguments' JSON."""

    context: TaskContext
    arguments: str


@dataclass(frozen=True, slots=True)
class Verify:
    """A question about an execution whose outcome the server does not know: its context (no
    session id, deadline or worker id) and its arguments' JSON."""

    context: TaskContext
    arguments: str


@dataclass(frozen=True, slots=True)
class Ack:
    execution_id: str
    attempt: int
    accepted: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Answer:
    """The answer to a task's question: `action` ("accept", "decline", "cancel"; "" with
    an error), with "accept" the content's JSON, or `error`: it was not asked, and why."""

    execution_id: str
    number: int
    action: str
    content: str
    error: str


_ACTIONS = {
    run_pb2.ELICITATION_ACTION_ACCEPT: "accept",
    run_pb2.ELICITATION_ACTION_DECLINE: "decline",
    run_pb2.ELICITATION_ACTION_CANCEL: "cancel",
}


def connect(channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> Any:
    """A new Connect stream (a grpc.aio StreamStreamCall)."""
    return worker_pb2_grpc.WorkerServiceStub(channel).Connect(metadata=metadata)


def hello(name: str, tools: Iterable[WorkerTool], max_tasks: int) -> worker_pb2.WorkerMessage:
    specs = [
        worker_pb2.WorkerToolSpec(
            name=tool.name,
            description=tool.description,
            parameters_schema=json.dumps(tool.parameters_schema),
            output_schema=json.dumps(tool.output_schema) if tool.output_schema else "",
            idempotent=tool.idempotent,
            read_only=tool.read_only,
            concurrency_safe=tool.concurrency_safe,
            requires_approval=tool.requires_approval,
            timeout_s=tool.timeout_s,
            schedule_timeout_s=tool.schedule_timeout_s,
            max_attempts=tool.max_attempts,
            verifiable=tool.verifiable,
        )
        for tool in tools
    ]
    return worker_pb2.WorkerMessage(
        hello=worker_pb2.WorkerHello(name=name, tools=specs, max_tasks=max_tasks)
    )


HEARTBEAT = worker_pb2.WorkerMessage(heartbeat=worker_pb2.WorkerHeartbeat())
DRAIN = worker_pb2.WorkerMessage(drain=worker_pb2.WorkerDrain())


def result(execution_id: str, attempt: int, outcome: Outcome) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(
        result=worker_pb2.WorkerResult(
            execution_id=execution_id,
            attempt=attempt,
            output=outcome.output,
            is_error=outcome.is_error,
            retryable=outcome.retryable,
        )
    )


def verdict(execution_id: str, attempt: int, verdict: Verdict) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(
        verdict=worker_pb2.WorkerVerdict(
            execution_id=execution_id,
            attempt=attempt,
            known=verdict.known,
            ran=verdict.ran,
            output=verdict.output,
            is_error=verdict.is_error,
        )
    )


def ask(execution_id: str, number: int, message: str, schema: str) -> worker_pb2.WorkerMessage:
    return worker_pb2.WorkerMessage(
        ask=worker_pb2.WorkerAsk(
            execution_id=execution_id, number=number, message=message, requested_schema=schema
        )
    )


def instruction(
    message: worker_pb2.WorkerInstruction,
) -> Welcome | Task | Ack | Verify | Answer | None:
    """What the server said; None for an instruction newer than this SDK (ignored)."""
    kind = message.WhichOneof("instruction")
    if kind == "welcome":
        welcome = message.welcome
        return Welcome(welcome.worker_id, welcome.heartbeat_interval_s)
    if kind == "task":
        return _task(message.task)
    if kind == "ack":
        ack = message.ack
        return Ack(ack.execution_id, ack.attempt, ack.accepted, ack.reason)
    if kind == "verify":
        return _verify(message.verify)
    if kind == "answer":
        answer = message.answer
        action = _ACTIONS.get(answer.action, "")
        return Answer(answer.execution_id, answer.number, action, answer.content, answer.error)
    return None


def _task(task: worker_pb2.WorkerTask) -> Task:
    deadline = task.deadline.ToDatetime(tzinfo=UTC) if task.HasField("deadline") else None
    context = TaskContext(
        execution_id=task.execution_id,
        attempt=task.attempt,
        idempotency_key=task.idempotency_key,
        tool_name=task.tool_name,
        run_id=task.run_id,
        session_id=task.session_id,
        call_id=task.call_id,
        deadline=deadline,
    )
    return Task(context, task.arguments)


def _verify(verify: worker_pb2.WorkerVerify) -> Verify:
    context = TaskContext(
        execution_id=verify.execution_id,
        attempt=verify.attempt,
        idempotency_key=verify.idempotency_key,
        tool_name=verify.tool_name,
        run_id=verify.run_id,
        session_id="",
        call_id=verify.call_id,
    )
    return Verify(context, verify.arguments)
