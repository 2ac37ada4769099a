"""BehestClient's calls of sessions: listed, read, erased, and as conversations.

`watch_session` (WatchSessionEvents): every event of its runs, the runs started later
included; it does not end by itself. After a break (UNAVAILABLE: a restart, a failover) it
comes back from the last event it yielded — that event's run and sequence are the session's
cursor — with the client's reconnect backoff, so nothing is missed or repeated.

`fork_session` (ForkSession): a new session sharing a prefix of one's history; not retried
(a repeat would make a second fork)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc.aio

from behest.client import _wire
from behest.client._channel import Backoff
from behest.client._errors import Unavailable, error_of
from behest.client._events import Event
from behest.client._types import Message, Session


class SessionCalls:
    """Mixed into BehestClient, whose stubs, call metadata and backoff this uses."""

    @property
    def _s(self) -> _wire.Stubs:
        raise NotImplementedError

    _backoff: Backoff

    async def _unary(self, method: Any, request: Any, *, retry: bool = True) -> Any:
        raise NotImplementedError

    @property
    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        raise NotImplementedError

    async def list_sessions(
        self, *, limit: int = 0, offset: int = 0, forks_of: str = ""
    ) -> list[Session]:
        """The tenant's sessions (or the forks of one), newest first."""
        pagination = _wire.Pagination(limit=limit, offset=offset)
        request = _wire.session.ListSessionsRequest(pagination=pagination, forks_of=forks_of)
        response = await self._unary(self._s.sessions.ListSessions, request)
        return [_wire.session_of(s) for s in response.sessions]

    async def get_session(self, session_id: str) -> Session:
        """One session."""
        request = _wire.session.GetSessionRequest(session_id=session_id)
        return _wire.session_of((await self._unary(self._s.sessions.GetSession, request)).session)

    async def session_messages(
        self, session_id: str, from_position: int = 0, *, page: int = 0
    ) -> AsyncIterator[Message]:
        """The session's transcript from a position, page by page (`page` messages a call)."""
        more = True
        while more:
            request = _wire.session.ListSessionMessagesRequest(
                session_id=session_id, from_position=from_position, limit=page
            )
            response = await self._unary(self._s.sessions.ListSessionMessages, request)
            for message in response.messages:
                yield _wire.message_of(message)
            from_position, more = response.next_position, response.more

    async def delete_session(self, session_id: str) -> int:
        """Erase a session and everything of its runs; how many runs went with it (not
        retried: a repeat would be NotFound)."""
        request = _wire.session.DeleteSessionRequest(session_id=session_id)
        response = await self._unary(self._s.sessions.DeleteSession, request, retry=False)
        return int(response.runs_deleted)

    async def fork_session(
        self, session_id: str, *, through_position: int | None = None, after_run_id: str = ""
    ) -> Session:
        """A new session whose history is the session's through a message position (or the
        end of one of its runs), shared with it."""
        request = _wire.session.ForkSessionRequest(session_id=session_id)
        if after_run_id:
            request.after_run_id = after_run_id
        elif through_position is not None:
            request.through_position = through_position
        response = await self._unary(self._s.sessions.ForkSession, request, retry=False)
        return _wire.session_of(response.session)

    async def watch_session(
        self, session_id: str, *, after_run_id: str = "", after_sequence: int = 0
    ) -> AsyncIterator[Event]:
        """Yield the session's events after (after_run_id, after_sequence) — none given: from
        its first — as they are stored, resuming after breaks; stop iterating to end it."""
        last = (after_run_id, after_sequence)
        attempt = 0
        while True:
            request = _wire.session.WatchSessionEventsRequest(
                session_id=session_id, after_run_id=last[0], after_sequence=last[1]
            )
            call = self._s.sessions.WatchSessionEvents(request, metadata=self.call_metadata)
            try:
                async for wire_event in call:
                    event = _wire.event_of(wire_event)
                    last, attempt = (event.run_id, event.sequence), 0
                    yield event
                error: Unavailable = Unavailable(
                    grpc.StatusCode.UNAVAILABLE, "the server ended the session's stream"
                )
            except grpc.aio.AioRpcError as exc:
                translated = error_of(exc)
                if not isinstance(translated, Unavailable):
                    raise translated from None
                error = translated
            finally:
                call.cancel()
            if not await self._backoff.wait(attempt):
                raise error
            attempt += 1
