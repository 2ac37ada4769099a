"""What the pages show of a run's events: timeline items (plain strings: formats.py).

One function per event kind makes an `Item` (title, labelled sections of text); its
one-line summary is what the event says in behest/wording.py, the words the terminal shows
too. Consecutive deltas (text, reasoning, tool arguments) join into one item spanning their
sequence numbers. The server renders items with Jinja2 (autoescaped) and the live tail sends
the same items as JSON, which inspector.js puts in the page as text, never as markup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from behest import wording
from behest.domain import events as ev
from behest.domain.messages import Message
from behest.domain.runs import BusyPolicy, RunStatus
from behest.domain.waits import ElicitAction
from behest.web.formats import MAX_SUMMARY_CHARS, clip, pretty_json, stamp, tokens


@dataclass(slots=True)
class Item:
    """One entry of a run's timeline: one event, or a run of deltas."""

    kind: str  # how it looks: text, reasoning, args, model, tool, usage, wait, end, handoff, info
    name: str  # the event kind's stable name (domain/events.py KINDS)
    title: str
    first: int
    last: int
    time: str
    summary: str = ""
    sections: list[tuple[str, str]] = field(default_factory=list)
    delta: str | None = None
    error: bool = False
    link: str = ""  # a run's page
    status: str = ""  # the run's status once this event happened, when it changes it
    resolves: str = ""  # the waiting call (its id) this event answers: its form goes

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Context:
    """What items need beyond their event: the run's messages, the last model call."""

    messages: dict[str, Message] = field(default_factory=dict)
    iteration: int | None = None

    @classmethod
    def of(cls, messages: Iterable[Message]) -> Context:
        return cls(messages={m.id: m for m in messages})


def timeline(events: Iterable[ev.Event], context: Context) -> list[Item]:
    """The events as items, deltas joined."""
    items: list[Item] = []
    for event in events:
        made = item(event, context)
        last = items[-1] if items else None
        if (
            last is not None
            and made.delta is not None
            and last.delta is not None
            and (last.name, last.last + 1) == (made.name, made.first)
        ):
            last.delta += made.delta
            last.last = made.last
            continue
        items.append(made)
    return items


def item(event: ev.Event, context: Context) -> Item:
    base = Item(
        kind="info",
        name=ev.KINDS[type(event.payload)],
        title=ev.KINDS[type(event.payload)].replace("_", " "),
        first=event.sequence,
        last=event.sequence,
        time=stamp(event.timestamp),
    )
    said = wording.line(base.name, event.payload)
    if said is not None:
        base.summary = wording.shorten(said, MAX_SUMMARY_CHARS)
    describe = _DESCRIBE.get(type(event.payload))
    if describe is not None:
        describe(base, event.payload, context)
    return base


def _run_started(it: Item, p: ev.RunStarted, c: Context) -> None:
    it.kind, it.title = "model", "run started"
    if p.agent_name:
        it.sections = [("agent", f"{p.agent_name}@{p.agent_version}")]
    rolled = p.on_busy == BusyPolicy.ROLLBACK
    for how, other in (
        ("rolled back" if rolled else "interrupted", p.interrupted_run_id),
        ("waited for", p.waited_for_run_id),
    ):
        if other:  # what it did to the run before it on its session (double-texting)
            it.title, it.link = f"run started ({how} a run)", f"/runs/{other}"
            it.sections.append((how, other))


def _user_message_added(it: Item, p: ev.UserMessageAdded, c: Context) -> None:
    it.kind, it.title = "text", "user message (steered in)"
    it.sections = [("text", clip(p.text))]


def _model_started(it: Item, p: ev.ModelStarted, c: Context) -> None:
    retry = c.iteration == p.iteration
    c.iteration = p.iteration
    it.kind, it.title = "model", "model call (retry)" if retry else "model call"
    it.status = "CALLING_MODEL"
    if p.agent_name:
        it.sections = [("agent", f"{p.agent_name}@{p.agent_version}")]


def _handoff(it: Item, p: ev.Handoff, c: Context) -> None:
    it.kind, it.title = "handoff", "handoff"
    it.sections = [
        ("from", f"{p.from_agent}@{p.from_version}"),
        ("to", f"{p.to_agent}@{p.to_version}"),
        ("call", p.call_id),
    ]
    if p.reason:
        it.sections.append(("reason", clip(p.reason)))


def _text(it: Item, p: ev.TextDelta, c: Context) -> None:
    it.kind, it.title, it.delta = "text", "model text", p.delta


def _reasoning(it: Item, p: ev.ReasoningDelta, c: Context) -> None:
    it.kind, it.title, it.delta = "reasoning", "reasoning", p.delta


def _call_started(it: Item, p: ev.ToolCallStarted, c: Context) -> None:
    it.kind, it.title = "tool", "tool call"


def _call_delta(it: Item, p: ev.ToolCallDelta, c: Context) -> None:
    it.kind, it.title, it.delta = "args", "tool call arguments (streamed)", p.delta


def _call_completed(it: Item, p: ev.ToolCallCompleted, c: Context) -> None:
    it.kind, it.title = "tool", "tool call"
    it.sections = [("arguments", pretty_json(p.call.arguments))]


def _execution_started(it: Item, p: ev.ToolExecutionStarted, c: Context) -> None:
    it.kind, it.title = "tool", "tool running"
    it.status = "WAITING_FOR_TOOLS"


def _execution_finished(it: Item, p: ev.ToolExecutionFinished, c: Context) -> None:
    it.kind, it.error = "tool", p.is_error
    it.title = "tool failed" if p.is_error else "tool finished"
    it.sections = [("call", p.call_id)]


def _tool_progress(it: Item, p: ev.ToolProgress, c: Context) -> None:
    it.kind, it.title = "tool", "tool progress"
    it.sections = [("call", f"{p.tool_name} (call {p.call_id})")]
    if p.message:
        it.sections.append(("message", clip(p.message)))


def _tool_message(it: Item, p: ev.ToolMessageCommitted, c: Context) -> None:
    message = c.messages.get(p.message_id)
    it.kind, it.title = "tool", "tool result"
    if message is not None:
        it.error = message.is_error
        it.sections = [
            ("call", f"{message.tool_name} ({message.tool_call_id})"),
            ("error" if message.is_error else "result", clip(message.text)),
        ]


def _assistant_message(it: Item, p: ev.AssistantMessageCommitted, c: Context) -> None:
    message = c.messages.get(p.message_id)
    it.kind, it.title, it.status = "model", "answer stored", "PERSISTING"
    if message is not None and message.text:
        it.sections = [("text", clip(message.text))]


def _usage(it: Item, p: ev.UsageRecorded, c: Context) -> None:
    it.kind, it.title = "usage", "usage"


def _completed(it: Item, p: ev.RunCompleted, c: Context) -> None:
    it.kind, it.title, it.status = "end", "run completed", "COMPLETED"


def _failed(it: Item, p: ev.RunFailed, c: Context) -> None:
    it.kind, it.title, it.error, it.status = "end", "run failed", True, "FAILED"
    it.sections = [("error", clip(p.error))]


def _cancelled(it: Item, p: ev.RunCancelled, c: Context) -> None:
    it.kind, it.title, it.status = "end", "run cancelled", "CANCELLED"


def _budget(it: Item, p: ev.BudgetExceeded, c: Context) -> None:
    it.error, it.title = True, "budget exceeded"


def _doom_loop(it: Item, p: ev.DoomLoopDetected, c: Context) -> None:
    it.error, it.title = True, "doom loop detected"


def _breaker(it: Item, p: ev.CompactionCircuitOpened, c: Context) -> None:
    it.kind, it.error, it.title = "compaction", True, "compaction breaker opened"


def _compaction_started(it: Item, p: ev.CompactionStarted, c: Context) -> None:
    it.kind, it.title = "compaction", "compaction started"


def _compaction_finished(it: Item, p: ev.CompactionFinished, c: Context) -> None:
    it.kind, it.error = "compaction", not p.succeeded
    it.title = "compaction finished" if p.succeeded else "compaction failed"
    if p.error:
        it.sections = [("error", clip(p.error))]


def _approval_requested(it: Item, p: ev.ApprovalRequested, c: Context) -> None:
    it.kind, it.title, it.status = "wait", "approval requested", "WAITING_FOR_INPUT"
    it.sections = [("arguments", pretty_json(p.call.arguments))]


def _approval_resolved(it: Item, p: ev.ApprovalResolved, c: Context) -> None:
    it.kind, it.title, it.error = "wait", "approval resolved", not p.decision.allows
    it.resolves = p.call_id
    if p.reason:
        it.sections = [("reason", clip(p.reason))]


def _client_requested(it: Item, p: ev.ClientToolRequested, c: Context) -> None:
    it.kind, it.title, it.status = "wait", "client tool requested", "WAITING_FOR_INPUT"
    it.sections = [("arguments", pretty_json(p.call.arguments))]


def _client_answered(it: Item, p: ev.ClientToolAnswered, c: Context) -> None:
    it.kind, it.title, it.error = "wait", "client tool answered", p.is_error or p.timed_out
    it.resolves = p.call_id


def _question_asked(it: Item, p: ev.ElicitationRequested, c: Context) -> None:
    it.kind, it.title, it.status = "wait", "question asked", "WAITING_FOR_INPUT"
    it.sections = [
        ("tool", f"{p.tool_name} (call {p.call_id})"),
        ("question", clip(p.message)),
        ("the answer's schema", pretty_json(p.requested_schema)),
        ("waits until", f"{stamp(p.expires_at)} UTC"),
        ("question id", p.elicitation_id),
    ]


def _question_answered(it: Item, p: ev.ElicitationAnswered, c: Context) -> None:
    action = p.action.name.lower()
    it.kind, it.title, it.resolves = "wait", "question answered", p.elicitation_id
    it.error = p.timed_out or p.action != ElicitAction.ACCEPT
    how = "nobody answered in time" if p.timed_out else f"answered by {p.answered_by or '—'}"
    if p.timed_out:
        it.title = "question timed out"
    if p.replayed:
        it.title += " (replayed)"
        how += "; the tool ran again and got the stored answer"
    it.sections = [("action", action), ("how", how), ("tool", f"{p.tool_name} (call {p.call_id})")]


def _sub_started(it: Item, p: ev.SubRunStarted, c: Context) -> None:
    it.kind, it.title, it.link = "tool", "sub-run started", f"/runs/{p.child_run_id}"


def _sub_finished(it: Item, p: ev.SubRunFinished, c: Context) -> None:
    it.kind, it.title, it.link = "tool", "sub-run finished", f"/runs/{p.child_run_id}"
    it.error = p.status != RunStatus.COMPLETED
    it.sections = [("usage", tokens(p.usage))]


def _output_rejected(it: Item, p: ev.OutputRejected, c: Context) -> None:
    it.error, it.title = True, "output rejected"
    it.sections = [("error", clip(p.error))]


def _context_built(it: Item, p: ev.ContextBuilt, c: Context) -> None:
    it.kind, it.title = "model", "context built"


_DESCRIBE: dict[type, Callable[[Item, Any, Context], None]] = {
    ev.RunStarted: _run_started,
    ev.ContextBuilt: _context_built,
    ev.ModelStarted: _model_started,
    ev.TextDelta: _text,
    ev.ReasoningDelta: _reasoning,
    ev.ToolCallStarted: _call_started,
    ev.ToolCallDelta: _call_delta,
    ev.ToolCallCompleted: _call_completed,
    ev.ToolExecutionStarted: _execution_started,
    ev.ToolExecutionFinished: _execution_finished,
    ev.ToolProgress: _tool_progress,
    ev.ToolMessageCommitted: _tool_message,
    ev.AssistantMessageCommitted: _assistant_message,
    ev.UsageRecorded: _usage,
    ev.RunCompleted: _completed,
    ev.RunFailed: _failed,
    ev.RunCancelled: _cancelled,
    ev.BudgetExceeded: _budget,
    ev.DoomLoopDetected: _doom_loop,
    ev.CompactionCircuitOpened: _breaker,
    ev.CompactionStarted: _compaction_started,
    ev.CompactionFinished: _compaction_finished,
    ev.ApprovalRequested: _approval_requested,
    ev.ApprovalResolved: _approval_resolved,
    ev.ClientToolRequested: _client_requested,
    ev.ClientToolAnswered: _client_answered,
    ev.ElicitationRequested: _question_asked,
    ev.ElicitationAnswered: _question_answered,
    ev.SubRunStarted: _sub_started,
    ev.SubRunFinished: _sub_finished,
    ev.OutputRejected: _output_rejected,
    ev.Handoff: _handoff,
    ev.UserMessageAdded: _user_message_added,
}
