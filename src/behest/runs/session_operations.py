"""The Operations of sessions: listed, read a page at a time, followed whole
(runs/session_stream.py), forked (store/sql/forks.py) and erased. Mixed into
runs/operations.py Operations."""

from __future__ import annotations

import collections
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from behest.domain.callers import Caller
from behest.domain.events import Event
from behest.domain.messages import Message
from behest.domain.sessions import Session
from behest.errors import NotFound
from behest.events.log import EventLog
from behest.runs.session_stream import follow_session
from behest.store.base import Store


class SessionOperations:
    """Set by Operations' constructor."""

    _store: Store
    _log: EventLog
    # Tenants of runs seen lately (Operations): erasure forgets them.
    _tenants: collections.OrderedDict[str, str]

    async def list_sessions(
        self, caller: Caller, *, limit: int, offset: int, forks_of: str = ""
    ) -> list[Session]:
        """The caller's sessions (or the forks of one of them), newest first."""
        if forks_of:
            await self.get_session(caller, forks_of)
        return await self._store.list_sessions(
            tenant=caller.tenant, limit=limit, offset=offset, forks_of=forks_of
        )

    async def fork_session(
        self, caller: Caller, session_id: str, *, through: int | None, after_run_id: str
    ) -> Session:
        """A new session whose history is the session's through a position (or a run's
        end), shared with it (store/sql/forks.py)."""
        new_id = str(uuid.uuid4())
        await self._store.fork_session(
            tenant=caller.tenant,
            session_id=session_id,
            new_id=new_id,
            through=through,
            after_run_id=after_run_id,
            now=datetime.now(UTC),
        )
        return await self.get_session(caller, new_id)

    async def get_session(self, caller: Caller, session_id: str) -> Session:
        found = await self._store.get_session(session_id)
        if found is None or found.tenant != caller.tenant:
            raise NotFound(f"session {session_id} not found")
        return found

    async def watch_session(
        self, caller: Caller, session_id: str, *, after_run_id: str, after_sequence: int
    ) -> AsyncIterator[Event]:
        """Every event of the session's runs after the cursor (runs/session_stream.py)."""
        await self.get_session(caller, session_id)
        events = follow_session(
            self._store,
            self._log,
            session_id,
            after_run_id=after_run_id,
            after_sequence=after_sequence,
        )
        async for event in events:
            yield event

    async def session_messages(
        self, caller: Caller, session_id: str, *, from_position: int, limit: int
    ) -> tuple[list[Message], bool]:
        """A page of the session's transcript from a position, and whether more follow."""
        await self.get_session(caller, session_id)
        messages = await self._store.session_messages_page(
            session_id, from_position=from_position, limit=limit + 1
        )
        return messages[:limit], len(messages) > limit

    async def delete_session(self, caller: Caller, session_id: str) -> int:
        """Erase the session and everything of its runs; how many runs went with it."""
        deleted = await self._store.delete_session(tenant=caller.tenant, session_id=session_id)
        # Forget the tenants of runs seen lately: some of them no longer exist.
        self._tenants.clear()
        return deleted
