"""Sessions: the transcript a session's runs share, as listed to its tenant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Session:
    """One session, with how many runs and transcript messages it holds."""

    id: str
    tenant: str
    created_at: datetime
    updated_at: datetime
    # The run active on it now; "" when idle.
    active_run_id: str
    run_count: int
    message_count: int
    # A fork: the session it shares its history with, through this position ("", None: not).
    parent_session_id: str = ""
    forked_through: int | None = None
