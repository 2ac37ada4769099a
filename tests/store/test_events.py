"""The event log as stored: paging, order, last sequence, payload round-trip (SEMANTICS §2)."""

from __future__ import annotations

import random
import typing
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

from behest.domain import events as ev
from behest.domain.executions import Verdict
from behest.domain.messages import ToolCall
from behest.domain.runs import BusyPolicy, FinishReason, RunStatus
from behest.domain.spend import BudgetKind, CancelSource, FailureCode, Money, TokenUsage
from behest.domain.waits import Decision, ElicitAction
from behest.store.sql.store import SqlStore
from behest.store.writes import AppendEvent
from tests.store.helpers import SPAN_ID, TRACE_ID, create, event, events, new_id

EVERY_KIND: list[ev.Payload] = [
    ev.RunStarted(session_id=new_id(), provider="local", model="echo"),
    ev.ContextBuilt(message_count=7),
    ev.ModelStarted(provider="local", model="echo", iteration=2),
    ev.ModelStarted(
        provider="local", model="echo", iteration=3, agent_name="billing", agent_version=4
    ),
    ev.TextDelta(delta='héllo, wörld ✓ 🚀\n\t"quoted" \\ back'),
    ev.ToolCallStarted(call_id="call_1", tool_name="read_file"),
    ev.ToolCallDelta(call_id="call_1", delta='{"path": "/tm'),
    ev.ToolCallCompleted(call=ToolCall("call_1", "read_file", '{"path": "/tmp/x", "n": [1, 2]}')),
    ev.ToolExecutionStarted(
        call_id="call_1", tool_name="read_file", execution_id=new_id(), attempt=2
    ),
    ev.ToolExecutionFinished(
        call_id="call_1", tool_name="read_file", duration_ms=1234, is_error=True
    ),
    ev.AssistantMessageCommitted(message_id=new_id()),
    ev.ToolMessageCommitted(message_id=new_id()),
    ev.UsageRecorded(
        usage=TokenUsage(
            input_tokens=3_000_000_000,
            output_tokens=42,
            cached_input_tokens=5_000_000_000,
            cache_write_tokens=7,
            reasoning_tokens=30,
        ),
        cost=Money(Decimal("0.000123"), "USD"),
    ),
    ev.DoomLoopDetected(description="read_file({'path': '/tmp/x'}) three times in a row"),
    ev.CompactionCircuitOpened(consecutive_failures=3),
    ev.CompactionStarted(messages_before=12, estimated_tokens_before=9000, reason="overflow"),
    ev.CompactionFinished(
        messages_after=4, estimated_tokens_after=1200, pruned_only=False, succeeded=True
    ),
    ev.ApprovalRequested(
        call=ToolCall("call_2", "shell", '{"command": "rm -rf /tmp/x"}'),
        expires_at=datetime(2026, 12, 1, 10, 30, 0, 123456, tzinfo=UTC),
    ),
    ev.ApprovalResolved(
        call_id="call_2",
        tool_name="shell",
        decision=Decision.ALLOW_ALWAYS,
        decided_by="alice",
        reason="trusted ✓",
    ),
    ev.ClientToolRequested(
        call=ToolCall("call_3", "pick_file", "{}"),
        expires_at=datetime(2026, 12, 1, 10, 31, tzinfo=timezone(timedelta(hours=2))),
    ),
    ev.ClientToolAnswered(
        call_id="call_3", tool_name="pick_file", is_error=True, answered_by="", timed_out=True
    ),
    ev.SubRunStarted(call_id="call_4", child_run_id=new_id(), session_id=new_id()),
    ev.SubRunFinished(
        call_id="call_4",
        child_run_id=new_id(),
        status=RunStatus.FAILED,
        usage=TokenUsage(3_000_000_000, 42, 5, 7),
        cost=Money(Decimal("0.000123"), "USD"),
    ),
    ev.OutputRejected(error="the answer is not valid JSON (… ✓)", repairing=True),
    ev.ReasoningDelta(delta="two and two… make four ✓ "),
    ev.ToolOutcomeUnknown(
        execution_id=new_id(),
        call_id="call_5",
        tool_name="send_mail",
        attempt=1,
        expires_at=datetime(2026, 12, 2, 10, 0, tzinfo=UTC),
    ),
    ev.ToolRetryScheduled(
        call_id="call_6", tool_name="lookup", execution_id=new_id(), next_attempt=2, reason="x ✓"
    ),
    ev.ToolExecutionReconciled(
        execution_id=new_id(),
        call_id="call_5",
        tool_name="send_mail",
        verdict=Verdict.GIVE_UP,
        reconciled_by="alice",
        reason="no log ✓",
    ),
    ev.Handoff(
        call_id="call_7",
        from_agent="triage",
        from_version=2,
        to_agent="billing",
        to_version=4,
        reason="a refund ✓",
    ),
    ev.UserMessageAdded(message_id=new_id(), text="and one more thing ✓"),
    ev.ElicitationRequested(
        elicitation_id="call_8~1-0123456789ab",
        call_id="call_8",
        tool_name="echo__book",
        message="How many nights in Lisboa ✓?",
        requested_schema='{"type":"object","properties":{"nights":{"type":"integer"}}}',
        expires_at=datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
    ),
    ev.ElicitationAnswered(
        elicitation_id="call_8~1-0123456789ab",
        call_id="call_8",
        tool_name="echo__book",
        action=ElicitAction.DECLINE,
        answered_by="carol",
        timed_out=False,
        replayed=True,
    ),
    ev.ToolExecutionFinished(
        call_id="call_9", tool_name="slow", duration_ms=12, is_error=True, cancelled=True
    ),
    ev.ToolProgress(
        call_id="call_9", tool_name="slow", progress=3.0, total=8.0, message="page 3 ✓"
    ),
    ev.RunStarted(
        session_id=new_id(),
        provider="local",
        model="echo",
        interrupted_run_id=new_id(),
        on_busy=BusyPolicy.ROLLBACK,
        waited_for_run_id=new_id(),
    ),
    ev.RunCompleted(finish_reason=FinishReason.TOOL_CALLS, iterations=4),
    ev.BudgetExceeded(budget=BudgetKind.DAILY_COST, limit="10.00", used="10.000001"),
    ev.RunFailed(error="provider 'local': boom", code=FailureCode.RATE_LIMITED),
    ev.RunCancelled(cancelled_by="alice", reason="enough ✓", source=CancelSource.CALLER),
]


def test_the_round_trip_list_names_every_event_kind() -> None:
    assert {type(p) for p in EVERY_KIND} == set(typing.get_args(ev.Payload))


async def test_every_event_kind_round_trips(store: SqlStore) -> None:
    run = await create(store)
    written = [event(run.id, n, payload) for n, payload in enumerate(EVERY_KIND, start=1)]

    await store.apply([AppendEvent(e) for e in written])

    read = await store.read_events(run.id, after=0, limit=100)
    assert read == written
    completed = read[EVERY_KIND.index(ev.RunCompleted(FinishReason.TOOL_CALLS, 4))].payload
    assert isinstance(completed, ev.RunCompleted)
    assert type(completed.finish_reason) is FinishReason
    assert read[-1].is_terminal


async def test_payloads_with_their_defaults_round_trip(store: SqlStore) -> None:
    run = await create(store)
    defaults: list[ev.Payload] = [
        ev.UsageRecorded(usage=TokenUsage(1, 2)),
        ev.RunFailed(error="boom"),
        ev.RunCancelled(),
    ]
    written = [event(run.id, n, payload) for n, payload in enumerate(defaults, start=1)]

    await store.apply([AppendEvent(e) for e in written])

    assert await store.read_events(run.id, after=0, limit=10) == written


async def test_event_envelope_round_trips(store: SqlStore) -> None:
    run = await create(store)
    stamp = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    written = ev.Event(
        run_id=run.id,
        sequence=1,
        payload=ev.ContextBuilt(1),
        timestamp=stamp,
        trace_id=TRACE_ID,
        span_id=SPAN_ID,
    )

    await store.apply([AppendEvent(written)])

    (read,) = await store.read_events(run.id, after=0, limit=1)
    assert (read.run_id, read.sequence, read.trace_id, read.span_id) == (
        run.id,
        1,
        TRACE_ID,
        SPAN_ID,
    )
    assert read.timestamp == stamp
    assert read.timestamp.utcoffset() == timedelta(0)


async def test_timestamp_with_another_offset_reads_back_as_the_same_instant(
    store: SqlStore,
) -> None:
    run = await create(store)
    stamp = datetime(2031, 5, 6, 9, 8, 9, 5, tzinfo=timezone(timedelta(hours=2)))

    await store.apply(
        [
            AppendEvent(
                ev.Event(run_id=run.id, sequence=1, payload=ev.ContextBuilt(1), timestamp=stamp)
            )
        ]
    )

    (read,) = await store.read_events(run.id, after=0, limit=1)
    assert read.timestamp == stamp
    assert read.timestamp.utcoffset() == timedelta(0)


async def test_read_events_returns_them_in_sequence_order(store: SqlStore) -> None:
    run = await create(store)
    writes = events(run.id, 1, 20)
    random.Random(7).shuffle(writes)

    await store.apply(writes)

    read = await store.read_events(run.id, after=0, limit=100)
    assert [e.sequence for e in read] == list(range(1, 21))


async def test_read_events_pages_with_after_and_limit(store: SqlStore) -> None:
    run = await create(store)
    await store.apply(events(run.id, 1, 7))

    pages = []
    after = 0
    while page := await store.read_events(run.id, after=after, limit=3):
        pages.append([e.sequence for e in page])
        after = page[-1].sequence

    assert pages == [[1, 2, 3], [4, 5, 6], [7]]


async def test_read_events_after_the_last_is_empty(store: SqlStore) -> None:
    run = await create(store)
    await store.apply(events(run.id, 1, 3))

    assert await store.read_events(run.id, after=3, limit=10) == []
    assert await store.read_events(run.id, after=99, limit=10) == []


async def test_read_events_sees_only_its_own_run(store: SqlStore) -> None:
    run = await create(store)
    other = await create(store)
    await store.apply([*events(run.id, 1, 2), *events(other.id, 1, 3)])

    read = await store.read_events(run.id, after=0, limit=10)

    assert {e.run_id for e in read} == {run.id}
    assert [e.sequence for e in read] == [1, 2]


async def test_last_sequence_is_the_highest_stored(store: SqlStore) -> None:
    run = await create(store)
    await store.apply(events(run.id, 1, 4))
    await store.apply(events(run.id, 5, 9))

    assert await store.last_sequence(run.id) == 9


async def test_last_sequence_is_zero_without_events(store: SqlStore) -> None:
    run = await create(store)

    assert await store.last_sequence(run.id) == 0
    assert await store.last_sequence(new_id()) == 0
