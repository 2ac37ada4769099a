"""Sub-agent runs as stored: a run's parent, depth and permission, and a parent's children."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from behest.domain.runs import Run, RunRequest, RunStatus
from behest.store.sql.store import SqlStore
from tests.store.helpers import at, create, finish, new_id
from tests.support import sqlite_at_revision


def req(session_id: str | None = None, **options: Any) -> RunRequest:
    """A request with the given options."""
    return RunRequest(session_id=session_id, provider="local", model="echo", input="hi", **options)


async def child(store: SqlStore, parent: Run, *, seconds: float = 0.0, **options: Any) -> Run:
    """A sub-agent run `parent` started, created `seconds` from now."""
    sub = req(parent_run_id=parent.id, depth=parent.depth + 1, **options)
    return await create(store, sub, now=at(seconds))


# --- a run's parent, depth and permission --------------------------------------------------


@pytest.mark.parametrize("checked", [False, True], ids=["fresh", "checked"])
async def test_a_sub_agent_run_reads_back_with_its_parent_and_depth(
    store: SqlStore, checked: bool
) -> None:
    parent = await create(store, req(allow_sub_agents=True))
    # A key makes the creation a checked one (its own savepoint), not a plain insert.
    key = {"client_request_id": new_id()} if checked else {}
    sub = req(parent_run_id=parent.id, depth=3, allow_sub_agents=True, **key)

    run = await create(store, sub)  # also checks the outcome is the run as stored

    assert (run.parent_run_id, run.depth, run.allow_sub_agents) == (parent.id, 3, True)
    assert parent.allow_sub_agents
    assert await store.get_run(run.id) == run


async def test_a_run_without_a_parent_reads_back_with_none(store: SqlStore) -> None:
    run = await create(store, req())

    assert (run.parent_run_id, run.depth, run.allow_sub_agents) == ("", 0, False)
    assert await store.get_run(run.id) == run
    assert await store.child_runs(run.id) == []


# --- a parent's children -------------------------------------------------------------------


async def test_child_runs_lists_only_the_parents_children_oldest_first(store: SqlStore) -> None:
    parent = await create(store, req(allow_sub_agents=True))
    other = await create(store, req(allow_sub_agents=True))
    # Created out of order, to show they are listed by created_at and not by insertion.
    second = await child(store, parent, seconds=2)
    first = await child(store, parent, seconds=1)
    await child(store, other, seconds=1)
    grandchild = await child(store, first, seconds=3)
    await create(store, req(), now=at(1))  # a run with no parent

    children = await store.child_runs(parent.id)

    assert [c.id for c in children] == [first.id, second.id]
    assert children == [first, second]
    assert await store.child_runs(first.id) == [grandchild]
    assert grandchild.depth == 2


async def test_child_runs_includes_ended_children(store: SqlStore) -> None:
    parent = await create(store, req(allow_sub_agents=True))
    ended = await child(store, parent, seconds=1)
    running = await child(store, parent, seconds=2)
    await finish(store, ended.id, RunStatus.FAILED)

    children = await store.child_runs(parent.id)

    assert [(c.id, c.status) for c in children] == [
        (ended.id, RunStatus.FAILED),
        (running.id, RunStatus.SESSION_LOADED),
    ]


async def test_children_created_at_the_same_instant_are_listed_by_id(store: SqlStore) -> None:
    parent = await create(store, req(allow_sub_agents=True))
    now = at(1)
    ids = sorted(new_id() for _ in range(3))
    for run_id in reversed(ids):
        sub = req(parent_run_id=parent.id, depth=1)
        await create(store, sub, run_id=run_id, now=now)

    assert [c.id for c in await store.child_runs(parent.id)] == ids


async def test_no_parent_is_not_a_parent(store: SqlStore) -> None:
    await create(store, req())

    assert await store.child_runs("") == []
    assert await store.child_runs(new_id()) == []


# --- migration 0009 -------------------------------------------------------------------------


async def test_runs_stored_before_0009_have_no_parent(tmp_path: Path) -> None:
    path = tmp_path / "behest.db"
    sqlite_at_revision(path, "0008")
    stamp = "2031-05-06 10:00:00.000000"
    with sqlite3.connect(path) as db:  # what a 0.7 server left behind
        db.execute(
            "INSERT INTO sessions (id, created_at, updated_at, active_run_id, tenant)"
            f" VALUES ('s1', '{stamp}', '{stamp}', NULL, 't')"
        )
        db.execute(
            "INSERT INTO runs (id, session_id, status, provider, model, input, metadata,"
            " tool_choice, created_at, updated_at, iterations, finish_reason, input_tokens,"
            " output_tokens, error, traceparent, tenant) VALUES ('r1', 's1', 7, 'local', 'echo',"
            f" 'hi', '', 'auto', '{stamp}', '{stamp}', 1, 1, 3, 4, '', '', 't')"
        )
    store = SqlStore(f"sqlite+aiosqlite:///{path}")
    await store.start()  # migrates to head
    try:
        run = await store.get_run("r1")
        children = await store.child_runs("r1")
    finally:
        await store.close()
    assert run is not None
    assert (run.parent_run_id, run.depth, run.allow_sub_agents) == ("", 0, False)
    assert children == []
