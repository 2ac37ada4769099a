"""Who executes each unfinished run: claims with a generation, renewals, releases, cancel
requests for a run another node holds, and the nodes serving the database.

Every claim raises the run's `lease_generation`; every step a node writes into a run carries
the generation of its claim (a Fence) and is checked against the stored one in the step's own
transaction (`fence_generations`). On PostgreSQL the check locks the runs' rows (FOR SHARE), so a
claim waits for a step in flight and the step of a node that lost the run fails: a run's log
has one writer at a time, whatever the clocks say.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from behest.domain.runs import Cancel
from behest.errors import FailedPrecondition
from behest.store.base import Renewal
from behest.store.sql import channel_payloads
from behest.store.sql import tables as t
from behest.store.sql.rows import utc
from behest.store.sql.writes import TERMINAL

_runs = t.runs.c
_nodes = t.nodes.c

# PostgreSQL's lock_not_available: a claim's lock_timeout ran out.
LOCK_NOT_AVAILABLE = "55P03"
CLAIM_LOCK_TIMEOUT_MS = 500
_CLAIM_LOCK_TIMEOUT = sa.text(f"SET LOCAL lock_timeout = {CLAIM_LOCK_TIMEOUT_MS}")
_RENEW = (
    sa.update(t.runs)
    .where(_runs.owner == sa.bindparam("b_owner"), _runs.status.not_in(TERMINAL))
    .values(lease_expires_at=sa.bindparam("b_until"))
    .returning(_runs.id, _runs.cancel_requested_at)
)
_RENEW_NODE = (
    sa.update(t.nodes)
    .where(_nodes.name == sa.bindparam("b_owner"))
    .values(expires_at=sa.bindparam("b_until"))
)
_RELEASE = (
    sa.update(t.runs)
    .where(_runs.owner == sa.bindparam("b_owner"), _runs.status.not_in(TERMINAL))
    .values(owner=None, lease_expires_at=None)
)


def claim(
    conn: Connection,
    run_id: str,
    *,
    owner: str,
    now: datetime,
    lease_until: datetime,
    force: bool,
) -> int:
    """Take an unfinished run that is unowned, `owner`'s, or whose lease lapsed (any unfinished
    run with `force`); the new claim's generation, 0 if the run was not taken."""
    conditions: list[sa.ColumnElement[bool]] = [_runs.id == run_id, _runs.status.not_in(TERMINAL)]
    if not force:
        conditions.append(
            sa.or_(
                _runs.owner.is_(None),
                _runs.owner == owner,
                _runs.lease_expires_at.is_(None),
                _runs.lease_expires_at < now,
            )
        )
    statement = (
        sa.update(t.runs)
        .where(*conditions)
        .values(
            owner=owner,
            lease_expires_at=lease_until,
            lease_generation=_runs.lease_generation + 1,
        )
        .returning(_runs.lease_generation)
    )
    if conn.dialect.name == "postgresql":
        # A run whose row another transaction locks (its owner writing a step) is not
        # waited for long: its claim is tried again at the next round.
        conn.execute(_CLAIM_LOCK_TIMEOUT)
        try:
            with conn.begin_nested():
                generation = conn.execute(statement).scalar()
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            return 0
    else:
        generation = conn.execute(statement).scalar()
    return 0 if generation is None else int(generation)


def renew(conn: Connection, *, owner: str, lease_until: datetime) -> Renewal:
    """Extend `owner`'s claims and its node's registration: which runs it holds, and which
    of them a cancel was asked of (through another node)."""
    params = {"b_owner": owner, "b_until": lease_until}
    renewed = conn.execute(_RENEW, params).all()
    conn.execute(_RENEW_NODE, params)
    return Renewal(
        held=frozenset(run_id for run_id, _ in renewed),
        cancel_asked=frozenset(run_id for run_id, asked in renewed if asked is not None),
    )


def release(conn: Connection, *, owner: str) -> int:
    """Let go of every unfinished run `owner` holds (a node that stops): any node may take
    them up at once. Returns how many."""
    return int(conn.execute(_RELEASE, {"b_owner": owner}).rowcount)


def fence_generations(conn: Connection, run_ids: set[str]) -> dict[str, int]:
    """The current lease generation of each of `run_ids` (a run that is gone is left out),
    to check the Fences of a batch's steps against. On PostgreSQL the rows stay locked until
    the transaction ends, so no claim can come between this check and the commit."""
    if not run_ids:
        return {}
    query = (
        sa.select(_runs.id, _runs.lease_generation)
        .where(_runs.id.in_(sorted(run_ids)))
        .order_by(_runs.id)
    )
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(read=True)
    return {run_id: int(generation) for run_id, generation in conn.execute(query)}


def request_cancel(conn: Connection, run_id: str, cancel: Cancel, *, now: datetime) -> bool:
    """Store a cancel asked of an unfinished run, unless one was asked already (the first
    stands); whether the run is unfinished."""
    statement = (
        sa.update(t.runs)
        .where(
            _runs.id == run_id,
            _runs.status.not_in(TERMINAL),
            _runs.cancel_requested_at.is_(None),
        )
        .values(
            cancel_requested_at=now,
            cancel_by=cancel.by,
            cancel_reason=cancel.reason,
            cancel_source=int(cancel.source),
        )
    )
    if conn.execute(statement).rowcount == 1:
        return True
    unfinished = sa.select(_runs.id).where(_runs.id == run_id, _runs.status.not_in(TERMINAL))
    return conn.execute(unfinished).first() is not None


def request_cancel_and_signal(
    conn: Connection, run_id: str, cancel: Cancel, *, now: datetime, node: str
) -> bool:
    unfinished = request_cancel(conn, run_id, cancel, now=now)
    if unfinished and node and conn.dialect.name == "postgresql":
        channel_payloads.notify(
            conn, channel_payloads.SIGNALS, channel_payloads.signal_payload(node, "cancel", run_id)
        )
    return unfinished


# --- the nodes serving the database ---------------------------------------------------------


def register_node(
    conn: Connection,
    *,
    name: str,
    instance: str,
    host: str,
    pid: int,
    now: datetime,
    until: datetime,
) -> None:
    """Register this process as node `name` until `until`; FailedPrecondition while another
    live process holds the name (its registration has not lapsed)."""
    row = conn.execute(sa.select(t.nodes).where(_nodes.name == name).with_for_update()).first()
    if row is not None and row.instance != instance and utc(row.expires_at) > now:
        raise FailedPrecondition(
            f"node_id {name!r} is held by another live behest process (pid {row.pid} on "
            f"{row.host!r}, renewed until {utc(row.expires_at).isoformat()}); give this "
            "process another node_id, or leave node_id unset for a unique one"
        )
    values = {
        "instance": instance,
        "host": host,
        "pid": pid,
        "started_at": now,
        "expires_at": until,
    }
    if row is None:
        conn.execute(sa.insert(t.nodes).values(name=name, **values))
    else:
        conn.execute(sa.update(t.nodes).where(_nodes.name == name).values(**values))


def unregister_node(conn: Connection, *, name: str, instance: str) -> None:
    conn.execute(sa.delete(t.nodes).where(_nodes.name == name, _nodes.instance == instance))


def live_nodes(conn: Connection, *, now: datetime) -> int:
    """How many nodes serve the database now (registrations not lapsed)."""
    query = sa.select(sa.func.count()).select_from(t.nodes).where(_nodes.expires_at > now)
    count = conn.execute(query).scalar()
    return int(count or 0)


def forget_lapsed_nodes(conn: Connection, *, before: datetime) -> None:
    """Delete registrations lapsed before `before` (nodes long gone)."""
    conn.execute(sa.delete(t.nodes).where(_nodes.expires_at < before))
