"""agent.v1.WorkerService: a worker's stream, translated; its serving is
runs/worker_session.py's."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from behest._proto.agent.v1 import run_pb2
from behest._proto.agent.v1 import worker_pb2 as pb
from behest.api import worker_hello
from behest.api.auth import current_caller
from behest.api.convert import timestamp
from behest.domain.workers import TaskAnswer, VerifyRequest
from behest.errors import InvalidArgument
from behest.runs.operations import Operations
from behest.runs.worker_session import Incoming, Outgoing, ResultAck, WorkerDrain, WorkerHeartbeat


class WorkerServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def Connect(
        self, requests: AsyncIterator[pb.WorkerMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.WorkerInstruction]:
        caller = current_caller()
        first = await anext(aiter(requests), None)
        if first is None or first.WhichOneof("message") != "hello":
            raise InvalidArgument("the first message of a worker's stream must be its hello")
        hello = worker_hello.hello(first.hello, self._runs.server_tool_names())
        session = await self._runs.connect_worker(caller, hello)
        welcome = pb.WorkerWelcome(
            worker_id=session.worker.id, heartbeat_interval_s=self._runs.worker_heartbeat_s
        )
        yield pb.WorkerInstruction(welcome=welcome)
        async for item in session.serve(_messages(requests)):
            yield _instruction(item)


async def _messages(requests: AsyncIterator[pb.WorkerMessage]) -> AsyncIterator[Incoming]:
    async for message in requests:
        match message.WhichOneof("message"):
            case "heartbeat":
                yield WorkerHeartbeat()
            case "drain":
                yield WorkerDrain()
            case "verdict":
                yield worker_hello.verdict(message.verdict)
            case "result":
                yield worker_hello.result(message.result)
            case "ask":
                yield worker_hello.ask(message.ask)
            case "hello":
                raise InvalidArgument("a worker says hello once, first")
            case _:
                raise InvalidArgument(
                    "a worker's message must be a heartbeat, a result, a verdict, an ask or drain"
                )


def _instruction(item: Outgoing) -> pb.WorkerInstruction:
    if isinstance(item, TaskAnswer):
        answer = pb.WorkerAnswer(
            execution_id=item.execution_id,
            number=item.number,
            action=run_pb2.ElicitationAction.ValueType(int(item.action or 0)),
            content=item.content,
            error=item.error,
        )
        return pb.WorkerInstruction(answer=answer)
    if isinstance(item, VerifyRequest):
        verify = pb.WorkerVerify(
            execution_id=item.execution_id,
            attempt=item.attempt,
            idempotency_key=item.idempotency_key,
            tool_name=item.tool_name,
            arguments=item.arguments,
            run_id=item.run_id,
            call_id=item.call_id,
        )
        return pb.WorkerInstruction(verify=verify)
    if isinstance(item, ResultAck):
        ack = pb.WorkerResultAck(
            execution_id=item.execution_id,
            attempt=item.attempt,
            accepted=item.accepted,
            reason=item.reason,
        )
        return pb.WorkerInstruction(ack=ack)
    task = pb.WorkerTask(
        execution_id=item.execution_id,
        attempt=item.attempt,
        idempotency_key=item.idempotency_key,
        tool_name=item.tool_name,
        arguments=item.arguments,
        deadline=timestamp(item.deadline) if item.deadline is not None else None,
        run_id=item.run_id,
        session_id=item.session_id,
        call_id=item.call_id,
    )
    return pb.WorkerInstruction(task=task)
