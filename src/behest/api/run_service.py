"""agent.v1.RunService: validate → one call, for the authenticated caller → convert."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from behest._proto.agent.v1 import run_pb2 as pb
from behest.api import convert
from behest.api.admission import Admission
from behest.api.agent_requests import agent_run_request
from behest.api.answers import (
    approval_answers,
    cancel_reason,
    elicitation_answers,
    tool_results,
)
from behest.api.auth import current_caller
from behest.api.fields import uuid_field
from behest.api.queries import events_query, run_query
from behest.domain.runs import CreatedRun
from behest.domain.waits import WaitKind
from behest.observability.trace_context import traceparent_in
from behest.runs.operations import Operations


def traceparent(context: grpc.aio.ServicerContext) -> str:
    """The W3C traceparent the client sent in metadata, if exactly one."""
    return traceparent_in(context.invocation_metadata() or ())


class RunServicer:
    def __init__(self, runs: Operations, admission: Admission) -> None:
        self._runs = runs
        self._admission = admission

    async def CreateRun(
        self, request: pb.CreateRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateRunResponse:
        created = await self._create(request, context)
        return pb.CreateRunResponse(
            run_id=created.run.id, session_id=created.run.session_id, steered=created.steered
        )

    async def CreateRunStream(
        self, request: pb.CreateRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AgentEvent]:
        created = await self._create(request, context)
        async for event in self._runs.follow_created(created.run.id):
            yield convert.event(event)

    async def _create(
        self, request: pb.CreateRunRequest, context: grpc.aio.ServicerContext
    ) -> CreatedRun:
        """Create the run asked for; creates_per_minute counts it only if it was created."""
        caller = current_caller()
        await self._runs.know_workers(caller)
        limits = self._admission.request_limits(caller.tenant)
        run = await agent_run_request(request, limits, self._runs, self._runs.agents, caller)
        with self._admission.creation(caller.tenant) as creation:
            created = await self._runs.create(caller, run, traceparent=traceparent(context))
            creation.created = created.created
        return created

    async def WatchRunEvents(
        self, request: pb.WatchRunEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AgentEvent]:
        run_id = uuid_field(request.run_id, "run_id")
        events = self._runs.watch(current_caller(), run_id, after=request.last_event_id)
        async for event in events:
            yield convert.event(event)

    async def GetRun(
        self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRunResponse:
        run = await self._runs.get(current_caller(), uuid_field(request.run_id, "run_id"))
        return pb.GetRunResponse(run=convert.run_record(run))

    async def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRunsResponse:
        runs = await self._runs.list_runs(current_caller(), run_query(request))
        return pb.ListRunsResponse(runs=[convert.run_record(r) for r in runs])

    async def GetRunOutput(
        self, request: pb.GetRunOutputRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRunOutputResponse:
        output = await self._runs.output(current_caller(), uuid_field(request.run_id, "run_id"))
        return pb.GetRunOutputResponse(output=convert.run_output(output))

    async def CancelRun(
        self, request: pb.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelRunResponse:
        run_id = uuid_field(request.run_id, "run_id")
        status = await self._runs.cancel(current_caller(), run_id, reason=cancel_reason(request))
        return pb.CancelRunResponse(status=convert.run_status(status))

    async def SubmitApprovals(
        self, request: pb.SubmitApprovalsRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitApprovalsResponse:
        run_id = uuid_field(request.run_id, "run_id")
        answers = approval_answers(request)
        submitted = await self._runs.answer(current_caller(), run_id, answers, WaitKind.APPROVAL)
        return pb.SubmitApprovalsResponse(waiting_call_ids=submitted.waiting_call_ids)

    async def SubmitToolResults(
        self, request: pb.SubmitToolResultsRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitToolResultsResponse:
        run_id = uuid_field(request.run_id, "run_id")
        answers = tool_results(request)
        submitted = await self._runs.answer(current_caller(), run_id, answers, WaitKind.CLIENT_TOOL)
        return pb.SubmitToolResultsResponse(waiting_call_ids=submitted.waiting_call_ids)

    async def SubmitElicitationAnswers(
        self, request: pb.SubmitElicitationAnswersRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitElicitationAnswersResponse:
        run_id = uuid_field(request.run_id, "run_id")
        answers = elicitation_answers(request)
        submitted = await self._runs.answer(current_caller(), run_id, answers, WaitKind.ELICITATION)
        return pb.SubmitElicitationAnswersResponse(waiting_call_ids=submitted.waiting_call_ids)

    async def ListPendingCalls(
        self, request: pb.ListPendingCallsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListPendingCallsResponse:
        calls = await self._runs.pending_calls(
            current_caller(), uuid_field(request.run_id, "run_id")
        )
        return pb.ListPendingCallsResponse(calls=[convert.pending_call(c) for c in calls])

    async def ListRunEvents(
        self, request: pb.ListRunEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRunEventsResponse:
        query = events_query(request)
        events, more = await self._runs.events(
            current_caller(), query.run_id, after=query.after, limit=query.limit
        )
        last = events[-1].sequence if events else request.after_sequence
        return pb.ListRunEventsResponse(
            events=[convert.event(e) for e in events], last_sequence=last, more=more
        )

    async def CreateStreamTicket(
        self, request: pb.CreateStreamTicketRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateStreamTicketResponse:
        run_id = uuid_field(request.run_id, "run_id")
        minted = await self._runs.stream_ticket(current_caller(), run_id)
        return pb.CreateStreamTicketResponse(
            ticket=minted.ticket, expires_at=convert.timestamp(minted.expires_at)
        )
