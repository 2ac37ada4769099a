"""The part of the Store protocol for sessions as conversations: the order of a session's
runs (WatchSessionEvents), and what a new message on a busy session does to the active run
(double-texting: the run of an idempotency key, a run's messages rolled back)."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from behest.domain.runs import Steer


class SessionStore(Protocol):
    async def session_runs(self, session_id: str) -> list[str]:
        """The ids of the session's runs that have started, in the order they started."""
        ...

    async def run_of_key(self, tenant: str, key: str) -> str | None:
        """The run a tenant's client_request_id created, if any."""
        ...

    async def add_steer(
        self, run_id: str, text: str, *, now: datetime, key: tuple[str, str, str] | None = None
    ) -> Steer | None:
        """Store a message for the active run to take (on_busy STEER), with its idempotency
        key (tenant, client_request_id, fingerprint) naming that run; None when the run has
        ended or closed steering (it is ending)."""
        ...

    async def pending_steers(self, run_id: str) -> list[Steer]:
        """The run's steers not taken yet, oldest first."""
        ...

    async def fork_session(
        self,
        *,
        tenant: str,
        session_id: str,
        new_id: str,
        through: int | None,
        after_run_id: str,
        now: datetime,
    ) -> None:
        """A new session of the tenant whose history is `session_id`'s through a position (or
        the end of one of its runs), shared (store/sql/forks.py)."""
        ...

    async def roll_back_run(self, run_id: str) -> int:
        """Take the ended run's messages out of its session's history (they stay the run's:
        GetRunOutput); how many."""
        ...
