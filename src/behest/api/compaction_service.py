"""agent.v1.CompactionService: the stored compaction config and circuit breaker."""

from __future__ import annotations

import grpc

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api import convert
from behest.runs.operations import Operations


class CompactionServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def GetCompactionConfig(
        self, request: pb.GetCompactionConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCompactionConfigResponse:
        return convert.compaction_config(await self._runs.compaction_config())

    async def UpdateCompactionConfig(
        self, request: pb.UpdateCompactionConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateCompactionConfigResponse:
        await self._runs.update_compaction_config(convert.compaction_config_from(request))
        return pb.UpdateCompactionConfigResponse()

    async def GetCircuitBreaker(
        self, request: pb.GetCircuitBreakerRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCircuitBreakerResponse:
        state, is_open = await self._runs.circuit_breaker()
        return convert.circuit_breaker(state, is_open=is_open)
