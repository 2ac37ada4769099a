"""apply_batch: run creations group-committed with other steps, each refusal failing alone."""

from __future__ import annotations

from behest.domain.runs import CreatedRun, RunStatus
from behest.errors import Aborted, NotFound
from behest.store.sql.store import SqlStore
from behest.store.writes import NewRun
from tests.store import helpers
from tests.store.helpers import (
    TRACE_ID,
    at,
    create,
    events,
    finish,
    new_id,
    real_first_step,
    request,
)


def new_run(session_id: str | None = None, *, key: str = "", text: str = "hi") -> NewRun:
    """A creation with production's first step, claimed by node-1."""
    return helpers.new_run(
        request(session_id=session_id, client_request_id=key, input=text),
        owner="node-1",
        lease_until=at(30),
        first_step=real_first_step,
    )


async def test_a_creation_commits_its_first_step_with_it(store: SqlStore) -> None:
    [result] = await store.apply_batch([new_run(text="first words")])
    assert isinstance(result, tuple)
    created, writes = result
    assert created.created and len(writes) == 4  # its Fence, event, message, snapshot
    run = await store.get_run(created.run.id)
    assert run is not None
    assert (run.status, run.owner) == (RunStatus.SESSION_LOADED, "node-1")
    [started] = await store.read_events(run.id, after=0, limit=10)
    assert (started.sequence, started.trace_id) == (1, TRACE_ID)
    [user] = await store.session_messages(run.session_id)
    assert (user.text, user.position) == ("first words", 0)
    snapshot = await store.get_snapshot(run.id)
    assert snapshot is not None and snapshot.status == RunStatus.SESSION_LOADED


async def test_a_refused_creation_fails_alone(store: SqlStore) -> None:
    busy = await create(store)
    other = await create(store)
    results = await store.apply_batch(
        [
            new_run(busy.session_id),
            events(other.id, 1, 3),
            new_run(new_id()),
            new_run(),
        ]
    )
    assert isinstance(results[0], Aborted) and busy.id in str(results[0])
    assert results[1] is None
    assert isinstance(results[2], NotFound)
    assert isinstance(results[3], tuple) and results[3][0].created
    assert await store.last_sequence(other.id) == 3


async def test_twins_in_one_batch_make_one_run(store: SqlStore) -> None:
    key = new_id()
    results = await store.apply_batch([new_run(key=key), new_run(key=key)])
    created = [r[0] for r in results if isinstance(r, tuple)]
    assert [c.created for c in created] == [True, False]
    assert created[0].run.id == created[1].run.id
    assert all(isinstance(c, CreatedRun) for c in created)
    assert results[1][1] == []  # type: ignore[index]


async def test_the_user_message_follows_the_session_transcript(store: SqlStore) -> None:
    [first] = await store.apply_batch([new_run()])
    assert isinstance(first, tuple)
    await finish(store, first[0].run.id)
    [second] = await store.apply_batch([new_run(first[0].run.session_id, text="again")])
    assert isinstance(second, tuple)
    messages = await store.session_messages(first[0].run.session_id)
    assert [(m.position, m.text) for m in messages] == [(0, "hi"), (1, "again")]
