"""A group commit (SqlStore.apply_batch): its transaction — steps checked against their
fences, run creations checked or inserted together, every write, the NOTIFYs that tell other
replicas — and, on PostgreSQL, fresh creations' one statement run on the driver."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy import Connection

from behest.domain.runs import Run
from behest.errors import Fenced
from behest.store.sql import channel_payloads, leases
from behest.store.sql.creation import (
    INSERT_RUNS,
    INSERT_SESSIONS,
    create_checked,
    fresh_rows,
    is_fresh,
)
from behest.store.sql.postgres_writer import AsyncWriter, ConnectionLost
from behest.store.sql.single_statement import OneStatement
from behest.store.sql.writer import Writer
from behest.store.sql.writes import apply_writes, notifications
from behest.store.writes import BatchResult, Fence, NewRun, Write


def apply_batch(
    conn: Connection, items: Sequence[list[Write] | NewRun], node: str
) -> list[BatchResult]:
    results: list[BatchResult] = []
    plain: list[Write] = []
    sessions: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    current = leases.fence_generations(conn, {f.run_id for f in _fences(items)})
    for item in items:
        if not isinstance(item, NewRun):
            stale = next((f for f in item if _is_stale(f, current)), None)
            if isinstance(stale, Fence):  # the run changed hands: this step writes nothing
                results.append(Fenced(stale.run_id, stale.generation))
                continue
            results.append(None)
            plain.extend(item)
        elif not is_fresh(item):
            results.append(create_checked(conn, item))
        else:
            # A new session and no key: nothing to check, so insert with the others.
            session, run, created, writes = fresh_rows(item)
            sessions.append(session)
            runs.append(run)
            results.append((created, writes))
            plain.extend(writes)
    if sessions:
        conn.execute(INSERT_SESSIONS, sessions)
        conn.execute(INSERT_RUNS, runs)
    apply_writes(conn, plain)
    if conn.dialect.name == "postgresql":
        # Fresh creations' first steps are in `plain`; checked ones' are in their results.
        firsts = (write for r in results if isinstance(r, tuple) for write in r[1])
        for name, payload in notifications(node, itertools.chain(plain, firsts)):
            channel_payloads.notify(conn, name, payload)
    return results


def _fences(items: Sequence[list[Write] | NewRun]) -> list[Fence]:
    return [w for item in items if isinstance(item, list) for w in item if isinstance(w, Fence)]


def _is_stale(write: Write, current: dict[str, int]) -> bool:
    return isinstance(write, Fence) and current.get(write.run_id) != write.generation


async def create_fresh(
    writer: Writer,
    one: OneStatement,
    results: list[BatchResult],
    *,
    get_run: Callable[[str], Awaitable[Run | None]],
) -> list[BatchResult]:
    """Run fresh creations' one statement on the driver. Its connection found dead (the
    server ended it just before: the pool cannot tell) leaves it committed whole or not
    at all: its first run says which, and one that did not commit is run once more on a
    new connection."""
    assert isinstance(writer, AsyncWriter)
    for attempt in (1, 2):
        try:
            await writer.execute_on_driver(one.statement, one.params)
            return results
        except ConnectionLost:
            if attempt == 2:
                raise
            first = results[0]
            assert isinstance(first, tuple)
            if await get_run(first[0].run.id) is not None:
                return results
    raise AssertionError("unreachable")
