"""agent.v1.AgentService: the caller's tenant's agents, their versions and aliases."""

from __future__ import annotations

import grpc

from behest._proto.agent.v1 import agent_pb2 as pb
from behest.api import agent_requests as edge
from behest.api.admission import Admission
from behest.api.auth import current_caller
from behest.api.queries import page
from behest.runs.operations import Operations


class AgentServicer:
    def __init__(self, runs: Operations, admission: Admission) -> None:
        self._runs = runs
        self._agents = runs.agents
        self._admission = admission

    async def CreateAgent(
        self, request: pb.CreateAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateAgentResponse:
        caller = current_caller()
        name = edge.name_field(request.name)
        definition = await self._definition(request.definition, caller.tenant)
        agent, version = await self._agents.create(caller, name, definition)
        return pb.CreateAgentResponse(
            agent=edge.agent_message(agent), version=edge.version_message(version)
        )

    async def UpdateAgent(
        self, request: pb.UpdateAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateAgentResponse:
        caller = current_caller()
        name = edge.name_field(request.name)
        definition = await self._definition(request.definition, caller.tenant)
        agent, version, changed = await self._agents.update(
            caller, name, definition, allow_missing=request.allow_missing
        )
        return pb.UpdateAgentResponse(
            agent=edge.agent_message(agent), version=edge.version_message(version), changed=changed
        )

    async def GetAgent(
        self, request: pb.GetAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetAgentResponse:
        agent, version = await self._agents.get(current_caller(), edge.ref_field(request.agent))
        return pb.GetAgentResponse(
            agent=edge.agent_message(agent), version=edge.version_message(version)
        )

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentsResponse:
        limit, offset = page(request.pagination)
        agents = await self._agents.list(
            current_caller(), limit=limit, offset=offset, include_archived=request.include_archived
        )
        return pb.ListAgentsResponse(agents=[edge.agent_message(a) for a in agents])

    async def ListAgentVersions(
        self, request: pb.ListAgentVersionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListAgentVersionsResponse:
        name = edge.name_field(request.name)
        limit, offset = page(request.pagination)
        versions = await self._agents.versions(current_caller(), name, limit=limit, offset=offset)
        return pb.ListAgentVersionsResponse(versions=[edge.version_message(v) for v in versions])

    async def SetAgentAlias(
        self, request: pb.SetAgentAliasRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetAgentAliasResponse:
        name = edge.name_field(request.name)
        alias = edge.alias_field(request.alias)
        agent = await self._agents.set_alias(current_caller(), name, alias, request.version)
        return pb.SetAgentAliasResponse(agent=edge.agent_message(agent))

    async def ArchiveAgent(
        self, request: pb.ArchiveAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.ArchiveAgentResponse:
        name = edge.name_field(request.name)
        agent = await self._agents.archive(current_caller(), name)
        return pb.ArchiveAgentResponse(agent=edge.agent_message(agent))

    async def _definition(
        self, definition: pb.AgentDefinition, tenant: str
    ) -> edge.AgentDefinition:
        await self._runs.know_workers(current_caller())
        limits = self._admission.request_limits(tenant)
        return edge.agent_definition(definition, limits, self._runs, tenant=tenant)
