"""The part of the Store protocol for sessions as conversations: the order of a session's
runs (WatchSessionEvents), and what a new message on a busy session does to the active run
(double-texting: the run of an idempotency key, a run's messages rolled back)."""

from __future__ import annotations

from typing import Protocol


class SessionStore(Protocol):
    async def session_runs(self, session_id: str) -> list[str]:
        """The ids of the session's runs that have started, in the order they started."""
        ...

    async def run_of_key(self, tenant: str, key: str) -> str | None:
        """The run a tenant's client_request_id created, if any."""
        ...

    async def roll_back_run(self, run_id: str) -> int:
        """Take the ended run's messages out of its session's history (they stay the run's:
        GetRunOutput); how many."""
        ...
