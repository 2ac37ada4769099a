"""agent.v1.ToolService and ProviderService: the tools and the models runs may name."""

from __future__ import annotations

import grpc

from behest._proto.agent.v1 import catalog_pb2 as pb
from behest.api import convert_catalog
from behest.api.auth import current_caller
from behest.runs.operations import Operations


class ToolServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def ListTools(
        self, request: pb.ListToolsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListToolsResponse:
        tools = await self._runs.tools(current_caller())
        return pb.ListToolsResponse(tools=[convert_catalog.tool_info(t) for t in tools])


class ProviderServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def ListProviders(
        self, request: pb.ListProvidersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListProvidersResponse:
        providers = self._runs.providers(current_caller())
        return pb.ListProvidersResponse(
            providers=[convert_catalog.provider_info(p) for p in providers]
        )
