"""agent.v1.ToolExecutionService: what ran for a run's tool calls; reconciling an execution
whose outcome is unknown."""

from __future__ import annotations

import grpc

from behest._proto.agent.v1 import execution_pb2 as pb
from behest.api import convert_executions as convert
from behest.api.auth import current_caller
from behest.api.fields import uuid_field
from behest.runs.operations import Operations


class ToolExecutionServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def ListToolExecutions(
        self, request: pb.ListToolExecutionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListToolExecutionsResponse:
        run_id = uuid_field(request.run_id, "run_id")
        found = await self._runs.tool_executions(current_caller(), run_id)
        return pb.ListToolExecutionsResponse(executions=[convert.execution(e) for e in found])

    async def GetToolExecution(
        self, request: pb.GetToolExecutionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetToolExecutionResponse:
        execution_id = uuid_field(request.execution_id, "execution_id")
        found = await self._runs.tool_execution(current_caller(), execution_id)
        return pb.GetToolExecutionResponse(execution=convert.execution(found))

    async def ReconcileToolExecution(
        self, request: pb.ReconcileToolExecutionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReconcileToolExecutionResponse:
        execution_id = uuid_field(request.execution_id, "execution_id")
        answer = convert.reconcile_answer(request)
        done, submitted = await self._runs.reconcile(current_caller(), execution_id, answer)
        return pb.ReconcileToolExecutionResponse(
            execution=convert.execution(done), waiting_call_ids=submitted.waiting_call_ids
        )
