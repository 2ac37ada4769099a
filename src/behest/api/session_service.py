"""agent.v1.SessionService: the caller's tenant's sessions, their transcripts, their erasure."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from behest._proto.agent.v1 import run_pb2 as run_pb
from behest._proto.agent.v1 import session_pb2 as pb
from behest.api import convert
from behest.api.auth import current_caller
from behest.api.fields import uuid_field
from behest.api.queries import fork_query, messages_query, session_watch_query, sessions_page
from behest.runs.operations import Operations


class SessionServicer:
    def __init__(self, runs: Operations) -> None:
        self._runs = runs

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        limit, offset = sessions_page(request)
        forks_of = uuid_field(request.forks_of, "forks_of") if request.forks_of else ""
        sessions = await self._runs.list_sessions(
            current_caller(), limit=limit, offset=offset, forks_of=forks_of
        )
        return pb.ListSessionsResponse(sessions=[convert.session(s) for s in sessions])

    async def GetSession(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetSessionResponse:
        session_id = uuid_field(request.session_id, "session_id")
        found = await self._runs.get_session(current_caller(), session_id)
        return pb.GetSessionResponse(session=convert.session(found))

    async def ListSessionMessages(
        self, request: pb.ListSessionMessagesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionMessagesResponse:
        query = messages_query(request)
        messages, more = await self._runs.session_messages(
            current_caller(),
            query.session_id,
            from_position=query.from_position,
            limit=query.limit,
        )
        following = messages[-1].position + 1 if messages else query.from_position
        return pb.ListSessionMessagesResponse(
            messages=[convert.message(m) for m in messages], next_position=following, more=more
        )

    async def WatchSessionEvents(
        self, request: pb.WatchSessionEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[run_pb.AgentEvent]:
        query = session_watch_query(request)
        events = self._runs.watch_session(
            current_caller(),
            query.session_id,
            after_run_id=query.after_run_id,
            after_sequence=query.after_sequence,
        )
        async for event in events:
            yield convert.event(event)

    async def ForkSession(
        self, request: pb.ForkSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ForkSessionResponse:
        query = fork_query(request)
        forked = await self._runs.fork_session(
            current_caller(),
            query.session_id,
            through=query.through,
            after_run_id=query.after_run_id,
        )
        return pb.ForkSessionResponse(session=convert.session(forked))

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSessionResponse:
        session_id = uuid_field(request.session_id, "session_id")
        deleted = await self._runs.delete_session(current_caller(), session_id)
        return pb.DeleteSessionResponse(runs_deleted=deleted)
