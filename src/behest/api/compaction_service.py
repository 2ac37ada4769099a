"""agent.v1.CompactionService: the stored compaction config and circuit breaker."""

from __future__ import annotations

import grpc

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api import convert
from behest.api.auth import current_caller
from behest.runs.operations import Operations


class CompactionServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def GetCompactionConfig(
        self, request: pb.GetCompactionConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCompactionConfigResponse:
        return convert.compaction_config(await self._runs.compaction_config(current_caller()))

    async def UpdateCompactionConfig(
        self, request: pb.UpdateCompactionConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateCompactionConfigResponse:
        config = convert.compaction_config_from(request)
        await self._runs.update_compaction_config(current_caller(), config)
        return pb.UpdateCompactionConfigResponse()

    async def GetCircuitBreaker(
        self, request: pb.GetCircuitBreakerRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCircuitBreakerResponse:
        state, is_open = await self._runs.circuit_breaker(current_caller())
        return convert.circuit_breaker(state, is_open=is_open)
