"""One description of events (behest/wording.py) for both doors: the terminal reads the
client's types, the inspector the server's; an event says the same in both."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from behest import wording
from behest.api import convert
from behest.client import _wire
from behest.domain import events as ev
from behest.domain.executions import Verdict
from behest.domain.messages import ToolCall
from behest.domain.runs import FinishReason, RunStatus
from behest.domain.spend import BudgetKind, FailureCode, Money, TokenUsage
from behest.domain.waits import Decision, ElicitAction

WHEN = datetime(2026, 12, 1, 17, 5, 9, 250_000, tzinfo=UTC)
CALL = ToolCall("call-1", "lookup", '{"q": "' + "x" * 300 + '"}')
USAGE = TokenUsage(1200, 340, cached_input_tokens=800, reasoning_tokens=120)
COST = Money(Decimal("0.000150"), "USD")

# One payload of each kind that has a line, with values that are not defaults.
SAMPLES: list[ev.Payload] = [
    ev.RunStarted("s-1", "local", "script"),
    ev.ContextBuilt(7),
    ev.ModelStarted("local", "script", 2),
    ev.ModelStarted("local", "script", 3, "billing", 4),
    ev.ToolCallStarted("call-1", "lookup"),
    ev.ToolCallCompleted(CALL),
    ev.ToolExecutionStarted("call-1", "lookup"),
    ev.ToolExecutionFinished("call-1", "lookup", 12, is_error=True),
    ev.ToolMessageCommitted("m-1"),
    ev.AssistantMessageCommitted("m-2"),
    ev.UsageRecorded(USAGE, COST),
    ev.RunCompleted(FinishReason.STOP, 1),
    ev.RunFailed("the provider said no", FailureCode.RATE_LIMITED),
    ev.RunCancelled("alice", "enough"),
    ev.BudgetExceeded(BudgetKind.COST, "0.01", "0.012"),
    ev.DoomLoopDetected("lookup called 5 times with the same arguments"),
    ev.CompactionCircuitOpened(1),
    ev.CompactionStarted(40, 90_000, "threshold"),
    ev.CompactionFinished(6, 12_000, pruned_only=False, succeeded=True),
    ev.ApprovalRequested(CALL, WHEN),
    ev.ApprovalResolved("call-1", "lookup", Decision.DENY, "alice", "not today"),
    ev.ClientToolRequested(CALL, WHEN),
    ev.ClientToolAnswered("call-1", "lookup", is_error=True, answered_by="bob", timed_out=False),
    ev.SubRunStarted("call-1", "child-1", "s-2"),
    ev.SubRunFinished("call-1", "child-1", RunStatus.FAILED, USAGE, COST),
    ev.OutputRejected("missing property 'name'", repairing=True),
    ev.ToolOutcomeUnknown("x-1", "call-1", "send_mail", 1, WHEN),
    ev.ToolExecutionReconciled("x-1", "call-1", "send_mail", Verdict.GIVE_UP, "alice", "no log"),
    ev.ToolRetryScheduled("call-1", "lookup", "x-2", 2, "a retryable error"),
    ev.Handoff("call-2", "triage", 1, "billing", 4, "a refund"),
    ev.UserMessageAdded("m-1", "and in French, please"),
    ev.ElicitationRequested("call-1~1-ab12", "call-1", "book", "How many nights?", "{}", WHEN),
    ev.ElicitationAnswered("call-1~1-ab12", "call-1", "book", ElicitAction.DECLINE, "alice"),
    ev.ToolProgress("call-1", "crawl", 3, 8, "fetching page 3"),
]


def both(payload: ev.Payload) -> tuple[str | None, str | None]:
    """The line of `payload` read as the server's type and as the client gets it."""
    event = ev.Event(run_id="r-1", sequence=3, payload=payload, timestamp=WHEN)
    seen = _wire.event_of(convert.event(event))
    return wording.line(ev.kind_of(payload), payload), wording.line(seen.kind, seen.data)


def test_every_kind_but_the_deltas_has_a_line() -> None:
    assert wording.LINE_KINDS | wording.DELTA_KINDS == set(ev.KINDS.values())
    assert {ev.kind_of(p) for p in SAMPLES} == wording.LINE_KINDS


def test_an_event_says_the_same_as_the_servers_type_and_the_clients() -> None:
    for payload in SAMPLES:
        server, client = both(payload)
        assert server is not None and server == client, payload


def test_lines_in_the_words_the_cli_has_always_written() -> None:
    lines = {ev.kind_of(p): both(p)[0] for p in SAMPLES}
    assert lines["tool_execution_finished"] == "← lookup failed in 12 ms"
    assert lines["run_failed"] == "✗ failed [rate_limited]: the provider said no"
    assert lines["approval_resolved"] == "✗ lookup denied by alice: not today"
    assert lines["approval_requested"] == (
        f"? lookup({wording.shorten(CALL.arguments)}) waits for approval "
        "(call call-1, until 2026-12-01 17:05:09Z)"
    )
    assert len(wording.shorten(CALL.arguments)) == wording.MAX_ARGUMENTS_SHOWN
    assert lines["usage_recorded"] == (
        "· usage: 1200 in + 340 out tokens (800 cached, 120 reasoning), 0.000150 USD"
    )
    assert lines["compaction_circuit_opened"] == "! compaction circuit opened after 1 failure"
    assert lines["sub_run_finished"] == "← sub-agent run child-1 failed"
    assert lines["tool_execution_reconciled"] == (
        "✓ send_mail reconciled, given up by alice: no log"
    )
    assert lines["handoff"] == "⇄ handed off from triage@1 to billing@4: a refund"
    assert lines["user_message_added"] == "+ user: and in French, please"
    assert lines["model_started"] == "· model call: script, iteration 3 (billing@4)"
    assert lines["elicitation_requested"] == (
        "? book asks: How many nights? (question call-1~1-ab12, until 2026-12-01 17:05:09Z)"
    )
    assert lines["elicitation_answered"] == "✗ book's question declined by alice"


def test_how_a_question_was_answered() -> None:
    def answered(action: ElicitAction, **flags: bool) -> str | None:
        return both(ev.ElicitationAnswered("q", "c", "book", action, "bob", **flags))[1]

    assert answered(ElicitAction.ACCEPT) == "✓ book's question answered by bob"
    assert answered(ElicitAction.CANCEL) == "✗ book's question cancelled by bob"
    assert answered(ElicitAction.ACCEPT, replayed=True) == (
        "✓ book's question answered by bob (the stored answer: the tool asked again)"
    )
    timed_out = ev.ElicitationAnswered("q", "c", "book", ElicitAction.CANCEL, "", timed_out=True)
    assert both(timed_out)[1] == "✗ book's question timed out: nobody answered"


def test_how_far_a_tool_got() -> None:
    def said(*fields: object) -> tuple[str | None, str | None]:
        return both(ev.ToolProgress("c", "crawl", *fields))  # type: ignore[arg-type]

    assert said(3, 8, "fetching page 3") == ("… crawl: 3 of 8 (37%): fetching page 3",) * 2
    assert said(0.25, 1.0) == ("… crawl: 0.25 of 1 (25%)",) * 2
    assert said(12.0) == ("… crawl: 12",) * 2  # no total: no share
    assert said(9, 8)[1] == "… crawl: 9 of 8 (100%)"  # a tool that miscounts


def test_deltas_and_kinds_newer_than_this_code_have_no_line() -> None:
    assert wording.line("text_delta", ev.TextDelta("hi")) is None
    assert wording.line("a_kind_from_the_future", object()) is None
