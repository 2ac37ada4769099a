"""apply(): one step's writes commit together, in order, or not at all (SEMANTICS §1, §2, §7)."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from behest.domain.events import RunCompleted, TextDelta
from behest.domain.messages import Role
from behest.domain.runs import FinishReason, RunStatus
from behest.domain.spend import TokenUsage
from behest.store.sql.store import SqlStore
from behest.store.writes import AppendEvent, AppendMessage, DeleteSnapshot, PutSnapshot
from tests.store.helpers import (
    create,
    event,
    events,
    finish,
    message,
    request,
    snapshot,
    update,
)


async def test_events_messages_run_update_and_snapshot_commit_together(store: SqlStore) -> None:
    run = await create(store)
    user = message(run, 0, text=run.input)
    assistant = message(run, 1, role=Role.ASSISTANT, text="hi there")
    saved = snapshot(run, status=RunStatus.PERSISTING, iteration=1)

    await store.apply(
        [
            *events(run.id, 1, 3),
            AppendMessage(user),
            AppendMessage(assistant),
            update(run.id, RunStatus.PERSISTING, iterations=1, usage=TokenUsage(12, 3)),
            PutSnapshot(saved),
        ]
    )

    assert [e.sequence for e in await store.read_events(run.id, after=0, limit=10)] == [1, 2, 3]
    assert await store.session_messages(run.session_id) == [user, assistant]
    stored = await store.get_run(run.id)
    assert stored is not None
    assert (stored.status, stored.iterations, stored.usage) == (
        RunStatus.PERSISTING,
        1,
        TokenUsage(12, 3),
    )
    assert await store.get_snapshot(run.id) == saved


async def test_terminal_step_writes_status_event_and_removes_the_snapshot(store: SqlStore) -> None:
    run = await create(store)
    await store.apply([*events(run.id, 1, 1), PutSnapshot(snapshot(run))])

    terminal = event(run.id, 2, RunCompleted(FinishReason.STOP, 1))
    await store.apply(
        [
            AppendEvent(terminal),
            update(run.id, RunStatus.COMPLETED, finish_reason=FinishReason.STOP),
            DeleteSnapshot(run.id),
        ]
    )

    assert (await store.read_events(run.id, after=1, limit=10)) == [terminal]
    assert (await store.get_run(run.id)).status == RunStatus.COMPLETED  # type: ignore[union-attr]
    assert await store.get_snapshot(run.id) is None


async def test_batch_with_a_duplicate_sequence_fails_whole_and_keeps_earlier_events(
    store: SqlStore,
) -> None:
    run = await create(store)
    await store.apply(events(run.id, 1, 2))
    earlier = await store.read_events(run.id, after=0, limit=10)
    other = await create(store)

    with pytest.raises(IntegrityError):
        await store.apply(
            [
                *events(other.id, 1, 1),
                AppendMessage(message(run, 0)),
                update(run.id, RunStatus.CALLING_MODEL, iterations=1),
                PutSnapshot(snapshot(run)),
                AppendEvent(event(run.id, 3, TextDelta("new"))),
                AppendEvent(event(run.id, 2, TextDelta("a second writer's event 2"))),
            ]
        )

    assert await store.read_events(run.id, after=0, limit=10) == earlier
    assert await store.last_sequence(run.id) == 2
    assert await store.read_events(other.id, after=0, limit=10) == []
    assert await store.session_messages(run.session_id) == []
    assert await store.get_run(run.id) == run  # as created: SESSION_LOADED, no progress
    assert await store.get_snapshot(run.id) is None


async def test_batch_with_a_duplicate_sequence_inside_it_leaves_nothing(store: SqlStore) -> None:
    run = await create(store)

    with pytest.raises(IntegrityError):
        await store.apply([*events(run.id, 1, 2), *events(run.id, 2, 2)])

    assert await store.read_events(run.id, after=0, limit=10) == []
    assert await store.last_sequence(run.id) == 0


async def test_batch_with_a_duplicate_message_position_fails_whole(store: SqlStore) -> None:
    run = await create(store)
    await store.apply([AppendMessage(message(run, 0))])
    before = await store.session_messages(run.session_id)

    with pytest.raises(IntegrityError):
        await store.apply([*events(run.id, 1, 1), AppendMessage(message(run, 0, text="again"))])

    assert await store.session_messages(run.session_id) == before
    assert await store.last_sequence(run.id) == 0


async def test_store_accepts_writes_after_a_failed_batch(store: SqlStore) -> None:
    run = await create(store)
    await store.apply(events(run.id, 1, 1))
    with pytest.raises(IntegrityError):
        await store.apply(events(run.id, 1, 1))

    await store.apply(events(run.id, 2, 3))

    assert await store.last_sequence(run.id) == 3


async def test_terminal_update_on_a_terminal_run_does_not_change_it(store: SqlStore) -> None:
    run = await create(store)
    await store.apply(
        [update(run.id, RunStatus.CANCELLED, iterations=2, usage=TokenUsage(5, 1), error="")]
    )
    cancelled = await store.get_run(run.id)

    await store.apply(
        [
            update(
                run.id,
                RunStatus.COMPLETED,
                iterations=3,
                usage=TokenUsage(50, 10),
                finish_reason=FinishReason.STOP,
            )
        ]
    )

    assert await store.get_run(run.id) == cancelled


async def test_non_terminal_update_on_a_terminal_run_does_not_reopen_it(store: SqlStore) -> None:
    run = await create(store)
    await finish(store, run.id, RunStatus.FAILED)
    failed = await store.get_run(run.id)

    await store.apply([update(run.id, RunStatus.CALLING_MODEL, iterations=5)])

    assert await store.get_run(run.id) == failed


async def test_update_after_a_terminal_one_in_the_same_batch_does_not_reopen_the_run(
    store: SqlStore,
) -> None:
    run = await create(store)

    await store.apply(
        [
            update(run.id, RunStatus.CANCELLED, iterations=1),
            update(run.id, RunStatus.PERSISTING, iterations=2),
        ]
    )

    stored = await store.get_run(run.id)
    assert stored is not None
    assert (stored.status, stored.iterations) == (RunStatus.CANCELLED, 1)
    next_run = await create(store, request(session_id=run.session_id))
    assert next_run.session_id == run.session_id


async def test_later_update_in_a_batch_wins_while_the_run_is_active(store: SqlStore) -> None:
    run = await create(store)

    await store.apply(
        [
            update(run.id, RunStatus.CALLING_MODEL, iterations=1),
            update(run.id, RunStatus.WAITING_FOR_TOOLS, iterations=1, usage=TokenUsage(9, 9)),
        ]
    )

    stored = await store.get_run(run.id)
    assert stored is not None
    assert (stored.status, stored.usage) == (RunStatus.WAITING_FOR_TOOLS, TokenUsage(9, 9))


async def test_snapshot_writes_in_one_batch_apply_in_order(store: SqlStore) -> None:
    run = await create(store)
    first = snapshot(run, iteration=1)
    last = snapshot(run, iteration=2)

    await store.apply([PutSnapshot(first), DeleteSnapshot(run.id), PutSnapshot(last)])
    assert await store.get_snapshot(run.id) == last

    await store.apply([PutSnapshot(first), DeleteSnapshot(run.id)])
    assert await store.get_snapshot(run.id) is None


async def test_one_batch_updates_several_runs_and_their_snapshots(store: SqlStore) -> None:
    first, second = await create(store), await create(store)
    await store.apply(
        [
            PutSnapshot(snapshot(first, iteration=1)),
            update(first.id, RunStatus.CALLING_MODEL, iterations=1),
            PutSnapshot(snapshot(second, iteration=2)),
            update(second.id, RunStatus.COMPLETED, iterations=2),
            DeleteSnapshot(second.id),
        ]
    )
    one, two = await store.get_run(first.id), await store.get_run(second.id)
    assert one is not None and (one.status, one.iterations) == (RunStatus.CALLING_MODEL, 1)
    assert two is not None and (two.status, two.iterations) == (RunStatus.COMPLETED, 2)
    saved = await store.get_snapshot(first.id)
    assert saved is not None and saved.iteration == 1
    assert await store.get_snapshot(second.id) is None
