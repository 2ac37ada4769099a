"""Creating runs, one active run per session, listing runs (SEMANTICS §1)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from behest.domain.runs import FinishReason, Run, RunFilter, RunRequest, RunStatus
from behest.domain.spend import TokenUsage
from behest.errors import Aborted, NotFound
from behest.store.sql.store import SqlStore
from tests.store.conftest import OpenStore
from tests.store.helpers import (
    TENANT,
    TRACEPARENT,
    at,
    create,
    create_outcome,
    finish,
    new_id,
    new_run,
    request,
    update,
)

SECOND = timedelta(seconds=1)


async def test_a_creation_without_session_makes_a_session_and_a_session_loaded_run(
    store: SqlStore,
) -> None:
    run_id = new_id()
    now = at()
    lease = now + 30 * SECOND
    req = request(input="what is 2+2?", metadata='{"k": "v"}')

    created, writes = await create_outcome(
        store, new_run(req, run_id=run_id, now=now, owner="node-1", lease_until=lease)
    )

    assert created.created
    assert writes == []
    run = created.run
    assert run.id == run_id
    assert run.session_id
    # Created with its first step: the run is stored as started, never as PENDING.
    assert run.status == RunStatus.SESSION_LOADED
    assert (run.provider, run.model, run.input) == ("local", "echo", "what is 2+2?")
    assert run.metadata == '{"k": "v"}'
    assert run.tool_choice == "auto"
    assert run.created_at == now
    assert run.updated_at == now
    assert run.iterations == 0
    assert run.finish_reason == FinishReason.UNSPECIFIED
    assert run.usage == TokenUsage(0, 0)
    assert run.error == ""
    assert run.traceparent == TRACEPARENT
    assert (run.owner, run.lease_expires_at) == ("node-1", lease)
    assert await store.get_run(run_id) == run


async def test_a_creation_on_a_session_keeps_the_request_options(store: SqlStore) -> None:
    first = await create(store)
    await finish(store, first.id)
    req = RunRequest(
        session_id=first.session_id,
        provider="local",
        model="script",
        input="go",
        instructions="be brief",
        tools=("calculator", "read_file"),
        max_iterations=3,
        tool_choice="none",
    )

    run = await create(store, req)

    stored = await store.get_run(run.id)
    assert stored is not None
    assert (stored.instructions, stored.tools, stored.max_iterations, stored.tool_choice) == (
        "be brief",
        ("calculator", "read_file"),
        3,
        "none",
    )
    assert (stored.owner, stored.lease_expires_at) == ("", None)


async def test_create_run_on_an_existing_session_continues_it(store: SqlStore) -> None:
    first = await create(store)
    await finish(store, first.id)

    second = await create(store, request(session_id=first.session_id))

    assert second.session_id == first.session_id
    assert second.id != first.id


async def test_get_run_of_unknown_run_is_none(store: SqlStore) -> None:
    assert await store.get_run(new_id()) is None


async def test_create_run_on_unknown_session_is_not_found(store: SqlStore) -> None:
    session_id = new_id()
    run_id = new_id()

    with pytest.raises(NotFound, match=session_id):
        await create(store, request(session_id=session_id), run_id=run_id)

    assert await store.get_run(run_id) is None


async def test_create_run_on_a_busy_session_is_aborted_naming_the_active_run(
    store: SqlStore,
) -> None:
    active = await create(store)
    refused_id = new_id()

    with pytest.raises(Aborted, match=active.id):
        await create(store, request(session_id=active.session_id), run_id=refused_id)

    assert await store.get_run(refused_id) is None
    assert await store.get_run(active.id) == active


async def test_two_stores_racing_for_an_idle_session_one_wins_the_other_is_aborted(
    store: SqlStore, open_store: OpenStore
) -> None:
    other = await open_store()
    first = await create(store)
    await finish(store, first.id)

    for _ in range(5):
        ids = [new_id(), new_id()]
        outcomes = await asyncio.gather(
            *(
                create(s, request(session_id=first.session_id), run_id=i)
                for s, i in zip((store, other), ids, strict=True)
            ),
            return_exceptions=True,
        )

        winners = [o for o in outcomes if isinstance(o, Run)]
        losers = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(winners) == 1, outcomes
        assert len(losers) == 1 and isinstance(losers[0], Aborted), outcomes
        assert winners[0].id in str(losers[0])
        (lost,) = set(ids) - {winners[0].id}
        assert await other.get_run(lost) is None
        await finish(other, winners[0].id)


async def test_terminal_update_frees_the_session_for_a_new_run(store: SqlStore) -> None:
    first = await create(store)

    await store.apply(
        [
            update(
                first.id,
                RunStatus.COMPLETED,
                iterations=2,
                usage=TokenUsage(30, 7),
                finish_reason=FinishReason.STOP,
            )
        ]
    )
    second = await create(store, request(session_id=first.session_id))

    ended = await store.get_run(first.id)
    assert ended is not None
    assert ended.status == RunStatus.COMPLETED
    assert ended.iterations == 2
    assert ended.usage == TokenUsage(30, 7)
    assert ended.finish_reason == FinishReason.STOP
    assert second.session_id == first.session_id
    assert second.status == RunStatus.SESSION_LOADED


async def test_non_terminal_update_keeps_the_session_busy(store: SqlStore) -> None:
    run = await create(store)

    await store.apply([update(run.id, RunStatus.CALLING_MODEL)])

    with pytest.raises(Aborted, match=run.id):
        await create(store, request(session_id=run.session_id))


async def test_late_terminal_update_of_an_old_run_leaves_the_new_run_active(
    store: SqlStore,
) -> None:
    old = await create(store)
    await finish(store, old.id, RunStatus.CANCELLED)
    new = await create(store, request(session_id=old.session_id))

    await finish(store, old.id, RunStatus.FAILED)

    with pytest.raises(Aborted, match=new.id):
        await create(store, request(session_id=old.session_id))
    assert (await store.get_run(old.id)).status == RunStatus.CANCELLED  # type: ignore[union-attr]


async def _session_history(store: SqlStore) -> list[tuple[str, RunStatus]]:
    """Five runs on one session, a second apart: COMPLETED, FAILED, CANCELLED, COMPLETED and
    one still active (SESSION_LOADED, as every run is created).

    Returns (run id, status) oldest first.
    """
    statuses = [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.COMPLETED]
    base = at()
    session_id: str | None = None
    history = []
    for i, status in enumerate(statuses):
        run = await create(store, request(session_id=session_id), now=base + i * SECOND)
        session_id = run.session_id
        await finish(store, run.id, status)
        history.append((run.id, status))
    last = await create(store, request(session_id=session_id), now=base + 4 * SECOND)
    history.append((last.id, RunStatus.SESSION_LOADED))
    return history


async def test_list_runs_of_a_session_is_newest_first(store: SqlStore) -> None:
    history = await _session_history(store)
    session_id = (await store.get_run(history[0][0])).session_id  # type: ignore[union-attr]

    runs = await store.list_runs(tenant=TENANT, wanted=RunFilter(session_id=session_id, limit=100))

    assert [r.id for r in runs] == [run_id for run_id, _ in reversed(history)]
    assert [r.status for r in runs] == [status for _, status in reversed(history)]


async def test_list_runs_pages_with_limit_and_offset(store: SqlStore) -> None:
    history = await _session_history(store)
    newest_first = [run_id for run_id, _ in reversed(history)]
    session_id = (await store.get_run(history[0][0])).session_id  # type: ignore[union-attr]

    pages = [
        [
            r.id
            for r in await store.list_runs(
                tenant=TENANT, wanted=RunFilter(session_id=session_id, limit=2, offset=o)
            )
        ]
        for o in (0, 2, 4, 6)
    ]

    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:5], []]


async def test_list_runs_filters_by_session_and_status(store: SqlStore) -> None:
    history = await _session_history(store)
    session_id = (await store.get_run(history[0][0])).session_id  # type: ignore[union-attr]
    completed = [run_id for run_id, status in reversed(history) if status == RunStatus.COMPLETED]

    runs = await store.list_runs(
        tenant=TENANT,
        wanted=RunFilter(session_id=session_id, status=RunStatus.COMPLETED, limit=100),
    )

    assert [r.id for r in runs] == completed


async def test_list_runs_filters_by_status_across_sessions(store: SqlStore) -> None:
    failed = await create(store)
    await finish(store, failed.id, RunStatus.FAILED)
    active = await create(store)

    runs = await store.list_runs(
        tenant=TENANT, wanted=RunFilter(status=RunStatus.FAILED, limit=1000)
    )

    ids = {r.id for r in runs}
    assert failed.id in ids
    assert active.id not in ids
    assert {r.status for r in runs} == {RunStatus.FAILED}


async def test_unfinished_runs_are_the_non_terminal_ones_oldest_first(store: SqlStore) -> None:
    base = at()
    older = await create(store, now=base)
    ended = await create(store, now=base + SECOND)
    await finish(store, ended.id, RunStatus.CANCELLED)
    newer = await create(store, now=base + 2 * SECOND)
    await store.apply([update(newer.id, RunStatus.WAITING_FOR_TOOLS)])

    runs = await store.unfinished_runs()

    ours = [r.id for r in runs if r.id in {older.id, ended.id, newer.id}]
    assert ours == [older.id, newer.id]
    assert not any(r.status.is_terminal for r in runs)


async def test_list_runs_filters_by_model_and_creation_time(store: SqlStore) -> None:
    base = at()
    made = [
        await create(store, request(model=model), now=base + i * SECOND)
        for i, model in enumerate(["echo", "script", "echo", "script"])
    ]

    def ids(runs: list[Run]) -> list[str]:
        return [r.id for r in runs]

    async def listed(**filters: Any) -> list[str]:
        return ids(await store.list_runs(tenant=TENANT, wanted=RunFilter(limit=100, **filters)))

    mine = set(ids(made))  # on PostgreSQL the database holds other tests' runs too

    async def listed_mine(**filters: Any) -> list[str]:
        return [run_id for run_id in await listed(**filters) if run_id in mine]

    assert await listed_mine(model="script") == [made[3].id, made[1].id]
    window = {"created_from": base + SECOND, "created_to": base + 2 * SECOND}
    assert await listed_mine(**window) == [made[2].id, made[1].id]
    assert await listed_mine(model="echo", **window) == [made[2].id]
