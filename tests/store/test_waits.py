"""Runs that wait: their options, pending calls, answers, time-outs (domain/waits.py)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from behest.domain.runs import Run, RunFilter, RunRequest, RunStatus
from behest.domain.waits import (
    Answer,
    ClientTool,
    Decision,
    PendingCall,
    Submitted,
    WaitKind,
    WaitOptions,
)
from behest.errors import FailedPrecondition, InvalidArgument, NotFound
from behest.store.base import Store
from behest.store.sql.store import SqlStore
from behest.store.writes import ExpireCalls, ReleaseRun, RequestInput
from tests.store.conftest import OpenStore
from tests.store.helpers import at, create, finish, new_id, request, update

APPROVAL, CLIENT_TOOL = WaitKind.APPROVAL, WaitKind.CLIENT_TOOL
SECOND = timedelta(seconds=1)
WAITS = WaitOptions(
    client_tools=(
        ClientTool(
            name="pick_file",
            description="Ask the user to pick a file ✓",
            parameters_schema={
                "type": "object",
                "properties": {"filter": {"type": "string"}, "max": {"type": "number"}},
                "required": ["filter"],
            },
        ),
        ClientTool(name="noop", description="", parameters_schema={}),
    ),
    approval_required_tools=("shell", "write_file"),
    approve_side_effects=True,
    approval_timeout_s=120,
    client_tool_timeout_s=30,
)


def call(
    run: Run,
    call_id: str,
    *,
    kind: WaitKind = APPROVAL,
    ordinal: int = 0,
    tool_name: str = "shell",
    expires_at: datetime | None = None,
) -> PendingCall:
    return PendingCall(
        run_id=run.id,
        call_id=call_id,
        session_id=run.session_id,
        tenant=run.tenant,
        kind=kind,
        tool_name=tool_name,
        arguments='{"command": "ls -l"}',
        ordinal=ordinal,
        requested_at=at(),
        expires_at=expires_at or at(600),
    )


async def waiting_run(
    store: Store,
    *calls: tuple[str, WaitKind],
    run: Run | None = None,
    expires_at: datetime | None = None,
) -> tuple[Run, list[PendingCall]]:
    """A run that stopped to wait for `calls` (call id, kind), in that order, as the loop
    stops one: the calls, the status and the release in one step."""
    run = run or await create(store, owner="node-a", lease_until=at(60))
    pending = [
        call(run, call_id, kind=kind, ordinal=n, expires_at=expires_at)
        for n, (call_id, kind) in enumerate(calls)
    ]
    await store.apply(
        [
            RequestInput(tuple(reversed(pending))),
            update(run.id, RunStatus.WAITING_FOR_INPUT),
            ReleaseRun(run.id),
        ]
    )
    return run, pending


def allow(call_id: str, reason: str = "") -> Answer:
    return Answer(call_id=call_id, decision=Decision.ALLOW, text=reason)


def deny(call_id: str, reason: str = "") -> Answer:
    return Answer(call_id=call_id, decision=Decision.DENY, text=reason)


def output(call_id: str, text: str = "picked /tmp/x", *, is_error: bool = False) -> Answer:
    return Answer(call_id=call_id, text=text, is_error=is_error)


async def submit(
    store: Store,
    run: Run,
    *answers: Answer,
    kind: WaitKind = APPROVAL,
    by: str = "alice",
    now: datetime | None = None,
) -> Submitted:
    return await store.submit_answers(run.id, answers, kind=kind, by=by, now=now or at())


async def answers(store: Store, run: Run) -> dict[str, Answer | None]:
    return {c.call_id: c.answer for c in await store.pending_calls(run.id)}


async def resumable_ids(store: Store, runs: Sequence[Run], *, now: datetime) -> list[str]:
    """Which of `runs` are resumable, in the store's order (other tests' runs left out)."""
    ours = {run.id for run in runs}
    return [r.id for r in await store.resumable_runs(now=now) if r.id in ours]


# --- options and pending calls as stored ---------------------------------------------------


async def test_a_runs_options_for_waiting_read_back_as_given(store: SqlStore) -> None:
    base = request()
    req = RunRequest(
        session_id=None, provider=base.provider, model=base.model, input="hi", waits=WAITS
    )

    waits = await create(store, req)  # and it asserts that the stored run equals the outcome
    plain = await create(store)

    assert waits.waits == WAITS
    assert isinstance(waits.waits.client_tools, tuple)
    assert plain.waits == WaitOptions()
    listed = await store.list_runs(
        tenant=waits.tenant, wanted=RunFilter(session_id=waits.session_id, limit=10)
    )
    assert [r.waits for r in listed] == [WAITS]


async def test_a_run_stops_to_wait_unowned_with_its_calls_in_order(store: SqlStore) -> None:
    run, pending = await waiting_run(store, ("c1", APPROVAL), ("c2", CLIENT_TOOL), ("c3", APPROVAL))

    stored = await store.get_run(run.id)
    assert stored is not None
    assert stored.status == RunStatus.WAITING_FOR_INPUT
    assert (stored.owner, stored.lease_expires_at) == ("", None)
    assert await store.pending_calls(run.id) == pending
    assert await store.pending_calls(new_id()) == []


async def test_answers_read_back_on_their_calls(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a", APPROVAL), ("t", CLIENT_TOOL))
    now = at()

    await submit(store, run, deny("a", "too risky"), now=now, by="alice")
    await submit(store, run, output("t", "no file", is_error=True), kind=CLIENT_TOOL, now=now)

    calls = await store.pending_calls(run.id)
    assert [c.answer for c in calls] == [
        deny("a", "too risky"),
        output("t", "no file", is_error=True),
    ]
    assert [(c.answered_by, c.answered_at, c.timed_out) for c in calls] == [
        ("alice", now, False)
    ] * 2
    assert not any(c.expired(at(3600)) for c in calls)


# --- which runs may go on -------------------------------------------------------------------


async def test_a_waiting_run_is_resumable_once_every_call_is_answered(store: SqlStore) -> None:
    base = at()
    running = await create(store, now=base)
    waiting, _ = await waiting_run(
        store, ("c1", APPROVAL), ("c2", CLIENT_TOOL), run=await create(store, now=base + SECOND)
    )
    ended = await create(store, now=base + 2 * SECOND)
    await finish(store, ended.id)
    ours = [running, waiting, ended]

    assert await resumable_ids(store, ours, now=at()) == [running.id]
    await submit(store, waiting, allow("c1"))
    assert await resumable_ids(store, ours, now=at()) == [running.id]
    await submit(store, waiting, output("c2"), kind=CLIENT_TOOL)
    assert await resumable_ids(store, ours, now=at()) == [running.id, waiting.id]


async def test_a_waiting_run_is_resumable_once_its_calls_expire(store: SqlStore) -> None:
    expires = at(30)
    run, _ = await waiting_run(store, ("c1", APPROVAL), ("c2", APPROVAL), expires_at=expires)
    await submit(store, run, allow("c1"))

    assert await resumable_ids(store, [run], now=at()) == []
    assert await resumable_ids(store, [run], now=expires) == [run.id]


# --- submitting answers ---------------------------------------------------------------------


async def test_an_answer_to_an_unknown_call_or_kind_or_run_is_not_found(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a", APPROVAL), ("t", CLIENT_TOOL))

    with pytest.raises(NotFound, match=f"run {run.id} has no approval request 'nope'"):
        await submit(store, run, allow("a"), allow("nope"))
    with pytest.raises(NotFound, match=f"run {run.id} has no approval request 't'"):
        await submit(store, run, allow("t"))
    with pytest.raises(NotFound, match=f"run {run.id} has no client tool call 'a'"):
        await submit(store, run, output("a"), kind=CLIENT_TOOL)
    missing = new_id()
    with pytest.raises(NotFound, match=f"run {missing} not found"):
        await store.submit_answers(missing, [allow("a")], kind=APPROVAL, by="alice", now=at())
    assert await answers(store, run) == {"a": None, "t": None}


async def test_the_same_answer_again_is_accepted_and_changes_nothing(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a", APPROVAL), ("t", CLIENT_TOOL))
    await submit(store, run, allow("a", "fine"), by="alice")
    await submit(store, run, output("t"), kind=CLIENT_TOOL, by="alice")
    first = await store.pending_calls(run.id)

    again = await submit(store, run, allow("a", "fine"), by="bob", now=at(1))
    await submit(store, run, output("t"), kind=CLIENT_TOOL, by="bob", now=at(1))

    assert again == Submitted(waiting_call_ids=())
    assert await store.pending_calls(run.id) == first


async def test_another_answer_is_refused_and_the_whole_request_with_it(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a1", APPROVAL), ("a2", APPROVAL), ("t", CLIENT_TOOL))
    await submit(store, run, deny("a2", "no"))
    await submit(store, run, output("t", "x"), kind=CLIENT_TOOL)

    with pytest.raises(
        FailedPrecondition, match=r"call 'a2' was already answered otherwise \(DENY"
    ):
        await submit(store, run, allow("a1"), allow("a2"))
    with pytest.raises(FailedPrecondition, match="call 't' was already answered otherwise"):
        await submit(store, run, output("t", "y"), kind=CLIENT_TOOL)
    with pytest.raises(FailedPrecondition, match="call 'a2' was already answered otherwise"):
        await submit(store, run, deny("a2", "a different reason"))

    assert await answers(store, run) == {"a1": None, "a2": deny("a2", "no"), "t": output("t", "x")}


async def test_an_expired_or_timed_out_call_takes_no_answer(store: SqlStore) -> None:
    expires = at(30)
    run, _ = await waiting_run(store, ("a1", APPROVAL), ("a2", APPROVAL), expires_at=expires)
    await store.apply([ExpireCalls(run_id=run.id, call_ids=("a2",))])

    with pytest.raises(
        FailedPrecondition,
        match=re.escape(f"call 'a1' expired at {expires.isoformat()}; it was treated as timed out"),
    ):
        await submit(store, run, allow("a1"), now=expires)
    with pytest.raises(FailedPrecondition, match="call 'a2' expired at"):
        await submit(store, run, allow("a2"), now=at())

    assert await answers(store, run) == {"a1": None, "a2": None}


async def test_expiring_marks_only_unanswered_calls_timed_out(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a1", APPROVAL), ("a2", APPROVAL))
    await submit(store, run, allow("a1"))
    before = at()

    await store.apply([ExpireCalls(run_id=run.id, call_ids=("a1", "a2"))])

    a1, a2 = await store.pending_calls(run.id)
    assert (a1.answer, a1.timed_out) == (allow("a1"), False)
    assert (a2.answer, a2.timed_out) == (None, True)
    assert a2.answered_at is not None and a2.answered_at >= before
    assert a2.expired(before) and not a1.expired(at(3600))


async def test_an_ended_run_takes_no_answers(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a", APPROVAL))
    await finish(store, run.id, RunStatus.CANCELLED)

    with pytest.raises(FailedPrecondition, match=f"run {run.id} already ended CANCELLED"):
        await submit(store, run, allow("a"))
    assert await answers(store, run) == {"a": None}


async def test_an_ended_run_takes_a_repeat_of_the_answers_it_had(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a", APPROVAL), ("b", APPROVAL))
    await submit(store, run, allow("a"))
    await finish(store, run.id, RunStatus.COMPLETED)

    assert (await submit(store, run, allow("a"))).waiting_call_ids == ()
    with pytest.raises(FailedPrecondition, match="already ended COMPLETED"):
        await submit(store, run, allow("a"), allow("b"))


async def test_one_call_answered_twice_in_a_request(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a1", APPROVAL), ("a2", APPROVAL))

    with pytest.raises(InvalidArgument, match="call 'a2' is answered twice, differently"):
        await submit(store, run, allow("a1"), allow("a2"), deny("a2"))
    assert await answers(store, run) == {"a1": None, "a2": None}

    await submit(store, run, allow("a2", "ok"), allow("a2", "ok"))
    assert await answers(store, run) == {"a1": None, "a2": allow("a2", "ok")}


async def test_submitted_names_the_calls_that_still_wait(store: SqlStore) -> None:
    run, _ = await waiting_run(store, ("a1", APPROVAL), ("t", CLIENT_TOOL), ("a2", APPROVAL))
    expires = at(30)
    late, _ = await waiting_run(store, ("b1", APPROVAL), ("b2", APPROVAL), expires_at=expires)

    assert await submit(store, run, allow("a2")) == Submitted(waiting_call_ids=("a1", "t"))
    assert await submit(store, run) == Submitted(waiting_call_ids=("a1", "t"))
    assert await submit(store, run, allow("a1")) == Submitted(waiting_call_ids=("t",))
    done = await submit(store, run, output("t"), kind=CLIENT_TOOL)
    assert done == Submitted(waiting_call_ids=())
    # At its expiry, a call no longer waits.
    assert await submit(store, late, allow("b1"), now=expires - SECOND) == Submitted(("b2",))
    assert await submit(store, late, now=expires) == Submitted(())


async def test_always_allowed_tools_are_the_sessions(store: SqlStore) -> None:
    first, _ = await waiting_run(store, ("c1", APPROVAL), ("c2", APPROVAL), ("c3", APPROVAL))
    await submit(
        store,
        first,
        Answer(call_id="c1", decision=Decision.ALLOW_ALWAYS),
        allow("c2"),
        deny("c3"),
    )
    await finish(store, first.id)
    # A later run of the session, and a run of another session.
    later = await create(store, request(session_id=first.session_id))
    elsewhere = await create(store)
    for run, tool in ((later, "grep"), (elsewhere, "rm")):
        pending = call(run, "x", tool_name=tool)
        await store.apply([RequestInput((pending,))])
        await submit(store, run, Answer(call_id="x", decision=Decision.ALLOW_ALWAYS))

    assert await store.always_allowed(first.session_id) == {"shell", "grep"}
    assert await store.always_allowed(elsewhere.session_id) == {"rm"}
    assert await store.always_allowed(new_id()) == frozenset()


async def test_answers_to_one_run_from_two_stores_both_land(
    store: SqlStore, open_store: OpenStore
) -> None:
    other = await open_store()
    for _ in range(5):
        run, _ = await waiting_run(store, ("a1", APPROVAL), ("a2", APPROVAL))

        results = await asyncio.gather(
            submit(store, run, allow("a1")), submit(other, run, deny("a2"))
        )

        assert await answers(store, run) == {"a1": allow("a1"), "a2": deny("a2")}
        # Serialised: the later one saw the earlier's answer, so one of them reports that
        # nothing waits any more (the run may go on).
        waiting = sorted(r.waiting_call_ids for r in results)
        assert waiting in ([(), ("a1",)], [(), ("a2",)])
