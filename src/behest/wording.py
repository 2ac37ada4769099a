"""What each event says, in words, and how tokens, money, times and counts are written: the
one description the terminal (cli/render.py) and the inspector (web/views.py) both show.

An event is given as its kind's stable name (`run_completed`, …: the AgentEvent oneof field)
and its payload, which may be the client's type (behest.client) or the server's
(behest.domain.events): both mirror the wire message field for field, so this module reads
fields by name and enums by `.name`, and imports neither.

    line("tool_execution_finished", payload)  →  "← lookup finished in 12 ms"

A line starts with a mark: → something starts, ← it ends, ? the run waits for someone,
✓ / ✗ how a run or a decision ended, ! something went wrong, ↻ a call runs again,
… a running tool's progress, · bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

# Long tool arguments would drown the answer's text; the full call is in the event log.
MAX_ARGUMENTS_SHOWN = 200


def line(kind: str, payload: Any) -> str | None:
    """What an event of `kind` says, on one line (None for deltas and unknown kinds)."""
    say = _LINES.get(kind)
    return None if say is None or payload is None else say(payload)


# --- the events ----------------------------------------------------------------------------


def _run_started(p: Any) -> str:
    return f"· run started: {p.provider}/{p.model}, session {p.session_id}"


def _context_built(p: Any) -> str:
    return f"· context built: {plural(p.message_count, 'message')}"


def _model_started(p: Any) -> str:
    agent = f" ({p.agent_name}@{p.agent_version})" if p.agent_name else ""
    return f"· model call: {p.model}, iteration {p.iteration}{agent}"


def _tool_call_started(p: Any) -> str:
    return f"→ tool {p.tool_name} called (call {p.call_id})"


def _tool_call_completed(p: Any) -> str:
    return f"→ tool {call(p.call)}"


def _tool_execution_started(p: Any) -> str:
    return f"→ {p.tool_name} running (call {p.call_id})"


def _tool_execution_finished(p: Any) -> str:
    if p.cancelled:
        return f"✗ {p.tool_name} cut after {p.duration_ms} ms: the run was cancelled"
    how = "failed" if p.is_error else "finished"
    return f"← {p.tool_name} {how} in {p.duration_ms} ms"


def _tool_message(p: Any) -> str:
    return "· tool result stored"


def _assistant_message(p: Any) -> str:
    return "· answer stored"


def _usage(p: Any) -> str:
    spent = f", {money(p.cost)}" if p.cost is not None else ""
    return f"· usage: {tokens(p.usage, detail=True)}{spent}"


def _completed(p: Any) -> str:
    return f"✓ completed ({name(p.finish_reason)}, {plural(p.iterations, 'iteration')})"


def _failed(p: Any) -> str:
    return f"✗ failed{code(p.code)}: {p.error}"


def _cancelled(p: Any) -> str:
    why = f": {p.reason}" if p.reason else ""
    return f"✗ cancelled{by(p.cancelled_by)}{why}"


def _budget(p: Any) -> str:
    return f"! budget exceeded: {name(p.budget)} {p.used} of {p.limit}"


def _doom_loop(p: Any) -> str:
    return f"! doom loop detected: {p.description}"


def _breaker(p: Any) -> str:
    return f"! compaction circuit opened after {plural(p.consecutive_failures, 'failure')}"


def _compaction_started(p: Any) -> str:
    return (
        f"· compaction started: {plural(p.messages_before, 'message')}, "
        f"~{p.estimated_tokens_before} tokens ({p.reason})"
    )


def _compaction_finished(p: Any) -> str:
    if not p.succeeded:
        return f"! compaction failed: {p.error}"
    how = "pruned" if p.pruned_only else "summarised"
    return (
        f"· compaction finished, {how}: {plural(p.messages_after, 'message')}, "
        f"~{p.estimated_tokens_after} tokens"
    )


def _approval_requested(p: Any) -> str:
    return f"? {call(p.call)} waits for approval (call {p.call.id}{until(p.expires_at)})"


_DECISIONS = {
    "ALLOW": "allowed",
    "ALLOW_ALWAYS": "allowed for the rest of the session",
    "DENY": "denied",
}


def _approval_resolved(p: Any) -> str:
    decision = name(p.decision).upper()
    if decision == "TIMED_OUT":
        return f"✗ {p.tool_name} denied: nobody decided in time"
    allowed = decision in ("ALLOW", "ALLOW_ALWAYS")
    how = _DECISIONS.get(decision, f"decided ({decision.lower()})")
    why = f": {p.reason}" if p.reason and not allowed else ""
    return f"{'✓' if allowed else '✗'} {p.tool_name} {how}{by(p.decided_by)}{why}"


def _client_requested(p: Any) -> str:
    return f"? {call(p.call)} waits for the client's result (call {p.call.id}{until(p.expires_at)})"


def _client_answered(p: Any) -> str:
    if p.timed_out:
        return f"← {p.tool_name} timed out: the client sent no result"
    how = " with an error" if p.is_error else ""
    return f"← {p.tool_name} answered{how}{by(p.answered_by)}"


def _sub_started(p: Any) -> str:
    return f"→ sub-agent run {p.child_run_id} started"


def _sub_finished(p: Any) -> str:
    return f"← sub-agent run {p.child_run_id} {name(p.status)}"


def _outcome_unknown(p: Any) -> str:
    return (
        f"? {p.tool_name} was cut by a stop: its outcome is unknown; the run waits for a "
        f"reconciliation (execution {p.execution_id}{until(p.expires_at)})"
    )


_VERDICTS = {
    "RAN": "it ran",
    "DID_NOT_RUN": "it did not run: run again",
    "GIVE_UP": "given up",
}


def _reconciled(p: Any) -> str:
    how = _VERDICTS.get(name(p.verdict).upper(), name(p.verdict))
    why = f": {p.reason}" if p.reason else ""
    return f"✓ {p.tool_name} reconciled, {how}{by(p.reconciled_by)}{why}"


def _retry(p: Any) -> str:
    why = f": {p.reason}" if p.reason else ""
    return f"↻ {p.tool_name} runs again as attempt {p.next_attempt}{why}"


def _handoff(p: Any) -> str:
    why = f": {p.reason}" if p.reason else ""
    return f"⇄ handed off from {p.from_agent}@{p.from_version} to {p.to_agent}@{p.to_version}{why}"


def _user_message_added(p: Any) -> str:
    return f"+ user: {shorten(p.text, 200)}"


def _elicitation_requested(p: Any) -> str:
    asked = shorten(p.message, 200)
    return f"? {p.tool_name} asks: {asked} (question {p.elicitation_id}{until(p.expires_at)})"


_ACTIONS = {"ACCEPT": "answered", "DECLINE": "declined", "CANCEL": "cancelled"}


def _elicitation_answered(p: Any) -> str:
    again = " (the stored answer: the tool asked again)" if p.replayed else ""
    if p.timed_out:
        return f"✗ {p.tool_name}'s question timed out: nobody answered{again}"
    how = _ACTIONS.get(name(p.action).upper(), name(p.action))
    mark = "✓" if how == "answered" else "✗"
    return f"{mark} {p.tool_name}'s question {how}{by(p.answered_by)}{again}"


def _tool_progress(p: Any) -> str:
    done = f"{p.progress:g}"
    if p.total:
        done += f" of {p.total:g} ({min(100, int(100 * p.progress / p.total))}%)"
    said = f": {shorten(p.message, 200)}" if p.message else ""
    return f"… {p.tool_name}: {done}{said}"


def _output_rejected(p: Any) -> str:
    then = "; asking the model once more" if p.repairing else ""
    return f"! answer rejected: {p.error}{then}"


_LINES: dict[str, Callable[[Any], str]] = {
    "run_started": _run_started,
    "context_built": _context_built,
    "model_started": _model_started,
    "tool_call_started": _tool_call_started,
    "tool_call_completed": _tool_call_completed,
    "tool_execution_started": _tool_execution_started,
    "tool_execution_finished": _tool_execution_finished,
    "tool_message_committed": _tool_message,
    "assistant_message_committed": _assistant_message,
    "usage_recorded": _usage,
    "run_completed": _completed,
    "run_failed": _failed,
    "run_cancelled": _cancelled,
    "budget_exceeded": _budget,
    "doom_loop_detected": _doom_loop,
    "compaction_circuit_opened": _breaker,
    "compaction_started": _compaction_started,
    "compaction_finished": _compaction_finished,
    "approval_requested": _approval_requested,
    "approval_resolved": _approval_resolved,
    "client_tool_requested": _client_requested,
    "client_tool_answered": _client_answered,
    "sub_run_started": _sub_started,
    "sub_run_finished": _sub_finished,
    "output_rejected": _output_rejected,
    "tool_outcome_unknown": _outcome_unknown,
    "tool_execution_reconciled": _reconciled,
    "tool_retry_scheduled": _retry,
    "handoff": _handoff,
    "user_message_added": _user_message_added,
    "elicitation_requested": _elicitation_requested,
    "elicitation_answered": _elicitation_answered,
    "tool_progress": _tool_progress,
}
# Kinds without a line: their payload is a piece of text that streams (the delta itself).
DELTA_KINDS = frozenset({"text_delta", "reasoning_delta", "tool_call_delta"})
LINE_KINDS = frozenset(_LINES)


# --- the words every line shares -----------------------------------------------------------


def name(value: Any) -> str:
    """An enum value as behest writes it: `FINISH_REASON_STOP` / `STOP` → "stop"."""
    return str(getattr(value, "name", value)).lower()


def call(tool_call: Any) -> str:
    """A tool call as `name(arguments)`, long arguments shortened."""
    return f"{tool_call.name}({shorten(tool_call.arguments)})"


def code(failure: Any) -> str:
    """A failure code as shown after "failed", e.g. " [budget_exceeded]" (none when unset)."""
    return f" [{name(failure)}]" if failure else ""


def money(cost: Any) -> str:
    """An amount with its currency, as the server writes it on the wire (plain decimal)."""
    amount = cost.amount
    text = amount if isinstance(amount, str) else format(Decimal(amount), "f")
    return f"{text} {cost.currency}"


def tokens(usage: Any, *, detail: bool = False) -> str:
    """Tokens in and out ("12 in + 5 out tokens"); with `detail`, the cached, cache-write and
    reasoning tokens after them when there are any."""
    text = f"{usage.input_tokens} in + {usage.output_tokens} out tokens"
    if not detail:
        return text
    parts = [
        f"{count} {what}"
        for count, what in (
            (usage.cached_input_tokens, "cached"),
            (usage.cache_write_tokens, "cache writes"),
            (usage.reasoning_tokens, "reasoning"),
        )
        if count
    ]
    return f"{text} ({', '.join(parts)})" if parts else text


def by(principal: str) -> str:
    return f" by {principal}" if principal else ""


def until(when: datetime | None) -> str:
    return f", until {time(when)}" if when is not None else ""


def time(when: datetime | None) -> str:
    """A moment in UTC to the second, or "-" when unset."""
    if when is None:
        return "-"
    return (when.astimezone(UTC) if when.tzinfo else when).strftime("%Y-%m-%d %H:%M:%SZ")


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def shorten(text: str, limit: int = MAX_ARGUMENTS_SHOWN) -> str:
    """At most `limit` characters, an ellipsis marking the cut."""
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"
