"""Sessions of a vanished node stuck inside a write (PostgreSQL): ended so that its runs'
row locks do not hold up their adoption.

idle_in_transaction_session_timeout (engine.create_engines) ends the session of a process
frozen between two statements of a transaction. It does not end one frozen in the middle of
a statement's messages (say, a batch sent in parts): PostgreSQL arms that timeout only once a
statement is done, and a backend waiting for the rest of a message is "active". Such a session
keeps its transaction, and the row locks of its runs, for as long as its process is frozen.
Each node names its sessions (application_name "behest <node>"); a live node ends those of
nodes whose registration lapsed that wait for their client inside a transaction older than a
lease. Their transactions roll back, so nothing of them is written.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection

PREFIX = "behest "
# PostgreSQL keeps application_name to 63 bytes (NAMEDATALEN - 1).
_NAME_BYTES = 63

_END_STALLED = sa.text(
    "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a "
    "WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() "
    "AND a.application_name LIKE 'behest %' AND a.state = 'active' "
    "AND a.wait_event = 'ClientRead' AND a.xact_start < :b_before "
    "AND a.application_name NOT IN ("
    "  SELECT left('behest ' || n.name, 63) FROM nodes n WHERE n.expires_at > :b_now)"
)


def application_name(node: str) -> str:
    """What a node's sessions are named (cut as PostgreSQL keeps it)."""
    return (PREFIX + node).encode()[:_NAME_BYTES].decode(errors="ignore")


def end_stalled(conn: Connection, *, now: datetime, before: datetime) -> int:
    """End the sessions of lapsed nodes that wait for their client inside a transaction
    begun before `before`; how many were ended."""
    return sum(
        1 for (ended,) in conn.execute(_END_STALLED, {"b_now": now, "b_before": before}) if ended
    )
